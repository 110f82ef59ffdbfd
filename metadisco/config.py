"""Run configuration: experiment files (TOML), overrides (typed values, or FIELD=VALUE strings from
the command line), and `validate`.

A run is fully described by a `RunConfig` (its schema, frozen dataclasses, is
`metadisco.core.run_config`'s, and the checks of its values `metadisco.core.run_checks`': the run
directory's reader parses and checks config.json with them too; this module exports the schema as
the place a config is built from); the run directory stores it resolved (config.json), so any run
can be re-created and resumed. `validate` checks a config before anything compiles: the jax-free
checks first (environment names, then the schema's), then those that need jax (objectives, shapes).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from metadisco import resources
from metadisco.core.errors import ConfigError
from metadisco.core.plugs import PLUGS, version_option
from metadisco.core.run_checks import check_run_config
from metadisco.core.run_config import (
    DistributionConfig,
    ESConfig,
    ExpectConfig,
    HeldoutConfig,
    InnerConfig,
    ObjectivesConfig,
    PlugChoice,
    RunConfig,
    ValidationConfig,
    coerce,
    read_section,
)
from metadisco.core.scores import fitness_of

if TYPE_CHECKING:
    from metadisco.inner_loops import PPOConfig
    from metadisco.meta_objectives import Objectives

# The schema's classes are part of this module's interface: a config is built here.
__all__ = [
    "DEMO_ENV_BOUND", "DEMO_EXPERIMENT", "EXPERIMENTS", "DistributionConfig", "ESConfig", "ExpectConfig", "HeldoutConfig",
    "InnerConfig", "ObjectivesConfig", "PlugChoice", "RunConfig", "ValidationConfig", "check_static", "demo", "diff",
    "experiment_purpose", "inner_config", "list_experiments", "load_experiment", "nest_overrides", "objectives_of",
    "override", "parse_overrides", "PlannedProblem", "ppo_config", "resolve", "RunPlan", "run_plan", "typed_objectives",
    "validate", "validation_ppo_config",
]

# Overrides: a mapping of typed values ({"es": {"population_size": 4}, "inner.hidden": (64, 64)}),
# or FIELD=VALUE strings as the command line gives them (["es.population_size=4"]).
Overrides = Mapping | Sequence[str]

EXPERIMENTS = "experiments"  # the data folder of named experiments (metadisco.resources)
DEMO_EXPERIMENT = "rediscover_shaping"  # what `metadisco train` runs with no experiment and no override
# What of the demo was written for MountainCar-v0, and which `demo` leaves out on other environments
DEMO_ENV_BOUND = {"objectives.shaping.obs_scale": "its potential's observation scale",
                  "heldout": "its held-out set", "expect": "its expectation"}


def _merge(base: dict, update: dict) -> dict:
    """`update` over `base`, section by section. A section that names another objective replaces
    the old one: the options given for one objective do not carry over to the next."""
    out = dict(base)
    for k, v in update.items():
        old = out.get(k)
        renamed = isinstance(v, dict) and isinstance(old, dict) and "name" in v and v["name"] != old.get("name")
        out[k] = _merge(old, v) if isinstance(v, dict) and isinstance(old, dict) and not renamed else v
    return out


def list_experiments() -> list[str]:
    """The named experiments that ship with metadisco (experiments/*.toml, installed as package data)."""
    return resources.names(EXPERIMENTS, ".toml")


def experiment_purpose(name: str) -> str:
    """What a shipped experiment is for, in one line: its file's first line, a comment (TOML
    ignores it, so it is in no config); "" where the file does not start with one."""
    first = resources.read_text(EXPERIMENTS, f"{name}.toml").partition("\n")[0]
    return first.removeprefix("#").strip() if first.startswith("#") else ""


def load_experiment(name_or_path: str) -> dict:
    """An experiment's fields as a dict: a path to a TOML file, a name in ./experiments/ (the user's
    own, which wins over a shipped one of the same name), or a named experiment that ships with metadisco."""
    path = Path(name_or_path)
    local = Path("experiments") / f"{name_or_path}.toml"
    try:
        if path.suffix:
            text, where = path.read_text(), str(path)
        elif local.is_file():
            text, where = local.read_text(), str(local)
        else:
            text, where = resources.read_text(EXPERIMENTS, f"{name_or_path}.toml"), f"experiment {name_or_path}"
    except (FileNotFoundError, IsADirectoryError):
        known = list_experiments()
        close = difflib.get_close_matches(name_or_path, known, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown experiment {name_or_path!r}: no file {local} here and no shipped experiment of "
                          f"that name.{hint} A path to a TOML file works too (my_exp.toml). Shipped: "
                          f"{', '.join(known) or '(none)'}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML: {e}") from e


def parse_overrides(items: Sequence[str]) -> dict:
    """['es.population_size=32', 'envs=CartPole-v1,Acrobot-v1'] -> nested dict of strings."""
    pairs = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like FIELD=VALUE (e.g. es.population_size=32)")
        key, value = item.split("=", 1)
        pairs.append((key.strip(), value.strip()))
    return _nest(pairs)


def nest_overrides(overrides: Mapping) -> dict:
    """Typed overrides -> the nested dict of sections that `resolve` merges over a config: a
    section as a dict ({"es": {"population_size": 4}}) or a dotted name ({"es.population_size": 4})
    alike; values are kept as given (read as their fields' types when the config is built)."""
    return _nest(_flat(overrides))


def _flat(mapping: Mapping, prefix: str = "") -> list[tuple[str, object]]:
    """{"es": {"population_size": 4}} -> [("es.population_size", 4)] (a dict value is a section)."""
    out = []
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _nest(pairs) -> dict:
    """[(dotted field, value)] in order -> nested dict. A plug point given a name and options in
    either order (objectives.drift=dpo, objectives.drift.alpha=1) becomes one section."""
    out: dict = {}
    for key, value in pairs:
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            if isinstance(node.get(p), str):  # objectives.drift=dpo objectives.drift.alpha=1: the string was a name
                node[p] = {"name": node[p]}
            node = node.setdefault(p, {})
        if isinstance(node.get(leaf), dict):  # objectives.drift.alpha=1 objectives.drift=dpo: the same
            node[leaf]["name"] = value
        else:
            node[leaf] = value
    return out


def _nested(overrides: Overrides) -> dict:
    """Overrides of either form -> nested dict (`nest_overrides`, `parse_overrides`)."""
    if isinstance(overrides, Mapping):
        return nest_overrides(overrides)
    return parse_overrides([overrides] if isinstance(overrides, str) else list(overrides))


def inner_config(base: dict, overrides: Overrides = ()) -> InnerConfig:
    """PPO overrides from a stored `inner` section updated by `overrides` (typed values by field, or
    FIELD=VALUE items), read and checked as `metadisco train` reads inner.FIELD=VALUE (evaluate's
    --inner and --inner-from-run)."""
    return read_section(InnerConfig, _merge(base, _nested(overrides)), "inner.")


def demo(overrides: Overrides = ()) -> RunConfig:
    """`metadisco train [FIELD=VALUE ...]`: the demo, DEMO_EXPERIMENT, with the overrides.

    The demo is written for MountainCar-v0. Where the overrides train on other environments, what
    belongs to MountainCar (DEMO_ENV_BOUND: the potential's observation scale, the held-out set, the
    expectation) is left out unless the overrides give it, and expect.not_applied says so: the
    demo's search on the user's environments, with the plain comparison at its end.
    """
    given = _nested(overrides)
    loaded = load_experiment(DEMO_EXPERIMENT)
    envs = given.get("envs", loaded["envs"])
    envs = [envs] if isinstance(envs, str) else list(envs)
    if envs == list(loaded["envs"]):
        return resolve(DEMO_EXPERIMENT, overrides)
    left_out = []
    for dotted, what in DEMO_ENV_BOUND.items():
        *parents, leaf = dotted.split(".")
        section, given_section = loaded, given
        for name in parents:
            section, given_section = section.get(name, {}), given_section.get(name, {})
        if leaf in section and not (isinstance(given_section, dict) and leaf in given_section):
            del section[leaf]
            left_out.append(what)
    reason = (f"the demo ({DEMO_EXPERIMENT}) was written for {', '.join(loaded['envs'])}; on {', '.join(envs)} it "
              f"runs without {', '.join(left_out)}; the run ends with the plain comparison, without a verdict")
    try:
        cfg = _resolve(loaded, given, experiment=DEMO_EXPERIMENT)
    except ConfigError as e:  # the overrides were likely meant for another search than the demo's
        raise type(e)(f"{e}. With no experiment named, train runs the demo ({DEMO_EXPERIMENT}, a shaping "
                          f"search written for {', '.join(loaded['envs'])}): name an experiment for another search "
                          "(`metadisco experiments` lists them)") from None
    if "expect" in given:
        return cfg
    return validate(RunConfig.from_dict({**cfg.to_dict(), "expect": {"not_applied": reason}}))


def resolve(experiment: str | None = None, overrides: Overrides = ()) -> RunConfig:
    """Defaults <- experiment file <- overrides (typed values or FIELD=VALUE strings: `Overrides`),
    then validated. An experiment's
    expectation ([expect]) belongs to the run it was written for: where the overrides change its
    objectives, or turn off the checks on fresh seeds its verdict reads (eval_every=0), and state
    no expectation of their own, it is dropped with the reason in expect.not_applied."""
    return _resolve(load_experiment(experiment) if experiment else {}, _nested(overrides), experiment=experiment)


def _resolve(loaded: dict, given: dict, experiment: str | None) -> RunConfig:
    """`resolve` of an experiment's fields `loaded` and the overrides `given`, both nested dicts."""
    d = _merge(RunConfig().to_dict(), loaded)
    written_for = RunConfig.from_dict(d).objectives.signature() if "expect" in loaded else None
    d = _merge(d, given)
    d = _evolving_what_is_named(d, given)
    if written_for is not None and "expect" not in given:
        reason = _expectation_lost(RunConfig.from_dict(d), written_for)
        if reason:
            d = {**d, "expect": {"not_applied": f"experiment {experiment}'s expectation {reason}; the run ends with the "
                                                "plain comparison, without a verdict"}}
    return validate(RunConfig.from_dict(d))


def _evolving_what_is_named(d: dict, given: dict) -> dict:
    """A config dict in which every plug whose objective the overrides name (objectives.drift=NAME), and
    which has parameters to evolve (a plug-in of the user's, drift_mix, lpo...), evolves beside what
    already did, unless the overrides set objectives.evolve: naming a learnable objective asks to search it.
    Likewise a plug whose named objective has no parameters (objectives.shaping=none) stops evolving,
    unless it is the only one."""
    named = given.get("objectives", {})
    if not isinstance(named, dict) or "evolve" in named:
        return d
    evolve = list(d["objectives"].get("evolve", ()))
    for plug in PLUGS:
        chosen = isinstance(named.get(plug), str) or (isinstance(named.get(plug), dict) and "name" in named[plug])
        if not chosen:
            continue
        learnable = _has_parameters(plug, d["objectives"][plug])
        if learnable and plug not in evolve:
            evolve.append(plug)
        elif not learnable and plug in evolve and len(evolve) > 1 and _known(plug, d["objectives"][plug]):
            evolve.remove(plug)  # never the last: validate then says what to pick instead
    return {**d, "objectives": {**d["objectives"], "evolve": [p for p in PLUGS if p in evolve]}}


def _known(plug: str, choice) -> bool:
    """Whether the objective a config section names for `plug` can be built (validate says why not)."""
    from metadisco.meta_objectives import make_objective

    try:
        make_objective(plug, PlugChoice.read(choice, f"objectives.{plug}").name)
        return True
    except Exception:  # noqa: BLE001
        return False


def _has_parameters(plug: str, choice) -> bool:
    """Whether the objective a config section names for `plug` has parameters, built with its
    default options (False where it cannot be built: validate reports why)."""
    import jax

    from metadisco.meta_objectives import make_objective

    choice = PlugChoice.read(choice, f"objectives.{plug}")
    try:
        objective = make_objective(plug, choice.name)
        objective = objective.for_env(objective.observation_shape() or (3,))
        return bool(jax.tree.leaves(objective.default_params()))
    except Exception:  # noqa: BLE001  (a bad name or option: validate says what is wrong)
        return False


def _expectation_lost(cfg: RunConfig, written_for: str) -> str | None:
    """Why an expectation written for the objectives `written_for` does not apply to `cfg`, or None."""
    now = cfg.objectives.signature()
    if now != written_for:
        return f"was written for {written_for}; this run has {now}"
    if not cfg.eval_every:
        return "is judged by the checks on fresh seeds, which eval_every=0 turns off"
    return None


def override(cfg: RunConfig, overrides: Overrides = ()) -> RunConfig:
    """`cfg` updated by `overrides` (as `resolve` applies them), then validated."""
    return validate(RunConfig.from_dict(_merge(cfg.to_dict(), _nested(overrides))))


def validate(cfg: RunConfig) -> RunConfig:
    """Every check that can fail without compiling anything; raises ConfigError saying what to do.

    The jax-free checks (`check_static`) run first, so a typo is reported before jax starts.
    """
    check_static(cfg)
    return _check_objectives_and_shapes(cfg)


def check_static(cfg: RunConfig) -> None:
    """The checks that need neither jax nor an environment library: the environment names (a
    plug-in is imported: metadisco.core.catalog), then what the config says (`check_run_config`, the
    check every reader of a run directory makes too)."""
    from metadisco.core.catalog import check_env_name

    for env in (*cfg.envs, *cfg.heldout.envs, *cfg.validation.envs):
        check_env_name(env)
    check_run_config(cfg)


def typed_choice(choice: PlugChoice, plug: str, path: str) -> PlugChoice:
    """`choice` with each option read as the type its objective declares (and the version a new
    choice runs recorded); ConfigError for an unknown objective or option (with close matches) or a
    value of the wrong type. `path` names the config field in messages (objectives.drift)."""
    from metadisco.meta_objectives import check_options, objective_class

    try:
        declared = objective_class(plug, choice.name).options()
        for key, value in choice.options:
            if key not in declared:
                check_options(plug, choice.name, {key: value}, settable=True)  # raises: says what there is
        options = tuple((k, coerce(v, declared[k][0], f"{path}.{k}")) for k, v in choice.options)
        check_options(plug, choice.name, dict(options), settable=True)
        version = version_option(plug, choice.name)
        if version is not None and version not in dict(options):  # a new choice records the version it runs
            options = tuple(sorted((*options, (version, declared[version][1]))))
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
    return PlugChoice(choice.name, options)


def typed_objectives(objectives: ObjectivesConfig) -> ObjectivesConfig:
    """Every plug's choice read as its objective declares (typed_choice)."""
    return dataclasses.replace(objectives, **{p: typed_choice(getattr(objectives, p), p, f"objectives.{p}")
                                              for p in PLUGS})


def objectives_of(objectives: ObjectivesConfig):
    """The meta_objectives.Objectives the config sections describe, each built with its options,
    not yet sized for an environment (`Objectives.for_env`); ConfigError for anything that cannot be
    built (an unknown name or option, an option the objective refuses such as an invalid expression)."""
    from metadisco.meta_objectives import Objectives, make_objective

    built = {}
    for plug in PLUGS:
        path = f"objectives.{plug}"
        choice = typed_choice(getattr(objectives, plug), plug, path)
        try:
            built[plug] = make_objective(plug, choice.name, **dict(choice.options))
        except ValueError as e:
            raise ConfigError(f"{path}: {e}") from None
    return Objectives(**built)


def _check_objectives_and_shapes(cfg: RunConfig) -> RunConfig:
    """The checks that import the objectives and environments (jax): names, options, shapes.
    Returns `cfg` with each objective option read as the type its objective declares."""
    o = typed_objectives(cfg.objectives)  # an unknown objective or option, a value of the wrong type
    objectives = objectives_of(o)  # an option the objective refuses (e.g. an invalid closed-form expression)
    if not o.evolve:
        raise ConfigError("objectives.evolve is empty: name the plug points to evolve, e.g. objectives.evolve=drift")
    for plug in o.evolve:
        if plug not in PLUGS:
            raise ConfigError(f"objectives.evolve: unknown plug point {plug!r}; choose from {', '.join(PLUGS)}")
        if not _has_parameters(plug, getattr(o, plug)):
            from metadisco.meta_objectives import names

            learned = " or ".join(f"objectives.{plug}={name}" for name in names(plug, learned=True))
            raise ConfigError(f"objectives.evolve names {plug}, but objectives.{plug}={getattr(o, plug).name} has no "
                              f"parameters to evolve: pick a learned one ({learned}), or leave {plug} out of "
                              "objectives.evolve")
    if len(set(o.evolve)) != len(o.evolve):
        raise ConfigError(f"objectives.evolve lists a plug point twice: {o.evolve}")
    if objectives.reads_observations:  # sized for one observation shape (Objectives.for_env)
        shapes = {_obs_shape(e) for e in cfg.envs}
        if len(shapes) > 1:
            readers = " and ".join(obj.title for _, obj in objectives.items() if obj.reads_observations)
            raise ConfigError(f"the {readers} reads observations and needs one observation shape, "
                              f"but envs have {sorted(shapes)}: train on environments of one shape, or leave "
                              f"{'it' if ' and ' not in readers else 'them'} out "
                              "(e.g. objectives.shaping=none objectives.evolve=drift)")
        # a declared held-out set the discovery cannot run on would only fail at `evaluate`
        sized = objectives.for_env(next(iter(shapes)))
        problem = sized.incompatibility(next(iter(shapes)), cfg.envs[0])
        if problem:  # e.g. an option sized for other observations (a potential's obs_scale)
            raise ConfigError(f"objectives: {problem}")
        for section, envs in (("heldout", cfg.heldout.envs), ("validation", cfg.validation.envs)):
            for env in envs:
                problem = sized.incompatibility(_obs_shape(env), env)
                if problem:
                    raise ConfigError(f"{section}.envs: {env} cannot evaluate what this run evolves: {problem}")
    for env in cfg.envs:  # PPO shapes: fails here, not inside jit
        for h in (1.0, *cfg.distribution.horizons):
            try:
                ppo_config(cfg, env, h).validate()
            except ValueError as e:
                where = "inner settings" if h == 1.0 else f"distribution.horizons: {h:g} of the run's length"
                raise ConfigError(f"{where} on {env}: {e}") from None
    for i, env in enumerate(cfg.validation.envs):
        try:
            validation_ppo_config(cfg, i).validate()
        except ValueError as e:
            raise ConfigError(f"validation on {env}: {e}") from None
    _check_plugin_envs((*cfg.envs, *cfg.heldout.envs, *cfg.validation.envs))
    return dataclasses.replace(cfg, objectives=o)


def _check_plugin_envs(names) -> None:
    """Build each plug-in environment once (metadisco.inner_loops.envs traces a reset and a step), so
    that one that is not an environment is reported here, before anything compiles."""
    from metadisco.core.catalog import is_builtin_env
    from metadisco.inner_loops import make_env

    for name in dict.fromkeys(names):
        if not is_builtin_env(name):
            make_env(name)


def _obs_shape(env_name: str):
    from metadisco.inner_loops import make_env

    return make_env(env_name).obs_shape


def ppo_config(cfg: RunConfig, env_name: str, horizon: float = 1.0):
    """The PPO config of one meta-training environment: its preset with the run's overrides, and
    `horizon` (a fraction, distribution.horizons) of its total_timesteps."""
    from metadisco.inner_loops import preset_for

    # greedy evaluation episodes only where the fitness scores them: the sampled score is the same
    # without them, and greedy episodes can run to the time limit (CHANGELOG.md, "greedy evaluation episodes")
    config = preset_for(env_name).replace(**cfg.inner.overrides(), eval_greedy=fitness_of(cfg.fitness).score.greedy)
    if horizon == 1.0:
        return config
    return config.replace(total_timesteps=max(1, round(horizon * config.total_timesteps)))


def validation_ppo_config(cfg: RunConfig, index: int):
    """The PPO config of validation problem `index` (cfg.validation.envs[index]): its env's preset with
    the run's inner overrides, then the validation section's own lr and timesteps where it gives them."""
    v = cfg.validation
    config = ppo_config(cfg, v.envs[index])
    if v.timesteps:
        config = config.replace(total_timesteps=v.timesteps[index])
    if v.lr:
        config = config.replace(lr=v.lr[index])
    return config


@dataclasses.dataclass(frozen=True)
class PlannedProblem:
    """One environment a run trains on (or validates on) at one horizon, as its config sets it."""

    name: str  # the env's name, or "env@fraction" with distribution.horizons (metrics, baseline.json)
    env: str  # the environment (metadisco.inner_loops.make_env's name)
    env_index: int | None  # into RunPlan.envs (cfg.envs); None for a validation problem
    horizon: float  # fraction of the env's total_timesteps (1.0 without distribution.horizons)
    ppo_config: PPOConfig  # its preset with the run's inner overrides, at that horizon


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What a validated config decides about its run, built once (`run_plan`) and handed to the engine
    (metadisco.engine.MetaTrainer), which reads it and none of this module's rules: the objectives,
    every problem and its PPO config. The engine builds the environments, programs and strategy from it."""

    cfg: RunConfig
    objectives: Objectives  # each plug built with its section's options, not yet sized for an environment
    envs: tuple[PlannedProblem, ...]  # each of cfg.envs at its whole budget (horizon 1)
    horizons: tuple[float, ...]  # distribution.horizons, or (1.0,)
    problems: tuple[PlannedProblem, ...]  # every (env, horizon), env-major: env e at horizon h is e * len(horizons) + h
    validation: tuple[PlannedProblem, ...]  # each of cfg.validation.envs, its section's lr and timesteps


def run_plan(cfg: RunConfig) -> RunPlan:
    """The plan of a validated run config (`validate`'s result, or a run directory's stored config)."""
    horizons = tuple(cfg.distribution.horizons) or (1.0,)
    envs = tuple(PlannedProblem(name, name, e, 1.0, ppo_config(cfg, name)) for e, name in enumerate(cfg.envs))
    problems = tuple(PlannedProblem(name if len(horizons) == 1 else f"{name}@{h:g}", name, e, h, ppo_config(cfg, name, h))
                     for e, name in enumerate(cfg.envs) for h in horizons)
    validation = tuple(PlannedProblem(name, name, None, 1.0, validation_ppo_config(cfg, i))
                       for i, name in enumerate(cfg.validation.envs))
    return RunPlan(cfg, objectives_of(cfg.objectives), envs, horizons, problems, validation)


def diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Human-readable differences between two config dicts."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff(va, vb, f"{prefix}{k}.")
        elif _norm(va) != _norm(vb):
            out.append(f"{prefix}{k}: {va!r} -> {vb!r}")
    return out


def _norm(v):
    return json.loads(json.dumps(v))

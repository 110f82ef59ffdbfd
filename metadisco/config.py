"""Run configuration: experiment files (TOML), command-line overrides and the checks of a config.

A run is fully described by a `RunConfig` (its schema, frozen dataclasses, is
`analysis.run_config`'s: the run directory's reader parses config.json with it too, and this
module exports it as the place a config is built from); the run directory stores it resolved
(config.json), so any run can be re-created and resumed. Validation happens here, before anything
compiles: the jax-free checks first.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
from pathlib import Path

from analysis.run_config import (
    DistributionConfig,
    ESConfig,
    ExpectConfig,
    HeldoutConfig,
    InnerConfig,
    ObjectivesConfig,
    PlugChoice,
    RunConfig,
    read_section,
)
from meta_objectives.plugs import PLUGS
from metadisco import resources
from metadisco_common.errors import ConfigError

# The schema's classes are part of this module's interface: a config is built here.
__all__ = [
    "DEMO_EXPERIMENT", "ENV_FITNESS", "EXPECT_BEATS", "EXPERIMENTS", "FITNESS_KINDS", "LR_DRAWS",
    "DistributionConfig", "ESConfig", "ExpectConfig", "HeldoutConfig", "InnerConfig", "ObjectivesConfig",
    "PlugChoice", "RunConfig", "check_static", "diff", "inner_config", "list_experiments", "load_experiment",
    "override", "parse_overrides", "ppo_config", "resolve", "validate",
]

EXPERIMENTS = "experiments"  # the data folder of named experiments (metadisco.resources)
DEMO_EXPERIMENT = "rediscover_value_loss"  # what `metadisco train` runs with no experiment and no override
# metadisco.engine.SCORES defines them (final_eval: the final policy's evaluation, sampled; its
# greedy twin; auc: the learning curve's mean; final: its last 10%); *_norm: normalised by PPO.
# Kept here because the engine imports jax and these checks run before it; tests/test_engine.py
# holds the two equal.
FITNESS_KINDS = tuple(k + n for k in ("final_eval", "greedy_eval", "auc", "final") for n in ("", "_norm"))

# How DistributionConfig's draws are shared and how per-environment fitness is combined.
LR_DRAWS = ("pair", "generation")
ENV_FITNESS = ("mean", "rank")

# Which comparison on fresh seeds a run's pass criterion reads (ExpectConfig.beats).
EXPECT_BEATS = ("", "start", "ppo")


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


def load_experiment(name_or_path: str) -> dict:
    """An experiment's fields as a dict: a named experiment or a path to a TOML file."""
    path = Path(name_or_path)
    try:
        if path.suffix:
            text, where = path.read_text(), str(path)
        else:
            text, where = resources.read_text(EXPERIMENTS, f"{name_or_path}.toml"), f"experiment {name_or_path}"
    except (FileNotFoundError, IsADirectoryError):
        known = list_experiments()
        close = difflib.get_close_matches(name_or_path, known, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown experiment {name_or_path!r}.{hint} Available: {', '.join(known) or '(none)'}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML: {e}") from e


def parse_overrides(items: list[str]) -> dict:
    """['es.population_size=32', 'envs=CartPole-v1,Acrobot-v1'] -> nested dict of strings."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like FIELD=VALUE (e.g. es.population_size=32)")
        key, value = item.split("=", 1)
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            if isinstance(node.get(p), str):  # objectives.drift=dpo objectives.drift.alpha=1: the string was a name
                node[p] = {"name": node[p]}
            node = node.setdefault(p, {})
        if isinstance(node.get(leaf), dict):  # objectives.drift.alpha=1 objectives.drift=dpo: the same
            node[leaf]["name"] = value.strip()
        else:
            node[leaf] = value.strip()
    return out


def inner_config(base: dict, overrides: list[str] = ()) -> InnerConfig:
    """PPO overrides from a stored `inner` section updated by FIELD=VALUE items, coerced and checked
    as `metadisco train` checks inner.FIELD=VALUE (evaluate's --inner and --inner-from-run)."""
    given = parse_overrides([f"inner.{item}" for item in overrides]).get("inner", {})
    return read_section(InnerConfig, _merge(base, given), "inner.")


def resolve(experiment: str | None = None, overrides: list[str] = ()) -> RunConfig:
    """Defaults <- experiment file <- command-line overrides, then validated."""
    d = RunConfig().to_dict()
    if experiment:
        d = _merge(d, load_experiment(experiment))
    d = _merge(d, parse_overrides(list(overrides)))
    return validate(RunConfig.from_dict(d))


def override(cfg: RunConfig, overrides: list[str] = ()) -> RunConfig:
    """`cfg` updated by FIELD=VALUE overrides (as `resolve` applies them), then validated."""
    return validate(RunConfig.from_dict(_merge(cfg.to_dict(), parse_overrides(list(overrides)))))


def validate(cfg: RunConfig) -> RunConfig:
    """Every check that can fail without compiling anything; raises ConfigError saying what to do.

    The jax-free checks (`check_static`) run first, so a typo is reported before jax starts.
    """
    check_static(cfg)
    return _check_objectives_and_shapes(cfg)


def check_static(cfg: RunConfig) -> None:
    """The checks that need neither jax nor an environment library: names, ranges, sizes."""
    from inner_loops.catalog import check_env_name
    from metadisco.strategy import (
        ANTITHETIC_STRATEGIES,
        FITNESS_SHAPING,
        STRATEGIES,
        UNSUPPORTED_STRATEGIES,
        WEIGHTED_STRATEGIES,
    )

    if not cfg.envs:
        raise ConfigError("envs is empty: name at least one environment, e.g. envs=CartPole-v1")
    for env in cfg.envs:
        check_env_name(env)
    for env in cfg.heldout.envs:
        check_env_name(env)
    trained_on = [e for e in cfg.heldout.envs if e in cfg.envs]
    if trained_on:
        raise ConfigError(
            f"heldout.envs lists {', '.join(trained_on)}, which the run meta-trains on: a held-out "
            "environment must be one the run never sees; drop it from heldout.envs or from envs"
        )
    if cfg.heldout.seeds < 1 or (cfg.heldout.timesteps is not None and cfg.heldout.timesteps < 1):
        raise ConfigError("heldout.seeds and heldout.timesteps must be >= 1")
    if cfg.es.strategy not in STRATEGIES:
        close = difflib.get_close_matches(cfg.es.strategy, STRATEGIES, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown ES strategy {cfg.es.strategy!r}.{hint} Available: {', '.join(sorted(STRATEGIES))}")
    if cfg.es.strategy in UNSUPPORTED_STRATEGIES:
        raise ConfigError(f"es.strategy={cfg.es.strategy} cannot be used here: "
                          f"{UNSUPPORTED_STRATEGIES[cfg.es.strategy]}; choose another (e.g. Open_ES, SNES, CMA_ES)")
    es = cfg.es
    if es.population_size < 2:
        raise ConfigError(f"es.population_size must be >= 2, got {es.population_size}")
    if es.antithetic and es.population_size % 2 and es.strategy in ANTITHETIC_STRATEGIES:
        raise ConfigError(
            f"es.population_size = {es.population_size} is odd but antithetic sampling pairs members (+z, -z): "
            "use an even population, or es.antithetic=false"
        )
    if es.sigma_init <= 0 or es.lr <= 0:
        raise ConfigError("es.sigma_init and es.lr must be > 0")
    if not (0 < es.sigma_decay <= 1 and 0 < es.lr_decay <= 1):
        raise ConfigError("es.sigma_decay and es.lr_decay must be in (0, 1]")
    if es.optimizer not in ("adam", "sgd"):
        raise ConfigError(f"es.optimizer must be adam or sgd, got {es.optimizer!r}")
    if es.fitness_shaping not in FITNESS_SHAPING:
        raise ConfigError(f"es.fitness_shaping must be one of {', '.join(FITNESS_SHAPING)}")
    if es.fitness_shaping not in ("auto", "default") and es.strategy in WEIGHTED_STRATEGIES:
        raise ConfigError(
            f"es.fitness_shaping={es.fitness_shaping} does not apply to {es.strategy}: its update takes "
            "recombination weights, which it computes from the ranks itself; leave es.fitness_shaping=auto"
        )
    if cfg.fitness not in FITNESS_KINDS:
        raise ConfigError(f"fitness must be one of {', '.join(FITNESS_KINDS)}, got {cfg.fitness!r}")
    if len(cfg.envs) > 1 and not cfg.fitness.endswith("_norm"):
        raise ConfigError(
            f"{len(cfg.envs)} meta-training environments need a normalised fitness so that their returns "
            f"can be averaged: use fitness={cfg.fitness}_norm"
        )
    if cfg.inner.eval_episodes == 0 and "eval" in cfg.fitness:
        raise ConfigError(f"fitness={cfg.fitness} scores evaluation episodes: inner.eval_episodes must be >= 1")
    if cfg.fitness.endswith("_norm") and cfg.baseline_seeds < 2:
        raise ConfigError(
            f"fitness={cfg.fitness} checks that PPO beats its initial policy beyond noise, which takes "
            f"baseline_seeds >= 2 (got {cfg.baseline_seeds})"
        )
    _check_distribution(cfg)
    _check_expect(cfg)
    for name in ("seeds_per_member", "generations", "checkpoint_every", "eval_seeds", "baseline_seeds"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.eval_every < 0 or cfg.devices < 0:
        raise ConfigError("eval_every and devices must be >= 0")


def _check_distribution(cfg: RunConfig) -> None:
    d = cfg.distribution
    if not 0 <= d.envs_per_generation <= len(cfg.envs):
        raise ConfigError(
            f"distribution.envs_per_generation = {d.envs_per_generation} must be between 1 and the {len(cfg.envs)} "
            "environment(s) in envs (0: all of them every generation)"
        )
    if d.lr_range and not (len(d.lr_range) == 2 and 0 < d.lr_range[0] <= d.lr_range[1]):
        raise ConfigError(
            f"distribution.lr_range = {list(d.lr_range)} must be [low, high] with 0 < low <= high: factors on "
            "each environment's preset lr, e.g. distribution.lr_range=0.5,2 (empty: the preset's lr)"
        )
    if d.lr_draw not in LR_DRAWS:
        raise ConfigError(f"distribution.lr_draw must be one of {', '.join(LR_DRAWS)}, got {d.lr_draw!r}")
    if any(not 0 < h <= 1 for h in d.horizons) or len(set(d.horizons)) != len(d.horizons):
        raise ConfigError(
            f"distribution.horizons = {list(d.horizons)} must be distinct fractions in (0, 1] of "
            "inner.total_timesteps, e.g. distribution.horizons=0.5,1"
        )
    if d.env_fitness not in ENV_FITNESS:
        raise ConfigError(f"distribution.env_fitness must be one of {', '.join(ENV_FITNESS)}, got {d.env_fitness!r}")


def _check_expect(cfg: RunConfig) -> None:
    e = cfg.expect
    if e.beats not in EXPECT_BEATS:
        raise ConfigError(f"expect.beats must be start or ppo (or empty: no verdict), got {e.beats!r}")
    if not 0 <= e.gap_closed <= 1:
        raise ConfigError(f"expect.gap_closed = {e.gap_closed} must be a share in [0, 1] of the gap from the start to PPO")
    if (e.beats or e.gap_closed) and not cfg.eval_every:
        raise ConfigError("expect needs the checks on fresh seeds that eval_every runs: set eval_every >= 1")
    if e.gap_closed and not e.beats:
        raise ConfigError("expect.gap_closed needs expect.beats (start or ppo): the comparison that must exclude 0")


def _check_objectives_and_shapes(cfg: RunConfig) -> RunConfig:
    """The checks that import the objectives and environments (jax): names, options, shapes.
    Returns `cfg` with each objective option read as the type its objective declares."""
    o = cfg.objectives.typed()  # an unknown objective or option, a value of the wrong type
    objectives = o.build()  # an option the objective refuses (e.g. an invalid closed-form expression)
    if not o.evolve:
        raise ConfigError("objectives.evolve is empty: name the plug points to evolve, e.g. objectives.evolve=drift")
    for plug in o.evolve:
        if plug not in PLUGS:
            raise ConfigError(f"objectives.evolve: unknown plug point {plug!r}; choose from {', '.join(PLUGS)}")
    if len(set(o.evolve)) != len(o.evolve):
        raise ConfigError(f"objectives.evolve lists a plug point twice: {o.evolve}")
    if objectives.reads_observations:  # sized for one observation shape (Objectives.for_env)
        shapes = {_obs_shape(e) for e in cfg.envs}
        if len(shapes) > 1:
            readers = " and ".join(obj.title for _, obj in objectives.items() if obj.reads_observations)
            raise ConfigError(f"the {readers} reads observations and needs one observation shape, "
                              f"but envs have {sorted(shapes)}")
        # a declared held-out set the discovery cannot run on would only fail at `evaluate`
        sized = objectives.for_env(next(iter(shapes)))
        problem = sized.incompatibility(next(iter(shapes)), cfg.envs[0])
        if problem:  # e.g. an option sized for other observations (a potential's obs_scale)
            raise ConfigError(f"objectives: {problem}")
        for env in cfg.heldout.envs:
            problem = sized.incompatibility(_obs_shape(env), env)
            if problem:
                raise ConfigError(f"heldout.envs: {env} cannot evaluate what this run evolves: {problem}")
    for env in cfg.envs:  # PPO shapes: fails here, not inside jit
        for h in (1.0, *cfg.distribution.horizons):
            try:
                ppo_config(cfg, env, h).validate()
            except ValueError as e:
                where = "inner settings" if h == 1.0 else f"distribution.horizons: {h:g} of the run's length"
                raise ConfigError(f"{where} on {env}: {e}") from None
    _check_plugin_envs((*cfg.envs, *cfg.heldout.envs))
    return dataclasses.replace(cfg, objectives=o)


def _check_plugin_envs(names) -> None:
    """Build each plug-in environment once (inner_loops.envs traces a reset and a step), so
    that one that is not an environment is reported here, before anything compiles."""
    from inner_loops import make_env
    from inner_loops.catalog import is_builtin_env

    for name in dict.fromkeys(names):
        if not is_builtin_env(name):
            make_env(name)


def _obs_shape(env_name: str):
    from inner_loops import make_env

    return make_env(env_name).obs_shape


def ppo_config(cfg: RunConfig, env_name: str, horizon: float = 1.0):
    """The PPO config of one meta-training environment: its preset with the run's overrides, and
    `horizon` (a fraction, distribution.horizons) of its total_timesteps."""
    from inner_loops import preset_for

    # greedy evaluation episodes only where the fitness scores them: the sampled score is the same
    # without them, and greedy episodes can run to the time limit (docs/benchmarks.md, "Greedy episodes")
    config = preset_for(env_name).replace(**cfg.inner.overrides(), eval_greedy=cfg.fitness.startswith("greedy"))
    if horizon == 1.0:
        return config
    return config.replace(total_timesteps=max(1, round(horizon * config.total_timesteps)))


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

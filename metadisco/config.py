"""Run configuration: frozen dataclasses, experiment files (TOML) and command-line overrides.

A run is fully described by a `RunConfig`; the run directory stores it resolved (config.json),
so any run can be re-created and resumed. Validation happens here, before anything compiles.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meta_objectives.plugs import PLUGS, upgrade_section
from metadisco import resources
from metadisco_common.errors import ConfigError

EXPERIMENTS = "experiments"  # the data folder of named experiments (metadisco.resources)
DEMO_EXPERIMENT = "rediscover_value_loss"  # what `metadisco train` runs with no experiment and no override
# metadisco.engine.SCORES defines them (final_eval: the final policy's evaluation, sampled; its
# greedy twin; auc: the learning curve's mean; final: its last 10%); *_norm: normalised by PPO.
FITNESS_KINDS = tuple(k + n for k in ("final_eval", "greedy_eval", "auc", "final") for n in ("", "_norm"))


@dataclass(frozen=True)
class ESConfig:
    """The evolution strategy (evosax 0.3) and its schedules."""

    strategy: str = "Open_ES"
    population_size: int = 16
    sigma_init: float = 0.01
    sigma_decay: float = 1.0  # multiplied in every generation
    sigma_limit: float = 0.001
    lr: float = 0.01
    lr_decay: float = 1.0
    lr_limit: float = 0.0001
    optimizer: str = "adam"  # adam | sgd
    antithetic: bool = True
    fitness_shaping: str = "auto"  # centered ranks, or the strategy's own weights (CMA-ES, NES); see strategy.py


@dataclass(frozen=True)
class InnerConfig:
    """Overrides of the environment's PPO preset (None keeps the preset's value)."""

    total_timesteps: int | None = None
    num_envs: int | None = None
    num_steps: int | None = None
    update_epochs: int | None = None
    num_minibatches: int | None = None
    hidden: tuple[int, ...] | None = None
    normalize_obs: bool | None = None
    normalize_reward: bool | None = None
    eval_episodes: int | None = None  # final-policy evaluation episodes per mode (final_eval fitness)
    reward_noise: float | None = None  # scale of Student-t noise on the rewards PPO learns from (returns stay clean)
    reward_noise_df: float | None = None  # its degrees of freedom
    lr: float | None = None
    gamma: float | None = None
    gae_lambda: float | None = None
    ent_coef: float | None = None
    vf_coef: float | None = None
    max_grad_norm: float | None = None

    def overrides(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class PlugChoice:
    """The objective at one plug point: a registered name and the options it is built with (the
    objective's own dataclass fields, e.g. hidden for lpo, use_target for learned, expression for
    closed_form). In an experiment file a section per plug point:

        [objectives.drift]
        name = "lpo"
        hidden = 64

    on the command line objectives.drift=lpo (a string for the section is its name) and
    objectives.drift.hidden=64. Options not given keep the objective's defaults.
    """

    name: str
    options: tuple[tuple[str, Any], ...] = ()  # (option, value) pairs, sorted by option

    def __str__(self) -> str:
        """As a user would write it: lpo, or lpo(hidden=64)."""
        options = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"{self.name}({options})" if options else self.name

    @classmethod
    def read(cls, value, path: str) -> PlugChoice:
        """A name, a section dict {"name": ..., OPTION: VALUE} or a PlugChoice -> PlugChoice."""
        if isinstance(value, PlugChoice):
            return value
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, dict):
            raise ConfigError(f"config field {path} picks an objective: set {path}=NAME, or a section with "
                              f"name = NAME and its options ({path}.OPTION=VALUE)")
        name = value.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"config field {path} has no objective name: set {path}.name=NAME (or {path}=NAME)")

        def frozen(v):  # TOML and JSON arrays -> tuples, so that configs compare and hash
            return tuple(frozen(x) for x in v) if isinstance(v, (list, tuple)) else v

        return cls(name, tuple(sorted((k, frozen(v)) for k, v in value.items() if k != "name")))

    def to_dict(self) -> dict:
        return {"name": self.name, **dict(self.options)}

    def typed(self, plug: str, path: str) -> PlugChoice:
        """The same choice with each option read as the type the objective declares; ConfigError
        for an unknown objective or option (with close matches) or a value of the wrong type."""
        from meta_objectives import check_options, objective_class

        try:
            declared = objective_class(plug, self.name).options()
            for key, value in self.options:
                if key not in declared:
                    check_options(plug, self.name, {key: value}, settable=True)  # raises: says what there is
            options = tuple((k, _coerce(v, declared[k][0], f"{path}.{k}")) for k, v in self.options)
            check_options(plug, self.name, dict(options), settable=True)
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(f"{path}: {e}") from None
        return PlugChoice(self.name, options)

    def build(self, plug: str, path: str):
        """The objective this choice names, built with its options (ConfigError if it cannot be)."""
        from meta_objectives import make_objective

        choice = self.typed(plug, path)
        try:
            return make_objective(plug, choice.name, **dict(choice.options))
        except ValueError as e:  # e.g. an option the objective itself refuses (an invalid expression)
            raise ConfigError(f"{path}: {e}") from None


@dataclass(frozen=True)
class ObjectivesConfig:
    """Which objective fills each plug point (with its options), and which plug points evolve.

    Each plug accepts a PlugChoice, a name or a section dict: ObjectivesConfig(drift="dpo"),
    ObjectivesConfig(drift={"name": "lpo", "hidden": 8}).
    """

    drift: PlugChoice = PlugChoice("lpo")
    value_loss: PlugChoice = PlugChoice("clipped_l2")
    shaping: PlugChoice = PlugChoice("none")
    evolve: tuple[str, ...] = ("drift",)

    def __post_init__(self):
        for plug in PLUGS:
            object.__setattr__(self, plug, PlugChoice.read(getattr(self, plug), f"objectives.{plug}"))

    def to_dict(self) -> dict:
        return {**{plug: getattr(self, plug).to_dict() for plug in PLUGS}, "evolve": self.evolve}

    def typed(self) -> ObjectivesConfig:
        """Every option read as its declared type (ConfigError for an unknown name or option)."""
        return dataclasses.replace(self, **{p: getattr(self, p).typed(p, f"objectives.{p}") for p in PLUGS})

    def build(self):
        """The meta_objectives.Objectives these sections describe, not yet sized for an environment
        (`Objectives.for_env`). Raises ConfigError for anything that cannot be built."""
        from meta_objectives import Objectives

        return Objectives(**{p: getattr(self, p).build(p, f"objectives.{p}") for p in PLUGS})


@dataclass(frozen=True)
class HeldoutConfig:
    """The held-out evaluation, fixed before the run: environments it never meta-trains on.

    `metadisco evaluate RUN_DIR` uses it when no --envs, --suite or --quick is given, so the
    environments a discovery is judged on are chosen before its results are seen.
    """

    envs: tuple[str, ...] = ()
    timesteps: int | None = None  # steps per evaluation run; None: each environment's evaluation budget
    seeds: int = 8
    inner_from_run: bool = False  # evaluate with the run's inner settings (lr, rollout shape)


# How DistributionConfig's draws are shared and how per-environment fitness is combined.
LR_DRAWS = ("pair", "generation")
ENV_FITNESS = ("mean", "rank")


@dataclass(frozen=True)
class DistributionConfig:
    """The training distribution each generation draws its problems from (issue 14): so that what
    evolution finds is not tied to one environment, one learning rate or one training length.

    Every draw is a function of (seed, generation) only, so a resumed run draws what it would have.
    Environments and horizons are drawn once per generation (every member trains on the same ones:
    each is a separate compiled program, selected by `lax.switch`, so only what is drawn runs); a
    learning-rate factor per antithetic pair (members i and i + P/2 in evosax's mirrored layout share
    it, and their seeds; the ES then ranks each member against its pair's mean, so that the rate a
    pair drew cancels) or per generation. The normaliser of *_norm fitness is PPO per env and horizon
    at the preset's lr. The defaults draw nothing: every env, the preset's lr, the full length.

        [distribution]
        envs_per_generation = 1   # a subset of 1 of `envs` per generation
        lr_range = [0.5, 2.0]     # lr = preset lr * a log-uniform factor in [0.5, 2]
        horizons = [0.5, 1.0]     # total_timesteps * one of these; progress is relative to it
    """

    envs_per_generation: int = 0  # k in 1..len(envs): a subset of k drawn per generation; 0: all of them
    lr_range: tuple[float, ...] = ()  # (low, high) factors on each env's lr, drawn log-uniformly; (): the preset
    lr_draw: str = "pair"  # pair: one factor per antithetic pair (per member without pairs); generation: one for all
    horizons: tuple[float, ...] = ()  # fractions of inner.total_timesteps, one drawn per generation; (): 1.0 only
    env_fitness: str = "mean"  # mean: the ES ranks the mean over envs; rank: the mean of per-env centred ranks


# Which comparison on fresh seeds a run's pass criterion reads (ExpectConfig.beats).
EXPECT_BEATS = ("", "start", "ppo")


@dataclass(frozen=True)
class ExpectConfig:
    """What a run is expected to find, stated before it runs (rediscovery problems, the demo).

    The end of the run prints a verdict line from the last check on fresh seeds (`eval_every`):
    found when the ES mean beats `beats` (its start point or PPO) with a 95% interval above 0
    and, with `gap_closed` > 0, closes at least that share of the gap from its start to PPO
    (the point estimate; its interval is printed beside it).

        [expect]
        answer = "a drift that penalises moving r away from 1 (PPO's trust region)"
        beats = "start"
        gap_closed = 0.8
    """

    answer: str = ""  # the expected answer, in words
    beats: str = ""  # start | ppo: the comparison whose interval must lie above 0; "": no verdict
    gap_closed: float = 0.0  # in [0, 1]: the share of the start -> PPO gap to close (0: not required)


@dataclass(frozen=True)
class RunConfig:
    """One meta-training run. The defaults are the CPU demo (`metadisco train`)."""

    name: str = "lpo-cartpole"
    envs: tuple[str, ...] = ("CartPole-v1",)
    inner: InnerConfig = field(default_factory=lambda: InnerConfig(total_timesteps=32_768))
    objectives: ObjectivesConfig = field(default_factory=ObjectivesConfig)
    es: ESConfig = field(default_factory=ESConfig)
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)
    distribution: DistributionConfig = field(default_factory=DistributionConfig)
    expect: ExpectConfig = field(default_factory=ExpectConfig)
    fitness: str = "final_eval"
    seeds_per_member: int = 2
    generations: int = 60
    seed: int = 0
    eval_every: int = 10  # every k generations: ES mean vs PPO on the same fresh seeds (0: off)
    eval_seeds: int = 8
    baseline_seeds: int = 8  # seeds of the PPO run that normalises fitness (*_norm kinds)
    checkpoint_every: int = 5
    devices: int = 0  # 0: all local devices (on CPU, one per core)
    tensorboard: bool = False
    mlflow: bool = False
    mlflow_uri: str = ""  # empty: a local SQLite store, RUN_DIR/mlflow.db

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "objectives": self.objectives.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        """From a config dict (config.json, an experiment merged with overrides); the objectives
        section of run directories written before options were nested is read too."""
        if isinstance(d.get("objectives"), dict):
            d = {**d, "objectives": upgrade_section(d["objectives"])}
        return _build(cls, d, "")


def _unwrap_optional(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _coerce(value, tp, path: str):
    """Convert a TOML/JSON/command-line value to the annotated field type."""
    hints_tp = _unwrap_optional(tp)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and hints_tp is not str):
        return None
    origin = typing.get_origin(hints_tp)
    if origin is tuple:
        (item_tp, *_) = typing.get_args(hints_tp)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        return tuple(_coerce(v.strip() if isinstance(v, str) else v, item_tp, path) for v in value)
    try:
        if hints_tp is bool:
            if isinstance(value, str):
                if value.lower() in ("true", "1", "yes", "on"):
                    return True
                if value.lower() in ("false", "0", "no", "off"):
                    return False
                raise ValueError
            return bool(value)
        if hints_tp is int:
            number = float(value) if isinstance(value, str) else value
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            return int(number)
        if hints_tp is float:
            return float(value)
        if hints_tp is str:
            return str(value)
    except (TypeError, ValueError):
        pass
    else:
        return value
    raise ConfigError(f"config field {path}: cannot read {value!r} as {getattr(hints_tp, '__name__', hints_tp)}")


def _build(cls, d: dict, prefix: str):
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in d if k not in names]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(k, names, n=3)
        hint = f" Did you mean {', '.join(prefix + c for c in close)}?" if close else ""
        raise ConfigError(f"unknown config field {prefix + k!r}.{hint} Fields here: {', '.join(names)}")
    kwargs = {}
    for k, v in d.items():
        tp = hints[k]
        if tp is PlugChoice:
            kwargs[k] = PlugChoice.read(v, prefix + k)
        elif dataclasses.is_dataclass(tp):
            if not isinstance(v, dict):
                raise ConfigError(f"config field {prefix + k} is a section; set its fields as {prefix + k}.FIELD=VALUE")
            kwargs[k] = _build(tp, v, f"{prefix}{k}.")
        else:
            kwargs[k] = _coerce(v, tp, prefix + k)
    return cls(**kwargs)


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
    return _build(InnerConfig, _merge(base, given), "inner.")


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

    config = preset_for(env_name).replace(**cfg.inner.overrides())
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

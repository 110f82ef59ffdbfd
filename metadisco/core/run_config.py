"""The run config's schema: what a run is, as frozen dataclasses (jax-free).

`RunConfig` and its sections are the one typed form of a run's config. `metadisco.config` builds
one from the defaults, an experiment file and FIELD=VALUE overrides and checks it; the run
directory stores it resolved (RUN_DIR/config.json, `RunConfig.to_dict`); `metadisco.analysis.runs.Run.config()`
reads it back with `RunConfig.from_stored`, which checks it as `metadisco train` does
(`metadisco.core.run_checks`), so every reader of a run's config (train --resume, plot, the
report, evaluate, distil, export) sees the same fields with the same defaults, or the same error.
`InnerConfig` is derived from PPO's own settings (metadisco.core.ppo_config). What needs the
objectives' registry (an option's declared type, building the objectives) is metadisco.config's.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from metadisco.core.errors import ConfigError
from metadisco.core.plugs import PLUGS, upgrade_section
from metadisco.core.ppo_config import PPOConfig, PPOHyperparams
from metadisco.core.run_checks import check_run_config


@dataclass(frozen=True)
class ESConfig:
    """The evolution strategy (evosax 0.3) and its schedules."""

    strategy: str = "Open_ES"  # an evosax 0.3 strategy name (metadisco.core.strategies.STRATEGIES)
    population_size: int = 16  # members per generation, each a candidate objective
    sigma_init: float = 0.01  # the initial standard deviation of the search distribution
    sigma_decay: float = 1.0  # multiplied in every generation
    sigma_limit: float = 0.001  # sigma decays no lower than this
    lr: float = 0.01  # the ES optimizer's learning rate on the search mean
    lr_decay: float = 1.0  # multiplied into lr every generation
    lr_limit: float = 0.0001  # lr decays no lower than this
    optimizer: str = "adam"  # the ES optimizer on the search mean: adam | sgd
    antithetic: bool = True  # mirrored sampling (members +z and -z) where the strategy takes it
    fitness_shaping: str = "auto"  # centered ranks, or the strategy's own weights (CMA-ES, NES); see strategy.py;
    # pairwise: each antithetic pair scored against each other, +1/2 to the better, -1/2 to the other (TA-LPG)


# PPOConfig's fields a run does not set: fixed by the inner loop's caller (record_samples: distil;
# eval_greedy: the fitness, metadisco.config.ppo_config) or by the preset alone (activation, anneal_lr).
FIXED_PPO_FIELDS = ("activation", "anneal_lr", "record_samples", "eval_greedy")


def inner_config_class(ppo: type = PPOConfig) -> type:
    """The InnerConfig dataclass of `ppo` (PPOConfig, or a subclass with more settings): a field,
    None by default, of each of its settings but FIXED_PPO_FIELDS (and hparams), then of each of
    PPOHyperparams', of the setting's type or None."""
    hints = typing.get_type_hints(ppo) | typing.get_type_hints(PPOHyperparams)
    static = [f.name for f in dataclasses.fields(ppo) if f.name not in (*FIXED_PPO_FIELDS, "hparams")]
    fields = [(name, hints[name] | None, field(default=None)) for name in static + list(PPOHyperparams._fields)]
    doc = ("Overrides of the environment's PPO preset (None keeps the preset's value): the settings of "
           "inner_loops' PPOConfig (but FIXED_PPO_FIELDS) and PPOHyperparams, each of its type.")
    return dataclasses.make_dataclass("InnerConfig", fields, frozen=True, module=__name__,
                                      namespace={"__doc__": doc, "overrides": _overrides})


def _overrides(self) -> dict:
    """{field: value} of the settings this section sets (PPOConfig.replace takes them)."""
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


# So a PPO setting added to PPOConfig or PPOHyperparams (with its default) is a field here: an
# override inner.NAME=VALUE, stored in config.json and read back.
InnerConfig = inner_config_class()


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


@dataclass(frozen=True)
class ObjectivesConfig:
    """Which objective fills each plug point (with its options), and which plug points evolve.

    Each plug accepts a PlugChoice, a name or a section dict: ObjectivesConfig(drift="dpo"),
    ObjectivesConfig(drift={"name": "lpo", "hidden": 8}).
    """

    drift: PlugChoice = PlugChoice("lpo")  # the policy loss's drift D(r, A) (LPO/DPO); `metadisco objectives` lists them
    value_loss: PlugChoice = PlugChoice("clipped_l2")  # the critic's loss
    shaping: PlugChoice = PlugChoice("none")  # a reward-shaping potential (none: rewards unchanged)
    evolve: tuple[str, ...] = ("drift",)  # the plug points whose parameters evolution searches; the rest stay at their start

    def __post_init__(self):
        for plug in PLUGS:
            object.__setattr__(self, plug, PlugChoice.read(getattr(self, plug), f"objectives.{plug}"))

    def to_dict(self) -> dict:
        return {**{plug: getattr(self, plug).to_dict() for plug in PLUGS}, "evolve": self.evolve}

    def signature(self) -> str:
        """What an expectation is written for: the objective at each plug point and which evolve,
        e.g. "drift=ppo_clip, value_loss=value_loss_mix, shaping=none; evolving value_loss"."""
        return ", ".join(f"{p}={getattr(self, p).name}" for p in PLUGS) + f"; evolving {', '.join(self.evolve)}"


@dataclass(frozen=True)
class HeldoutConfig:
    """The held-out evaluation, fixed before the run: environments it never meta-trains on.

    `metadisco evaluate RUN_DIR` uses it when no --envs, --suite or --quick is given, so the
    environments a discovery is judged on are chosen before its results are seen.
    """

    envs: tuple[str, ...] = ()  # held-out environment names (`metadisco envs` lists them)
    timesteps: int | None = None  # steps per evaluation run; None: each environment's evaluation budget
    seeds: int = 8  # training seeds per method and environment
    inner_from_run: bool = False  # evaluate with the run's inner settings (lr, rollout shape)


@dataclass(frozen=True)
class ValidationConfig:
    """Meta-validation: problems a run never meta-trains on, which choose what it returns.

    Every `eval_every` generations the ES mean (and its start, and PPO) is scored on them on fresh
    seeds (their own stream), normalised by PPO on each as the training fitness is; the score never
    enters the ES update. The run keeps objectives/selected.json, the ES mean of the generation
    with the best validation score, or the start where no ES mean scored higher, and `evaluate`,
    `distil`, `export` and `plot` take it. The environments must be disjoint from `envs` and from
    `heldout.envs`.

        [validation]
        envs = ["Seaquest-MinAtar"]
        lr = [0.005]              # optional: one per env (empty: each env's preset rate, with inner's)
        timesteps = [262144]      # optional: one per env (empty: the run's inner.total_timesteps)
        seeds = 8
    """

    envs: tuple[str, ...] = ()  # validation environment names; (): no validation
    lr: tuple[float, ...] = ()  # one learning rate per env, or () for the run's (inner.lr, else the preset's)
    timesteps: tuple[int, ...] = ()  # one training length per env, or () for the run's
    seeds: int = 8  # fresh training seeds per method and problem at each validation


@dataclass(frozen=True)
class DistributionConfig:
    """The training distribution each generation draws its problems from: so that what
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
    env_fitness: str = "mean"  # mean: the ES ranks the mean over envs; rank: the mean of per-env centred ranks;
    # worst: the lowest of the envs (a member is as good as its worst game)


@dataclass(frozen=True)
class ExpectConfig:
    """What a run is expected to find, stated before it runs (rediscovery problems, the demo).

    The end of the run prints a verdict line from the last check on fresh seeds (`eval_every`):
    found when the ES mean beats `beats` (its start point or PPO) with a 95% interval above 0
    and, with `gap_closed` > 0, closes at least that share of the gap from its start to PPO
    (the point estimate; its interval is printed beside it). An expectation belongs to the
    objectives it was written for: a run that swaps them (an override of an experiment's
    objectives) keeps none, and `not_applied` says why; the run ends with the plain comparison.

        [expect]
        answer = "a drift that penalises moving r away from 1 (PPO's trust region)"
        beats = "start"
        gap_closed = 0.8
    """

    answer: str = ""  # the expected answer, in words
    beats: str = ""  # start | ppo: the comparison whose interval must lie above 0; "": no verdict
    gap_closed: float = 0.0  # in [0, 1]: the share of the start -> PPO gap to close (0: not required)
    not_applied: str = ""  # why an experiment's expectation does not apply to this run (set by metadisco.config)


@dataclass(frozen=True)
class RunConfig:
    """One meta-training run. The defaults are the CPU demo (`metadisco train`)."""

    name: str = "lpo-cartpole"  # the run's name (runs/NAME is its default directory)
    envs: tuple[str, ...] = ("CartPole-v1",)  # the meta-training environments
    inner: InnerConfig = field(default_factory=lambda: InnerConfig(total_timesteps=32_768))
    objectives: ObjectivesConfig = field(default_factory=ObjectivesConfig)
    es: ESConfig = field(default_factory=ESConfig)
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    distribution: DistributionConfig = field(default_factory=DistributionConfig)
    expect: ExpectConfig = field(default_factory=ExpectConfig)
    fitness: str = "final_eval"  # what the ES maximises: final_eval, greedy_eval, auc or final, each also *_norm
    seeds_per_member: int = 2  # inner training runs per member; its fitness is their mean
    generations: int = 60  # ES generations
    seed: int = 0  # the run's random seed (every draw is a function of it and the generation)
    eval_every: int = 10  # every k generations: ES mean vs PPO on the same fresh seeds (0: off)
    eval_seeds: int = 8  # fresh seeds of each eval_every comparison
    baseline_seeds: int = 8  # seeds of the PPO run that normalises fitness (*_norm kinds)
    checkpoint_every: int = 5  # generations between checkpoints (train --resume continues from the last)
    devices: int = 0  # 0: all local devices (on CPU, one per core)
    # members each device trains at once, at most (a lax.map over batches of gcd(population, this)):
    # with the batch fixed, a run's bits do not depend on how many devices split the population
    # (docs/guide.md, "What is bit for bit"); 0: the whole local shard at once (a GPU's fastest layout,
    # whose bits change with the device count)
    member_batch: int = 4

    @property
    def members_per_batch(self) -> int:
        """The members each device trains at once (0: its whole shard), fixed by the config alone."""
        return math.gcd(self.es.population_size, self.member_batch) if self.member_batch else 0
    tensorboard: bool = False  # also log to TensorBoard (RUN_DIR/tb; the tensorboard extra)
    mlflow: bool = False  # also log to MLflow (the mlflow extra)
    mlflow_uri: str = ""  # empty: a local SQLite store, RUN_DIR/mlflow.db

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "objectives": self.objectives.to_dict()}

    def digest(self) -> str:
        """`config_digest` of this config as config.json stores it (RUN_DIR/config.digest)."""
        return config_digest(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        """From a config dict (config.json, an experiment merged with overrides); a field it lacks
        takes its default."""
        if isinstance(d.get("objectives"), dict):
            d = {**d, "objectives": upgrade_section(d["objectives"])}
        return read_section(cls, d, "")

    @classmethod
    def from_stored(cls, d: dict) -> RunConfig:
        """From a run directory's config.json (`metadisco.analysis.runs.Run.config`): `from_dict`,
        where a versioned family that the file does not pin ran its first version
        (metadisco.core.plugs.VERSIONED) and a file without member_batch ran as member_batch = 0 (before the
        field, every device trained its whole shard at once): a stored run resumes as it ran. Checked by
        `check_run_config`: a value `metadisco train` refuses is refused here with the same ConfigError."""
        if isinstance(d.get("objectives"), dict):
            d = {**d, "objectives": upgrade_section(d["objectives"], stored=True)}
        if "member_batch" not in d:  # a run from before member_batch trained each device's whole shard at once
            d = {**d, "member_batch": 0}
        cfg = cls.from_dict(d)
        check_run_config(cfg)
        return cfg


def config_digest(stored: dict) -> str:
    """A fingerprint of a config as config.json holds it (`RunConfig.to_dict`), but `generations`
    (the one field a resume may change). A run keeps its start's (RUN_DIR/config.digest) and
    `--resume` compares the file's own, so that it notices an edited config.json, while a field
    added to the schema since the run began (which the file lacks and reads at its default) does
    not change it."""
    fields = {k: v for k, v in stored.items() if k != "generations"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def _unwrap_optional(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def coerce(value, tp, path: str):
    """Convert a TOML/JSON/command-line value, or a typed one from the Python API, to the annotated
    field type: a string as the command line writes it ("64,64", "true"), or a value of the type
    (an int for a float too; a single value for a tuple is its one item)."""
    hints_tp = _unwrap_optional(tp)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and hints_tp is not str):
        return None
    origin = typing.get_origin(hints_tp)
    if origin is tuple:
        (item_tp, *_) = typing.get_args(hints_tp)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        elif not isinstance(value, (list, tuple)):
            value = [value]
        return tuple(coerce(v.strip() if isinstance(v, str) else v, item_tp, path) for v in value)
    try:
        if hints_tp is bool:
            if isinstance(value, str):
                if value.lower() in ("true", "1", "yes", "on"):
                    return True
                if value.lower() in ("false", "0", "no", "off"):
                    return False
                raise ValueError
            if not (isinstance(value, bool) or value in (0, 1)):
                raise ValueError
            return bool(value)
        if isinstance(value, bool) and hints_tp in (int, float):
            raise ValueError
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


def read_section(cls, d: dict, prefix: str = ""):
    """A config dataclass (RunConfig or one of its sections) from a dict of its fields, each read as
    its annotated type; ConfigError naming the field (`prefix` + name) for an unknown field (with
    close matches) or a value that does not read as its type."""
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
            kwargs[k] = read_section(tp, v, f"{prefix}{k}.")
        else:
            kwargs[k] = coerce(v, tp, prefix + k)
    return cls(**kwargs)

"""What an evaluation found, as records: results.json's one schema, written and read here and
nowhere else (jax-free).

    results = read_results(path)       RESULTS_DIR/results.json -> Evaluation
    write_results(results, path)       Evaluation -> results.json (strict JSON, atomically)
    Evaluation.from_json(obj) / results.to_json()   the same, without the file

    Evaluation                  settings, targets, methods, per environment an EnvResult, the aggregates, notes
      Settings                  what was asked: environments, seeds, budgets, the protocol, the presets
      TargetEntry, MethodEntry  the methods compared (targets and the PPO and DPO references)
      EnvResult                 one environment: flags, normaliser, learning-rate tuning, per method MethodScores
        MethodScores            its scores per seed and their interval, every kind of score, the
                                normalised score and its interval, the learning curve (Curve)
        Tuning                  a method's learning-rate grid and the rate it was scored at
      Aggregate                 a group of environments (held out, meta-train): per method
                                AggregateScores (IQM, mean, probabilities of improvement: Estimate)

The stored keys are the field names (a method's probabilities of improvement over the references
are stored as poi_vs_<reference>). Per-seed values are float arrays in memory, lists in the file
(NaN as null). A field written by a newer release than a stored file (`pairwise`,
`no_episode_ended`, `tied`, `trained_through`) is None where the file lacks it, and is not written
back. EvaluationError for a file that is not an evaluation's results.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from metadisco.analysis.evaluation.protocol import Protocol
from metadisco.analysis.suites import EvaluationError
from metadisco.core.fileio import atomic_write_text, to_jsonable

__all__ = ["FORMAT", "VERSION", "Aggregate", "AggregateScores", "Curve", "EnvResult", "Estimate", "Evaluation",
           "MethodEntry", "MethodScores", "Settings", "TargetEntry", "Tuning", "VersusPPO", "read_results",
           "write_results"]

FORMAT = "metadisco.evaluation"
VERSION = 2
GROUPS = ("held_out", "meta_train")  # the aggregates: held-out environments, meta-training ones, apart
POI_PREFIX = "poi_vs_"


def floats(values) -> np.ndarray:
    """A stored list (null for NaN, nested for a 2-D array) or an array -> a float64 array."""
    array = np.array(values, dtype=object)
    return np.where(np.equal(array, None), np.nan, array).astype(np.float64)


def _optional(obj: Mapping, key: str, read=lambda x: x):
    value = obj.get(key)
    return None if value is None else read(value)


def _put(out: dict, key: str, value) -> dict:
    """`out` with `key` where `value` is recorded (not None)."""
    if value is not None:
        out[key] = value
    return out


@dataclass(frozen=True)
class Estimate:
    """A bootstrap estimate and its 95% interval (an IQM, a mean, a probability of improvement)."""

    point: float | None
    low: float | None
    high: float | None

    def to_json(self) -> dict:
        return {"point": self.point, "low": self.low, "high": self.high}

    @classmethod
    def from_json(cls, obj: Mapping) -> Estimate:
        return cls(obj["point"], obj["low"], obj["high"])


@dataclass(frozen=True, eq=False)
class Curve:
    """A method's learning curve on one environment: the mean over seeds and its 95% t-band [U],
    and every seed's curve [S, U] (NaN before an episode ends, where no evaluation stands in)."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: np.ndarray

    def to_json(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "seeds": self.seeds}

    @classmethod
    def from_json(cls, obj: Mapping) -> Curve:
        return cls(*(floats(obj[k]) for k in ("mean", "low", "high", "seeds")))


@dataclass(frozen=True)
class VersusPPO:
    """One method against PPO on one environment, on raw scores (normalising changes neither): the
    mean difference paired by seed (every method trains on the same evaluation seeds) with its 95%
    t-interval, and P(this method > PPO) with its stratified-bootstrap interval. What a reader has
    where PPO gives no usable normaliser, and so no aggregate."""

    diff: Estimate
    poi: Estimate

    def to_json(self) -> dict:
        return {"diff": self.diff.to_json(), "poi": self.poi.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping) -> VersusPPO:
        return cls(Estimate.from_json(obj["diff"]), Estimate.from_json(obj["poi"]))


@dataclass(frozen=True, eq=False)
class MethodScores:
    """One method on one environment: its headline score per seed (a diverged or non-finite seed at
    the worst finite seed of any method there) with its mean and 95% t-interval, the mean of every
    kind of score (None where a seed is not finite), the score normalised by PPO and the initial
    policy with its bootstrap interval (None on an environment without a usable normaliser), and
    its learning curve."""

    lr: float  # the learning rate it was scored at
    scores: np.ndarray  # [S]
    mean: float
    ci_low: float | None
    ci_high: float | None
    columns: Mapping[str, float | None]  # {score label (protocol.LABELS): the mean over seeds}
    diverged: int  # seeds whose training diverged
    nonfinite: int  # seeds placed at the worst (diverged or non-finite)
    no_episode_ended: int | None  # seeds whose training scores are the initial evaluation
    normalized: np.ndarray | None  # [S]
    norm_mean: float | None
    norm_ci_low: float | None
    norm_ci_high: float | None
    curve: Curve

    def to_json(self) -> dict:
        out = {"lr": self.lr, "scores": self.scores, "mean": self.mean, "ci_low": self.ci_low,
               "ci_high": self.ci_high, "columns": dict(self.columns), "diverged": self.diverged,
               "nonfinite": self.nonfinite}
        _put(out, "no_episode_ended", self.no_episode_ended)
        return out | {"normalized": self.normalized, "norm_mean": self.norm_mean, "norm_ci_low": self.norm_ci_low,
                      "norm_ci_high": self.norm_ci_high, "curve": self.curve.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping) -> MethodScores:
        return cls(lr=obj["lr"], scores=floats(obj["scores"]), mean=obj["mean"], ci_low=obj["ci_low"],
                   ci_high=obj["ci_high"], columns=dict(obj["columns"]), diverged=obj["diverged"],
                   nonfinite=obj["nonfinite"], no_episode_ended=obj.get("no_episode_ended"),
                   normalized=_optional(obj, "normalized", floats), norm_mean=obj["norm_mean"],
                   norm_ci_low=obj["norm_ci_low"], norm_ci_high=obj["norm_ci_high"],
                   curve=Curve.from_json(obj["curve"]))


@dataclass(frozen=True)
class Tuning:
    """A method's learning-rate tuning on one environment: the grid, its mean `select` score per
    rate on the tuning seeds (None where no seed was finite), and the best."""

    lrs: tuple[float, ...]
    factors: tuple[float, ...]  # the grid, x the base rate
    select: str  # the score that picked the rate
    mean_scores: tuple[float | None, ...]
    best_lr: float
    best_factor: float
    tied: bool | None = None  # every rate scored the same: scored at the base rate

    def to_json(self) -> dict:
        out = {"lrs": list(self.lrs), "factors": list(self.factors), "select": self.select,
               "mean_scores": list(self.mean_scores), "best_lr": self.best_lr, "best_factor": self.best_factor}
        return _put(out, "tied", self.tied)

    @classmethod
    def from_json(cls, obj: Mapping) -> Tuning:
        return cls(tuple(obj["lrs"]), tuple(obj["factors"]), obj["select"], tuple(obj["mean_scores"]),
                   obj["best_lr"], obj["best_factor"], obj.get("tied"))


@dataclass(frozen=True, eq=False)
class EnvResult:
    """One environment of an evaluation: what it is (flags: "meta-train" where a target was
    meta-trained on it, "ppo-flat" where PPO gives no usable normaliser), its normaliser (PPO's
    and the initial policy's values per seed), the tuning and every method's scores."""

    flags: tuple[str, ...]
    meta_train_for: tuple[str, ...]  # the targets meta-trained on it
    family: str  # its PPO preset's family
    budget: int  # environment steps per training run
    num_updates: int
    steps_per_update: int
    score: str  # the headline score's label
    init_return: float  # the initial policy's mean (the normaliser's 0)
    ppo_return: float  # PPO's mean (the normaliser's 1)
    normaliser_ppo: np.ndarray  # [S] PPO's values
    normaliser_zero: np.ndarray  # [S] the initial policy's
    excluded_from_aggregate: str | None  # why it is left out of the aggregates, or None
    tuning: Mapping[str, Tuning] | None  # {method: its tuning}, None without tuning
    time_s: float
    methods: Mapping[str, MethodScores]
    vs_ppo: Mapping[str, VersusPPO] | None = None  # {method: against PPO on raw scores}, all but PPO (None: older)

    @property
    def group(self) -> str:
        """"excluded" (no usable normaliser), else the aggregate it is in: meta_train or held_out."""
        if self.excluded_from_aggregate:
            return "excluded"
        return "meta_train" if "meta-train" in self.flags else "held_out"

    def to_json(self) -> dict:
        return {"flags": list(self.flags), "meta_train_for": list(self.meta_train_for), "family": self.family,
                "budget": self.budget, "num_updates": self.num_updates, "steps_per_update": self.steps_per_update,
                "score": self.score, "init_return": self.init_return, "ppo_return": self.ppo_return,
                "normaliser": {"ppo": self.normaliser_ppo, "zero": self.normaliser_zero},
                "excluded_from_aggregate": self.excluded_from_aggregate,
                "tuning": None if self.tuning is None else {m: t.to_json() for m, t in self.tuning.items()},
                "time_s": self.time_s, "methods": {m: e.to_json() for m, e in self.methods.items()}} | (
            {} if self.vs_ppo is None else {"vs_ppo": {m: v.to_json() for m, v in self.vs_ppo.items()}})

    @classmethod
    def from_json(cls, obj: Mapping) -> EnvResult:
        return cls(flags=tuple(obj["flags"]), meta_train_for=tuple(obj["meta_train_for"]), family=obj["family"],
                   budget=obj["budget"], num_updates=obj["num_updates"], steps_per_update=obj["steps_per_update"],
                   score=obj["score"], init_return=obj["init_return"], ppo_return=obj["ppo_return"],
                   normaliser_ppo=floats(obj["normaliser"]["ppo"]), normaliser_zero=floats(obj["normaliser"]["zero"]),
                   excluded_from_aggregate=obj["excluded_from_aggregate"],
                   tuning=_optional(obj, "tuning", lambda t: {m: Tuning.from_json(x) for m, x in t.items()}),
                   time_s=obj["time_s"], methods={m: MethodScores.from_json(e) for m, e in obj["methods"].items()},
                   vs_ppo=_optional(obj, "vs_ppo", lambda v: {m: VersusPPO.from_json(x) for m, x in v.items()}))


@dataclass(frozen=True)
class AggregateScores:
    """One method over a group of environments, normalised scores: IQM and mean with bootstrap
    intervals, and the probability of improvement over each reference (ppo, dpo)."""

    iqm: Estimate
    mean: Estimate
    poi_vs: Mapping[str, Estimate]  # {reference: P(this method > the reference)}

    def to_json(self) -> dict:
        return {"iqm": self.iqm.to_json(), "mean": self.mean.to_json()} | {
            f"{POI_PREFIX}{r}": e.to_json() for r, e in self.poi_vs.items()}

    @classmethod
    def from_json(cls, obj: Mapping) -> AggregateScores:
        return cls(Estimate.from_json(obj["iqm"]), Estimate.from_json(obj["mean"]),
                   {k.removeprefix(POI_PREFIX): Estimate.from_json(v) for k, v in obj.items()
                    if k.startswith(POI_PREFIX)})


@dataclass(frozen=True)
class Aggregate:
    """A group of environments (those with a usable normaliser): every method's aggregate scores,
    and the probability of improvement of every method over every other (pairwise[m][n] = P(m > n));
    methods None where the group is empty."""

    envs: tuple[str, ...]
    methods: Mapping[str, AggregateScores] | None = None
    pairwise: Mapping[str, Mapping[str, Estimate]] | None = None

    @property
    def references(self) -> tuple[str, ...]:
        """The methods every row is compared with (its poi_vs columns), in order."""
        return tuple(next(iter(self.methods.values())).poi_vs) if self.methods else ()

    def to_json(self) -> dict:
        out = {"envs": list(self.envs),
               "methods": None if self.methods is None else {m: a.to_json() for m, a in self.methods.items()}}
        return _put(out, "pairwise", None if self.pairwise is None else {
            m: {n: e.to_json() for n, e in row.items()} for m, row in self.pairwise.items()})

    @classmethod
    def from_json(cls, obj: Mapping) -> Aggregate:
        return cls(tuple(obj["envs"]),
                   _optional(obj, "methods", lambda ms: {m: AggregateScores.from_json(a) for m, a in ms.items()}),
                   _optional(obj, "pairwise", lambda p: {m: {n: Estimate.from_json(e) for n, e in row.items()}
                                                         for m, row in p.items()}))


@dataclass(frozen=True)
class TargetEntry:
    """A method under evaluation (not a reference): its objectives' spec and where it was meta-trained."""

    label: str
    role: str
    meta_train_envs: tuple[str, ...]
    objectives: Mapping[str, Any]  # Objectives.spec(): {plug: {"plug", "name", "config"}}

    def to_json(self) -> dict:
        return {"label": self.label, "role": self.role, "meta_train_envs": list(self.meta_train_envs),
                "objectives": self.objectives}

    @classmethod
    def from_json(cls, obj: Mapping) -> TargetEntry:
        return cls(obj["label"], obj["role"], tuple(obj["meta_train_envs"]), obj["objectives"])


@dataclass(frozen=True)
class MethodEntry:
    """A row of every table: its label, its role ("target", "reference") and, for a method whose
    objectives a target's program contains exactly (PPO in an LPO target's), that target's label:
    it trained through that program, bit for bit the runs of its own."""

    label: str
    role: str
    trained_through: str | None = None

    def to_json(self) -> dict:
        return _put({"label": self.label, "role": self.role}, "trained_through", self.trained_through)

    @classmethod
    def from_json(cls, obj: Mapping) -> MethodEntry:
        return cls(obj["label"], obj["role"], obj.get("trained_through"))


@dataclass(frozen=True)
class Settings:
    """What the evaluation was asked to do, resolved: environments, seeds, budgets, the protocol
    (and the meaning of its headline score), each environment's PPO preset, learning rates."""

    envs: tuple[str, ...]
    suite: str | None
    scale: str
    quick: bool
    seeds: int
    seed: int
    protocol: Protocol
    score_meaning: str  # the headline score in words (the protocol's `describe()` when it ran)
    score: str
    tuning_seeds: int
    budgets: Mapping[str, int]
    steps_per_run: Mapping[str, int]
    presets: Mapping[str, Mapping[str, Any]]  # {env: {"family", "config": its PPOConfig's fields}}
    tune_lr: bool
    lr: float | None
    inner: Mapping[str, Any]
    lr_factors: tuple[float, ...] | None
    lr_grid: Mapping[str, tuple[float, ...]] | None
    bootstrap_reps: int
    confidence: float
    devices: int
    jax_version: str

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "score_meaning"}
        return out | {"envs": list(self.envs),
                      "protocol": self.protocol.to_dict() | {"score_meaning": self.score_meaning},
                      "budgets": dict(self.budgets), "steps_per_run": dict(self.steps_per_run),
                      "presets": dict(self.presets), "inner": dict(self.inner),
                      "lr_factors": None if self.lr_factors is None else list(self.lr_factors),
                      "lr_grid": None if self.lr_grid is None else {e: list(g) for e, g in self.lr_grid.items()}}

    @classmethod
    def from_json(cls, obj: Mapping) -> Settings:
        protocol = dict(obj["protocol"])
        meaning = protocol.pop("score_meaning")
        known = {f.name for f in fields(cls)} - {"score_meaning", "protocol"}
        if set(obj) - known - {"protocol"}:
            raise KeyError(f"unknown settings {sorted(set(obj) - known - {'protocol'})}")
        return cls(**{name: obj[name] for name in known} | {
            "envs": tuple(obj["envs"]), "score_meaning": meaning,
            "protocol": Protocol(**protocol | {"lr_factors": tuple(protocol["lr_factors"])}),
            "lr_factors": _optional(obj, "lr_factors", tuple),
            "lr_grid": _optional(obj, "lr_grid", lambda g: {e: tuple(x) for e, x in g.items()})})


@dataclass(frozen=True, eq=False)
class Evaluation:
    """An evaluation's results: what `metadisco evaluate` writes to results.json (`write_results`)
    and `metadisco.api.evaluate` returns (with `out_dir`, the folder it wrote)."""

    created: str  # ISO time, to the second
    settings: Settings
    targets: tuple[TargetEntry, ...]
    methods: tuple[MethodEntry, ...]  # every row, targets first, in the tables' order
    envs: Mapping[str, EnvResult]
    aggregate: Mapping[str, Aggregate]  # {group (GROUPS): its aggregate}
    notes: tuple[str, ...]  # what a reader must know to read the numbers
    time_s: float | None
    out_dir: Path | None = None  # where it was saved (not stored in the file)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(m.label for m in self.methods)

    @property
    def roles(self) -> dict[str, str]:
        return {m.label: m.role for m in self.methods}

    def saved(self, out_dir: str | os.PathLike) -> Evaluation:
        return replace(self, out_dir=Path(out_dir))

    def to_json(self) -> dict:
        return to_jsonable({
            "format": FORMAT, "version": VERSION, "created": self.created, "settings": self.settings.to_json(),
            "targets": [t.to_json() for t in self.targets], "methods": [m.to_json() for m in self.methods],
            "envs": {name: e.to_json() for name, e in self.envs.items()},
            "aggregate": {group: a.to_json() for group, a in self.aggregate.items()},
            "notes": list(self.notes), "time_s": self.time_s})

    @classmethod
    def from_json(cls, obj: Mapping) -> Evaluation:
        """The results a results.json holds; EvaluationError for anything else."""
        if not isinstance(obj, Mapping) or obj.get("format") != FORMAT or obj.get("version") != VERSION:
            found = f"format {obj.get('format')!r}, version {obj.get('version')!r}" if isinstance(obj, Mapping) \
                else type(obj).__name__
            raise EvaluationError(f"not the results of a metadisco evaluation ({FORMAT} version {VERSION}): {found}")
        try:
            return cls(created=obj["created"], settings=Settings.from_json(obj["settings"]),
                       targets=tuple(TargetEntry.from_json(t) for t in obj["targets"]),
                       methods=tuple(MethodEntry.from_json(m) for m in obj["methods"]),
                       envs={name: EnvResult.from_json(e) for name, e in obj["envs"].items()},
                       aggregate={group: Aggregate.from_json(a) for group, a in obj["aggregate"].items()},
                       notes=tuple(obj["notes"]), time_s=obj["time_s"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise EvaluationError(f"results of a metadisco evaluation with a missing or malformed field: "
                                  f"{type(e).__name__}: {e}") from None


def write_results(results: Evaluation, path: str | os.PathLike) -> Path:
    """`results` as RESULTS_DIR/results.json: strict JSON (NaN as null), atomically."""
    return atomic_write_text(path, json.dumps(results.to_json(), indent=1, allow_nan=False))


def read_results(path: str | os.PathLike) -> Evaluation:
    """The Evaluation a results.json holds; EvaluationError naming the file when it is missing,
    not JSON or not an evaluation's results."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise EvaluationError(f"{path} is missing: `metadisco evaluate` writes results.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EvaluationError(f"{path} is corrupt ({e})") from None
    try:
        return Evaluation.from_json(obj)
    except EvaluationError as e:
        raise EvaluationError(f"{path}: {e}") from None

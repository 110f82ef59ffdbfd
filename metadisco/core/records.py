"""What a metrics row is: one generation of a run as a typed record, and its comparison on fresh
seeds (jax-free). RUN_DIR/metrics.jsonl holds one row per generation, a JSON object; its keys are
written and read here and nowhere else.

    GenerationRecord.from_row(row)   a stored row (a dict) -> its record; record.to_row() -> the row
    Comparison.from_row(row)         the comparison on fresh seeds a row carries, or None
    Interval, ProblemScores, Health, Violations   the parts of a record
    Violation                        a constraint an objective breaks (meta_objectives.constraints' checks)
    finite(x)                        whether a field holds a number that is not NaN or infinite

The keys are data: stored runs, the TensorBoard and MLflow mirrors and users' own scripts read
them, so `to_row` writes exactly the keys metrics.jsonl holds, in its order. A
field is None where the row lacks its key (older releases wrote fewer); a stored null (JSON has
no NaN: a NaN or infinite value is written as null) reads as NaN, and `to_row` writes NaN and
infinities back as null; a key this version does not know is kept in `extra` and written after
the known ones, so reading and writing a row loses nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from metadisco.core.fileio import to_jsonable

__all__ = ["Comparison", "GenerationRecord", "Health", "Interval", "ProblemScores", "Violation", "Violations", "finite"]

# the comparisons' keys: eval/<problem name>/<part>, eval_mean_fitness... (the training problems);
# val/<problem name>/<part>, val_mean_fitness... (the validation problems, RunConfig.validation)
EVAL, VAL = "eval", "val"
_PROBLEM_PARTS = ("mean", "start", "ppo")
_DRAW_PREFIX = "draw/"
_HEALTH_PREFIX = "health/"
_HEALTH_FIELDS = ("grad_cos", "rank_corr", "undefined")


def finite(x) -> bool:
    """Whether `x` is a number other than NaN and the infinities (None, a field the row lacks, is not)."""
    return x is not None and math.isfinite(x)


def _number(row: Mapping, key: str):
    """The value at `key`: None where the row lacks it, NaN where it stores null."""
    if key not in row:
        return None
    value = row[key]
    return math.nan if value is None else value


def _put(row: dict, key: str, value) -> None:
    if value is not None:
        row[key] = value


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95% interval; NaN where it is not defined (a single finite seed,
    or no gap to close)."""

    value: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def bounded(self) -> bool:
        """Whether both bounds are numbers, as a reading of the interval (above 0, below 0) needs."""
        return finite(self.low) and finite(self.high)

    @classmethod
    def _from_row(cls, row: Mapping, key: str) -> Interval | None:
        parts = (_number(row, key), _number(row, f"{key}_low"), _number(row, f"{key}_high"))
        return None if all(p is None for p in parts) else cls(*parts)

    def _put(self, row: dict, key: str) -> None:
        _put(row, key, self.value)
        _put(row, f"{key}_low", self.low)
        _put(row, f"{key}_high", self.high)


@dataclass(frozen=True)
class ProblemScores:
    """One training problem's scores in a comparison (an env, or env@horizon with several
    horizons), each the mean over the fresh seeds."""

    name: str
    mean: float | None = None  # the ES mean
    start: float | None = None  # the run's start point (its initial solution)
    ppo: float | None = None  # PPO with its own objectives
    diff: Interval | None = None  # ES mean - PPO on this problem, paired by seed (95% t-interval)
    vs_start: Interval | None = None  # ES mean - its start on this problem, paired by seed


@dataclass(frozen=True)
class Comparison:
    """The ES mean against PPO and against the run's start point, all trained on the same fresh
    seeds (metadisco.checks.Checks.compare): per training problem, overall (the mean over
    problems, then over seeds), and the paired differences with their intervals."""

    problems: tuple[ProblemScores, ...] = ()
    mean: float | None = None  # the ES mean's fitness
    start: float | None = None  # its start point's
    ppo: float | None = None  # PPO's
    diff: Interval | None = None  # ES mean - PPO, paired by seed (95% t-interval)
    vs_start: Interval | None = None  # ES mean - its start, paired by seed (95% t-interval)
    gap_closed: Interval | None = None  # share of the gap from the start to PPO closed (paired bootstrap)

    @property
    def scored(self) -> bool:
        """Whether the ES mean has a score: NaN where a seed diverged (a mean over seeds)."""
        return finite(self.mean)

    def to_row(self, prefix: str = EVAL) -> dict:
        """The comparison's keys of a metrics row, in their stored order: eval/<problem>/<part>,
        eval_mean_fitness, ... for the comparison on the training problems, val/... and
        val_mean_fitness, ... (prefix VAL) for the validation problems."""
        row: dict[str, Any] = {}
        for p in self.problems:
            for part, value in zip(_PROBLEM_PARTS, (p.mean, p.start, p.ppo)):
                _put(row, f"{prefix}/{p.name}/{part}", value)
            for interval, key in ((p.diff, "diff"), (p.vs_start, "vs_start")):
                if interval is not None:
                    interval._put(row, f"{prefix}/{p.name}/{key}")
        _put(row, f"{prefix}_mean_fitness", self.mean)
        _put(row, f"{prefix}_start_fitness", self.start)
        _put(row, f"{prefix}_ppo_fitness", self.ppo)
        for interval, key in ((self.diff, "diff"), (self.vs_start, "vs_start"), (self.gap_closed, "gap_closed")):
            if interval is not None:
                interval._put(row, f"{prefix}_{key}")
        return to_jsonable(row)

    @classmethod
    def from_row(cls, row: Mapping, prefix: str = EVAL) -> Comparison | None:
        """The comparison a metrics row carries (prefix EVAL: on the training problems; VAL: on the
        validation problems), or None where it carries none (a generation without the check on
        fresh seeds)."""
        parts: dict[str, dict] = {}
        for key in row:
            head, _, part = key.rpartition("/")
            name = head.removeprefix(f"{prefix}/")
            if head.startswith(f"{prefix}/") and name and part in _PROBLEM_PARTS:
                parts.setdefault(name, {})[part] = _number(row, key)
        found = cls(problems=tuple(ProblemScores(name, **scores, diff=Interval._from_row(row, f"{prefix}/{name}/diff"),
                                                 vs_start=Interval._from_row(row, f"{prefix}/{name}/vs_start"))
                                   for name, scores in parts.items()),
                    mean=_number(row, f"{prefix}_mean_fitness"), start=_number(row, f"{prefix}_start_fitness"),
                    ppo=_number(row, f"{prefix}_ppo_fitness"), diff=Interval._from_row(row, f"{prefix}_diff"),
                    vs_start=Interval._from_row(row, f"{prefix}_vs_start"),
                    gap_closed=Interval._from_row(row, f"{prefix}_gap_closed"))
        return found if found != cls() else None


class Health(NamedTuple):
    """Search health (metadisco.measure.health.split_half): how far two halves of the
    generation's seeds agree on the ES gradient and on the ranking. A NamedTuple, so a pytree as
    it is: split_half returns one of arrays inside the jitted generation, and a record holds one
    of numbers (metrics.jsonl's health/grad_cos, health/rank_corr, health/undefined)."""

    grad_cos: float | None = None  # cosine of the halves' ES gradients; NaN where undefined
    rank_corr: float | None = None  # rank correlation of the halves' scores
    undefined: int | None = None  # why grad_cos is NaN: a key of measure.health.UNDEFINED, or 0 (defined)


_VIOLATION_FIELDS = ("plug", "constraint", "message")


@dataclass(frozen=True)
class Violation:
    """A constraint an objective breaks (metadisco.meta_objectives.constraints checks them): its
    plug point, the constraint's name, and in words what fails with a counterexample. Stored (a
    metrics row's checks of what a run found, a distillation candidate's checks) as a JSON object
    with these fields, read back by `from_json`; `str` gives the message and, where the check
    names them, the parameters it was found at."""

    plug: str  # drift, value_loss or shaping
    constraint: str  # e.g. "nonnegative", "flat_at_one", "zero_at_target", "potential_based"
    message: str  # what fails, with a counterexample
    where: str | None = None  # the parameters it was found at ("initial parameters", ...), where named

    def __str__(self) -> str:
        return f"{self.message} [{self.where}]" if self.where else self.message

    def to_json(self) -> dict:
        """The stored form: {"plug", "constraint", "message"} (and "where" where it is named)."""
        return {name: getattr(self, name) for name in (*_VIOLATION_FIELDS, "where") if getattr(self, name) is not None}

    @classmethod
    def from_json(cls, obj) -> Violation:
        """A stored violation; ValueError for anything but an object with string plug, constraint
        and message (and, optionally, where)."""
        if (not isinstance(obj, Mapping) or set(obj) - {*_VIOLATION_FIELDS, "where"}
                or not all(isinstance(obj.get(k), str) for k in _VIOLATION_FIELDS)
                or not isinstance(obj.get("where", ""), str | None)):
            raise ValueError(f"a violation is an object with string fields {', '.join(_VIOLATION_FIELDS)}, got {obj!r}")
        return cls(**obj)


@dataclass(frozen=True)
class Violations:
    """The constraint checks of what a run found, made with each comparison on fresh seeds: the
    checks the ES mean and the best member fail (() where they pass; None where not checked)."""

    mean: tuple[Violation, ...] | None = None
    best: tuple[Violation, ...] | None = None

    def to_row(self) -> dict:
        """The violations' keys of a metrics row, in their stored order: lists of violation objects."""
        row: dict[str, Any] = {}
        for key, found in (("eval_mean_violations", self.mean), ("eval_best_violations", self.best)):
            _put(row, key, None if found is None else [v.to_json() for v in found])
        return row


def _violations(row: Mapping, key: str) -> tuple[Violation, ...] | None:
    """The violations a row stores at `key`; None where it stores none. ValueError for a list
    that holds anything but violation objects."""
    value = row.get(key)
    return tuple(Violation.from_json(v) for v in value) if isinstance(value, list) else None


@dataclass(frozen=True)
class GenerationRecord:
    """One generation of a run: a line of metrics.jsonl."""

    generation: int  # 0-based; core.records.completed numbers it as the generations done
    fitness_mean: float | None = None  # over the members that did not diverge (NaN: none did not)
    fitness_max: float | None = None
    fitness_min: float | None = None
    fitness_std: float | None = None
    best_fitness: float | None = None  # the highest member fitness of any generation so far
    sigma: float | None = None  # the strategy's step size after the update
    num_diverged: int | None = None  # members whose training diverged
    # what the generation was drawn to train on, only the levers the run uses: {env name: 1.0 if
    # drawn else 0.0} (a subset of envs), "horizon" (its fraction), "lr_factor" (the geometric mean)
    draw: Mapping[str, float] = field(default_factory=dict)
    health: Health | None = None  # None: not measured (one seed per member)
    # each drawn env's own search health (health/<env>/grad_cos, ...), for a run of several envs
    game_health: Mapping[str, Health] = field(default_factory=dict)
    wall_time_s: float | None = None  # the generation's wall time
    env_steps_per_s: float | None = None  # environment steps (expected over the draw) per second
    comparison: Comparison | None = None  # the check on fresh seeds, every eval_every generations and at the last
    validation: Comparison | None = None  # with each comparison where the run has [validation]: on its problems
    violations: Violations | None = None  # with each comparison
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know, as stored

    def to_row(self) -> dict:
        """The metrics row: the keys and order metrics.jsonl stores (the generation's own metrics
        in key order, then its timing, comparison and violations), NaN and infinities as None."""
        row: dict[str, Any] = {"generation": self.generation}
        _put(row, "best_fitness", self.best_fitness)
        row |= {f"{_DRAW_PREFIX}{name}": value for name, value in self.draw.items()}
        _put(row, "fitness_max", self.fitness_max)
        _put(row, "fitness_mean", self.fitness_mean)
        _put(row, "fitness_min", self.fitness_min)
        _put(row, "fitness_std", self.fitness_std)
        if self.health is not None:
            for name in _HEALTH_FIELDS:
                _put(row, f"{_HEALTH_PREFIX}{name}", getattr(self.health, name))
        for env, game in self.game_health.items():
            for name in _HEALTH_FIELDS:
                _put(row, f"{_HEALTH_PREFIX}{env}/{name}", getattr(game, name))
        _put(row, "num_diverged", self.num_diverged)
        _put(row, "sigma", self.sigma)
        _put(row, "wall_time_s", self.wall_time_s)
        _put(row, "env_steps_per_s", self.env_steps_per_s)
        if self.comparison is not None:
            row |= self.comparison.to_row()
        if self.validation is not None:
            row |= self.validation.to_row(VAL)
        if self.violations is not None:
            row |= self.violations.to_row()
        row |= {key: value for key, value in self.extra.items() if key not in row}
        return to_jsonable(row)

    @classmethod
    def from_row(cls, row: Mapping) -> GenerationRecord:
        """The record of a stored row. ValueError for a row without an integer `generation`, or
        with violations that are not violation objects (not a metrics row); any other key may be
        missing."""
        generation = row.get("generation")
        if not isinstance(generation, int) or isinstance(generation, bool):
            raise ValueError(f"a metrics row needs an integer generation, got {generation!r}")
        health = {name: _number(row, f"{_HEALTH_PREFIX}{name}") for name in _HEALTH_FIELDS}
        games: dict[str, dict] = {}
        for key in row:
            env, _, name = key.removeprefix(_HEALTH_PREFIX).rpartition("/")
            if key.startswith(_HEALTH_PREFIX) and env and name in _HEALTH_FIELDS:
                games.setdefault(env, {})[name] = _number(row, key)
        mean, best = _violations(row, "eval_mean_violations"), _violations(row, "eval_best_violations")
        record = cls(
            generation=generation,
            fitness_mean=_number(row, "fitness_mean"), fitness_max=_number(row, "fitness_max"),
            fitness_min=_number(row, "fitness_min"), fitness_std=_number(row, "fitness_std"),
            best_fitness=_number(row, "best_fitness"), sigma=_number(row, "sigma"),
            num_diverged=_number(row, "num_diverged"),
            draw={key.removeprefix(_DRAW_PREFIX): _number(row, key) for key in row if key.startswith(_DRAW_PREFIX)},
            health=Health(**health) if any(v is not None for v in health.values()) else None,
            game_health={env: Health(**fields) for env, fields in games.items()},
            wall_time_s=_number(row, "wall_time_s"), env_steps_per_s=_number(row, "env_steps_per_s"),
            comparison=Comparison.from_row(row), validation=Comparison.from_row(row, VAL),
            violations=Violations(mean, best) if mean is not None or best is not None else None,
        )
        known = record.to_row()
        extra = {key: value for key, value in row.items() if key not in known}
        return replace(record, extra=extra) if extra else record

    def measures(self) -> dict:
        """The row without its generation index: what was measured of the generation, by key."""
        row = self.to_row()
        del row["generation"]
        return row

    def scalars(self) -> dict[str, float]:
        """Every finite number of `measures` (the generation is the step they are logged at): what
        the TensorBoard and MLflow mirrors log."""
        return {key: float(value) for key, value in self.measures().items()
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)}


def completed(record: GenerationRecord) -> int:
    """The generations completed when a metrics.jsonl row was written, 1 for the first row: the one
    number every human-facing place (console, report, figures, verdicts) calls "generation N", as
    checkpoints and objectives files count. The record's `generation` is 0-based."""
    return record.generation + 1

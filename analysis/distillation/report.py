"""What a distillation found, as records: a report's one schema (RUN_DIR/distil/{plug}.json),
written and read here and nowhere else (jax-free).

    report = read_report(path)         RUN_DIR/distil/{plug}.json -> DistillationReport
    write_report(report, path)         DistillationReport -> the file (strict JSON, atomically)
    DistillationReport.from_json(obj) / report.to_json()   the same, without the file

    DistillationReport          every candidate, the Pareto front (indices), the chosen one, what was fitted
      Candidate                 a closed form: its expression, size, errors, constraint checks, score
        Errors                  R^2, largest error and rmse (on the fit points, on the grid, of the slopes)
      FitPoints                 the points it was fitted on, and the grid its errors are reported on
      SearchCounts              the symbolic search's counts (formulas considered, the valid share, seconds)
      End                       an interpolated drift's fit at one end of training
      Reference                 a potential beside a named one of its environment (MountainCar's energy)
      Source                    the run distilled: its directory, which objectives, how many rows

The stored keys are the field names, but for a candidate's errors on the fit points (r2,
max_abs_error, rmse at the candidate's top level) and a report's symbolic counts (one object, a
list of one per end for an interpolated drift, null without the search). A field that only some
fitters give (alpha and beta of a DPO fit, a sparse fit's terms, a value loss's departure from
L2, ...) is None where a candidate has none, and is not written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from metadisco.core.fileio import atomic_write_text, to_jsonable
from metadisco.core.records import Violation
from metadisco.measure.run_files import RunDirError

__all__ = ["Candidate", "DistillationReport", "End", "Errors", "FitPoints", "Reference", "SearchCounts", "Source",
           "read_report", "write_report"]


def _put(out: dict, key: str, value) -> dict:
    """`out` with `key` where `value` is recorded (not None)."""
    if value is not None:
        out[key] = value
    return out


def _optional(obj: Mapping, key: str, read=lambda x: x):
    value = obj.get(key)
    return None if value is None else read(value)


@dataclass(frozen=True)
class Errors:
    """How far a closed form is from the learned objective: R^2, the largest absolute error and
    the rmse; the grid's also the rmse weighted by how often training visits each point; a
    slope's also the same on the grid."""

    r2: float | None
    max_abs_error: float | None
    rmse: float | None
    weighted_rmse: float | None = None
    grid: Errors | None = None

    def to_json(self) -> dict:
        out = {"r2": self.r2, "max_abs_error": self.max_abs_error, "rmse": self.rmse}
        _put(out, "weighted_rmse", self.weighted_rmse)
        return _put(out, "grid", None if self.grid is None else self.grid.to_json())

    @classmethod
    def from_json(cls, obj: Mapping) -> Errors:
        return cls(obj["r2"], obj["max_abs_error"], obj["rmse"], obj.get("weighted_rmse"),
                   _optional(obj, "grid", Errors.from_json))


# the fields a fitter adds to its candidates, in their stored order
_EXTRAS = ("alpha", "beta", "terms", "program", "ends", "progresses", "departure")


@dataclass(frozen=True)
class Candidate:
    """A closed form fitted to the learned objective (`metadisco.analysis.distillation.data.candidate`
    scores one): its expression (a sympy string for ClosedFormDrift or ClosedFormValueLoss), its size
    (sympy's operation count) and number of terms, its errors on the fit points (top level), on the
    grid and of its slopes, `error` (the rmse of what the fit matches: values or slopes), the
    constraints it breaks (None before they are checked) and its score (error / std(target) +
    penalty x complexity: the chosen one is the front's lowest)."""

    method: str  # dpo, sparse, sparse_threshold, symbolic, interpolated, l2, plane
    expression: str
    complexity: int
    n_terms: int
    r2: float | None
    max_abs_error: float | None
    rmse: float | None
    grid: Errors
    slope: Errors | None  # None where the fit has no slopes ({} in the file)
    error: float | None
    alpha: float | None = None  # a DPO fit's parameters
    beta: float | None = None
    terms: tuple[str, ...] | None = None  # a sparse fit's library terms, by name
    program: str | None = None  # the symbolic search's tree
    ends: tuple[str, str] | None = None  # an interpolated drift's expressions at the two ends of training
    progresses: tuple[float, float] | None = None  # ... and the progress of each end
    departure: str | None = None  # a value loss's departure from L2 (its expression is e**2/2 + departure)
    violations: tuple[Violation, ...] | None = None
    score: float | None = None

    @property
    def valid(self) -> bool:
        """Checked, and it breaks no constraint of its plug point."""
        return self.violations is not None and not self.violations

    def to_json(self) -> dict:
        out = {"method": self.method, "expression": self.expression, "complexity": self.complexity,
               "n_terms": self.n_terms, "r2": self.r2, "max_abs_error": self.max_abs_error, "rmse": self.rmse,
               "grid": self.grid.to_json(), "slope": {} if self.slope is None else self.slope.to_json(),
               "error": self.error}
        for name in _EXTRAS:
            value = getattr(self, name)
            _put(out, name, list(value) if isinstance(value, tuple) else value)
        if self.violations is not None:
            out["violations"] = [v.to_json() for v in self.violations]
        return _put(out, "score", self.score)

    @classmethod
    def from_json(cls, obj: Mapping) -> Candidate:
        extras = {name: tuple(obj[name]) if isinstance(obj.get(name), list) else obj.get(name) for name in _EXTRAS}
        return cls(method=obj["method"], expression=obj["expression"], complexity=obj["complexity"],
                   n_terms=obj["n_terms"], r2=obj["r2"], max_abs_error=obj["max_abs_error"], rmse=obj["rmse"],
                   grid=Errors.from_json(obj["grid"]), slope=Errors.from_json(obj["slope"]) if obj["slope"] else None,
                   error=obj["error"], **extras,
                   violations=_optional(obj, "violations", lambda vs: tuple(Violation.from_json(v) for v in vs)),
                   score=obj.get("score"))


@dataclass(frozen=True)
class FitPoints:
    """What was fitted: where the points came from ("samples" visited by training, or the "prior")
    and how many, the target's spread, and the grid the errors are also reported on. A drift's
    progress (a number, or "per point") and its slopes' spread; a value loss's error scale (the
    std of v - target) and what its fit is of (the departure from L2)."""

    source: str
    n_points: int
    grid: Mapping[str, Any]  # a drift's {"r", "A", "num"}; a value loss's {"e", "t", "num"}; a potential's
    # {"variables", "ranges" (of the first two), "at" (the others' values), "num"}
    target_std: float
    progress: float | str | None = None
    error_std: float | None = None
    fit: str | None = None
    slope_std: float | None = None

    def to_json(self) -> dict:
        out = {"source": self.source, "n_points": self.n_points}
        for name in ("progress", "error_std", "fit"):
            _put(out, name, getattr(self, name))
        out |= {"grid": dict(self.grid), "target_std": self.target_std}
        return _put(out, "slope_std", self.slope_std)

    @classmethod
    def from_json(cls, obj: Mapping) -> FitPoints:
        return cls(obj["source"], obj["n_points"], obj["grid"], obj["target_std"], obj.get("progress"),
                   obj.get("error_std"), obj.get("fit"), obj.get("slope_std"))


@dataclass(frozen=True)
class SearchCounts:
    """The symbolic search's budget and counts: formulas considered, how many of them valid, the
    generations and population it ran, its seconds, and the front's members the safe parser
    refused (None: none)."""

    n_considered: int
    n_valid: int
    valid_share: float
    generations: int
    population_size: int
    seconds: float
    unreadable: tuple[str, ...] | None = None

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "unreadable"}
        return _put(out, "unreadable", None if self.unreadable is None else list(self.unreadable))

    @classmethod
    def from_json(cls, obj: Mapping) -> SearchCounts:
        return cls(**{f.name: obj[f.name] for f in fields(cls) if f.name != "unreadable"},
                   unreadable=_optional(obj, "unreadable", tuple))


@dataclass(frozen=True)
class End:
    """An interpolated drift's fit at one end of training: its progress, the closed form chosen
    there, the DPO fit there and the size of its Pareto front."""

    progress: float
    chosen: Candidate | None
    dpo_fit: Candidate
    n_pareto: int

    def to_json(self) -> dict:
        return {"progress": self.progress, "chosen": None if self.chosen is None else self.chosen.to_json(),
                "dpo_fit": self.dpo_fit.to_json(), "n_pareto": self.n_pareto}

    @classmethod
    def from_json(cls, obj: Mapping) -> End:
        return cls(obj["progress"], _optional(obj, "chosen", Candidate.from_json), Candidate.from_json(obj["dpo_fit"]),
                   obj["n_pareto"])


@dataclass(frozen=True)
class Reference:
    """A learned potential beside a named potential of its environment: the name, its expression
    (over s0, s1, ...), where it comes from, the correlation of the two on the fit points and the
    R^2 of the reference's best affine map onto the learned one (the correlation squared)."""

    name: str
    expression: str
    source: str
    correlation: float | None
    r2: float | None

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: Mapping) -> Reference:
        return cls(**{f.name: obj[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class Source:
    """The run a report was distilled from: its directory, which objectives (mean or best), the
    plug point's objective (its spec, stored under the plug's name), the visited rows and, for a
    drift, the share of fit points drawn from the prior."""

    run_dir: str
    which: str
    plug: str
    objective: Mapping[str, Any]
    n_rows: int
    prior_fraction: float | None = None
    params_digest: str | None = None  # of the plug's parameters it was fitted to (None: written before it was kept)

    def to_json(self) -> dict:
        out = {"run_dir": self.run_dir, "which": self.which, self.plug: self.objective, "n_rows": self.n_rows}
        return _put(_put(out, "prior_fraction", self.prior_fraction), "params_digest", self.params_digest)

    @classmethod
    def from_json(cls, obj: Mapping) -> Source:
        (plug,) = set(obj) - {"run_dir", "which", "n_rows", "prior_fraction", "params_digest"}
        return cls(obj["run_dir"], obj["which"], plug, obj[plug], obj["n_rows"], obj.get("prior_fraction"),
                   obj.get("params_digest"))


@dataclass(frozen=True)
class DistillationReport:
    """A distillation of one plug point: every candidate, sorted by error; the Pareto front of
    the valid ones (`pareto`: indices into `candidates`, by complexity, numbered as `metadisco
    distil` prints them and `export --candidate N` takes them: `front`); the chosen one (None
    where no candidate is valid); what the fit matches ("value" or "slope") and on which points;
    the symbolic search's counts; a drift's DPO fit and, interpolated over training, its two
    ends; a value loss's closed-form base (the ClosedFormValueLoss options its expressions mean
    the learned loss under); a potential's best plane and its named reference; and the run it
    came from."""

    candidates: tuple[Candidate, ...]
    pareto: tuple[int, ...]
    chosen: Candidate | None
    fit: str
    data: FitPoints
    complexity_penalty: float
    symbolic: tuple[SearchCounts, ...] = ()  # one a fit (one per end, interpolated); () without the search
    dpo_fit: Candidate | None = None
    ends: tuple[End, ...] | None = None
    closed_form_base: Mapping[str, Any] | None = None
    source: Source | None = None
    plane_fit: Candidate | None = None
    reference: Reference | None = None

    @property
    def front(self) -> tuple[Candidate, ...]:
        """The Pareto front's candidates, in the order `metadisco distil` prints them."""
        return tuple(self.candidates[i] for i in self.pareto)

    def to_json(self) -> dict:
        out = {} if self.dpo_fit is None else {"dpo_fit": self.dpo_fit.to_json()}
        counts = [s.to_json() for s in self.symbolic]
        out |= {"candidates": [c.to_json() for c in self.candidates], "pareto": list(self.pareto),
                "chosen": None if self.chosen is None else self.chosen.to_json(),
                "symbolic": counts if self.ends is not None and counts else counts[0] if counts else None,
                "fit": self.fit, "data": self.data.to_json(), "complexity_penalty": self.complexity_penalty}
        _put(out, "ends", None if self.ends is None else [e.to_json() for e in self.ends])
        _put(out, "closed_form_base", None if self.closed_form_base is None else dict(self.closed_form_base))
        _put(out, "plane_fit", None if self.plane_fit is None else self.plane_fit.to_json())
        _put(out, "reference", None if self.reference is None else self.reference.to_json())
        return to_jsonable(_put(out, "source", None if self.source is None else self.source.to_json()))

    @classmethod
    def from_json(cls, obj: Mapping) -> DistillationReport:
        """The report a file holds; ValueError for anything else."""
        try:
            symbolic = obj.get("symbolic")
            counts = symbolic if isinstance(symbolic, list) else [symbolic] if symbolic else []
            return cls(candidates=tuple(Candidate.from_json(c) for c in obj["candidates"]),
                       pareto=tuple(obj["pareto"]), chosen=_optional(obj, "chosen", Candidate.from_json),
                       fit=obj["fit"], data=FitPoints.from_json(obj["data"]),
                       complexity_penalty=obj["complexity_penalty"],
                       symbolic=tuple(SearchCounts.from_json(s) for s in counts),
                       dpo_fit=_optional(obj, "dpo_fit", Candidate.from_json),
                       ends=_optional(obj, "ends", lambda es: tuple(End.from_json(e) for e in es)),
                       closed_form_base=obj.get("closed_form_base"), source=_optional(obj, "source", Source.from_json),
                       plane_fit=_optional(obj, "plane_fit", Candidate.from_json),
                       reference=_optional(obj, "reference", Reference.from_json))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"not a distillation report: a missing or malformed field ({type(e).__name__}: {e})") \
                from None


def write_report(report: DistillationReport, path: str | os.PathLike) -> Path:
    """`report` as strict JSON (NaN as null), atomically."""
    return atomic_write_text(path, json.dumps(report.to_json(), indent=1, allow_nan=False))


def read_report(path: str | os.PathLike) -> DistillationReport:
    """The DistillationReport a file holds; RunDirError naming the file when it is missing, not
    JSON or not a report."""
    path = Path(path)
    try:
        return DistillationReport.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        raise RunDirError(f"{path} is missing: `metadisco distil` writes it") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
        raise RunDirError(f"{path} is corrupt ({e})") from None

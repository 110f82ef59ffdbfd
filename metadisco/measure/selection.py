"""Which objective a validated run returns (RunConfig.validation), without the winner's curse (jax-free).

Every check scores the ES mean and the start on the validation problems, each check on seeds of its own.
The best of those scores is a maximum over noisy draws: it favours whichever candidate drew lucky seeds,
and it overstates that candidate's score, the more so the more checks a run makes. So the checks only
nominate. At the end of the run the finalists, the start and the FINALISTS ES means that scored best at
their checks (each free of constraint violations), are scored again together on common fresh seeds
(metadisco.core.streams.Stream.SELECTION), and the run returns the one that scores highest there.
objectives/selected.json keeps that re-scored mean with its 95% interval, and its difference from the
start, paired by seed. A seed that diverged counts as a failure: it ties the worst finite seed of any
finalist on that problem (core.scores.at_worst), never a missing value that drops its candidate.

    finalists(records)              [Finalist, ...]: the start, then the nominated ES means
    rescored(finalists, per_seed)   [Rescored, ...] from each one's per-seed scores on the common seeds
    chosen(rescored)                the index of the one the run returns (the first of equals: the start)
    reported(winner, per_seed)      its score to report, from seeds neither the checks nor the ranking saw

The ranking's score of the one it chose is still the largest of the finalists' scores on the same seeds,
so it keeps some of the curse. The score selected.json reports is the winner's alone on a third set of
seeds (Stream.SELECTION index 2), scored beside the start for its paired difference: unbiased.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from metadisco.core.records import Comparison, GenerationRecord, Interval, Violations, finite
from metadisco.core.scores import at_worst
from metadisco.measure.run_files import completed, selected_words
from metadisco.measure.stats import t_interval

FINALISTS = 3  # ES means re-scored beside the start: the best checks, so few that re-scoring stays cheap


@dataclass(frozen=True)
class Finalist:
    """A candidate the checks nominated: the start (generation 0) or the ES mean after `generation`
    generations, with the score its check gave it (what nominated it; never what selects it)."""

    generation: int
    checked: float

    @property
    def start(self) -> bool:
        return self.generation == 0


@dataclass(frozen=True)
class Rescored:
    """A finalist scored on the common fresh seeds: its validation score (the mean over the validation
    problems of each seed's score) with its t-interval, and its difference from the start, paired by seed."""

    finalist: Finalist
    score: Interval
    vs_start: Interval
    seeds: int

    def to_json(self) -> dict:
        return {"generation": self.finalist.generation, "checked": self.finalist.checked,
                "score": interval_json(self.score), "vs_start": interval_json(self.vs_start), "seeds": self.seeds}


def finalists(records: list[GenerationRecord], k: int = FINALISTS) -> list[Finalist]:
    """The start, then the `k` ES means with the best check scores (rows with a validation), each from a
    check where its constraint checks found nothing (a DEGENERATE ES mean is never nominated). A check
    whose score is not finite (a diverged seed there) ranks below every finite one, not out."""
    checks = [r for r in records if r.validation is not None and not (r.violations and r.violations.mean)]
    start = max((r.validation.start for r in checks if finite(r.validation.start)), default=math.nan)
    ranked = sorted(checks, key=lambda r: (finite(r.validation.mean), r.validation.mean if finite(r.validation.mean)
                                           else -math.inf, -r.generation), reverse=True)
    return [Finalist(0, start)] + [Finalist(completed(r), _number(r.validation.mean)) for r in ranked[:k]]


def rescored(candidates: list[Finalist], per_seed) -> list[Rescored]:
    """Each finalist's re-scoring from per_seed [F, problems, S]: its score on each validation problem and
    common seed, NaN where that seed diverged (the first finalist is the start). A diverged seed ties the
    worst finite score of any finalist on its problem; a problem where none is finite scores NaN."""
    scores = np.asarray(per_seed, np.float64)
    placed = np.stack([at_worst(scores[:, p], none_finite=np.nan) for p in range(scores.shape[1])], 1)
    per_candidate = placed.mean(1)  # [F, S]: the validation score of each seed, as a check's mean
    out = []
    for candidate, values in zip(candidates, per_candidate):
        out.append(Rescored(candidate, _t(values), _t(values - per_candidate[0]) if not candidate.start
                            else Interval(0.0, 0.0, 0.0), values.size))
    return out


def chosen(scored: list[Rescored]) -> int:
    """The index of the finalist with the highest re-scored mean; the first of equals, so the start
    unless an ES mean scores strictly higher (a finalist without a finite score is never chosen over one
    with)."""
    values = [s.score.value if finite(s.score.value) else -math.inf for s in scored]
    return int(np.argmax(values))


def reported(winner: Finalist, per_seed) -> Rescored:
    """The chosen finalist's score to report, from per_seed [2, problems, S]: the start's and the winner's
    per-seed validation scores on seeds that neither nominated nor ranked it ([1, problems, S], the start's
    alone, where the winner is the start); its difference from the start paired by seed."""
    if winner.start:
        return rescored([winner], np.asarray(per_seed)[:1])[0]
    return rescored([Finalist(0, math.nan), winner], per_seed)[1]


def _t(values: np.ndarray) -> Interval:
    mean, low, high = (float(x) for x in t_interval(values))
    return Interval(mean, low, high)


def _number(x) -> float:
    return float(x) if finite(x) else math.nan


def interval_json(i: Interval) -> dict:
    """An Interval as selected.json stores it."""
    return {"value": i.value, "low": i.low, "high": i.high}


@dataclass(frozen=True)
class FinalSelection:
    """What a validated run returns, decided at its end (metadisco.measure.selection): every finalist
    re-scored on common fresh seeds, the index of the one chosen, its comparison with PPO and its start on
    the training problems on fresh seeds of their own, and its constraint checks."""

    finalists: list[Rescored]
    index: int
    reported: Rescored  # the winner on seeds the ranking never saw: the score to quote
    comparison: Comparison
    violations: Violations
    completed: int

    @property
    def chosen(self) -> Rescored:
        return self.finalists[self.index]

    def describe(self) -> str:
        return selected_words(self.chosen.finalist.start, self.chosen.finalist.generation)

    def named(self) -> str:
        """The chosen objective, as its comparison and verdict lines name it."""
        return f"selected objective ({self.describe().split(' (')[0]})"

    def record(self) -> GenerationRecord:
        """A metrics-row view of the chosen objective's re-scoring, as verdicts read one."""
        return GenerationRecord(self.completed - 1, comparison=self.comparison, violations=self.violations)

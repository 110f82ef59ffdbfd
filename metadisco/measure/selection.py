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

    selection(records)              the Selection after these rows (a fold of `select`): what
                                    selected.json holds while the run runs; the train loop, its
                                    summary, the report and the figure read it alike
    finalists(records)              [Finalist, ...]: the start, then the nominated ES means
    rescored(finalists, per_seed)   [Rescored, ...] from each one's per-seed scores on the common seeds
    chosen(rescored)                the index of the one the run returns (the first of equals: the start)
    reported(winner, per_seed)      its score to report, from seeds neither the checks nor the ranking saw
    provisional_json(selection, cfg, evolved), final_json(final, cfg, evolved)
                                    what selected.json holds beside the objective: `final` true only
                                    after the end's re-scoring

The ranking's score of the one it chose is still the largest of the finalists' scores on the same seeds,
so it keeps some of the curse. The score selected.json reports is the winner's alone on a third set of
seeds (Stream.SELECTION index 2), scored beside the start for its paired difference: unbiased.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from metadisco.core.records import Comparison, GenerationRecord, Interval, Violations, completed, finite
from metadisco.core.run_config import RunConfig
from metadisco.core.scores import at_worst
from metadisco.measure.stats import t_interval
from metadisco.measure.verdicts import es_mean_vs_ppo, verdict

FINALISTS = 3  # ES means re-scored beside the start: the best checks, so few that re-scoring stays cheap


# Nomination: the checks, as a run goes


@dataclass(frozen=True)
class Selection:
    """What objectives/selected.json holds (RunConfig.validation): the candidate with the best validation
    score of any check so far, `record` the check (metrics row) that scored it, None before any finite
    score; `start`: the run's start point rather than that check's ES mean."""

    score: float = -math.inf
    record: GenerationRecord | None = None
    start: bool = False

    @property
    def generation(self) -> int | None:
        """The generation of the objective held: 0 for the start, else the generations done at its check."""
        return None if self.record is None else 0 if self.start else completed(self.record)

    def describe(self) -> str:
        """In words, which objective it is (the console's summary, the report)."""
        return selected_words(self.start, self.generation)


def selected_words(start: bool, generation) -> str:
    """In words, the objective objectives/selected.json holds: the start, or the ES mean of `generation`."""
    if start:
        return "the start (generation 0; no ES mean scored higher on validation)"
    return f"the ES mean of generation {generation}"


def select(best: Selection, record: GenerationRecord) -> Selection:
    """`best` after `record`'s check: its candidates are the start (validation.start), then the ES mean
    (validation.mean), each taken where finite and strictly higher than the best so far (so the first
    of equals is kept, and at one check the ES mean must beat the start), the ES mean only where its
    constraint checks at that check found nothing. Provisional: at the end of the run the finalists are
    re-scored on common seeds (`finalists`, `rescored`, `chosen`), which decides."""
    v = record.validation
    if v is None:
        return best
    degenerate = bool(record.violations and record.violations.mean)  # an invalid ES mean is no candidate
    for score, start in ((v.start, True), (v.mean, False)):
        if finite(score) and score > best.score and (start or not degenerate):
            best = Selection(score, record, start)
    return best


def selection(records) -> Selection:
    """The Selection after `records` (metrics rows, oldest first): a run and its resume fold the same rows."""
    return functools.reduce(select, records, Selection())


# The end: the finalists re-scored


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


def provisional_json(chosen: Selection, cfg: RunConfig, evolved) -> dict:
    """selected.json's fields while the run runs: the candidate `chosen` and the scores of the check
    that nominated it; `final` false (the end re-scores the finalists)."""
    v, part = chosen.record.validation, "start" if chosen.start else "mean"
    return {"generation": chosen.generation, "candidate": part, "scored_at": completed(chosen.record),
            "envs": list(cfg.envs), "evolved": list(evolved),
            "validation": {"envs": list(cfg.validation.envs), "score": chosen.score, "start": v.start,
                           "mean": v.mean, "ppo": v.ppo, "problems": {p.name: getattr(p, part) for p in v.problems},
                           "seeds": cfg.validation.seeds},
            "fitness": cfg.fitness, "final": False,
            "note": ("the run's start: no ES mean scored higher on the validation problems" if chosen.start else
                     "the ES mean of the generation with the best validation score")
                    + f" (RunConfig.validation, fresh seeds, never used by the ES update; scored at generation "
                      f"{completed(chosen.record)}); provisional: the end of the run re-scores the finalists on common "
                      "seeds and keeps the highest (metadisco.measure.selection)"}


def final_json(final: FinalSelection, cfg: RunConfig, evolved) -> dict:
    """selected.json's fields after the end's re-scoring: the winner, its score from seeds of its own,
    the finalists' ranking, its comparison and verdict; `final` true."""
    chosen, reported, named = final.chosen, final.reported, final.named()
    return {"generation": chosen.finalist.generation, "candidate": "start" if chosen.finalist.start else "mean",
            "envs": list(cfg.envs), "evolved": list(evolved), "fitness": cfg.fitness,
            "validation": {"envs": list(cfg.validation.envs), "score": reported.score.value,
                           "score_low": reported.score.low, "score_high": reported.score.high,
                           "vs_start": interval_json(reported.vs_start),
                           "seeds": cfg.validation.seeds, "rescored_at": final.completed,
                           "ranking_score": interval_json(chosen.score),
                           "scored_on": "seeds neither the checks nor the finalists' ranking saw (its own set)"},
            "finalists": [f.to_json() for f in final.finalists], "final": True,
            "comparison": es_mean_vs_ppo(final.comparison, named),
            "verdict": verdict(final.record(), cfg.expect, named),
            "note": f"re-scored at the end of the run (generation {final.completed}) with the other finalists (the start "
                    f"and the {len(final.finalists) - 1} best-checked ES means free of violations) on common fresh seeds, "
                    "never used by the ES update: the highest there; what evaluate, distil, export and plot take"}

"""What a training run scores: the one registry of scores over a TrainResult's arrays (jax-free).

    SCORES                        {kind: Score}: what each score means, what it needs, how it is computed
    FITNESS                       {fitness: Fitness}: the values of a run config's `fitness`, each a Score,
                                  raw or normalised (every kind, and its `_norm` twin); FITNESS_KINDS their names
    fitness_of(name)              the Fitness of a run config's `fitness` (what the engine asks of it)
    score_of(kind)                the Score of a fitness kind or of its evaluation name
    value(run, kind, tail)        a run's values of one score, per run (any leading axes)
    zero(run, kind)               the initial policy's values of it: the 0 of a normalised score
    normalise(score, ppo, zero)   (score - zero) / (ppo - zero): 0 = the initial policy, 1 = PPO
    normaliser_gain(ppo, zero)    PPO's gain over its initial policy, paired by seed: mean, standard error, usable
    at_worst(scores, diverged)    a diverged run tied with the worst finite one

A run is a TrainResult (metadisco.inner_loops.ppo) or a mapping with the same names, numpy or jax
arrays alike, with any leading axes: "returns" [..., U] (the learning curve: mean return of the
episodes that ended in each update), "eval_return", "eval_return_greedy" [...] (the final
policy's mean return over complete evaluation episodes, actions sampled or greedy),
"init_eval_return", "init_eval_return_greedy" [...] (the same for the initial policy).

Meta-training (`metadisco.engine`: a run's `fitness`) and evaluation (`metadisco evaluate`) both
score through `value`, normalise through `normalise` over `zero`, accept a normaliser only where
`normaliser_gain` says PPO learnt, and rank a diverged run with `at_worst`. A kind has two names:
the fitness kind a run config holds (`fitness=final_eval`) and the column an evaluation reports
(`eval`); both are accepted wherever a kind is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Score", "SCORES", "Fitness", "FITNESS", "FITNESS_KINDS", "EVALUATION_NAMES", "FINAL_TAIL", "GUARD_SE",
           "fitness_of", "score_of", "value", "zero", "normalise", "normaliser_gain", "at_worst"]

FINAL_TAIL = 0.1  # the share of the learning curve whose mean is the "final" score (a run config's)
GUARD_SE = 2.0  # PPO's gain over its initial policy must exceed this many standard errors to normalise
NONE_FINITE = -1e6  # at_worst's score for every run where none is finite


def field(run, name: str):
    """Array `name` of a run: a TrainResult's attribute or a mapping's key."""
    return run[name] if isinstance(run, Mapping) else getattr(run, name)


def tail_mean(curve, fraction: float = FINAL_TAIL):
    """Mean of the last `fraction` of the updates (at least one) of curve [..., U] -> [...]."""
    n = max(1, math.floor(curve.shape[-1] * fraction + 1e-9))
    return curve[..., -n:].mean(-1)


@dataclass(frozen=True)
class Score:
    """One kind of score of a training run.

    name: the fitness kind (a run config's `fitness`, the fields of metadisco.scoring.Baseline);
    label: its column in an evaluation's results; needs: "evaluation" (evaluation episodes,
    PPOConfig.eval_episodes >= 1) or "curve" (the learning curve); greedy: whether its zero is the
    initial policy's greedy evaluation (else sampled); compute(run, tail) -> values [...].
    """

    name: str
    label: str
    description: str
    needs: str
    greedy: bool
    compute: Callable

    def describe(self, tail: float = FINAL_TAIL) -> str:
        return self.description.format(tail=tail)


SCORES: dict[str, Score] = {s.name: s for s in (
    # The default (LPO scores the final policy over complete evaluation episodes): sampled actions,
    # because that stochastic policy is the one PPO optimises and the one whose episodes make the
    # learning curve, so the initial policy's sampled evaluation is a consistent zero. A greedy
    # policy can loop until the time limit in deterministic games, a different agent from the one trained.
    Score("final_eval", "eval", "the final policy's mean return over complete evaluation episodes, actions sampled",
          "evaluation", False, lambda run, tail: field(run, "eval_return")),
    Score("greedy_eval", "eval_greedy",
          "the final policy's mean return over complete evaluation episodes, greedy actions",
          "evaluation", True, lambda run, tail: field(run, "eval_return_greedy")),
    Score("final", "train_final", "mean return of the episodes that ended in the last {tail:.0%} of training",
          "curve", False, lambda run, tail: tail_mean(field(run, "returns"), tail)),
    Score("auc", "auc", "mean return over the whole learning curve (its area per update)",
          "curve", False, lambda run, tail: field(run, "returns").mean(-1)),
)}
EVALUATION_NAMES = {s.label: s.name for s in SCORES.values()}  # evaluation column -> fitness kind


@dataclass(frozen=True)
class Fitness:
    """A value of a run config's `fitness`: `score`, raw, or `normalised` on each training problem
    so that the initial policy scores 0 and PPO 1 (its name is the score's with `_norm`; it needs
    PPO's baseline on the meta-training problems)."""

    name: str
    score: Score
    normalised: bool


FITNESS: dict[str, Fitness] = {f.name: f for s in SCORES.values()
                               for f in (Fitness(s.name, s, False), Fitness(f"{s.name}_norm", s, True))}
FITNESS_KINDS = tuple(FITNESS)


def fitness_of(name: str) -> Fitness:
    """The Fitness a run config's `fitness` names. KeyError names the kinds there are."""
    if name not in FITNESS:
        raise KeyError(f"unknown fitness {name!r}; choose one of {', '.join(FITNESS)}")
    return FITNESS[name]


def score_of(kind: str) -> Score:
    """The Score of `kind`: a fitness kind (final_eval, final_eval_norm, ...) or an evaluation
    column (eval, ...). KeyError names the kinds there are."""
    if kind in FITNESS:
        return FITNESS[kind].score
    if kind in EVALUATION_NAMES:
        return SCORES[EVALUATION_NAMES[kind]]
    raise KeyError(f"unknown score {kind!r}; choose one of {', '.join(FITNESS)} "
                   f"(in an evaluation: {', '.join(EVALUATION_NAMES)})")


def value(run, kind: str, tail: float = FINAL_TAIL):
    """The values [...] of score `kind` of `run` (any leading axes; numpy or jax alike), not normalised."""
    return score_of(kind).compute(run, tail)


def zero(run, kind: str):
    """The initial policy's values [...] of score `kind`: its evaluation, greedy for a greedy score and
    sampled otherwise (the learning curve is the sampled policy's). NaN without evaluation episodes."""
    return field(run, "init_eval_return_greedy" if score_of(kind).greedy else "init_eval_return")


def normalise(score, ppo, zero):
    """(score - zero) / (ppo - zero): 0 = the initial (untrained) policy, 1 = PPO; negative returns
    too; numpy or jax arrays alike. A zero denominator divides by 1e-8."""
    denom = ppo - zero
    return (score - zero) / (denom + (denom == 0) * 1e-8)


def normaliser_gain(ppo, zero):
    """PPO's gain over its initial policy, paired by seed: ppo, zero [..., S] (numpy) ->
    (mean [...], standard error [...], usable [...] bool). Usable where the mean exceeds GUARD_SE
    standard errors: otherwise the normaliser's denominator is mostly noise, and a normalised score
    on that environment with it (one such environment dominates a mean over environments). NaN,
    and a single seed, are never usable."""
    gain = np.asarray(ppo, np.float64) - np.asarray(zero, np.float64)
    seeds = gain.shape[-1]
    mean = gain.mean(-1)
    se = gain.std(-1, ddof=1) / np.sqrt(seeds) if seeds > 1 else np.full_like(mean, np.nan)
    return mean, se, mean > GUARD_SE * se  # NaN compares False


def _namespace(x):
    return x.__array_namespace__() if hasattr(x, "__array_namespace__") else np


def at_worst(scores, diverged=None, axis=None, none_finite: float = NONE_FINITE):
    """scores with every diverged entry at the worst finite score along `axis` (None: over all of
    them): a diverged run ties the worst finite one, so it ranks last but not alone. diverged:
    bool broadcasting with scores (None: the non-finite entries); `none_finite` where no entry
    along `axis` is finite. numpy or jax arrays alike (jit- and vmap-safe)."""
    xp = _namespace(scores)
    bad = ~xp.isfinite(scores) if diverged is None else diverged
    worst = xp.min(xp.where(bad, xp.inf, scores), axis=axis, keepdims=axis is not None)
    return xp.where(bad, xp.where(xp.isfinite(worst), worst, none_finite), scores)

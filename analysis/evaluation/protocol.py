"""How an evaluation scores methods and how each method's learning rate is chosen (jax-free).

    LABELS                      the evaluation's names of the scores (metadisco.core.scores' labels)
    no_episode_ended(run)       the seeds whose training scores are the initial evaluation (no episode ended)
    Protocol, PROTOCOLS         named protocols ("default", "discogen")
    resolve_protocol(...)       a protocol from a name and the --tune-lr shortcut

A run is the dict `metadisco.analysis.evaluation.run` makes from a TrainResult: its arrays under
their TrainResult names, with the seeds on the last axis of each ("returns" [..., S, U]). What
each score is and how it is computed is metadisco.core.scores', the registry meta-training's
fitness reads too: `scores.value(run, kind, tail)`, `scores.zero(run, kind)`.

The default score is the final policy's evaluation with sampled actions: the quantity that
meta-training maximises by default (fitness final_eval), measured on complete episodes of the
policy itself rather than on the episodes that happened to end during training (which favour
short episodes and older policies). DiscoGen's protocol scores greedy episodes.
Learning-rate tuning trains every method over a grid (factors x the base rate) on tuning seeds
disjoint from the evaluation seeds, picks the rate with the best mean `select` score (a seed that
diverged ties the worst finite seed of the grid: scores.at_worst), and scores the method at that
rate on the evaluation seeds.
"""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass

import numpy as np

from metadisco.analysis.suites import EvaluationError
from metadisco.core import scores

__all__ = ["LR_FACTORS", "BOOTSTRAP_REPS", "LABELS", "Protocol", "PROTOCOLS", "no_episode_ended", "label_of",
           "resolve_protocol", "help_text"]

LR_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)  # --tune-lr: x the base rate
# Replicates of every bootstrap interval (--bootstrap); rliable's default. Measured: two bootstrap
# seeds give IQM/mean bounds within 0.002 of each other (8 seeds x 3 environments), under half a unit
# of the two decimals printed (tests/test_stats.py checks it on a small case).
BOOTSTRAP_REPS = 50_000
LABELS = tuple(s.label for s in scores.SCORES.values())  # eval, eval_greedy, train_final, auc


def label_of(kind: str) -> str:
    """The evaluation's name of score `kind` (its label, or the fitness kind a run config names)."""
    try:
        return scores.score_of(kind).label
    except KeyError as e:
        raise EvaluationError(e.args[0]) from None


def no_episode_ended(run: dict) -> np.ndarray:
    """Per seed [..., S]: True where no training episode ended in the whole run.

    The learning curve carries the latest earlier value into an update in which no episode ended,
    and the initial policy's evaluation into those before the first (metadisco.inner_loops.ppo.carry_forward).
    A seed in which none ended has its initial evaluation at every update (NaN throughout without
    evaluation episodes): its scores that read the learning curve are that evaluation, not a return
    of training (long episodes on a short budget: Freeway-MinAtar's 2,500 steps). A curve on which
    episodes did end equals the initial evaluation at every update only if each update's episodes
    averaged exactly that number, bit for bit."""
    returns, init = run["returns"], np.asarray(run["init_eval_return"])[..., None]
    return ((returns == init) | (np.isnan(returns) & np.isnan(init))).all(-1)


@dataclass(frozen=True)
class Protocol:
    """How methods are scored: the learning-rate grid, the seeds that tune it, and the scores."""

    name: str
    summary: str
    lr_factors: tuple[float, ...] = ()  # the grid, x the base rate; () = every method at the base rate
    tuning_seeds: int | None = None  # seeds per grid point (None: as many as the evaluation seeds)
    select: str = "eval"  # the score that picks the learning rate (on the tuning seeds)
    score: str = "eval"  # the headline score: reported, normalised, aggregated
    tail: float = scores.FINAL_TAIL  # fraction of training in "train_final"
    eval_episodes: int | None = None  # final-policy episodes per mode (None: the preset's)

    def check(self) -> Protocol:
        """This protocol with its scores under their evaluation names; EvaluationError for a bad value."""
        try:
            named = dataclasses.replace(self, select=label_of(self.select), score=label_of(self.score))
        except EvaluationError as e:
            raise EvaluationError(f"protocol {self.name!r}: {e}") from None
        if any(not f > 0 for f in self.lr_factors):
            raise EvaluationError(f"lr_factors must be positive numbers, got {self.lr_factors!r}")
        if self.tuning_seeds is not None and (int(self.tuning_seeds) != self.tuning_seeds or self.tuning_seeds < 1):
            raise EvaluationError(f"tuning_seeds must be a positive integer, got {self.tuning_seeds!r}")
        if not 0 < self.tail <= 1:
            raise EvaluationError(f"tail must be in (0, 1], got {self.tail!r}")
        if self.eval_episodes is not None and (int(self.eval_episodes) != self.eval_episodes or self.eval_episodes < 1):
            raise EvaluationError(f"eval_episodes must be a positive integer, got {self.eval_episodes!r}")
        return named

    @property
    def needs_evaluation(self) -> bool:
        """Whether its scores need final-policy evaluation episodes."""
        return any(scores.score_of(k).needs == "evaluation" for k in (self.select, self.score))

    def describe(self, kind: str | None = None) -> str:
        """The meaning of score `kind` (default: the headline) under this protocol."""
        return scores.score_of(kind or self.score).describe(self.tail)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"lr_factors": [float(f) for f in self.lr_factors],
                                           "score_meaning": self.describe()}


PROTOCOLS: dict[str, Protocol] = {
    "default": Protocol(
        "default", "the final policy's evaluation, actions sampled (the preset's eval_episodes); every method at "
                   "the preset's learning rate (or --lr), or with --tune-lr at its own rate tuned over x0.25..x4 "
                   "the base (by the same score) on tuning seeds disjoint from the evaluation seeds"),
    "discogen": Protocol(
        "discogen", "as DiscoGen's on-policy RL domain scores a loss: each method's learning rate tuned over 10 "
                    "rates geometrically spaced from the base to 10x the base on 8 tuning seeds, picked by the "
                    "mean of the last 5% of training returns; the method at its best rate is then scored by 16 "
                    "greedy episodes of its final policy (observation normaliser frozen)",
        lr_factors=tuple(10 ** (i / 9) for i in range(10)), tuning_seeds=8, select="train_final",
        score="eval_greedy", tail=0.05, eval_episodes=16),
}


def resolve_protocol(protocol: str | Protocol = "default", tune_lr: bool = False, lr_factors=None) -> Protocol:
    """The protocol by name (or as given); `tune_lr` gives an untuned one the LR_FACTORS grid and
    `lr_factors` replaces the grid. Raises EvaluationError for an unknown name or bad values."""
    if isinstance(protocol, str):
        if protocol not in PROTOCOLS:
            raise EvaluationError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
        protocol = PROTOCOLS[protocol]
    if lr_factors is not None:
        protocol = dataclasses.replace(protocol, lr_factors=tuple(float(f) for f in lr_factors))
    elif tune_lr and not protocol.lr_factors:
        protocol = dataclasses.replace(protocol, lr_factors=LR_FACTORS)
    if lr_factors is not None and not protocol.lr_factors:
        raise EvaluationError("lr_factors is empty: give at least one factor, or leave tuning off")
    return protocol.check()


def help_text(width: int = 100) -> str:
    """The protocols and scores, for `metadisco evaluate --help`."""
    lines = ["protocols (--protocol):"]
    for p in PROTOCOLS.values():
        lines += textwrap.wrap(p.summary, width, initial_indent=f"  {p.name:<10} ", subsequent_indent=" " * 13)
    lines.append("scores (a protocol's headline score is normalised: 0 = the initial policy, 1 = PPO):")
    for s in scores.SCORES.values():
        lines += textwrap.wrap(f"{s.describe()} (fitness={s.name} in a run config)", width,
                               initial_indent=f"  {s.label:<12} ", subsequent_indent=" " * 15)
    return "\n".join(lines)

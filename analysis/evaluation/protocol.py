"""What an evaluation scores and how each method's learning rate is chosen (jax-free).

    SCORES                      {kind: meaning}: the numbers a run yields per seed
    score(run, kind, tail)      a run's per-seed values of one kind
    no_episode_ended(run)       the seeds whose training scores are the initial evaluation (no episode ended)
    zero(ppo_run, kind)         the initial policy's per-seed values: the 0 of a normalised score
    Protocol, PROTOCOLS         named protocols ("default", "discogen")
    resolve_protocol(...)       a protocol from a name and the --tune-lr shortcut

A run is the dict `metadisco.analysis.evaluation.run` makes from a TrainResult: "returns" [..., S, U] (the
learning curve: mean return of the episodes that ended in each update), "eval", "eval_greedy"
[..., S] (the final policy's mean return over complete evaluation episodes, actions sampled or
greedy), "init_eval", "init_eval_greedy" [..., S] (the same for the initial policy) and
"diverged" [..., S].

The default score is the final policy's evaluation with sampled actions: the quantity that
meta-training maximises by default (fitness final_eval), measured on complete episodes of the
policy itself rather than on the episodes that happened to end during training (which favour
short episodes and older policies). DiscoGen's protocol scores greedy episodes.
Learning-rate tuning trains every method over a grid (factors x the base rate) on tuning seeds
disjoint from the evaluation seeds, picks the rate with the best mean `select` score (a seed that
diverged counts as -inf), and scores the method at that rate on the evaluation seeds.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from dataclasses import dataclass

import numpy as np

from metadisco.analysis.suites import EvaluationError

__all__ = ["LR_FACTORS", "BOOTSTRAP_REPS", "SCORES", "EVAL_SCORES", "TRAINING_SCORES", "Protocol", "PROTOCOLS", "score",
           "no_episode_ended", "zero", "resolve_protocol", "help_text"]

LR_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)  # --tune-lr: x the base rate
# Replicates of every bootstrap interval (--bootstrap); rliable's default. Measured: two bootstrap
# seeds give IQM/mean bounds within 0.002 of each other (8 seeds x 3 environments), under half a unit
# of the two decimals printed (tests/test_stats.py checks it on a small case).
BOOTSTRAP_REPS = 50_000

SCORES = {
    "eval": "the final policy's mean return over complete evaluation episodes, actions sampled",
    "eval_greedy": "the final policy's mean return over complete evaluation episodes, greedy actions",
    "train_final": "mean return of the episodes that ended in the last {tail:.0%} of training",
    "auc": "mean return over the whole learning curve (its area per update)",
}
EVAL_SCORES = ("eval", "eval_greedy")  # need evaluation episodes (PPOConfig.eval_episodes > 0)
TRAINING_SCORES = ("train_final", "auc")  # read the learning curve (see no_episode_ended)


def _tail(curve: np.ndarray, fraction: float) -> np.ndarray:
    """Mean of the last `fraction` of the updates (at least one) of curve [..., U] -> [...]."""
    n = max(1, math.floor(curve.shape[-1] * fraction + 1e-9))
    return curve[..., -n:].mean(-1)


def score(run: dict, kind: str, tail: float = 0.1) -> np.ndarray:
    """Per-seed values [..., S] of `kind` (a key of SCORES) from a run."""
    if kind in EVAL_SCORES:
        return run[kind]
    if kind == "train_final":
        return _tail(run["returns"], tail)
    if kind == "auc":
        return run["returns"].mean(-1)
    raise EvaluationError(f"unknown score {kind!r}; choose one of {', '.join(SCORES)}")


def no_episode_ended(run: dict) -> np.ndarray:
    """Per seed [..., S]: True where no training episode ended in the whole run.

    The learning curve carries the latest earlier value into an update in which no episode ended,
    and the initial policy's evaluation into those before the first (metadisco.inner_loops.ppo.carry_forward).
    A seed in which none ended has its initial evaluation at every update (NaN throughout without
    evaluation episodes): its TRAINING_SCORES are that evaluation, not a return of training (long
    episodes on a short budget: Freeway-MinAtar's 2,500 steps). A curve on which episodes did end
    equals the initial evaluation at every update only if each update's episodes averaged exactly
    that number, bit for bit."""
    returns, init = run["returns"], np.asarray(run["init_eval"])[..., None]
    return ((returns == init) | (np.isnan(returns) & np.isnan(init))).all(-1)


def zero(ppo_run: dict, kind: str) -> np.ndarray:
    """The initial policy's per-seed values [S] for `kind`: its evaluation, greedy for
    "eval_greedy" and sampled otherwise (the training returns are the sampled policy's); without
    evaluation episodes (NaN), a training score's zero is the first update's return."""
    if kind not in SCORES:
        raise EvaluationError(f"unknown score {kind!r}; choose one of {', '.join(SCORES)}")
    if kind == "eval_greedy":
        return ppo_run["init_eval_greedy"]
    if kind == "eval":
        return ppo_run["init_eval"]
    return np.where(np.isnan(ppo_run["init_eval"]), ppo_run["returns"][..., 0], ppo_run["init_eval"])


@dataclass(frozen=True)
class Protocol:
    """How methods are scored: the learning-rate grid, the seeds that tune it, and the scores."""

    name: str
    summary: str
    lr_factors: tuple[float, ...] = ()  # the grid, x the base rate; () = every method at the base rate
    tuning_seeds: int | None = None  # seeds per grid point (None: as many as the evaluation seeds)
    select: str = "eval"  # the score that picks the learning rate (on the tuning seeds)
    score: str = "eval"  # the headline score: reported, normalised, aggregated
    tail: float = 0.1  # fraction of training in "train_final"
    eval_episodes: int | None = None  # final-policy episodes per mode (None: the preset's)

    def check(self) -> Protocol:
        for kind in (self.select, self.score):
            if kind not in SCORES:
                raise EvaluationError(f"protocol {self.name!r}: unknown score {kind!r}; choose one of {', '.join(SCORES)}")
        if any(not f > 0 for f in self.lr_factors):
            raise EvaluationError(f"lr_factors must be positive numbers, got {self.lr_factors!r}")
        if self.tuning_seeds is not None and (int(self.tuning_seeds) != self.tuning_seeds or self.tuning_seeds < 1):
            raise EvaluationError(f"tuning_seeds must be a positive integer, got {self.tuning_seeds!r}")
        if not 0 < self.tail <= 1:
            raise EvaluationError(f"tail must be in (0, 1], got {self.tail!r}")
        if self.eval_episodes is not None and (int(self.eval_episodes) != self.eval_episodes or self.eval_episodes < 1):
            raise EvaluationError(f"eval_episodes must be a positive integer, got {self.eval_episodes!r}")
        return self

    @property
    def needs_evaluation(self) -> bool:
        """Whether its scores need final-policy evaluation episodes."""
        return self.select in EVAL_SCORES or self.score in EVAL_SCORES

    def describe(self, kind: str | None = None) -> str:
        """The meaning of score `kind` (default: the headline) under this protocol."""
        return SCORES[kind or self.score].format(tail=self.tail)

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
    for k, v in SCORES.items():
        lines += textwrap.wrap(v.format(tail=0.1), width, initial_indent=f"  {k:<12} ", subsequent_indent=" " * 15)
    return "\n".join(lines)

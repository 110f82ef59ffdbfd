"""The checks of a run, on the host around the scoring program (metadisco.scoring): PPO's baseline
(the normaliser of `*_norm` fitness), the comparisons on fresh seeds (the ES mean against PPO and
against the run's start), meta-validation, and the end's re-scoring of selection's finalists.

Each trains its candidates through the run's one program, and each gets its scores raw: the
normalisation, paired differences and intervals are computed here, in numpy.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from metadisco.core import scores, streams
from metadisco.core.errors import MetadiscoError
from metadisco.core.records import Comparison, Interval, ProblemScores
from metadisco.core.scores import GUARD_SE
from metadisco.measure.stats import gap_closed_ci, mean_ci
from metadisco.meta_objectives.base import same_params
from metadisco.scoring import Baseline, ScoringProgram, fitness_from


class NormaliserError(MetadiscoError):
    """A normalised fitness on an environment where PPO does not beat its initial policy."""


def check_normaliser(per_seed: Baseline, kind: str, envs) -> None:
    """Refuse a normalised fitness where PPO's gain over its initial policy is within noise.

    per_seed: fields [num_problems, seeds]; envs: their names. On each env PPO's gain over its initial
    policy must be significant (scores.normaliser_gain, the guard evaluation applies too). Raises
    NormaliserError naming every env where it is not, with advice.
    """
    ppo, init = (np.asarray(x) for x in per_seed.normaliser(kind))
    mean, se, usable = scores.normaliser_gain(ppo, init)
    bad = [
        f"{env}: PPO {float(np.mean(ppo[i])):.4g} vs its initial policy "
        f"{float(np.mean(init[i])):.4g}, gain {mean[i]:+.4g} +- {se[i]:.3g} (standard error)"
        for i, env in enumerate(envs)
        if not usable[i]
    ]
    if bad:
        raise NormaliserError(
            f"fitness={kind} divides by PPO's gain over its initial policy, but PPO does not improve beyond "
            f"noise ({GUARD_SE:g} standard errors over {ppo.shape[-1]} baseline seeds) on:\n  " + "\n  ".join(bad)
            + "\nGive PPO a budget it learns in (inner.total_timesteps, inner.lr), raise baseline_seeds if the "
            "gain is real but noisy, or drop that environment from envs (env@fraction: that horizon from "
            "distribution.horizons)."
        )


@dataclasses.dataclass(frozen=True)
class CheckedProblem:
    """A problem as the checks train it: its branch of the program, and PPO's."""

    name: str
    branch: int  # the run's objectives on it
    reference: int | None  # PPO's own branch, or None: PPO is `branch` at Checks.ppo_params
    row: int  # its row in a Baseline


class Checks:
    """The checks of a run over `program`: `training` and `validation` problems, the plugs that
    `evolve`, the run's start and PPO as every plug's parameters (ppo_params None: PPO trains on
    each problem's reference branch, else on the run's own, its fixed plugs the start's; start_is_ppo:
    the start is PPO exactly, trained once for both)."""

    def __init__(self, program: ScoringProgram, training, validation, cfg, evolve, start_params, ppo_params,
                 start_is_ppo: bool):
        self.program, self.training, self.validation, self.cfg = program, tuple(training), tuple(validation), cfg
        self.evolve, self.start_params, self.ppo_params, self.start_is_ppo = evolve, start_params, ppo_params, start_is_ppo

    def evolved(self, params) -> dict:
        """The evolved plugs' part of every plug's parameters: what a row of the program carries."""
        return {plug: params[plug] for plug in self.evolve}

    @property
    def problems(self) -> tuple[CheckedProblem, ...]:
        return self.training + self.validation

    def _ppo(self, problem: CheckedProblem, seeds) -> np.ndarray:
        """RunScores [1, E] of PPO on `problem`'s `seeds`."""
        if problem.reference is None:
            return self.program.score_candidates(problem.branch, [self.evolved(self.ppo_params)], seeds)
        return self.program.score_candidates(problem.reference, [self.evolved(self.start_params)], seeds)

    # ---------------------------------------------------------------- the baseline
    def baseline(self) -> Baseline:
        """PPO on every problem (each at its preset lr), fields [num_problems, baseline_seeds]: the
        training problems on seeds of the BASELINE stream, the validation problems on the VALIDATION
        stream's (its NORMALISER index). Not checked: `check_normaliser` says whether it normalises."""
        runs = []
        seed = self.cfg.seed
        for problems, key in ((self.training, streams.key(seed, streams.Stream.BASELINE)),
                              (self.validation, streams.key(seed, streams.Stream.VALIDATION, streams.NORMALISER))):
            seeds = seeds_of(key, self.cfg.baseline_seeds)
            runs += [self._ppo(problem, seeds) for problem in problems]
        return Baseline.of(jax.tree.map(lambda *x: np.concatenate(x), *runs))

    # ---------------------------------------------------------------- comparisons on fresh seeds
    def compare(self, solution, baseline: Baseline, keys) -> tuple[Comparison, Comparison | None]:
        """`solution` (an ES solution: the evolved plugs, host) against the start and PPO, all on the same
        fresh seeds: keys = (the training problems' key, the validation problems'), `eval_seeds` and
        `validation.seeds` seeds of each. Returns (the Comparison on the training problems, the same
        on the validation problems or None)."""
        training = self._scored(self.training, solution, baseline, seeds_of(keys[0], self.cfg.eval_seeds))
        validation = self._scored(self.validation, solution, baseline,
                                  seeds_of(keys[1], self.cfg.validation.seeds))
        return comparison(self.training, training), comparison(self.validation, validation) if self.validation else None

    def validation_scores(self, solutions, baseline: Baseline, key) -> np.ndarray:
        """Each of `solutions` (ES solutions, host) trained on every validation problem on the same
        `validation.seeds` fresh seeds of `key`, all in the same calls: per-seed fitness [C, problems, S],
        NaN where a seed diverged (selection's finalists, paired by seed)."""
        seeds = seeds_of(key, self.cfg.validation.seeds)
        per_problem = [np.asarray(fitness_from(self.program.score_candidates(p.branch, list(solutions), seeds),
                                               self.cfg.fitness, baseline, p.row), np.float64)
                       for p in self.validation]
        return np.stack(per_problem, 1)

    def training_comparison(self, solution, baseline: Baseline, key) -> Comparison:
        """`solution` against the start and PPO on the training problems, on `eval_seeds` fresh seeds of `key`."""
        return comparison(self.training, self._scored(self.training, solution, baseline,
                                                      seeds_of(key, self.cfg.eval_seeds)))

    def _scored(self, problems, params, baseline: Baseline, seeds) -> list[tuple[np.ndarray, ...]]:
        """[(ours, start, ppo) fitness, each [E], NaN where a seed diverged] per problem. Each distinct
        candidate is trained once: `params` that are the start (a selection that kept it) share its scores,
        and so does PPO where the start is PPO."""
        start = self.evolved(self.start_params)
        is_start = same_params(params, start)
        out = []
        for problem in problems:
            both = problem.reference is None and not self.start_is_ppo
            candidates = [params] + ([] if is_start else [start]) + ([self.evolved(self.ppo_params)] if both else [])
            runs = self.program.score_candidates(problem.branch, candidates, seeds)
            fitness = np.asarray(fitness_from(runs, self.cfg.fitness, baseline, problem.row), np.float64)
            theirs = fitness[0] if is_start else fitness[1]
            if both:
                ppo = fitness[-1]
            elif self.start_is_ppo:
                ppo = theirs
            else:
                ppo = np.asarray(fitness_from(self._ppo(problem, seeds), self.cfg.fitness, baseline,
                                              problem.row), np.float64)[0]
            out.append((fitness[0], theirs, ppo))
        return out


def seeds_of(key, n: int) -> np.ndarray:
    """`n` seeds split from `key`, as key data on the host: [n, key data]. With jax's default
    jax_threefry_partitionable, seed i is fold_in(key, i): a stream's key i (metadisco.core.streams)."""
    return np.asarray(jax.random.key_data(jax.random.split(key, n)))


def comparison(problems, scored) -> Comparison:
    """A Comparison from [(ours, start, ppo) per-seed fitness, each [E]] on `problems` (paired by seed)."""
    out = [tuple(np.asarray(x, np.float64) for x in s) for s in scored]
    rows = tuple(ProblemScores(problem.name, *(float(np.mean(x)) for x in s), diff=paired(s[0], s[2]),
                               vs_start=paired(s[0], s[1])) for problem, s in zip(problems, out))
    mean_scores, start, ppo = (np.mean([s[j] for s in out], axis=0) for j in range(3))  # [E]

    ok = np.isfinite(mean_scores) & np.isfinite(start) & np.isfinite(ppo)
    closed = gap_closed_ci(mean_scores[ok], start[ok], ppo[ok]) if ok.sum() >= 2 else (np.nan,) * 3
    return Comparison(rows, mean=float(np.mean(mean_scores)), start=float(np.mean(start)),
                      ppo=float(np.mean(ppo)), diff=paired(mean_scores, ppo), vs_start=paired(mean_scores, start),
                      gap_closed=Interval(*closed))


def paired(ours, other) -> Interval:
    """ours - other [E], paired by seed (all trained on the same seeds; a diverged seed has no score):
    the mean difference with its 95% t-interval."""
    diff = (ours - other)[np.isfinite(ours - other)]
    return Interval(*(mean_ci(diff) if diff.size else (np.nan,) * 3))


"""The statistics of an evaluation, from the raw runs of every method on every environment.

Per environment: each method's mean score (the protocol's headline score, at the learning rate it
was scored at) with a Student-t 95% interval, and its score normalised by PPO, (score - zero) / (ppo
- zero), zero = the initial policy's mean evaluation (`scores.zero`) and ppo = PPO's mean score (0 =
the initial policy, 1 = PPO; PPO at its tuned rate when the protocol tunes). Scores, zero,
normalisation, the normaliser's guard and the treatment of a diverged seed are
metadisco.core.scores', as in meta-training: a seed that diverged (or scored non-finite) ties the
worst finite score of any method's seed on that environment (`scores.at_worst`). Every kind of score
is reported as a column (final-policy evaluation sampled and greedy, the end of training, the
learning-curve AUC). The normalised intervals, per environment and in the aggregates (IQM and mean
over environments), come from a stratified bootstrap that resamples PPO's and the initial policy's
seeds along with the method's, so they carry the normaliser's noise. The probability of improvement
(over PPO, DPO and every other method) is computed within each environment, where normalising
changes nothing. Held-out and meta-train environments are aggregated apart.

An environment where PPO's gain over the initial policy (paired by seed) is not above
scores.GUARD_SE standard errors ("ppo-flat": `scores.normaliser_gain`, the guard meta-training's
normalised fitness applies) has no usable normaliser: its raw scores are reported but it is left
out of both aggregates, so that a PPO that barely learnt cannot inflate them.
"""

from __future__ import annotations

import numpy as np

from metadisco.analysis.evaluation.plan import EnvJob
from metadisco.analysis.evaluation.protocol import BOOTSTRAP_REPS, LABELS, Protocol, no_episode_ended
from metadisco.analysis.evaluation.results import Aggregate, AggregateScores, Curve, EnvResult, Estimate, MethodScores, VersusPPO
from metadisco.analysis.targets import REFERENCES
from metadisco.core import scores
from metadisco.inner_loops import preset_for, preset_name
from metadisco.measure import stats

__all__ = ["CONFIDENCE", "BOOTSTRAP_REPS", "env_stats", "aggregate", "reading", "notes"]

CONFIDENCE = 0.95


def scored(runs: dict, labels: list[str], kind: str, tail: float) -> tuple[dict, dict]:
    """Every method's values [S] of score `kind` on one environment, each diverged or non-finite seed
    at the worst finite value of any method's seed there (NaN where none is finite) ->
    ({label: values}, {label: [S] bool, the seeds so placed})."""
    values = np.stack([np.asarray(scores.value(runs[m], kind, tail), np.float64) for m in labels])  # [M, S]
    bad = np.stack([np.asarray(runs[m]["diverged"], bool) for m in labels]) | ~np.isfinite(values)
    placed = scores.at_worst(values, bad, none_finite=np.nan)
    return dict(zip(labels, placed)), dict(zip(labels, bad))


def normaliser(ppo_run: dict, ppo_seeds: np.ndarray, kind: str) -> tuple[np.ndarray, str | None]:
    """The initial policy's values [S] of `kind` (PPO's run's), and why PPO's values `ppo_seeds` [S]
    cannot normalise (None where they can: scores.normaliser_gain)."""
    zero = np.asarray(scores.zero(ppo_run, kind), np.float64)
    if not np.isfinite(zero).all():
        return zero, ("the initial policy has no evaluation (eval_episodes = 0), so a normalised score has no 0: "
                      "this environment is left out of the aggregates")
    mean, se, usable = scores.normaliser_gain(ppo_seeds, zero)
    if usable:
        return zero, None
    return zero, (f"PPO's gain over its initial policy ({float(np.mean(ppo_seeds)):.4g} vs {float(np.mean(zero)):.4g}: "
                  f"{mean:+.4g} +- {se:.3g} standard error, paired over {len(zero)} seeds) is not above "
                  f"{scores.GUARD_SE:g} standard errors: no usable normaliser, so this environment is left out of "
                  "the aggregates")


def env_stats(job: EnvJob, labels: list[str], env_result: dict, protocol: Protocol,
              reps: int = BOOTSTRAP_REPS, seed: int = 0) -> EnvResult:
    """One environment's entry of the results: flags, normaliser, and per method its scores (every
    kind of score, the headline one with its interval), learning rate, normalised scores and
    learning-curve band. `env_result` is {"runs": {label: run (protocol's docstring) | {"lr"}},
    "tuning": {label: Tuning} | None, "time_s"}."""
    runs = env_result["runs"]
    kind = protocol.score
    values, placed = scored(runs, labels, kind, protocol.tail)
    ppo_seeds = values["ppo"]
    zero_seeds, excluded = normaliser(runs["ppo"], ppo_seeds, kind)
    init, ppo_mean = float(np.mean(zero_seeds)), float(np.mean(ppo_seeds))
    columns = {label: scored(runs, labels, label, protocol.tail)[0] if label != kind else values for label in LABELS}
    flags = []
    if job.meta_train_for:
        flags.append("meta-train")
    if excluded:
        flags.append("ppo-flat")
    methods = {}
    for label in labels:
        run = runs[label]
        seed_scores = values[label]
        mean, low, high = stats.mean_ci(seed_scores, CONFIDENCE)
        normalized = norm = None
        if not excluded:
            normalized = np.asarray(scores.normalise(seed_scores, ppo_mean, init), np.float64)
            norm = stats.normalized_ci(seed_scores[:, None], ppo_seeds[:, None], zero_seeds[:, None], stats.mean,
                                       reps, CONFIDENCE, seed)
        curves = np.where(np.isfinite(run["returns"]), run["returns"], np.nan)
        band = stats.t_interval(curves, CONFIDENCE)
        methods[label] = MethodScores(
            lr=float(run["lr"]), scores=seed_scores, mean=mean, ci_low=low, ci_high=high,
            columns={k: _mean_or_none(columns[k][label]) for k in LABELS},
            diverged=int(run["diverged"].sum()), nonfinite=int(placed[label].sum()),
            no_episode_ended=int(no_episode_ended(run).sum()),  # seeds: training scores = initial evaluation
            normalized=normalized, norm_mean=None if norm is None else float(norm[0]),
            norm_ci_low=None if norm is None else float(norm[1]), norm_ci_high=None if norm is None else float(norm[2]),
            curve=Curve(mean=band[0], low=band[1], high=band[2], seeds=curves))
    vs_ppo = {label: versus_ppo(values[label], ppo_seeds, reps, seed) for label in labels if label != "ppo"}
    return EnvResult(
        flags=tuple(flags), meta_train_for=tuple(job.meta_train_for), family=preset_name(job.name), budget=job.budget,
        num_updates=job.config.num_updates, steps_per_update=job.config.batch_size, score=kind, init_return=init,
        ppo_return=ppo_mean, normaliser_ppo=ppo_seeds, normaliser_zero=zero_seeds, excluded_from_aggregate=excluded,
        tuning=env_result["tuning"], time_s=round(env_result["time_s"], 1), methods=methods, vs_ppo=vs_ppo)


def versus_ppo(x: np.ndarray, ppo: np.ndarray, reps: int = BOOTSTRAP_REPS, seed: int = 0) -> VersusPPO:
    """A method's values x [S] against PPO's [S] on one environment, raw: the paired mean difference
    (same evaluation seeds) with its t-interval, and P(x > PPO) with its bootstrap interval (NaN
    where no seed is finite: every seed of both diverged)."""
    ok = np.isfinite(x) & np.isfinite(ppo)
    if not ok.any():
        return VersusPPO(Estimate(None, None, None), Estimate(None, None, None))
    diff = Estimate(*(None if not np.isfinite(v) else v for v in stats.mean_ci(x[ok] - ppo[ok], CONFIDENCE)))
    return VersusPPO(diff, _poi(x[ok][:, None], ppo[ok][:, None], reps, seed))


def _mean_or_none(values: np.ndarray) -> float | None:
    return float(values.mean()) if np.isfinite(values).all() else None


def _poi(x, y, reps: int, seed: int) -> Estimate:
    return Estimate(*map(float, stats.probability_of_improvement_ci(x, y, reps, CONFIDENCE, seed)))


def _ci(triple) -> Estimate:
    return Estimate(*map(float, triple))


def aggregate(envs: dict[str, EnvResult], labels: list[str], reps: int = BOOTSTRAP_REPS,
              seed: int = 0) -> dict[str, Aggregate]:
    """IQM, mean and probabilities of improvement over the held-out and the meta-train envs, apart
    -> {group: Aggregate}."""
    usable = [e for e, r in envs.items() if r.excluded_from_aggregate is None]
    groups = {
        "held_out": [e for e in usable if "meta-train" not in envs[e].flags],
        "meta_train": [e for e in usable if "meta-train" in envs[e].flags],
    }
    out = {}
    for group, names in groups.items():
        if not names:
            out[group] = Aggregate(envs=())
            continue

        def stack(get):
            return np.stack([np.asarray(get(envs[e]), np.float64) for e in names], axis=1)  # [S, tasks]

        ref, zero = stack(lambda r: r.normaliser_ppo), stack(lambda r: r.normaliser_zero)
        raw = {m: stack(lambda r, m=m: r.methods[m].scores) for m in labels}
        norm = {m: stack(lambda r, m=m: r.methods[m].normalized) for m in labels}
        # P(row > column) for every ordered pair: a discovered objective against its controls
        # (RUN_DIR:init, a PPO variant), not only against PPO and DPO.
        pairwise = {m: {n: _poi(norm[m], norm[n], reps, seed) for n in labels if n != m} for m in labels}
        methods = {}
        for m in labels:
            methods[m] = AggregateScores(
                iqm=_ci(stats.normalized_ci(raw[m], ref, zero, stats.iqm, reps, CONFIDENCE, seed)),
                mean=_ci(stats.normalized_ci(raw[m], ref, zero, stats.mean, reps, CONFIDENCE, seed)),
                poi_vs={r: pairwise[m].get(r) or _poi(norm[m], norm[r], reps, seed) for r in REFERENCES})
        out[group] = Aggregate(envs=tuple(names), methods=methods, pairwise=pairwise)
    return out


def reading(poi: Estimate) -> str:
    """Words for a probability-of-improvement interval: "better" only when the whole interval is
    above 0.5, "worse" only when it is below; otherwise it includes 0.5."""
    low, high = poi.low, poi.high
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return "no interval (too few seeds)"
    if low > 0.5:
        return "better: the whole 95% interval is above 0.5"
    if high < 0.5:
        return "worse: the whole 95% interval is below 0.5"
    return "not distinguishable: the 95% interval includes 0.5"


def notes(envs: dict[str, EnvResult], protocol: Protocol, jobs: list[EnvJob], tune_lr: bool,
          lr: float | None = None) -> list[str]:
    """What a reader must know to read the numbers: exclusions, weak normalisers, divergences,
    training scores that are the initial evaluation (no episode ended), and methods left at the
    preset learning rate (or `lr`, when none is given) on a short budget."""
    out = []
    for name, r in envs.items():
        if r.excluded_from_aggregate:
            out.append(f"{name}: {r.excluded_from_aggregate}.")
        for m, e in r.methods.items():
            if e.diverged or e.nonfinite:
                out.append(f"{name}: {m} diverged in {e.diverged} of {len(e.scores)} seeds; {e.nonfinite} "
                           "seeds (diverged or non-finite) are scored as the worst finite seed of any method on this "
                           "environment, as meta-training ranks a diverged member.")
        none_ended = _no_episode_note(r, protocol)
        if none_ended:
            out.append(f"{name}: {none_ended}")
    short = [j.name for j in jobs if j.budget < preset_for(j.name).total_timesteps]
    if short and not tune_lr and lr is None:
        out.append(
            "every method ran at the preset's learning rate on budgets below the preset's "
            f"({', '.join(short)}); at short budgets the learning rate moves the return more than the objective "
            "does: rerun with --tune-lr (tune_lr=True) or --protocol discogen to score each method at its own "
            "tuned rate."
        )
    return out


def _no_episode_note(env: EnvResult, protocol: Protocol) -> str | None:
    """The note for an environment where some method's runs ended no training episode, or None."""
    methods = {m: (e.no_episode_ended, len(e.scores)) for m, e in env.methods.items() if e.no_episode_ended}
    if not methods:
        return None
    if all(k == n for k, n in methods.values()):
        who = f"any seed of {', '.join(methods)}"
    else:
        who = ", ".join(f"{k} of {n} seeds of {m}" for m, (k, n) in methods.items())
    columns = f'"training, last {protocol.tail:.0%}" and "auc"'
    if scores.score_of(protocol.score).needs == "curve":
        columns += " (and so the score)"
    return (f"no training episode ended in {who} within the budget of {env.budget:,} steps: there {columns} "
            "are the initial policy's evaluation, not a return of training (the learning curve holds it until an "
            "episode ends); the final policy's evaluation is unaffected.")

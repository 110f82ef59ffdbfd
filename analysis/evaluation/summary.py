"""The statistics of an evaluation, from the raw returns of every method on every environment.

Per environment: the mean final return with a Student-t 95% interval, and scores normalised by
PPO, (score - init) / (ppo - init) with init = PPO's mean first-update return and ppo = PPO's
mean final return (0 = the initial policy, 1 = PPO). Across environments: the IQM and mean of
normalised scores with stratified-bootstrap 95% intervals and the probability of improvement
over PPO and DPO (and ppo_tuned), held-out and meta-train environments apart.

An environment where PPO's mean final return does not exceed its initial return ("ppo-flat") has
no usable normaliser: its raw returns are reported but it is left out of both aggregates.
"ppo-weak" marks one where PPO's 95% interval still includes the initial return (kept, flagged).
"""

from __future__ import annotations

import itertools

import numpy as np

from analysis import stats
from analysis.evaluation.plan import TUNED, EnvJob
from inner_loops import preset_for, preset_name

__all__ = ["CONFIDENCE", "BOOTSTRAP_REPS", "env_stats", "aggregate", "notes"]

BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95


def _finite_or(x: np.ndarray, fill: float) -> np.ndarray:
    return np.where(np.isfinite(x), x, fill)


def env_stats(job: EnvJob, labels: list[str], env_result: dict) -> dict:
    """One environment's entry of the results: flags, normaliser, and per method its final
    returns, interval, normalised scores and learning-curve band. `env_result` is
    {"runs": {label: {"returns" [S, U], "final" [S], "diverged" [S]}}, "tuning", "time_s"}."""
    runs = env_result["runs"]
    ppo = runs["ppo"]
    init = float(np.nanmean(ppo["returns"][:, 0]))
    ppo_final = float(np.nanmean(ppo["final"]))
    flags = []
    if job.meta_train_for:
        flags.append("meta-train")
    flat = not (ppo_final - init > 0)
    if flat:
        flags.append("ppo-flat")
    elif len(ppo["final"]) > 1 and stats.mean_ci(_finite_or(ppo["final"], init), CONFIDENCE)[1] <= init:
        flags.append("ppo-weak")
    excluded = None
    if flat:
        excluded = (f"PPO's mean final return ({ppo_final:.4g}) does not exceed its initial return ({init:.4g}): "
                    "no normaliser, so this environment is left out of the aggregates")
    methods = {}
    for label in labels:
        run = runs[label]
        final = run["final"]
        nonfinite = int((~np.isfinite(final)).sum())
        clean = _finite_or(final, init)  # a non-finite final return counts as the initial policy's
        mean, low, high = stats.mean_ci(clean, CONFIDENCE)
        entry = {
            "final_returns": clean, "mean": mean, "ci_low": low, "ci_high": high,
            "diverged": int(run["diverged"].sum()), "nonfinite": nonfinite,
            "normalized": None, "norm_mean": None, "norm_ci_low": None, "norm_ci_high": None,
        }
        if not flat:
            norm = np.asarray(stats.normalize_score(clean, ppo_final, init), np.float64)
            entry["normalized"] = norm
            entry["norm_mean"], entry["norm_ci_low"], entry["norm_ci_high"] = stats.mean_ci(norm, CONFIDENCE)
        curves = np.where(np.isfinite(run["returns"]), run["returns"], np.nan)
        band = stats.t_interval(curves, CONFIDENCE)
        entry["curve"] = {"mean": band[0], "low": band[1], "high": band[2], "seeds": curves}
        methods[label] = entry
    return {
        "flags": flags,
        "meta_train_for": list(job.meta_train_for),
        "family": preset_name(job.name),
        "budget": job.budget,
        "num_updates": job.config.num_updates,
        "steps_per_update": job.config.batch_size,
        "init_return": init,
        "ppo_return": ppo_final,
        "excluded_from_aggregate": excluded,
        "tuning": env_result["tuning"],
        "time_s": round(env_result["time_s"], 1),
        "methods": methods,
    }


def _poi(x, y, reps: int) -> dict:
    point, low, high = stats.probability_of_improvement_ci(x, y, reps, CONFIDENCE)
    return {"point": point, "low": low, "high": high}


def aggregate(envs: dict, labels: list[str], reps: int = BOOTSTRAP_REPS) -> dict:
    """IQM, mean and probabilities of improvement over the held-out and the meta-train envs, apart.
    `envs` is {name: env_stats(...)}."""
    usable = [e for e, r in envs.items() if r["excluded_from_aggregate"] is None]
    groups = {
        "held_out": [e for e in usable if "meta-train" not in envs[e]["flags"]],
        "meta_train": [e for e in usable if "meta-train" in envs[e]["flags"]],
    }
    out = {}
    for group, names in groups.items():
        if not names:
            out[group] = {"envs": [], "methods": None}
            continue
        scores = {m: np.stack([envs[e]["methods"][m]["normalized"] for e in names], axis=1) for m in labels}
        summary = stats.summarize(scores, baseline="ppo", reps=reps, confidence=CONFIDENCE)
        methods = {}
        for m in labels:
            entry = {"iqm": summary[m]["iqm"], "mean": summary[m]["mean"], "poi_vs_ppo": summary[m]["prob_improvement"]}
            for ref in ("dpo", TUNED):
                if ref in scores:
                    entry[f"poi_vs_{ref}"] = _poi(scores[m], scores[ref], reps)
            methods[m] = entry
        # P(row > column) for every ordered pair: a discovered objective against its controls
        # (RUN_DIR:init, a PPO variant), not only against PPO and DPO.
        pairwise = {m: {} for m in labels}
        for m, n in itertools.permutations(labels, 2):
            pairwise[m][n] = _poi(scores[m], scores[n], reps)
        out[group] = {"envs": names, "methods": methods, "pairwise": pairwise}
    return out


def notes(results: dict, jobs: list[EnvJob], tune_lr: bool) -> list[str]:
    """What a reader must know to read the numbers: exclusions, weak normalisers, divergences,
    and a PPO left at its preset learning rate on a short budget."""
    out = []
    for name, r in results["envs"].items():
        if r["excluded_from_aggregate"]:
            out.append(f"{name}: {r['excluded_from_aggregate']}.")
        if "ppo-weak" in r["flags"]:
            out.append(f"{name}: PPO's 95% interval includes its initial return; normalised scores there are noisy.")
        for m, e in r["methods"].items():
            if e["diverged"] or e["nonfinite"]:
                out.append(f"{name}: {m} diverged in {e['diverged']} of {len(e['final_returns'])} seeds "
                           f"({e['nonfinite']} non-finite final returns counted as the initial return).")
    short = [j.name for j in jobs if j.budget < preset_for(j.name).total_timesteps]
    if short and not tune_lr and results["settings"].get("lr") is None:
        out.append(
            "PPO ran at its preset learning rate on budgets below the preset's "
            f"({', '.join(short)}); at short budgets PPO's learning rate moves its return more than the objective "
            "does: rerun with --tune-lr (tune_lr=True) for a PPO whose learning rate suits the budget."
        )
    return out

"""Running an evaluation: every method on every environment, the same seeds for all of them.

Every method (the targets, plus PPO and DPO as references) trains on each environment with that
environment's PPO preset, the same budget and the same seeds (common random numbers): one jitted
program per environment x objectives structure, vmapped over seeds and split over the local
devices. With `tune_lr`, PPO also trains over a learning-rate grid (LR_FACTORS x the preset's) on
separate tuning seeds, and "ppo_tuned" (PPO at the best learning rate) is evaluated on the
evaluation seeds: at short budgets PPO's learning rate moves its return more than any objective
does, so a fair comparison needs a PPO whose learning rate suits the budget.
"""

from __future__ import annotations

import datetime
import math
import sys
import time
from collections.abc import Sequence

import jax
import numpy as np

from analysis import suites
from analysis.evaluation import summary
from analysis.evaluation.plan import LR_FACTORS, TUNED, EnvJob, Method, plan
from analysis.evaluation.programs import Programs, hparams, mesh
from analysis.suites import EvaluationError
from analysis.targets import builtin, full_params
from inner_loops import PPOConfig, preset_name
from meta_objectives.fileio import to_jsonable

__all__ = ["FORMAT", "VERSION", "evaluate"]

FORMAT = "metadisco.evaluation"
VERSION = 1


def evaluate(
    targets,
    envs: Sequence[str] | str | None = None,
    seeds: int | None = None,
    budget: int | dict | None = None,
    tune_lr: bool = False,
    quick: bool = False,
    progress: bool = True,
    suite: str | None = None,
    seed: int = 0,
    lr_factors: Sequence[float] = LR_FACTORS,
    bootstrap_reps: int = summary.BOOTSTRAP_REPS,
    lr: float | None = None,
    inner: dict | None = None,
    programs: Programs | None = None,
) -> dict:
    """Train every method on every environment and compute the statistics -> results dict.

    targets: Target objects or specs for `resolve_target`. envs: names (or a comma-separated
    string); None takes the suite (`suite`, else "quick" if `quick` else "default"). seeds:
    evaluation seeds per method and environment (default DEFAULT_SEEDS). budget: total timesteps
    per run for every environment (an int), per environment (a dict), or None for the BUDGETS
    table ("quick" scale if `quick` or suite == "quick"). tune_lr: also report "ppo_tuned".
    lr: one learning rate for every method (default: each preset's), e.g. the one a run was
    meta-trained with (its inner.lr), so the comparison is made where the objective was found.
    inner: PPOConfig overrides for every environment (e.g. a run's CPU-sized
    {"num_envs": 64, "num_steps": 16, "hidden": (64, 64)}), applied to each preset.
    programs: the compiled-program cache to use (default: a new one for this evaluation).
    Every input error raises EvaluationError before anything compiles. The result is plain JSON
    (NaN as None; see `analysis.evaluation.render.save`).
    """
    seeds = suites.DEFAULT_SEEDS if seeds is None else seeds
    programs = Programs() if programs is None else programs
    methods, jobs, suite, scale = plan(targets, programs, envs, seeds, budget, tune_lr, quick, suite, lr_factors,
                                       lr, inner)
    root = jax.random.key(seed)
    eval_keys = jax.random.split(jax.random.fold_in(root, 0), seeds)
    tune_keys = jax.random.split(jax.random.fold_in(root, 1), seeds)
    _check_traces(programs, methods, jobs, eval_keys)

    from tqdm.auto import tqdm

    if progress:
        runs_per_env = len(methods) + (len(lr_factors) + 1 if tune_lr else 0)
        steps = sum(j.config.steps_per_run for j in jobs) * seeds * runs_per_env
        tqdm.write(f"evaluate: {len(methods)} methods ({', '.join(m.label for m in methods)}"
                   f"{', ppo lr grid' if tune_lr else ''}) x {len(jobs)} environments x {seeds} seeds: "
                   f"{steps:.3g} environment steps in all", file=sys.stderr)

    env_results: dict[str, dict] = {}
    started = time.time()
    bar = tqdm(jobs, desc="evaluate", unit="env", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    for job in bar:
        t0 = time.time()
        runs: dict[str, dict] = {}
        hp = hparams(job.config)
        for m in methods:
            bar.set_postfix_str(f"{job.name}: {m.label}")
            runs[m.label] = _run(programs.get(job.env, job.config, m.objectives, seeds), eval_keys, m.params, hp)
        tuning = None
        if tune_lr:
            bar.set_postfix_str(f"{job.name}: ppo lr grid")
            tuning, runs[TUNED] = _tune(programs, job, seeds, lr_factors, tune_keys, eval_keys, runs["ppo"])
        env_results[job.name] = {"runs": runs, "tuning": tuning, "time_s": time.time() - t0}
    bar.close()

    labels = [m.label for m in methods] + ([TUNED] if tune_lr else [])
    roles = {m.label: m.role for m in methods} | ({TUNED: "reference"} if tune_lr else {})
    results = {
        "format": FORMAT,
        "version": VERSION,
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "settings": {
            "envs": [j.name for j in jobs],
            "suite": suite,
            "scale": scale,
            "quick": bool(quick),
            "seeds": int(seeds),
            "seed": int(seed),
            "tuning_seeds": int(seeds) if tune_lr else 0,
            "budgets": {j.name: j.budget for j in jobs},
            "steps_per_run": {j.name: j.config.steps_per_run for j in jobs},
            "presets": {j.name: {"family": preset_name(j.name), "config": _config_dict(j.config)} for j in jobs},
            "tune_lr": bool(tune_lr),
            "lr": None if lr is None else float(lr),
            "inner": {k: list(v) if isinstance(v, tuple) else v for k, v in (inner or {}).items()},
            "lr_factors": [float(f) for f in lr_factors] if tune_lr else None,
            "lr_grid": ({j.name: [float(f) * float(j.config.hparams.lr) for f in lr_factors] for j in jobs}
                        if tune_lr else None),
            "bootstrap_reps": int(bootstrap_reps),
            "confidence": summary.CONFIDENCE,
            "devices": int(mesh(seeds).devices.size),
            "jax_version": jax.__version__,
        },
        "targets": [
            {"label": m.label, "role": m.role, "meta_train_envs": list(m.meta_train_envs),
             "objectives": m.objectives.spec()}
            for m in methods if m.role != "reference"
        ],
        "methods": [{"label": label, "role": roles[label]} for label in labels],
        "envs": {job.name: summary.env_stats(job, labels, env_results[job.name]) for job in jobs},
        "aggregate": {},
        "notes": [],
        "time_s": None,
    }
    results["aggregate"] = summary.aggregate(results["envs"], labels, bootstrap_reps)
    results["notes"] = summary.notes(results, jobs, tune_lr)
    results["time_s"] = round(time.time() - started, 1)
    return to_jsonable(results)


def _check_traces(programs: Programs, methods: list[Method], jobs: list[EnvJob], keys) -> None:
    """Trace every target's program (no compile) so that any other misfit fails before compute."""
    for job in jobs:
        for m in methods:
            if m.role != "target":
                continue
            try:
                program = programs.get(job.env, job.config, m.objectives, len(keys))
                program.eval_shape(keys, m.params, hparams(job.config))
            except Exception as e:  # noqa: BLE001  (any failure to build the program is a misfit)
                raise EvaluationError(
                    f"target {m.label!r} cannot train on {job.name}: {type(e).__name__}: {str(e)[:500]}"
                ) from None


def _run(program, keys, params, hp) -> dict:
    result = jax.device_get(program(keys, params, hp))
    return {
        "returns": np.asarray(result.returns, np.float64),  # [..., S, U]
        "final": np.asarray(result.final_return, np.float64),  # [..., S]
        "diverged": np.asarray(result.diverged, bool),
    }


def _tune(programs: Programs, job: EnvJob, seeds: int, lr_factors, tune_keys, eval_keys, ppo_run: dict):
    """PPO over the learning-rate grid on the tuning seeds; the best one on the evaluation seeds."""
    objectives = builtin("ppo")
    params = full_params(objectives)
    base_lr = float(job.config.hparams.lr)
    lrs = [float(f) * base_lr for f in lr_factors]
    hp = hparams(job.config)
    grid_hp = jax.tree.map(lambda x: np.full((len(lrs),), x, np.float32), hp).replace(lr=np.asarray(lrs, np.float32))
    grid = _run(programs.get(job.env, job.config, objectives, seeds, grid=len(lrs)), tune_keys, params, grid_hp)
    final = grid["final"]  # [G, S]
    score = np.where(np.isfinite(final), final, -np.inf).mean(1)
    best = int(np.argmax(score))
    if math.isclose(float(lr_factors[best]), 1.0):
        tuned = ppo_run  # the preset's learning rate won: same program, same seeds, same numbers
    else:
        program = programs.get(job.env, job.config, objectives, seeds)
        tuned = _run(program, eval_keys, params, hparams(job.config, lr=lrs[best]))
    tuning = {
        "lrs": lrs, "factors": [float(f) for f in lr_factors],
        "tuning_mean_final": [float(x) for x in np.nanmean(np.where(np.isfinite(final), final, np.nan), 1)],
        "best_lr": lrs[best], "best_factor": float(lr_factors[best]),
    }
    return tuning, tuned


def _config_dict(config: PPOConfig) -> dict:
    d = {k: getattr(config, k) for k in config.__dataclass_fields__ if k != "hparams"}
    d["hidden"] = list(config.hidden)
    d.update({k: float(getattr(config.hparams, k)) for k in config.hparams.__dataclass_fields__})
    d.update({"num_updates": config.num_updates, "batch_size": config.batch_size})
    return d

"""Running an evaluation: every method on every environment, the same seeds for all of them.

Every method (the targets, plus PPO and DPO as references) trains on each environment with that
environment's PPO preset, the same budget and the same seeds (common random numbers): one jitted
program per environment x objectives structure, vmapped over seeds and split over the local
devices. A protocol that tunes (`--tune-lr`, `--protocol discogen`) first trains EVERY method over
its learning-rate grid on tuning seeds disjoint from the evaluation seeds, then scores each one at
its own best rate on the evaluation seeds: at short budgets the learning rate moves the return
more than any objective does, so a comparison at one shared rate mixes the objective's effect
with the rate's. PPO at its tuned rate is then the normaliser.
"""

from __future__ import annotations

import datetime
import sys
import time
from collections.abc import Callable, Sequence

import jax
import numpy as np

from metadisco.analysis import suites
from metadisco.analysis.evaluation import summary
from metadisco.analysis.evaluation.plan import EnvJob, Method, Plan, plan
from metadisco.analysis.evaluation.programs import Programs, hparams, mesh
from metadisco.analysis.evaluation.protocol import Protocol, resolve_protocol
from metadisco.analysis.evaluation.results import Evaluation, MethodEntry, Settings, TargetEntry, Tuning
from metadisco.analysis.suites import EvaluationError
from metadisco.core import scores, streams
from metadisco.inner_loops import PPOConfig, preset_name

__all__ = ["evaluate"]


def planned(targets, envs=None, seeds=None, budget=None, tune_lr=False, quick=False, suite=None, lr_factors=None,
            lr=None, inner=None, programs: Programs | None = None, protocol: str | Protocol = "default",
            **_run_only) -> tuple[Protocol, Plan, int]:
    """What `evaluate` with these arguments would train, checked, before anything compiles: (the protocol, the
    plan of every method and environment, the seeds). EvaluationError where an input is refused (`plan`)."""
    seeds = suites.DEFAULT_SEEDS if seeds is None else seeds
    protocol = resolve_protocol(protocol, tune_lr, lr_factors)
    programs = Programs() if programs is None else programs
    return protocol, plan(targets, programs, protocol, envs, seeds, budget, quick, suite, lr, inner), seeds


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
    lr_factors: Sequence[float] | None = None,
    bootstrap_reps: int = summary.BOOTSTRAP_REPS,
    lr: float | None = None,
    inner: dict | None = None,
    programs: Programs | None = None,
    protocol: str | Protocol = "default",
    log: Callable[[str], None] | None = None,
) -> Evaluation:
    """Train every method on every environment and compute the statistics -> Evaluation (the
    record results.json holds: metadisco.analysis.evaluation.results).

    targets: Target objects or specs for `resolve_target`. envs: names (or a comma-separated
    string); None takes the suite (`suite`, else "quick" if `quick` else "default"). seeds:
    evaluation seeds per method and environment (default DEFAULT_SEEDS). budget: total timesteps
    per run for every environment (an int), per environment (a dict), or None for the BUDGETS
    table ("quick" scale if `quick` or suite == "quick"). protocol: a name of PROTOCOLS or a
    Protocol (scores, learning-rate grid, tuning seeds). tune_lr: tune every method's learning
    rate over LR_FACTORS (or `lr_factors`) x the base rate. lr: the base learning rate for every
    method (default: each preset's), e.g. the one a run was meta-trained with (its inner.lr).
    inner: PPOConfig overrides for every environment (e.g. a run's CPU-sized
    {"num_envs": 64, "num_steps": 16, "hidden": (64, 64)}), applied to each preset.
    bootstrap_reps: replicates of every bootstrap interval (drawn from `seed`).
    programs: the compiled-program cache to use (default: a new one for this evaluation).
    log: called with one line per method and environment as each finishes (its rate, its mean
    score, the minutes it took): what a run without a progress bar shows (`--no-progress`).
    Every input error raises EvaluationError before anything compiles.
    """
    if int(bootstrap_reps) != bootstrap_reps or bootstrap_reps < 1:
        raise EvaluationError(f"bootstrap replicates must be a positive integer, got {bootstrap_reps!r}")
    programs = Programs() if programs is None else programs
    protocol, (methods, jobs, suite, scale), seeds = planned(
        targets, envs, seeds, budget, tune_lr, quick, suite, lr_factors, lr, inner, programs, protocol)
    tuning_seeds = (protocol.tuning_seeds or seeds) if protocol.lr_factors else 0
    eval_keys = jax.random.split(streams.key(seed, streams.Stream.EVALUATION, 0), seeds)
    tune_keys = jax.random.split(streams.key(seed, streams.Stream.EVALUATION, 1), max(tuning_seeds, 1))
    _check_traces(programs, methods, jobs, eval_keys)

    from tqdm.auto import tqdm

    if progress:
        steps = sum(j.config.steps_per_run for j in jobs) * len(methods) * (
            seeds + tuning_seeds * len(protocol.lr_factors))
        tqdm.write(f"evaluate: {len(methods)} methods ({', '.join(m.label for m in methods)}) x {len(jobs)} "
                   f"environments x {seeds} seeds"
                   + (f", each method's learning rate tuned over {len(protocol.lr_factors)} rates x "
                      f"{tuning_seeds} tuning seeds" if tuning_seeds else "")
                   + f": {steps:.3g} environment steps in all", file=sys.stderr)

    env_results: dict[str, dict] = {}
    started = time.time()
    bar = tqdm(jobs, desc="evaluate", unit="env", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    for job in bar:
        programs.release(keep=job.env.name)  # bounded memory mappings, however many environments
        t0 = time.time()
        runs: dict[str, dict] = {}
        tuning: dict[str, Tuning] = {}
        for m in methods:
            rate = float(job.config.hparams.lr)
            if protocol.lr_factors:
                bar.set_postfix_str(f"{job.name}: {m.label} lr grid")
                tuning[m.label] = _tune(programs, job, m, protocol, tune_keys)
                rate = tuning[m.label].best_lr
            bar.set_postfix_str(f"{job.name}: {m.label}")
            objectives, params = m.program
            program = programs.get(job.env, job.config, objectives, seeds)
            runs[m.label] = _run(program, eval_keys, params, hparams(job.config, lr=rate)) | {"lr": rate}
            if log is not None:
                mean = np.nanmean(scores.value(runs[m.label], protocol.score, protocol.tail))
                log(f"{job.name}: {m.label} at lr {rate:.3g}: {protocol.score} {mean:.4g} over {seeds} seeds "
                    f"({(time.time() - t0) / 60:.1f} min into this environment)")
        env_results[job.name] = {"runs": runs, "tuning": tuning or None, "time_s": time.time() - t0}
    bar.close()

    labels = [m.label for m in methods]
    settings = Settings(
        envs=tuple(j.name for j in jobs), suite=suite, scale=scale, quick=bool(quick), seeds=int(seeds), seed=int(seed),
        protocol=protocol, score_meaning=protocol.describe(), score=protocol.score, tuning_seeds=int(tuning_seeds),
        budgets={j.name: j.budget for j in jobs}, steps_per_run={j.name: j.config.steps_per_run for j in jobs},
        presets={j.name: {"family": preset_name(j.name), "config": _config_dict(j.config)} for j in jobs},
        tune_lr=bool(protocol.lr_factors), lr=None if lr is None else float(lr),
        inner={k: list(v) if isinstance(v, tuple) else v for k, v in (inner or {}).items()},
        lr_factors=tuple(protocol.lr_factors) or None,
        lr_grid=({j.name: tuple(f * float(j.config.hparams.lr) for f in protocol.lr_factors) for j in jobs}
                 if protocol.lr_factors else None),
        bootstrap_reps=int(bootstrap_reps), confidence=summary.CONFIDENCE,
        devices=int(mesh(seeds, programs.devices).devices.size),
        jax_version=jax.__version__)
    envs = {job.name: summary.env_stats(job, labels, env_results[job.name], protocol, bootstrap_reps, seed)
            for job in jobs}
    return Evaluation(
        created=datetime.datetime.now().isoformat(timespec="seconds"),
        settings=settings,
        targets=tuple(TargetEntry(m.label, m.role, tuple(m.meta_train_envs), m.objectives.spec())
                      for m in methods if m.role != "reference"),
        methods=tuple(MethodEntry(m.label, m.role, m.through[0] if m.through else None) for m in methods),
        envs=envs,
        aggregate=summary.aggregate(envs, labels, bootstrap_reps, seed),
        notes=tuple(summary.notes(envs, protocol, jobs, bool(protocol.lr_factors), settings.lr)),
        time_s=round(time.time() - started, 1),
    )


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


# The arrays of a TrainResult an evaluation keeps (metadisco.core.scores reads them by these names).
RUN_ARRAYS = ("returns", "eval_return", "eval_return_greedy", "init_eval_return", "init_eval_return_greedy")


def _run(program, keys, params, hp) -> dict:
    """{name: array} of the TrainResult of `program` on seeds `keys`: returns [..., S, U], the
    others [..., S] (float64), diverged [..., S] bool."""
    result = jax.device_get(program(keys, params, hp))
    return {name: np.asarray(getattr(result, name), np.float64) for name in RUN_ARRAYS} | {
        "diverged": np.asarray(result.diverged, bool)}


def _tune(programs: Programs, job: EnvJob, method: Method, protocol: Protocol, keys) -> Tuning:
    """`method` over the protocol's learning-rate grid on the tuning seeds `keys` -> the grid, its
    mean `select` score per rate (a diverged or non-finite seed ties the worst finite seed of the grid:
    scores.at_worst), the best."""
    base = float(job.config.hparams.lr)
    lrs = [f * base for f in protocol.lr_factors]
    hp = hparams(job.config)
    grid_hp = jax.tree.map(lambda x: np.full((len(lrs),), x, np.float32), hp).replace(lr=np.asarray(lrs, np.float32))
    objectives, params = method.program
    program = programs.get(job.env, job.config, objectives, len(keys), grid=len(lrs))
    run = _run(program, keys, params, grid_hp)
    values = scores.value(run, protocol.select, protocol.tail)  # [G, S]
    means = scores.at_worst(values, run["diverged"] | ~np.isfinite(values), none_finite=-np.inf).mean(1)
    best = best_rate(means, protocol.lr_factors)
    return Tuning(lrs=tuple(lrs), factors=tuple(protocol.lr_factors), select=protocol.select,
                  mean_scores=tuple(float(x) if np.isfinite(x) else None for x in means),
                  best_lr=lrs[best], best_factor=float(protocol.lr_factors[best]),
                  tied=bool(np.all(means == means[best])) and len(means) > 1)


def best_rate(means, factors) -> int:
    """The index of the best mean score [G] over the grid `factors` [G]; among equal best scores the
    factor nearest the base rate (x1) in log scale, the lower one first. A grid that ties everywhere
    (a training score where no episode ended, so every rate scores the initial policy) gives the base
    rate, not the grid's first."""
    means = np.asarray(means, float)
    tied = np.flatnonzero(means == means.max())
    return int(min(tied, key=lambda i: (abs(np.log(factors[i])), factors[i])))


def _config_dict(config: PPOConfig) -> dict:
    d = {k: getattr(config, k) for k in config.__dataclass_fields__ if k != "hparams"}
    d["hidden"] = list(config.hidden)
    d.update({k: float(getattr(config.hparams, k)) for k in config.hparams._fields})
    d.update({"num_updates": config.num_updates, "batch_size": config.batch_size})
    return d

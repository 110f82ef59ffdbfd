"""Held-out evaluation: discovered objectives against PPO and DPO on environments of your choice.

    targets = [resolve_target("runs/lpo-cartpole-20261101-120000"), resolve_target("dpo")]
    results = evaluate(targets, envs=["Acrobot-v1", "Catch-bsuite"], seeds=8)
    out = save(results, default_out_dir(targets))   # results.json/csv/md, curves.png/pdf
    print(to_markdown(results))

A TARGET is "ppo" or "dpo" (built-in baselines), an objectives JSON file (an exported closed
form, a run's objectives/best.json), or a run directory (its objectives/mean.json; RUN_DIR:best
picks best.json). Every method (the targets, plus PPO and DPO as references) trains on each
environment with that environment's PPO preset (`inner_loops.preset_for`), the same budget and
the same seeds (common random numbers): one jitted program per environment x objectives
structure, vmapped over seeds and split over the local devices. With `tune_lr`, PPO is also
trained over a learning-rate grid (`LR_FACTORS` x the preset's) on separate tuning seeds, and
"ppo_tuned" (PPO at the best learning rate) is evaluated on the evaluation seeds: at short
budgets PPO's learning rate moves its return more than any objective does, so a fair comparison
needs a PPO whose learning rate suits the budget.

Statistics (analysis.stats): per environment the mean final return with a Student-t 95%
interval; scores normalised per environment by PPO, (score - init) / (ppo - init) with init =
PPO's mean first-update return and ppo = PPO's mean final return (0 = the initial policy,
1 = PPO); across environments the IQM and mean of normalised scores with stratified-bootstrap
95% intervals, and the probability of improvement over PPO and over DPO (and over ppo_tuned).

Environments a target was meta-trained on are flagged "meta-train" and aggregated separately,
never mixed into the held-out aggregate. An environment where PPO's mean final return does not
exceed its initial return ("ppo-flat") has no usable normaliser: its raw returns are reported
but it is left out of both aggregates. "ppo-weak" marks one where PPO's 95% interval still
includes the initial return (its normalised scores are noisy; kept, flagged).

Suites and budgets (environment steps per training run; total_timesteps of the preset):

| suite   | environment           | preset  | budget     | note                              |
|---------|-----------------------|---------|------------|-----------------------------------|
| quick   | CartPole-v1           | classic | 50,000     | CPU-sized: a few minutes on 2     |
| quick   | Acrobot-v1            | classic | 50,000     | cores, 8 seeds, 3 methods         |
| quick   | Catch-bsuite          | classic | 50,000     |                                   |
| default | CartPole-v1           | classic | 500,000    | PureJaxRL's CartPole budget       |
| default | Acrobot-v1            | classic | 500,000    |                                   |
| default | Breakout-MinAtar      | minatar | 10,000,000 | the budget of the published PPO   |
| default | SpaceInvaders-MinAtar | minatar | 10,000,000 | normalisers (REFERENCE.md)        |
| default | Asterix-MinAtar       | minatar | 10,000,000 |                                   |
| default | brax/hopper           | brax    | 5,000,000  | 1/10 of PureJaxRL's Brax budget   |
| default | brax/ant              | brax    | 5,000,000  | (LPO meta-trained Ant at 3e7)     |

"default" is accelerator-sized (hours on a 2-core CPU). Environments outside the table get
their family's budget (`FAMILY_BUDGETS`; quick scale when `quick=True`). MountainCar-v0 and
Pendulum-v1 are left out of "quick": PPO does not move off its initial return there within
5e4 steps, so they have no normaliser at that budget.
"""

from __future__ import annotations

import csv
import datetime
import io
import itertools
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from scipy import stats as _st

from analysis import stats
from inner_loops import Env, PPOConfig, check_env_name, make_env, preset_for, preset_name
from inner_loops.ppo import make_train
from meta_objectives import DPO, ObjectiveFileError, Objectives, PotentialShaping, load_objectives

__all__ = [
    "SUITES", "BUDGETS", "FAMILY_BUDGETS", "LR_FACTORS", "DEFAULT_SEEDS", "REFERENCES",
    "EvaluationError", "Target", "resolve_target", "evaluate", "save", "default_out_dir",
    "check_out_dir", "to_markdown", "curves_figure",
]

FORMAT = "metadisco.evaluation"
VERSION = 1

SUITES: dict[str, list[str]] = {
    "quick": ["CartPole-v1", "Acrobot-v1", "Catch-bsuite"],
    "default": [
        "CartPole-v1", "Acrobot-v1", "Breakout-MinAtar", "SpaceInvaders-MinAtar", "Asterix-MinAtar",
        "brax/hopper", "brax/ant",
    ],
}
# Environment steps per training run, by scale ("quick" = CPU-sized) and environment.
BUDGETS: dict[str, dict[str, int]] = {
    "quick": {"CartPole-v1": 50_000, "Acrobot-v1": 50_000, "Catch-bsuite": 50_000},
    "default": {
        "CartPole-v1": 500_000, "Acrobot-v1": 500_000,
        "Breakout-MinAtar": 10_000_000, "SpaceInvaders-MinAtar": 10_000_000, "Asterix-MinAtar": 10_000_000,
        "brax/hopper": 5_000_000, "brax/ant": 5_000_000,
    },
}
# Budgets of environments outside BUDGETS, by preset family (inner_loops.preset_name).
FAMILY_BUDGETS: dict[str, dict[str, int]] = {
    "quick": {"classic": 50_000, "minatar": 500_000, "brax": 204_800},
    "default": {"classic": 500_000, "minatar": 10_000_000, "brax": 5_000_000},
}
LR_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)
DEFAULT_SEEDS = 8
REFERENCES = ("ppo", "dpo")
TUNED = "ppo_tuned"
BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95


class EvaluationError(ValueError):
    """Bad input to an evaluation (the message says what is wrong and what to do)."""


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------


class Target(NamedTuple):
    """A method to evaluate: objectives (structure) with their full parameters."""

    label: str
    objectives: Objectives
    params: dict  # full meta-params, keyed by plug point
    meta_train_envs: tuple[str, ...]  # environments it was meta-trained on (flagged, never held out)
    source: str  # "builtin" | "file" | "run"
    spec: str  # as given
    run_dir: str | None = None  # the run it came from: a run-directory target, or a file inside one


def _builtin(name: str) -> Objectives:
    return {"ppo": Objectives, "dpo": lambda: Objectives(drift=DPO())}[name]()


def _full_params(objectives: Objectives, params: dict | None = None) -> dict:
    defaults = objectives.init(jax.random.key(0))
    return objectives.merge(params or {}, defaults)


def _envs_from(value) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


def resolve_target(spec: str) -> Target:
    """"ppo" | "dpo" | an objectives JSON file | RUN_DIR | RUN_DIR:best | RUN_DIR:mean |
    RUN_DIR:init -> Target. RUN_DIR:init is the run's objectives at their initial parameters, the
    point evolution started from: the control that separates what evolution found from what the
    parameterisation gives before any search (e.g. a learned value loss starts at L2, not at
    PPO's clipped L2).

    Raises EvaluationError (reading files only, no compute) for a missing path, a directory that
    is not a run directory, a run that has not written its objectives yet, or a corrupt file.
    """
    spec = str(spec)
    if spec in REFERENCES:
        objectives = _builtin(spec)
        return Target(spec, objectives, _full_params(objectives), (), "builtin", spec)
    path, which = Path(spec), None
    if not path.exists() and ":" in spec:
        base, _, suffix = spec.rpartition(":")
        if suffix in ("best", "mean", "init"):
            path, which = Path(base), suffix
    if path.is_dir():
        return _run_target(spec, path, which or "mean")
    if path.is_file():
        if which:
            raise EvaluationError(f"target {spec!r}: ':{which}' picks a file of a run directory, but {path} is a file")
        return _file_target(spec, path)
    raise EvaluationError(
        f"target {spec!r}: no run directory or objectives file at {path}. A TARGET is ppo, dpo, an objectives "
        "JSON file (an exported closed form or RUN_DIR/objectives/best.json), or a run directory "
        "(RUN_DIR evaluates objectives/mean.json, RUN_DIR:best objectives/best.json, RUN_DIR:init the "
        "objectives at their initial parameters)."
    )


def _load(spec: str, path: Path):
    try:
        objectives, params, extra = load_objectives(path)
        return objectives, _full_params(objectives, params), extra
    except ObjectiveFileError as e:
        raise EvaluationError(f"target {spec!r}: {e}") from None
    except ValueError as e:  # e.g. a learned shaping without an observation shape
        raise EvaluationError(f"target {spec!r}: {path} does not describe usable objectives ({e})") from None


def _file_target(spec: str, path: Path) -> Target:
    objectives, params, extra = _load(spec, path)
    run = path.parent.parent  # a file inside a run: RUN_DIR/objectives/*.json or RUN_DIR/export/*.json
    in_run = path.parent.name in ("objectives", "export") and (run / "config.json").is_file()
    label = path.stem
    if in_run and path.parent.name == "objectives":
        label = f"{run.name}:{path.stem}"  # RUN_DIR/objectives/best.json -> RUN:best
    return Target(label, objectives, params, _envs_from(extra.get("envs")), "file", spec,
                  str(run) if in_run else None)


def _run_target(spec: str, path: Path, which: str) -> Target:
    config_path = path / "config.json"
    if not config_path.is_file():
        raise EvaluationError(
            f"target {spec!r}: {path} is a directory but not a metadisco run directory (no config.json). "
            "Give a run directory made by `metadisco train`, or an objectives JSON file."
        )
    try:
        config = json.loads(config_path.read_text())
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise EvaluationError(f"target {spec!r}: {config_path} is corrupt ({e})") from None
    file = path / "objectives" / f"{'mean' if which == 'init' else which}.json"
    if not file.is_file():
        every = config.get("checkpoint_every", "checkpoint_every")
        raise EvaluationError(
            f"target {spec!r}: the run directory {path} has no objectives/{which}.json yet. A run writes its "
            f"objectives with each checkpoint (every {every} generations): this run has not reached its first "
            f"checkpoint, or it is still being created. Wait for it, or resume it with "
            f"`metadisco train --resume {path}`."
        )
    objectives, params, extra = _load(spec, file)
    if which == "init":
        params = _full_params(objectives)
    label = path.resolve().name + ("" if which == "mean" else f":{which}")
    envs = _envs_from(config.get("envs")) or _envs_from(extra.get("envs"))
    return Target(label, objectives, params, envs, "run", spec, str(path))


# ---------------------------------------------------------------------------------------------
# Planning: every check that can fail, before anything compiles
# ---------------------------------------------------------------------------------------------


@dataclass
class _Method:
    label: str
    objectives: Objectives
    params: dict
    role: str  # "target" | "reference" | "target+reference"
    meta_train_envs: tuple[str, ...] = ()


@dataclass
class _EnvJob:
    name: str
    env: Env
    config: PPOConfig
    budget: int
    meta_train_for: list[str] = field(default_factory=list)


def _as_targets(targets) -> list[Target]:
    if isinstance(targets, (str, os.PathLike, Target)):
        targets = [targets]
    out = [t if isinstance(t, Target) else resolve_target(t) for t in targets]
    if not out:
        raise EvaluationError("no targets: name at least one (ppo, dpo, an objectives file or a run directory)")
    return out


def _methods(targets: list[Target]) -> list[_Method]:
    methods: list[_Method] = []
    taken: set[str] = set()
    for t in targets:
        if t.source == "builtin":
            if t.label in taken:
                continue
            methods.append(_Method(t.label, t.objectives, t.params, "target+reference"))
            taken.add(t.label)
            continue
        label = t.label
        if label in taken or label in REFERENCES or label == TUNED:
            label = t.spec
        n = 2
        base = label
        while label in taken or label in REFERENCES or label == TUNED:
            label, n = f"{base}#{n}", n + 1
        methods.append(_Method(label, t.objectives, t.params, "target", tuple(t.meta_train_envs)))
        taken.add(label)
    for ref in REFERENCES:
        if ref not in taken:
            objectives = _builtin(ref)
            methods.append(_Method(ref, objectives, _full_params(objectives), "reference"))
            taken.add(ref)
    return methods


def _budget_for(name: str, scale: str, budget) -> int:
    if isinstance(budget, dict) and name in budget:
        return int(budget[name])
    if budget is not None and not isinstance(budget, dict):
        return int(budget)
    return BUDGETS[scale].get(name, FAMILY_BUDGETS[scale][preset_name(name)])


def _env_list(envs, suite, quick) -> tuple[list[str], str | None]:
    if envs is not None and suite is not None:
        raise EvaluationError("give envs or a suite, not both")
    if envs is None:
        suite = suite or ("quick" if quick else "default")
        if suite not in SUITES:
            raise EvaluationError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
        return list(SUITES[suite]), suite
    if isinstance(envs, str):
        envs = envs.split(",")
    names = list(dict.fromkeys(e.strip() for e in envs if e and e.strip()))
    if not names:
        raise EvaluationError("no environments given: name at least one, e.g. envs=CartPole-v1")
    return names, None


def _task(env_name: str) -> str:
    """The task an environment name stands for (a brax backend does not make another task)."""
    return env_name.partition(":")[0]


def _incompatibility(objectives: Objectives, env: Env) -> str | None:
    """What cannot work for these objectives on this environment (None if nothing).

    A drift or a value loss sees only ratios, advantages and values, so it runs on any action
    space; a learned shaping potential Phi(s) reads the observation and was sized for one shape.
    """
    shaping = objectives.shaping
    if isinstance(shaping, PotentialShaping) and tuple(shaping.obs_shape) != tuple(env.obs_shape):
        return (
            f"its learned shaping potential Phi(s) was built for observations of shape {tuple(shaping.obs_shape)}, "
            f"but {env.name} has observations of shape {tuple(env.obs_shape)}; a potential reads the observation, "
            f"so it cannot be evaluated there. Choose environments with observation shape "
            f"{tuple(shaping.obs_shape)} (e.g. the meta-training ones), or a target without learned shaping."
        )
    return None


def _plan(targets, envs, seeds, budget, tune_lr, quick, suite, lr_factors, lr=None, inner=None):
    targets = _as_targets(targets)
    if int(seeds) != seeds or seeds < 1:
        raise EvaluationError(f"seeds must be a positive integer, got {seeds!r}")
    if budget is not None and not isinstance(budget, dict) and (int(budget) != budget or budget < 1):
        raise EvaluationError(f"the budget (total timesteps per run) must be a positive integer, got {budget!r}")
    if tune_lr and (not lr_factors or min(lr_factors) <= 0):
        raise EvaluationError(f"lr_factors must be positive numbers, got {lr_factors!r}")
    names, suite = _env_list(envs, suite, quick)
    for name in names:
        try:
            check_env_name(name)
        except ValueError as e:
            raise EvaluationError(str(e)) from None
    scale = "quick" if quick or suite == "quick" else "default"
    methods = _methods(targets)
    jobs = []
    for name in names:
        steps = _budget_for(name, scale, budget)
        try:
            config = preset_for(name).replace(**(inner or {}))
            config = config.replace(total_timesteps=steps, **({"lr": float(lr)} if lr else {}))
            config.validate()
        except ValueError as e:
            raise EvaluationError(
                f"{name} with a budget of {steps} steps: {e} "
                + ("(check --inner and --timesteps)" if inner else "(set the budget with --timesteps)")
            ) from None
        env = _env(name)
        for m in methods:
            problem = _incompatibility(m.objectives, env)
            if problem:
                raise EvaluationError(f"target {m.label!r} cannot be evaluated on {name}: {problem}")
        meta = [m.label for m in methods if _task(name) in {_task(e) for e in m.meta_train_envs}]
        jobs.append(_EnvJob(name, env, config, steps, meta))
    return methods, jobs, suite, scale


# ---------------------------------------------------------------------------------------------
# Compiled programs (cached: one per environment x config x objectives structure x layout)
# ---------------------------------------------------------------------------------------------

_ENVS: dict[str, Env] = {}
_PROGRAMS: dict = {}


def _env(name: str) -> Env:
    if name not in _ENVS:
        _ENVS[name] = make_env(name)
    return _ENVS[name]


def _mesh(num_seeds: int) -> Mesh:
    """The local devices, as many as divide the number of seeds (seeds are split over them)."""
    devices = jax.local_devices()
    n = max(d for d in range(1, min(len(devices), num_seeds) + 1) if num_seeds % d == 0)
    return Mesh(np.array(devices[:n]), ("seed",))


def _program(env: Env, config: PPOConfig, objectives: Objectives, num_seeds: int, grid: int = 0):
    """jit(train vmapped over seeds [and over `grid` hyperparameter settings]), split over devices.

    Called as program(params, keys [S], hparams) -> TrainResult with leaves [S, ...], or with
    grid > 0 as program(params, keys [S], hparams with leaves [G]) -> leaves [G, S, ...].
    Hyperparameters are traced arguments, so PPO at any learning rate reuses one compile.
    """
    mesh = _mesh(num_seeds)
    cache_key = (env.name, config, objectives, num_seeds, grid, tuple(d.id for d in mesh.devices.flat))
    try:
        if cache_key in _PROGRAMS:
            return _PROGRAMS[cache_key]
    except TypeError:  # unhashable objectives: no caching
        cache_key = None
    train = make_train(env, config, objectives)
    over_seeds = jax.vmap(lambda params, key, hp: train(key, params, hp), in_axes=(None, 0, None))
    fn = jax.vmap(over_seeds, in_axes=(None, None, 0)) if grid else over_seeds
    out_spec = P(None, "seed") if grid else P("seed")
    program = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P(), P("seed"), P()), out_specs=out_spec, check_vma=False))
    if cache_key is not None:
        _PROGRAMS[cache_key] = program
    return program


def _hparams(config: PPOConfig, **changes):
    """The preset's traced numbers as float32 arrays (a fixed signature: no retracing)."""
    hp = config.hparams.replace(**changes) if changes else config.hparams
    return jax.tree.map(lambda x: np.asarray(x, np.float32), hp)


def _check_traces(methods, jobs, keys) -> None:
    """Trace every target's program (no compile) so that any other misfit fails before compute."""
    for job in jobs:
        for m in methods:
            if m.role != "target":
                continue
            try:
                program = _program(job.env, job.config, m.objectives, len(keys))
                program.eval_shape(m.params, keys, _hparams(job.config))
            except Exception as e:  # noqa: BLE001  (any failure to build the program is a misfit)
                raise EvaluationError(
                    f"target {m.label!r} cannot train on {job.name}: {type(e).__name__}: {str(e)[:500]}"
                ) from None


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def _run(program, params, keys, hp) -> dict:
    result = jax.device_get(program(params, keys, hp))
    return {
        "returns": np.asarray(result.returns, np.float64),  # [..., S, U]
        "final": np.asarray(result.final_return, np.float64),  # [..., S]
        "diverged": np.asarray(result.diverged, bool),
    }


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
    bootstrap_reps: int = BOOTSTRAP_REPS,
    lr: float | None = None,
    inner: dict | None = None,
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
    Every input error raises EvaluationError before anything compiles. The result is
    JSON-serialisable (see `save`).
    """
    seeds = DEFAULT_SEEDS if seeds is None else seeds
    if lr is not None and not lr > 0:
        raise EvaluationError(f"the learning rate must be > 0, got {lr!r}")
    methods, jobs, suite, scale = _plan(targets, envs, seeds, budget, tune_lr, quick, suite, lr_factors, lr, inner)
    root = jax.random.key(seed)
    eval_keys = jax.random.split(jax.random.fold_in(root, 0), seeds)
    tune_keys = jax.random.split(jax.random.fold_in(root, 1), seeds)
    _check_traces(methods, jobs, eval_keys)

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
        hp = _hparams(job.config)
        for m in methods:
            bar.set_postfix_str(f"{job.name}: {m.label}")
            runs[m.label] = _run(_program(job.env, job.config, m.objectives, seeds), m.params, eval_keys, hp)
        tuning = None
        if tune_lr:
            bar.set_postfix_str(f"{job.name}: ppo lr grid")
            tuning, runs[TUNED] = _tune(job, seeds, lr_factors, tune_keys, eval_keys, runs["ppo"])
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
            "confidence": CONFIDENCE,
            "devices": int(_mesh(seeds).devices.size),
            "jax_version": jax.__version__,
        },
        "targets": [
            {"label": m.label, "role": m.role, "meta_train_envs": list(m.meta_train_envs),
             "objectives": m.objectives.spec()}
            for m in methods if m.role != "reference"
        ],
        "methods": [{"label": label, "role": roles[label]} for label in labels],
        "envs": {},
        "aggregate": {},
        "notes": [],
        "time_s": None,
    }
    for job in jobs:
        results["envs"][job.name] = _env_stats(job, labels, env_results[job.name])
    results["aggregate"] = _aggregate(results, labels, bootstrap_reps)
    results["notes"] = _notes(results, jobs, tune_lr)
    results["time_s"] = round(time.time() - started, 1)
    return _jsonable(results)


def _tune(job: _EnvJob, seeds: int, lr_factors, tune_keys, eval_keys, ppo_run: dict):
    """PPO over the learning-rate grid on the tuning seeds; the best one on the evaluation seeds."""
    objectives = _builtin("ppo")
    params = _full_params(objectives)
    base_lr = float(job.config.hparams.lr)
    lrs = [float(f) * base_lr for f in lr_factors]
    hp = _hparams(job.config)
    grid_hp = jax.tree.map(lambda x: np.full((len(lrs),), x, np.float32), hp).replace(lr=np.asarray(lrs, np.float32))
    grid = _run(_program(job.env, job.config, objectives, seeds, grid=len(lrs)), params, tune_keys, grid_hp)
    final = grid["final"]  # [G, S]
    score = np.where(np.isfinite(final), final, -np.inf).mean(1)
    best = int(np.argmax(score))
    if math.isclose(float(lr_factors[best]), 1.0):
        tuned = ppo_run  # the preset's learning rate won: same program, same seeds, same numbers
    else:
        program = _program(job.env, job.config, objectives, seeds)
        tuned = _run(program, params, eval_keys, _hparams(job.config, lr=lrs[best]))
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


def _t_band(curves: np.ndarray, confidence: float = CONFIDENCE):
    """Mean over seeds of [S, U] curves and its Student-t band (nan band for one seed)."""
    mean = curves.mean(0)
    s = curves.shape[0]
    if s < 2:
        nan = np.full_like(mean, np.nan)
        return mean, nan, nan
    half = _st.t.ppf(0.5 + confidence / 2, df=s - 1) * curves.std(0, ddof=1) / np.sqrt(s)
    return mean, mean - half, mean + half


def _env_stats(job: _EnvJob, labels: list[str], env_result: dict) -> dict:
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
    elif len(ppo["final"]) > 1 and stats.mean_ci(_finite_or(ppo["final"], init))[1] <= init:
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
        mean, low, high = stats.mean_ci(clean)
        entry = {
            "final_returns": clean, "mean": mean, "ci_low": low, "ci_high": high,
            "diverged": int(run["diverged"].sum()), "nonfinite": nonfinite,
            "normalized": None, "norm_mean": None, "norm_ci_low": None, "norm_ci_high": None,
        }
        if not flat:
            norm = np.asarray(stats.normalize_score(clean, ppo_final, init), np.float64)
            entry["normalized"] = norm
            entry["norm_mean"], entry["norm_ci_low"], entry["norm_ci_high"] = stats.mean_ci(norm)
        curves = np.where(np.isfinite(run["returns"]), run["returns"], np.nan)
        band = _t_band(curves)
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


def _finite_or(x: np.ndarray, fill: float) -> np.ndarray:
    return np.where(np.isfinite(x), x, fill)


def _aggregate(results: dict, labels: list[str], reps: int) -> dict:
    """IQM, mean and probabilities of improvement over the held-out and the meta-train envs, apart."""
    envs = results["envs"]
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
                    point, low, high = stats.probability_of_improvement_ci(scores[m], scores[ref], reps, CONFIDENCE)
                    entry[f"poi_vs_{ref}"] = {"point": point, "low": low, "high": high}
            methods[m] = entry
        # P(row > column) for every ordered pair: a discovered objective against its controls
        # (RUN_DIR:init, a PPO variant), not only against PPO and DPO.
        pairwise = {m: {} for m in labels}
        for m, n in itertools.permutations(labels, 2):
            point, low, high = stats.probability_of_improvement_ci(scores[m], scores[n], reps, CONFIDENCE)
            pairwise[m][n] = {"point": point, "low": low, "high": high}
        out[group] = {"envs": names, "methods": methods, "pairwise": pairwise}
    return out


def _notes(results: dict, jobs: list[_EnvJob], tune_lr: bool) -> list[str]:
    notes = []
    for name, r in results["envs"].items():
        if r["excluded_from_aggregate"]:
            notes.append(f"{name}: {r['excluded_from_aggregate']}.")
        if "ppo-weak" in r["flags"]:
            notes.append(f"{name}: PPO's 95% interval includes its initial return; normalised scores there are noisy.")
        for m, e in r["methods"].items():
            if e["diverged"] or e["nonfinite"]:
                notes.append(f"{name}: {m} diverged in {e['diverged']} of {len(e['final_returns'])} seeds "
                             f"({e['nonfinite']} non-finite final returns counted as the initial return).")
    short = [j.name for j in jobs if j.budget < preset_for(j.name).total_timesteps]
    if short and not tune_lr and results["settings"].get("lr") is None:
        notes.append(
            "PPO ran at its preset learning rate on budgets below the preset's "
            f"({', '.join(short)}); at short budgets PPO's learning rate moves its return more than the objective "
            "does: rerun with --tune-lr (tune_lr=True) for a PPO whose learning rate suits the budget."
        )
    return notes


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return float(f"{x:.7g}") if math.isfinite(x) else None
    return x


def default_out_dir(targets=(), root: str | os.PathLike = "evaluations") -> Path:
    """RUN_DIR/evaluation/<timestamp> for the first run-directory target, else ./evaluations/<timestamp>."""
    run_dirs = [t.run_dir for t in targets if isinstance(t, Target) and t.run_dir]
    parent = Path(run_dirs[0]) / "evaluation" if run_dirs else Path(root)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = parent / stamp, 2
    while path.exists():
        path, n = parent / f"{stamp}-{n}", n + 1
    return path


def check_out_dir(out_dir) -> Path:
    """Raise EvaluationError if `out_dir` exists and is not an empty directory."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EvaluationError(f"output folder {out} already exists and is not empty; choose another --out")
    return out


def _fmt(x, digits: int = 4) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}g}"


def _ci(point, low, high) -> str:
    if point is None:
        return "–"
    if low is None or high is None:
        return _fmt(point)
    return f"{_fmt(point)} [{_fmt(low)}, {_fmt(high)}]"


def to_markdown(results: dict) -> str:
    """A table per environment and the aggregate tables (held-out and meta-train apart)."""
    s = results["settings"]
    lines = [
        "# Held-out evaluation",
        "",
        f"{s['seeds']} seeds per method and environment; budgets (environment steps per run): "
        + ", ".join(f"{e} {s['budgets'][e]:,}" for e in s["envs"]) + ". "
        "Normalised score: (return - init) / (PPO - init), 0 = the initial policy, 1 = PPO. "
        "Intervals are 95%: Student-t per environment, stratified bootstrap in the aggregates.",
        "",
    ]
    for name, r in results["envs"].items():
        flags = f" ({', '.join(r['flags'])})" if r["flags"] else ""
        lines += [f"## {name}{flags}", ""]
        if r["tuning"]:
            t = r["tuning"]
            lines += [f"PPO learning-rate grid {', '.join(_fmt(x, 3) for x in t['lrs'])} on separate tuning seeds: "
                      f"best {_fmt(t['best_lr'], 3)} (x{_fmt(t['best_factor'], 3)} the preset).", ""]
        lines += ["| method | final return [95% CI] | normalised [95% CI] | diverged |", "|---|---|---|---|"]
        for m, e in r["methods"].items():
            lines.append(f"| {m} | {_ci(e['mean'], e['ci_low'], e['ci_high'])} | "
                         f"{_ci(e['norm_mean'], e['norm_ci_low'], e['norm_ci_high'])} | "
                         f"{e['diverged']}/{len(e['final_returns'])} |")
        lines.append("")
    titles = {"held_out": "Aggregate over held-out environments",
              "meta_train": "Aggregate over meta-training environments"}
    for group, agg in results["aggregate"].items():
        if group == "meta_train" and not agg["envs"]:
            continue
        lines += [f"## {titles[group]}", ""]
        if not agg["methods"]:
            lines += ["No environment in this group has a usable normaliser (see the notes).", ""]
            continue
        refs = [k[len("poi_vs_"):] for k in next(iter(agg["methods"].values())) if k.startswith("poi_vs_")]
        lines += [f"Environments: {', '.join(agg['envs'])}.", "",
                  "| method | IQM [95% CI] | mean [95% CI] | " + " | ".join(f"P(> {r}) [95% CI]" for r in refs) + " |",
                  "|---|---|---|" + "---|" * len(refs)]
        for m, e in agg["methods"].items():
            cells = [_ci(e["iqm"]["point"], e["iqm"]["low"], e["iqm"]["high"]),
                     _ci(e["mean"]["point"], e["mean"]["low"], e["mean"]["high"])]
            cells += [_ci(e[f"poi_vs_{r}"]["point"], e[f"poi_vs_{r}"]["low"], e[f"poi_vs_{r}"]["high"]) for r in refs]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
        if len(agg.get("pairwise") or {}) > len(refs) + 1:  # more methods than the reference columns show
            labels = list(agg["pairwise"])
            lines += ["Probability of improvement of each row over each column [95% CI]:", "",
                      "| P(row > column) | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
            for m in labels:
                cells = ["–" if m == n else _ci(agg["pairwise"][m][n]["point"], agg["pairwise"][m][n]["low"],
                                                  agg["pairwise"][m][n]["high"]) for n in labels]
                lines.append(f"| {m} | " + " | ".join(cells) + " |")
            lines.append("")
    if results["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in results["notes"]] + [""]
    return "\n".join(lines)


CSV_COLUMNS = [
    "method", "role", "env", "group", "flags", "seeds", "budget", "mean", "ci_low", "ci_high",
    "normalized", "norm_ci_low", "norm_ci_high", "diverged",
]


def to_csv(results: dict) -> str:
    """One row per method x environment."""
    roles = {m["label"]: m["role"] for m in results["methods"]}
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for name, r in results["envs"].items():
        group = ("excluded" if r["excluded_from_aggregate"]
                 else "meta_train" if "meta-train" in r["flags"] else "held_out")
        for m, e in r["methods"].items():
            flags = list(r["flags"]) + ([f"diverged:{e['diverged']}"] if e["diverged"] else [])
            writer.writerow({
                "method": m, "role": roles.get(m, ""), "env": name, "group": group, "flags": ";".join(flags),
                "seeds": len(e["final_returns"]), "budget": r["budget"], "mean": e["mean"],
                "ci_low": e["ci_low"], "ci_high": e["ci_high"], "normalized": e["norm_mean"],
                "norm_ci_low": e["norm_ci_low"], "norm_ci_high": e["norm_ci_high"], "diverged": e["diverged"],
            })
    return buf.getvalue()


def _floats(values) -> np.ndarray:
    """A JSON list (None for nan) or an array -> float array."""
    return np.asarray([np.nan if v is None else v for v in np.asarray(values, object).ravel()], float)


def curves_figure(results: dict):
    """Learning curves (mean over seeds, 95% t-band), one panel per environment -> Figure."""
    import seaborn as sns
    from matplotlib.figure import Figure

    envs = list(results["envs"])
    labels = [m["label"] for m in results["methods"]]
    roles = {m["label"]: m["role"] for m in results["methods"]}
    colors = dict(zip(labels, sns.color_palette("colorblind", max(len(labels), 3))))
    ncols = min(len(envs), 4)
    nrows = math.ceil(len(envs) / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.2 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, name in zip(axes.flat, envs):
        r = results["envs"][name]
        x = (np.arange(r["num_updates"]) + 1) * r["steps_per_update"]
        for m in labels:
            c = r["methods"][m]["curve"]
            mean, low, high = (_floats(c[k]) for k in ("mean", "low", "high"))
            ax.plot(x, mean, color=colors[m], lw=1.6, ls="--" if roles[m] == "reference" else "-", label=m)
            if np.isfinite(low).any():
                ax.fill_between(x, low, high, color=colors[m], alpha=0.2, lw=0)
        seeds = np.concatenate([_floats(r["methods"][m]["curve"]["seeds"]) for m in labels])
        if np.isfinite(seeds).any():  # the band may reach far past the seeds themselves (few seeds)
            lo, hi = np.nanmin(seeds), np.nanmax(seeds)
            pad = 0.05 * (hi - lo) if hi > lo else max(1.0, 0.05 * abs(hi))
            ax.set_ylim(lo - pad, hi + pad)
        tags = [f for f in r["flags"] if f in ("meta-train", "ppo-flat")]
        ax.set_title(name + (f" ({', '.join(tags)})" if tags else ""), fontsize=10)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(envs):]:
        ax.set_visible(False)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(f"Learning curves: mean over {results['settings']['seeds']} seeds, 95% confidence band "
                 "(dashed: references)", fontsize=11)
    fig.legend(handles, names, loc="outside lower center", ncols=min(len(labels), 6), frameon=False)
    return fig


def save(results: dict, out_dir) -> Path:
    """Write results.json, results.csv, results.md, curves.png and curves.pdf into `out_dir`.

    Everything is written into a temporary folder beside it and moved into place at the end,
    so a failure leaves nothing half-written. Returns the output folder.
    """
    out = check_out_dir(out_dir)
    created = [p for p in reversed(out.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        (tmp / "results.json").write_text(json.dumps(_jsonable(results), indent=1, allow_nan=False))
        (tmp / "results.csv").write_text(to_csv(results))
        (tmp / "results.md").write_text(to_markdown(results))
        fig = curves_figure(results)
        for fmt in ("png", "pdf"):
            fig.savefig(tmp / f"curves.{fmt}", dpi=150)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the output is an ordinary folder
        if out.exists():
            out.rmdir()  # empty (check_out_dir)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in reversed(created):  # folders made only for this output
            try:
                p.rmdir()
            except OSError:
                pass
        raise
    return out

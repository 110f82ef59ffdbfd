"""metadisco from Python (a notebook, a script): the same configs and run directories as the CLI.

    from metadisco import api

    run = api.train("lpo_cartpole_cpu", "runs/demo", generations=2, es={"population_size": 4},
                    objectives={"drift": "my_drifts:ScaledSquare"})
    api.plot(run)                                   # {"training": [paths], ..., "report": [path]}
    results = api.evaluate([run, "ppo"], envs="my_envs:Corridor,CartPole-v1", quick=True)
    api.distil(run)                                 # {"drift": report, ...}

Every function raises `MetadiscoError` (a ValueError) for anything the user can fix, with the
message the CLI prints; none raises SystemExit. An interrupted `train` (Ctrl-C) raises
`RunInterrupted` after writing a checkpoint; `train(..., resume=True)` continues it.

The device layout cannot be chosen from here: XLA reads it (XLA_FLAGS, e.g.
--xla_force_host_platform_device_count=N to split a CPU population over N host devices) only when
jax starts, so set it in the environment before the first `import jax` (the CLI does that for
you). On a CPU without it, the population runs on one device.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from metadisco_common.errors import ConfigError

__all__ = ["distil", "evaluate", "plot", "train"]


def _items(fields: dict, prefix: str = "") -> list[str]:
    """{"es": {"population_size": 4}, "envs": ["A", "B"]} -> ["es.population_size=4", "envs=A,B"]."""
    out = []
    for key, value in fields.items():
        if isinstance(value, dict):
            out += _items(value, f"{prefix}{key}.")
        elif isinstance(value, (list, tuple)):
            out.append(f"{prefix}{key}={','.join(str(v) for v in value)}")
        else:
            out.append(f"{prefix}{key}={value}")
    return out


def train(config=None, run_dir=None, *, resume: bool = False, overwrite: bool = False, progress: bool = False,
          stop_after: int | None = None, **overrides) -> Path:
    """Meta-train (or resume) a run; returns its run directory.

    config: a `RunConfig`, a named experiment or a TOML file (str), or None for the defaults.
    run_dir: where to write (default runs/NAME-TIMESTAMP, as the CLI). overrides: config fields,
    a section as a dict (es={"population_size": 4}) or a dotted name in a dict
    (**{"inner.total_timesteps": 2048}); values as on the command line. resume=True continues
    the run in `run_dir` (config and overrides must then be None / empty, or agree with it).
    """
    from metadisco import config as config_lib
    from metadisco.train import default_run_dir
    from metadisco.train import run as run_training

    items = _items(overrides)
    if resume and run_dir is None:
        raise ConfigError("train(resume=True) needs the run_dir to continue")
    if isinstance(config, config_lib.RunConfig):
        cfg = config_lib.override(config, items)
    elif config is None and not items and resume:
        cfg = None  # the stored config
    else:
        cfg = config_lib.resolve(None if config is None else str(config), items)
    if run_dir is None:
        run_dir = default_run_dir(cfg)
    return run_training(cfg, run_dir, resume=resume, overwrite=overwrite, progress=progress, stop_after=stop_after)


def evaluate(targets: Sequence[str | Path] | str | Path, envs: Sequence[str] | str | None = None, *,
             out: str | Path | None = None, **options) -> dict:
    """Held-out evaluation of `targets` ("ppo", "dpo", objectives files, run directories,
    RUN_DIR:best / :init, `module:attr` objectives) on `envs` (names or `module:attr`, a list or
    a comma-separated string); `options` as `analysis.evaluation.run.evaluate` (seeds, budget, quick,
    suite, tune_lr, lr, inner, seed, progress). Writes results.json/csv/md and the curves to `out`
    (default as the CLI: RUN_DIR/evaluation/TIMESTAMP or ./evaluations/TIMESTAMP) and returns
    the results, with "out_dir" the folder written. With no `envs` (nor suite/quick), a run
    target's declared held-out set (its config's `heldout`: envs, timesteps, seeds) is used."""
    from analysis.evaluation import render
    from analysis.evaluation import run as evaluation
    from analysis.targets import resolve_target
    from metadisco.commands.evaluate import declared_heldout, inner_overrides

    if isinstance(targets, (str, Path)):
        targets = [targets]
    resolved = [resolve_target(str(t)) for t in targets]
    found = None if envs or options.get("suite") or options.get("quick") else declared_heldout(resolved)
    if found:  # as the CLI: no environments given, the held-out set a run declared before it ran
        heldout = found[1]
        envs = list(heldout["envs"])
        for option, field in (("budget", "timesteps"), ("seeds", "seeds")):
            if options.get(option) is None and heldout.get(field):
                options[option] = heldout[field]
        if heldout.get("inner_from_run") and "inner" not in options:
            options["inner"] = inner_overrides([], resolved)
    options.setdefault("progress", False)
    results = evaluation.evaluate(resolved, envs=envs, **options)
    path = render.save(results, render.check_out_dir(out) if out else render.default_out_dir(resolved))
    return {**results, "out_dir": str(path)}


def plot(run_dir: str | Path, **options) -> dict:
    """Draw a run's figures and write its report (`analysis.plots.plot_run` options: out_dir,
    formats, which); returns {figure: [paths]}, "report": [path], and "notes": what was skipped.
    A figure that fails to draw is a bug: the others are drawn, then FigureError names it."""
    from analysis.plots import plot_run
    from analysis.runs import Run

    Run(run_dir).config()  # RunDirError before anything heavy
    notes: list[str] = []
    written = plot_run(run_dir, notes=notes, **options)
    return {**written, "notes": notes}


def distil(run_dir: str | Path, which: str = "mean", **options) -> dict:
    """Fit closed forms to what a run evolved (its drift and/or value loss), as `metadisco distil`:
    writes RUN_DIR/distil/ and returns {plug: report} (options: symbolic, progress, seed,
    prior_fraction)."""
    from analysis.distillation.run import distillable
    from analysis.runs import Run
    from metadisco.commands.distil import distil_for_run

    run = Run(run_dir)
    cfg = run.config()
    objectives, params, _ = run.objectives(which)
    return distil_for_run(run, cfg, objectives, params, which, distillable(cfg), **options)

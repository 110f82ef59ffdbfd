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

import sys
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

    config: a `RunConfig`, a named experiment or a TOML file (str), or None for the demo (as
    `metadisco train` with no experiment).
    run_dir: where to write (default runs/NAME-TIMESTAMP, as the CLI). overrides: config fields,
    a section as a dict (es={"population_size": 4}) or a dotted name in a dict
    (**{"inner.total_timesteps": 2048}); values as on the command line. resume=True continues
    the run in `run_dir` (config must then be None or agree with it; overrides apply to its stored
    config, and generations=N, no fewer than it has done, is the one change accepted: it extends the run).
    """
    from metadisco import config as config_lib
    from metadisco.train import default_run_dir
    from metadisco.train import run as run_training

    items = _items(overrides)
    if resume and run_dir is None:
        raise ConfigError("train(resume=True) needs the run_dir to continue")
    if isinstance(config, config_lib.RunConfig):
        cfg = config_lib.override(config, items)
    elif config is None and resume:  # the stored config, with the overrides (generations=N extends it)
        from metadisco.rundir import RunDir

        cfg = config_lib.override(RunDir(run_dir).config(), items) if items else None
    else:
        cfg = config_lib.resolve(config_lib.DEMO_EXPERIMENT if config is None else str(config), items)
    if run_dir is None:
        run_dir = default_run_dir(cfg)
    return run_training(cfg, run_dir, resume=resume, overwrite=overwrite, progress=progress, stop_after=stop_after)


def evaluate(targets: Sequence[str | Path] | str | Path, envs: Sequence[str] | str | None = None, *,
             out: str | Path | None = None, inner: dict | Sequence[str] | None = None, inner_from_run: bool = False,
             allow_invalid: bool = False, **options) -> dict:
    """Held-out evaluation of `targets` ("ppo", "dpo", objectives files, run directories,
    RUN_DIR:best / :init, `module:attr` objectives) on `envs` (names or `module:attr`, a list or
    a comma-separated string), as `metadisco evaluate` (which calls this); `options` as
    `analysis.evaluation.run.evaluate` (seeds, budget, quick, suite, tune_lr, lr, seed, progress,
    protocol, bootstrap_reps). Writes results.json/csv/md and the curves to `out` (default:
    RUN_DIR/evaluation/TIMESTAMP or ./evaluations/TIMESTAMP) and returns the results, with
    "out_dir" the folder written.

    inner: PPO settings for every environment, a dict ({"num_envs": 64, "hidden": (64, 64)}) or
    FIELD=VALUE strings, read and checked as `metadisco train` reads inner.FIELD=VALUE, over the
    first run target's own inner settings (except its budget) when `inner_from_run`.
    With no `envs`, `suite` or `quick`, the held-out set the first run target declared before it
    ran (its config's `heldout`: envs, timesteps, seeds, inner_from_run) is used, and said on
    stderr; options given win over it.

    A target whose objectives break their plug point's constraints (`metadisco check`'s checks)
    is refused with ConstraintsViolated before anything compiles; allow_invalid=True evaluates
    it anyway, with a warning on stderr.
    """
    from analysis.targets import declared_heldout, require_valid_target, resolve_target
    from meta_objectives import ConstraintsViolated

    if isinstance(targets, (str, Path)):
        targets = [targets]
    resolved = [resolve_target(str(t)) for t in targets]
    for target in resolved:
        try:
            require_valid_target(target)
        except ConstraintsViolated as e:
            if not allow_invalid:
                raise
            print(f"warning: evaluating {target.spec!r} anyway (allow_invalid, --allow-invalid), although it breaks "
                  f"{len(e.violations)} constraint(s) ({', '.join(v.constraint for v in e.violations)}):\n  - "
                  + "\n  - ".join(e.violations), file=sys.stderr)

    from analysis.evaluation import render
    from analysis.evaluation import run as evaluation
    if envs is None and options.get("suite") is None and not options.get("quick"):
        found = declared_heldout(resolved)
        if found is not None:
            run_dir, heldout = found
            envs = list(heldout.envs)
            if options.get("budget") is None:
                options["budget"] = heldout.timesteps
            if options.get("seeds") is None:
                options["seeds"] = heldout.seeds
            inner_from_run = inner_from_run or heldout.inner_from_run
            steps = options["budget"]
            print(f"evaluating on the held-out set {run_dir} declared before it ran: {','.join(envs)}"
                  f"{f' at {steps:,} steps' if isinstance(steps, int) else ''} (config: heldout)", file=sys.stderr)
    options["inner"] = _inner_settings(inner, resolved if inner_from_run else ())
    out_dir = render.check_out_dir(out) if out else render.default_out_dir(resolved)
    options.setdefault("progress", False)
    results = evaluation.evaluate(resolved, envs=envs, **options)
    return {**results, "out_dir": str(render.save(results, out_dir))}


def _inner_settings(inner: dict | Sequence[str] | None, targets) -> dict:
    """PPO overrides for every environment: the first run target's `inner` section when `targets`
    are given (inner_from_run; its total_timesteps stays out, the budget sets it), then `inner`
    (a dict or FIELD=VALUE items), coerced and checked as `metadisco train` does inner.FIELD=VALUE."""
    from analysis.runs import Run
    from metadisco.config import inner_config

    items = _items(inner) if isinstance(inner, dict) else list(inner or ())
    base: dict = {}
    if targets:
        runs = [t for t in targets if t.run_dir]
        if not runs:
            raise ConfigError("--inner-from-run (inner_from_run) needs a RUN_DIR target, or a file in a run directory "
                              "(RUN_DIR/export/*.json, RUN_DIR/objectives/*.json)")
        stored = Run(runs[0].run_dir).config().inner.overrides()
        base = {k: v for k, v in stored.items() if k != "total_timesteps"}
    try:
        return inner_config(base, items).overrides()
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--inner (inner): {e}; fields: see InnerConfig in analysis/run_config.py") from None


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


def distil(run_dir: str | Path, which: str = "mean", plugs: Sequence[str] | None = None, **options) -> dict:
    """Fit closed forms to what a run evolved, as `metadisco distil` (which calls this; so does
    `metadisco export` for a plug point not distilled yet): writes RUN_DIR/distil/ and returns
    {plug: report}. plugs: the plug points to distil (default: every evolved one with closed
    forms, the drift and/or the value loss). options: symbolic, progress, seed, prior_fraction, fit.

    The fit runs on the points PPO visits when it trains with the run's objectives on each of its
    meta-training environments, equally many per environment, plus points from a prior.
    """
    from analysis.distillation.run import check_distil_options, distil_run, distillable
    from analysis.runs import Run

    run = Run(run_dir)
    cfg = run.config()
    plugs = distillable(cfg) if plugs is None else tuple(plugs)
    objectives, params, _ = run.objectives(which)
    check_distil_options(options.get("progress"), options.get("prior_fraction", 0.5), options.get("fit", "value"))
    rows = _visited(cfg, objectives, params, options.get("seed", 0))
    return distil_run(run, rows, objectives, params, which, plugs=plugs, **options)


def _visited(cfg, objectives, params, seed: int = 0):
    """(ratio, advantage, value, target, progress) rows PPO visits with `objectives` at `params`
    on each environment of `cfg` (the run's RunConfig), equally many per environment."""
    import jax

    from analysis.distillation.run import balanced, visited_samples
    from inner_loops import make_env
    from metadisco.config import ppo_config

    keys = jax.random.split(jax.random.key(cfg.seed + 7), len(cfg.envs))
    return balanced([visited_samples(k, make_env(env), ppo_config(cfg, env), objectives, params)
                     for k, env in zip(keys, cfg.envs)], seed)

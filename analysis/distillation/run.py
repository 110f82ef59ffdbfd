"""Distilling a run: fit closed forms to what it evolved, on the points its training visits.

    plugs = distillable(config)                       which plug points have closed forms to fit
    rows = visited_samples(key, env, ppo, objectives, params)   [n, 5] (ratio, advantage, value, target, progress)
    obs = visited_observations(key, env, ppo, objectives, params)   [n, obs_dim] raw observations
    rows = balanced([rows_env1, rows_env2, ...], seed)  equally many rows from each environment
    reports = distil_run(run, rows, objectives, params, plugs=plugs, observations=obs)   writes RUN_DIR/distil/
                                                      (per plug: distil_run_drift, distil_run_value_loss,
                                                      distil_run_shaping)
    report = stored_report(run, plug)                 a report written earlier, or None

A report is a DistillationReport (metadisco.analysis.distillation.report), written and read through
`write_report` and `read_report`.

`metadisco distil` and `metadisco export` are thin callers of these. The rows come from every
epoch and minibatch step of training, on every meta-training environment, each environment
contributing equally many. The drift is fitted on the visited (r, A) (at their progress, for a
progress-dependent drift) mixed with a share from the default prior (training alone rarely
reaches the walls of a trust region, which is what the walls are for); the value loss on the
visited (v - target, target); a shaping potential on the observations training reaches. Each
plug's files are named for it alike: its report RUN_DIR/distil/{plug}.json, its learned-vs-distilled
figure {plug}_learned_vs_distilled.png and its Pareto front's figure {plug}_pareto.png (drift,
value_loss, shaping).
Imports jax on use (the command line imports this before it sets XLA_FLAGS).
"""

from __future__ import annotations

from dataclasses import replace

from metadisco.analysis.distillation.report import DistillationReport, Source, read_report, write_report
from metadisco.analysis.runs import Run
from metadisco.core.errors import MetadiscoError
from metadisco.core.fileio import atomic_write_text, save_figure
from metadisco.measure.run_files import RunDirError, writing

DISTILLABLE = ("drift", "value_loss", "shaping")
REPORT_FILES = {plug: f"{plug}.json" for plug in DISTILLABLE}
PARETO_FIGURES = {plug: f"{plug}_pareto" for plug in DISTILLABLE}
ROW_COLUMNS = ("ratio", "advantage", "value", "target", "progress")


def distillable(config) -> tuple[str, ...]:
    """The evolved plug points of a run's config (a RunConfig, `Run.config()`) that have closed
    forms; RunDirError when there are none."""
    evolved = config.objectives.evolve
    plugs = tuple(p for p in DISTILLABLE if p in evolved)
    if not plugs:
        raise RunDirError(f"this run evolved nothing ({config.objectives.evolve!r}); metadisco distils an evolved "
                          "drift, value loss or shaping potential: evaluate the run as it is")
    return plugs


def visited_samples(key, env, ppo_config, objectives, params, seeds: int = 2, per_update: int = 64):
    """(ratio, advantage, value, target, progress) rows [seeds * num_updates * k, 5] visited by PPO
    trained with `objectives` at `params` on `env` (`ppo_config`), one run per seed: about
    `per_update` rows per update, spread over its epochs and minibatch steps (k >= per_update)."""
    import jax
    import numpy as np

    from metadisco.inner_loops import make_train

    steps = ppo_config.update_epochs * ppo_config.num_minibatches
    per_step = min(-(-per_update // steps), ppo_config.minibatch_size)
    train = make_train(env, ppo_config.replace(record_samples=per_step), objectives)
    result = jax.jit(jax.vmap(train, in_axes=(0, None)))(jax.random.split(key, seeds), params)
    visited = np.asarray(jax.device_get(result.visited), np.float64)  # [seeds, updates, k, 4]
    updates = visited.shape[1]
    progress = np.broadcast_to((np.arange(updates) / updates)[None, :, None, None], visited.shape[:-1] + (1,))
    return np.concatenate([visited, progress], axis=-1).reshape(-1, len(ROW_COLUMNS))


def visited_observations(key, env, ppo_config, objectives, params, seeds: int = 2):
    """Raw observations [seeds * num_updates * num_envs, *obs_shape] that PPO trained with
    `objectives` at `params` on `env` reaches: every environment's at the end of each update's
    rollout, one run per seed (PPO's own update, scanned here for what it leaves in the runner)."""
    import jax
    import numpy as np

    from metadisco.inner_loops.ppo import PPO, TrainInputs, init_runner, update

    ppo = PPO.create(env, ppo_config, objectives)
    inputs = TrainInputs(objectives.merge(params, ppo.default_meta_params), ppo_config.hparams, env.default_params)

    def reached(key):
        def step(runner, i):
            runner, _ = update(ppo, runner, i, inputs)
            return runner, runner.obs

        return jax.lax.scan(step, init_runner(ppo, key, inputs), jax.numpy.arange(ppo_config.num_updates))[1]

    obs = jax.jit(jax.vmap(reached))(jax.random.split(key, seeds))  # [seeds, updates, num_envs, *obs_shape]
    return np.asarray(jax.device_get(obs), np.float64).reshape((-1,) + tuple(env.obs_shape))


def balanced(row_sets, seed: int = 0):
    """Rows from several environments, equally many from each (the smallest set's size), so that
    no environment dominates the fit."""
    import numpy as np

    n = min(len(rows) for rows in row_sets)
    rng = np.random.default_rng(seed)
    return np.concatenate([rows[rng.choice(len(rows), n, replace=False)] for rows in row_sets])


def check_distil_options(progress: float | None = None, prior_fraction: float = 0.5, fit: str = "value") -> None:
    """Refuse out-of-range options before any compute (MetadiscoError)."""
    from metadisco.analysis.distillation.data import FITS

    if fit not in FITS:
        raise MetadiscoError(f"--fit must be one of {', '.join(FITS)}, got {fit!r}")
    if not 0.0 <= prior_fraction < 1.0:
        raise MetadiscoError(f"--prior-fraction must be in [0, 1), got {prior_fraction}")
    if progress is not None and not 0.0 <= progress <= 1.0:
        raise MetadiscoError(f"--progress is the share of training done, in [0, 1]; got {progress}")


def distil_run(run: Run, rows, objectives, params, which: str = "mean", symbolic: bool = True,
               progress: float | None = None, seed: int = 0, prior_fraction: float = 0.5,
               plugs=("drift",), fit: str = "value", symbolic_kwargs: dict | None = None,
               observations=None) -> dict[str, DistillationReport]:
    """Distil each plug in `plugs` from the visited `rows` [n, 5] (ROW_COLUMNS; None where only the
    shaping is distilled) and `observations` [m, *obs_shape] (the shaping's) -> {plug: its
    DistillationReport, with its Source}; writes RUN_DIR/distil/.

    prior_fraction: share of drift fit points drawn from the default prior over (r, A) instead
    of from training. progress: fit a progress-dependent drift at this one progress (default:
    fitted at the start and end of training and interpolated). fit: match values or slopes.
    MetadiscoError when a plug to distil has no learned parameters.
    """
    import jax

    check_distil_options(progress, prior_fraction, fit)
    for plug in plugs:
        if not jax.tree.leaves(params.get(plug, {})):
            objective = getattr(objectives, plug)
            raise MetadiscoError(
                f"the run's {plug} ({objective.title}) has no learned parameters: there is nothing to distil. "
                f"Evaluate it as it is (metadisco evaluate {run.objectives_path(which)}), or export a formula of "
                f"your own with `metadisco export {run.path} --{'expression' if plug == 'drift' else 'value-loss'} ...`")
    out = run.distil_dir
    options = {"symbolic": symbolic, "seed": seed, "fit": fit, "symbolic_kwargs": symbolic_kwargs}
    reports = {}
    if "drift" in plugs:
        reports["drift"] = distil_run_drift(out, rows[:, [0, 1, 4]], objectives, params, progress=progress,
                                        prior_fraction=prior_fraction, **options)
    if "value_loss" in plugs:
        reports["value_loss"] = distil_run_value_loss(out, rows[:, 2], rows[:, 3], objectives, params, **options)
    if "shaping" in plugs:
        if fit != "value":
            raise MetadiscoError("--fit slope is for drifts and value losses; a shaping potential is fitted to its values")
        reports["shaping"] = distil_run_shaping(out, observations, objectives, params, env=run.config().envs[0],
                                                **{k: v for k, v in options.items() if k != "fit"})
    for plug in list(reports):
        n_rows = len(observations) if plug == "shaping" else len(rows)
        reports[plug] = report = replace(reports[plug], source=Source(
            run_dir=str(run.path), which=which, plug=plug, objective=getattr(objectives, plug).spec(),
            n_rows=int(n_rows), prior_fraction=prior_fraction if plug == "drift" else None,
            params_digest=params_digest(params.get(plug, {}))))
        with writing(out / REPORT_FILES[plug]):
            write_report(report, out / REPORT_FILES[plug])
        _save_figure(pareto_figure(report, plug), out / PARETO_FIGURES[plug])
    return reports


def pareto_figure(report: DistillationReport, plug: str):
    """Error against complexity: every valid candidate, the front (numbered as printed) and the
    chosen one."""
    import matplotlib.pyplot as plt

    fit = report.fit
    fig, ax = plt.subplots(figsize=(6, 4))
    valid = [c for c in report.candidates if not c.violations and c.error is not None]
    methods = sorted({c.method for c in valid})
    for method in methods:
        cs = [c for c in valid if c.method == method]
        ax.scatter([c.complexity for c in cs], [c.error for c in cs], s=14, alpha=0.6, label=method)
    front = report.front
    ax.plot([c.complexity for c in front], [c.error for c in front], "k-", lw=1, label="Pareto front")
    for i, c in enumerate(front):
        ax.annotate(str(i), (c.complexity, c.error), textcoords="offset points", xytext=(3, 3), fontsize=8)
    if report.chosen:
        ax.scatter([report.chosen.complexity], [report.chosen.error], marker="*", s=160,
                   color="red", zorder=5, label="chosen")
    ax.set_xlabel("complexity (sympy operation count)")
    what = {"drift": "D", "value_loss": "L - e²/2", "shaping": "Φ(s)"}[plug]
    ax.set_ylabel(f"rmse of {what}" if fit == "value" else f"rmse of d({what})/d{'r' if plug == 'drift' else 'e'}")
    if all(c.error > 0 for c in valid):
        ax.set_yscale("log")
    ax.set_title(f"{plug}: error against size (fit to {'values' if fit == 'value' else 'slopes'})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def write_output(path, text: str) -> None:
    """An analysis output written atomically; a failed write is a RunWriteError naming the file."""
    with writing(path):
        atomic_write_text(path, text)


def _save_figure(fig, stem) -> None:
    with writing(f"{stem}.png/.pdf"):
        save_figure(fig, stem)


def distil_run_drift(out, samples, objectives, params, symbolic, progress, seed, prior_fraction, fit="value",
                     symbolic_kwargs=None) -> DistillationReport:
    """Fit the drift on visited (r, A, progress) [n, 3] mixed with the prior (at uniform progress);
    draws learned vs distilled."""
    import jax
    import numpy as np

    from metadisco.analysis.distillation.data import sample_prior
    from metadisco.analysis.distillation.fit import distil_drift, distil_over_progress
    from metadisco.analysis.figures.drift import DriftDifference, drift_surface_figure
    from metadisco.meta_objectives import ClosedFormDrift

    drift, dparams = objectives.drift, params["drift"]
    over_progress = progress is None and drift.depends_on_progress
    if progress is None:
        progress = 0.5 if over_progress else 0.0
    if prior_fraction > 0:
        k = int(round(len(samples) * prior_fraction / (1.0 - prior_fraction)))
        ratio, advantage = sample_prior(k, seed)
        prior_progress = np.random.default_rng(seed).uniform(0.0, 1.0, k)
        samples = np.concatenate([samples, np.stack([ratio, advantage, prior_progress], -1)])

    def drift_fn(r, a, p):
        return drift.drift(dparams, r, a, p)

    options = {"seed": seed, "symbolic": symbolic, "fit": fit, "symbolic_kwargs": symbolic_kwargs}
    if over_progress:  # TA-LPO: interpolate closed forms fitted at the start and the end of training
        report = distil_over_progress(jax.jit(drift_fn), samples=samples, **options)
    else:
        report = distil_drift(jax.jit(drift_fn), samples=samples[:, :2], progress=progress, **options)
    if report.chosen:
        closed = ClosedFormDrift(report.chosen.expression)
        _save_figure(drift_surface_figure({
            "learned": (drift, dparams),
            "distilled": (closed, {}),
            "learned − distilled": (DriftDifference(drift, dparams, closed, {}), {}),
        }, progress=progress), out / "drift_learned_vs_distilled")
    return report


def distil_run_value_loss(out, values, targets, objectives, params, seed, symbolic=True, fit="value",
                          symbolic_kwargs=None) -> DistillationReport:
    """Fit the value loss on visited predictions and targets [n]; draws learned vs distilled.

    The loss is sampled at v_old = v, where PPO's value clipping does nothing, so the expressions
    are over e, t alone; the report's closed_form_base (`closed_form_base`) says under which
    ClosedFormValueLoss base they mean the learned loss: a loss on the clipped base
    (learned_clipped) keeps its clipping, which export applies to the chosen expression."""
    import jax

    from metadisco.analysis.distillation.fit import distil_value_loss
    from metadisco.analysis.figures.value_loss import value_loss_figure
    from metadisco.meta_objectives.closed_form import ClosedFormValueLoss, closed_form_base

    loss, lparams = objectives.value_loss, params["value_loss"]
    loss_fn = jax.jit(lambda v, t: loss.value_loss(lparams, v, t, v))
    report = distil_value_loss(loss_fn, values - targets, targets, seed=seed, symbolic=symbolic, fit=fit,
                               symbolic_kwargs=symbolic_kwargs)
    base = closed_form_base(loss)
    report = replace(report, closed_form_base=base)
    if report.chosen:
        span = 3 * report.data.error_std
        t = report.data.grid["t"]
        distilled = ClosedFormValueLoss(report.chosen.expression, **base)
        _save_figure(value_loss_figure(loss, lparams, e_range=(-span, span), targets=(t,),
                                       compare={"distilled": (distilled, {})}),
                     out / "value_loss_learned_vs_distilled")
    return report


def distil_run_shaping(out, observations, objectives, params, seed, symbolic=True, symbolic_kwargs=None,
                       env: str | None = None) -> DistillationReport:
    """Fit the potential on visited observations [n, *obs_shape] (beside `env`'s named potential,
    where it has one); draws learned vs distilled over the first two observation variables."""
    import jax
    import numpy as np

    from metadisco.analysis.distillation.data import observation_grid
    from metadisco.analysis.distillation.fit import distil_shaping
    from metadisco.analysis.figures.shaping import OBS_NAMES, potential_comparison_figure
    from metadisco.meta_objectives import ClosedFormShaping

    shaping, sparams = objectives.shaping, params["shaping"]
    flat = np.asarray(observations).reshape(len(observations), -1)
    obs_shape = tuple(shaping.observation_shape() or flat.shape[1:])

    def learned(obs):  # [m, obs_dim] -> [m]
        return shaping.potential(sparams, obs.reshape((-1,) + obs_shape))

    report = distil_shaping(jax.jit(learned), flat, seed=seed, symbolic=symbolic, symbolic_kwargs=symbolic_kwargs,
                            env=env)
    if report.chosen:
        closed = ClosedFormShaping(report.chosen.expression, obs_shape=obs_shape)
        _, axes = observation_grid(flat)
        _save_figure(potential_comparison_figure(
            {"learned": learned, "distilled": lambda obs: closed.potential({}, obs.reshape((-1,) + obs_shape))},
            axes, flat.mean(0), dim_names=OBS_NAMES.get(env)), out / "shaping_learned_vs_distilled")
    return report


def stored_report(run: Run, plug: str, which: str | None = None) -> DistillationReport | None:
    """RUN_DIR/distil/'s report for `plug` where it was fitted to the run's objective `which` (default: the
    one readers take, Run.default_which) as that objective is now; None when `metadisco distil` has not
    written one, or wrote it for another objective (`distil --which`, or a run resumed or extended since:
    its closed form is not this objective's). RunDirError naming the file when it is not a report."""
    path = run.distil_dir / REPORT_FILES[plug]
    if not path.is_file():
        return None
    report = read_report(path)
    which = which or run.default_which()
    source = report.source
    if source is None or source.which != which or not run.objectives_path(which).is_file():
        return None
    if source.params_digest is not None:
        _, params, _ = run.objectives(which)
        if source.params_digest != params_digest(params.get(plug, {})):
            return None
    return report


def params_digest(params) -> str:
    """A digest of one plug's parameters (a pytree of arrays): what a distillation was fitted to."""
    import hashlib

    import jax
    import numpy as np

    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        a = np.ascontiguousarray(np.asarray(leaf))
        h.update(f"{jax.tree_util.keystr(path)}:{a.dtype}:{a.shape}".encode() + a.tobytes())
    return h.hexdigest()[:16]

"""Distilling a run: fit closed forms to what it evolved, on the points its training visits.

    plugs = distillable(config)                       which plug points have closed forms to fit
    rows = visited_samples(key, env, ppo, objectives, params)   [n, 4] (ratio, advantage, value, target)
    reports = distil_run(run, rows, objectives, params, plugs=plugs)   writes RUN_DIR/distil/
    report = stored_report(run, plug)                 a report written earlier, or None

`metadisco distil` and `metadisco export` are thin callers of these. The drift is fitted on the
visited (r, A) mixed with a share from the default prior (training alone rarely reaches the walls
of a trust region, which is what the walls are for); the value loss on the visited (v - target,
target). Each report is RUN_DIR/distil/{distil,value_loss}.json, beside a learned-vs-distilled
figure. Imports jax on use (the command line imports this before it sets XLA_FLAGS).
"""

from __future__ import annotations

import json

from analysis.runs import Run, RunDirError, writing
from meta_objectives.errors import MetadiscoError
from meta_objectives.fileio import atomic_write_text, save_figure, to_jsonable

DISTILLABLE = ("drift", "value_loss")
REPORT_FILES = {"drift": "distil.json", "value_loss": "value_loss.json"}


def distillable(config: dict) -> tuple[str, ...]:
    """The run's evolved plug points that have closed forms; RunDirError when there are none."""
    evolved = tuple(config.get("objectives", {}).get("evolve", ("drift",)))
    plugs = tuple(p for p in DISTILLABLE if p in evolved)
    if not plugs:
        raise RunDirError(
            f"this run evolved {', '.join(evolved)}; metadisco distils drifts and value losses into closed "
            "forms. A learned reward shaping is a potential over the environment's observations, with no "
            "closed form to fit here: evaluate it as it is (metadisco evaluate RUN_DIR --envs ITS_ENV)")
    return plugs


def visited_samples(key, env, ppo_config, objectives, params, seeds: int = 2, per_update: int = 64):
    """(ratio, advantage, value, target) rows [seeds * num_updates * per_update, 4] visited by PPO
    trained with `objectives` at `params` on `env` (`ppo_config`), one run per seed."""
    import jax

    from inner_loops import make_train

    train = make_train(env, ppo_config.replace(record_samples=per_update), objectives)
    result = jax.jit(jax.vmap(train, in_axes=(0, None)))(jax.random.split(key, seeds), params)
    return jax.device_get(result.visited).reshape(-1, 4)


class Difference:
    """A drift-like view of a - b (each an objective with its params), for a difference panel."""

    def __init__(self, a, pa, b, pb):
        self.a, self.pa, self.b, self.pb = a, pa, b, pb

    def drift(self, params, ratio, advantage, progress):
        return self.a.drift(self.pa, ratio, advantage, progress) - self.b.drift(self.pb, ratio, advantage, progress)


def check_options(progress: float | None = None, prior_fraction: float = 0.5) -> None:
    """Refuse out-of-range options before any compute (MetadiscoError)."""
    if not 0.0 <= prior_fraction < 1.0:
        raise MetadiscoError(f"--prior-fraction must be in [0, 1), got {prior_fraction}")
    if progress is not None and not 0.0 <= progress <= 1.0:
        raise MetadiscoError(f"--progress is the share of training done, in [0, 1]; got {progress}")


def distil_run(run: Run, rows, objectives, params, which: str = "mean", symbolic: bool = True,
               progress: float | None = None, seed: int = 0, prior_fraction: float = 0.5,
               plugs=("drift",)) -> dict:
    """Distil each plug in `plugs` from the visited `rows` -> {plug: report}; writes RUN_DIR/distil/.

    prior_fraction: share of drift fit points drawn from the default prior over (r, A) instead
    of from training. progress: fit a progress-dependent drift at this one progress (default:
    fitted at the start and end of training and interpolated).
    """
    check_options(progress, prior_fraction)
    out = run.distil_dir
    reports = {}
    if "drift" in plugs:
        reports["drift"] = distil_drift(out, rows[:, :2], objectives, params, symbolic, progress, seed,
                                        prior_fraction)
    if "value_loss" in plugs:
        reports["value_loss"] = distil_value_loss(out, rows[:, 2], rows[:, 3], objectives, params, seed)
    for plug, report in reports.items():
        report["source"] = {"run_dir": str(run.path), "which": which, plug: getattr(objectives, plug).spec(),
                            **({"prior_fraction": prior_fraction} if plug == "drift" else {})}
        write_output(out / REPORT_FILES[plug], json.dumps(to_jsonable(report), indent=1))
    return reports


def write_output(path, text: str) -> None:
    """An analysis output written atomically; a failed write is a RunWriteError naming the file."""
    with writing(path):
        atomic_write_text(path, text)


def _save_figure(fig, stem) -> None:
    with writing(f"{stem}.png/.pdf"):
        save_figure(fig, stem)


def distil_drift(out, samples, objectives, params, symbolic, progress, seed, prior_fraction) -> dict:
    """Fit the drift on visited (r, A) [n, 2] mixed with the prior; draws learned vs distilled."""
    import jax
    import numpy as np

    from analysis.distil import distil, distil_over_progress, sample_prior
    from analysis.plots import drift_surface_figure
    from meta_objectives import ClosedFormDrift

    drift, dparams = objectives.drift, params["drift"]
    over_progress = progress is None and drift.depends_on_progress
    if progress is None:
        progress = 0.5 if over_progress else 0.0
    if prior_fraction > 0:
        k = int(round(len(samples) * prior_fraction / (1.0 - prior_fraction)))
        ratio, advantage = sample_prior(k, seed)
        samples = np.concatenate([samples, np.stack([ratio, advantage], -1)])

    def drift_fn(r, a, p):
        return drift.drift(dparams, r, a, p)

    if over_progress:  # TA-LPO: interpolate closed forms fitted at the start and the end of training
        report = distil_over_progress(jax.jit(drift_fn), samples=samples, seed=seed, symbolic=symbolic)
    else:
        report = distil(jax.jit(drift_fn), samples=samples, seed=seed, symbolic=symbolic, progress=progress)
    if report["chosen"]:
        closed = ClosedFormDrift(report["chosen"]["expression"])
        _save_figure(drift_surface_figure({
            "learned": (drift, dparams),
            "distilled": (closed, {}),
            "learned − distilled": (Difference(drift, dparams, closed, {}), {}),
        }, progress=progress), out / "learned_vs_distilled")
    return report


def distil_value_loss(out, values, targets, objectives, params, seed) -> dict:
    """Fit the value loss on visited predictions and targets [n]; draws learned vs distilled."""
    import jax

    from analysis.distil import distil_value_loss as fit_value_loss
    from analysis.plots import value_loss_figure
    from meta_objectives import ClosedFormValueLoss

    loss, lparams = objectives.value_loss, params["value_loss"]
    loss_fn = jax.jit(lambda v, t: loss.value_loss(lparams, v, t, v))
    report = fit_value_loss(loss_fn, values - targets, targets, seed=seed)
    if report["chosen"]:
        span = 3 * report["data"]["error_std"]
        t = report["data"]["grid"]["t"]
        _save_figure(value_loss_figure(loss, lparams, e_range=(-span, span), targets=(t,),
                                       compare={"distilled": (ClosedFormValueLoss(report["chosen"]["expression"]), {})}),
                     out / "value_loss_learned_vs_distilled")
    return report


def stored_report(run: Run, plug: str) -> dict | None:
    """RUN_DIR/distil/'s report for `plug`, or None when `metadisco distil` has not written it."""
    path = run.distil_dir / REPORT_FILES[plug]
    return run.read_json(f"distil/{REPORT_FILES[plug]}") if path.is_file() else None

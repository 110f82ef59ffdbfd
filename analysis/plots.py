"""Figures that make a discovered objective legible, and a self-contained HTML report of a run.

This module defines `plot_run`, which reads a run directory, draws every figure that applies,
saves them and writes `report.html`. The figure builders it draws with are defined in
`metadisco.analysis.figures` (each takes objects, an objective and its params or metrics rows, and returns a
matplotlib `Figure`):

    drift_surface_figure(drifts)          D(r, A) heatmaps side by side (one colour scale per row)
                                          and d(rA - D)/dr, the policy-gradient weight (row 2)
    drift_slices_figure(drifts)           D(r) at fixed advantages, one panel per A
    progress_surfaces_figure(obj, p)      TA-LPO: D(r, A; n/N) at several training progresses
    value_loss_figure(obj, p)             a value loss and its gradient vs the error e = v - t
    shaping_figure(obj, p, low, high)     a learned potential Phi(s) over 2-D observation slices
    training_curves_figure(records)       fitness and ES step size over generations

Each builder lives in `metadisco.analysis.figures.<what it draws>` (drift, value_loss, shaping, training;
the shared theme in `metadisco.analysis.figures.style`), the page in `metadisco.analysis.report`; import them from
there. Every panel axis carries a label (`Axes.get_label()`), e.g. "surface/<title>",
"slice/A=<a>", "value_loss/loss", "shaping/<i>,<j>", "curves/fitness", so callers and tests find
panels without relying on their order; colour-bar axes keep matplotlib's own label "<colorbar>".
Importing this module changes no global matplotlib state (themes are scoped rc contexts).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from metadisco.analysis.figures.drift import (
    default_drift_comparison,
    drift_slices_figure,
    drift_surface_figure,
    progress_surfaces_figure,
)
from metadisco.analysis.figures.shaping import shaping_bounds, shaping_figure
from metadisco.analysis.figures.style import PNG_DPI
from metadisco.analysis.figures.training import training_curves_figure
from metadisco.analysis.figures.value_loss import value_loss_figure
from metadisco.analysis.report import write_report
from metadisco.analysis.runs import Run
from metadisco.core.errors import EXIT_FAILED, MetadiscoError
from metadisco.core.fileio import save_figure
from metadisco.core.plugs import PLUGS
from metadisco.core.strategies import searched_point
from metadisco.measure.run_files import WHICH

FORMATS = ("png", "pdf", "svg")


class PlotError(MetadiscoError):
    """A run directory (or input) that cannot be plotted; the message says what to do."""


class FigureError(PlotError):
    """Some figures failed to draw (a bug: each traceback went to stderr). Raised after every other
    figure and the report were written: `failed` names the figures, `written` is what `plot_run`
    would have returned. `metadisco plot` exits with EXIT_FAILED."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, failed: list[str], written: dict):
        super().__init__(message)
        self.failed, self.written = failed, written


def newest_evaluation(run: Run) -> Path | None:
    """The newest RUN_DIR/evaluation/<timestamp>/ that `metadisco evaluate RUN_DIR` finished
    (it holds results.md), or None."""
    found = sorted(p.parent for p in run.evaluation_dir.glob("*/results.md")) if run.evaluation_dir.is_dir() else []
    return found[-1] if found else None


def _distillation(run: Run, config, which: str) -> dict:
    """{plug: distil's stored report of the objective `which`, or None before `metadisco distil` (or where it
    distilled another objective)} for each evolved plug point with closed forms."""
    from metadisco.analysis.distillation.run import DISTILLABLE, stored_report

    return {plug: stored_report(run, plug, which) for plug in DISTILLABLE if plug in config.objectives.evolve}


def _found(loaded, evolve) -> dict:
    """{plug: MetaObjective.found at the saved parameters} for each evolved plug ({} without objectives)."""
    if loaded is None:
        return {}
    objectives, params, _ = loaded
    return {plug: getattr(objectives, plug).found(params.get(plug)) for plug in PLUGS if plug in evolve}


def _drawn(plug: str, objective, evolve) -> bool:
    """Whether `plot_run` draws a plug's objective: evolved, or fixed and worth drawing but not a
    network at its start."""
    return plug in evolve or (objective.drawn_when_fixed and not objective.learned)


def plot_run(run_dir, out_dir=None, formats=("png", "pdf"), which: str | None = None, report: bool = True,
             notes: list | None = None, error_span: float | None = None) -> dict:
    """Draw every figure that applies to a run directory; save them and report.html.

    Reads the run through `metadisco.analysis.runs.Run`: config.json, the complete metrics.jsonl rows and
    objectives/<which>.json (which = "selected", the ES mean of the generation with the best validation
    score or the start where none scored higher, "mean", the last ES mean, or "best", the best member
    seen; None: selected where the run kept one, else mean).
    Figures go to `out_dir` (default RUN_DIR/figures) in each of `formats`; the report (PNG
    figures embedded as data URIs, the config summary, the verdict, the newest held-out
    evaluation and the distillation where they exist, and the last metrics row) to
    RUN_DIR/report.html (out_dir/report.html when out_dir is given).

    error_span: the value loss is drawn over errors e in [-error_span, error_span] (those the run's
    critic makes: `metadisco.api.plot` measures them), else over [-3, 3].

    Returns {figure name: [paths]} in drawing order, "report" last. Figures that were skipped
    or failed, and why, are listed in the report and appended to `notes` when a list is given.
    Raises PlotError or RunDirError (MetadiscoErrors) for a missing or incomplete run directory.
    A figure that fails does not stop the others: its traceback goes to stderr and, once every
    figure and the report are written, FigureError names the failed ones.
    """
    run = Run(run_dir)
    which = which or run.default_which()
    if which not in WHICH:
        raise PlotError(f"--which must be one of {', '.join(WHICH)}, got {which!r}")
    formats = tuple(f.strip().lower().lstrip(".") for f in formats if f.strip())
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise PlotError(f"unsupported figure format(s) {bad or formats}; choose from {', '.join(FORMATS)}")
    config, rows = run.config(), run.metrics()
    notes = [] if notes is None else notes
    loaded = None
    if run.objectives_path(which).is_file():
        loaded = run.objectives(which)  # RunDirError if corrupt
    else:
        others = sorted(p.name for p in run.objectives_dir.glob("*.json")) if run.objectives_dir.is_dir() else []
        notes.append(f"no objectives/{which}.json" + (f" (found {', '.join(others)}; try --which)" if others else
                     " (the run has not written a checkpoint yet)") + ": objective figures skipped")
    if loaded is None and not rows:
        raise PlotError(f"{run.path} is incomplete: no metrics.jsonl rows and no objectives/{which}.json; "
                        "the run stopped before its first generation. Train it (`metadisco train --resume "
                        f"{run.path}`) before plotting.")
    out_dir = Path(out_dir) if out_dir is not None else run.figures_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path = (out_dir if out_dir != run.figures_dir else run.path) / "report.html"
    # The report embeds PNGs: draw one for it even when PNG is not among the formats asked for.
    drawn_formats = formats + (("png",) if report and "png" not in formats else ())

    written: dict[str, list[Path]] = {}
    images: dict[str, Path] = {}
    failed: list[str] = []

    def emit(name, make):
        try:
            files = save_figure(make(), out_dir / name, drawn_formats, dpi=PNG_DPI)
        except Exception as e:  # a bug: shown now, raised after the other figures are drawn
            print(f"plot_run: figure {name!r} failed to draw:", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            notes.append(f"{name}: not drawn ({type(e).__name__}: {e})")
            failed.append(name)
            return
        written[name] = [files[f] for f in formats]
        if "png" in files:
            images[name] = files["png"]

    if rows:
        emit("training_curves", lambda: training_curves_figure(rows, f"fitness ({config.fitness})",
                                                               searched_point(config.es.strategy)))
    evolve = set(config.objectives.evolve)
    if loaded is not None:
        objectives, params, _extra = loaded
        # What the run evolved is drawn, and a fixed objective worth drawing (a discovered closed
        # form); a network the run did not evolve is at its start (LPO is PPO-clip there): not drawn.
        drift, vl, shaping = objectives.drift, objectives.value_loss, objectives.shaping
        if _drawn("drift", drift, evolve):
            title = drift.title if drift.learned or "drift" not in evolve else f"evolved {drift.title}"
            title += f" [{which}]" if "drift" in evolve else " (fixed)"
            drifts = default_drift_comparison(drift, params.get("drift"), title)
            emit("drift_surface", lambda: drift_surface_figure(drifts))
            emit("drift_slices", lambda: drift_slices_figure(drifts))
            if drift.depends_on_progress:
                emit("progress_surfaces", lambda: progress_surfaces_figure(drift, params.get("drift")))
        if _drawn("value_loss", vl, evolve):
            e_range = (-error_span, error_span) if error_span else (-3.0, 3.0)
            emit("value_loss", lambda: value_loss_figure(vl, params.get("value_loss"), e_range=e_range))
        if _drawn("shaping", shaping, evolve):
            low, high, names = shaping_bounds(shaping, list(config.envs), notes)
            emit("shaping", lambda: shaping_figure(shaping, params.get("shaping"), low, high, dim_names=names))
    if report:
        write_report(report_path, run.path, config, rows, images, written, notes, which,
                     loaded[2] if loaded is not None else {}, evaluation=newest_evaluation(run),
                     distillation=_distillation(run, config, which),
                     exported=sorted(p for p in run.export_dir.rglob("*") if p.is_file()) if run.export_dir.is_dir() else [],
                     what_was_found=_found(loaded, evolve))
        for png in images.values() if "png" not in formats else ():
            png.unlink()  # drawn for the report only
        written["report"] = [report_path]
    if failed:
        raise FigureError(
            f"{len(failed)} figure(s) failed to draw: {', '.join(failed)} (tracebacks above: a bug, please report "
            f"it); the other figures{' and ' + str(report_path) if report else ''} were written",
            failed, written)
    return written

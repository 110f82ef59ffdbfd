"""The training-curves figure: ES fitness over generations and the ES step size."""

from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from metadisco.analysis.figures.style import theme
from metadisco.core.records import GenerationRecord, completed, finite
from metadisco.measure.health import NOISY_COSINE
from metadisco.measure.selection import selection

__all__ = ["training_curves_figure"]


def _column(values):
    """Numbers (None: not recorded) -> a float64 array, NaN where there is none."""
    return np.asarray([np.nan if v is None else float(v) for v in values], np.float64)


def training_curves_figure(records: list[GenerationRecord], fitness_label: str = "fitness", subject: str = "ES mean"):
    """Fitness over generations (top), search health (middle, where the run measured it) and the
    ES step size sigma (bottom).

    Top: population mean (line) with the min-max band, the highest member score so far (a
    maximum over noisy scores, dashed), and, on generations that were evaluated, the ES mean,
    its start point and PPO on the same fresh seeds (markers); where the run validates, the ES mean
    and its start on the validation problems, the selected one starred (metadisco.measure.run_files.
    selection: the start where no ES mean scored higher, at the check that scored it). Middle: the split-half cosine of
    the ES gradient per generation and its 5-generation running mean (metadisco.measure.health);
    below the dotted line the gradient is mostly seed noise. Bottom: sigma (log scale when
    positive). subject: what the run follows (metadisco.core.strategies.searched_point: the best
    member for a population-based strategy). Returns the Figure.
    """
    rows = list(records)
    if not rows:
        raise ValueError("training_curves_figure needs at least one generation's record")
    gen = np.array([completed(r) for r in rows], float)  # generations done, as the console and report count
    mean, lo, hi = (_column(r.fitness_mean for r in rows), _column(r.fitness_min for r in rows),
                    _column(r.fitness_max for r in rows))
    best = _column(r.best_fitness for r in rows) if any(r.best_fitness is not None for r in rows) else hi
    best = np.fmax.accumulate(np.where(np.isnan(best), -np.inf, best))
    best[np.isneginf(best)] = np.nan
    colors = sns.color_palette("colorblind")
    with theme():
        cos = _column(r.health.grad_cos if r.health is not None else None for r in rows)
        measured = bool(np.isfinite(cos).any())
        fig, axes = plt.subplots(3 if measured else 2, 1, figsize=(6.0, 6.0 if measured else 4.6), sharex=True,
                                 layout="constrained", height_ratios=(2.2, 1.0, 1.0) if measured else (2.2, 1.0))
        ax_f, ax_s = axes[0], axes[-1]
        ax_f.fill_between(gen, lo, hi, color=colors[0], alpha=0.2, linewidth=0, label="population min–max")
        ax_f.plot(gen, mean, color=colors[0], linewidth=1.5, label="population mean")
        ax_f.plot(gen, best, color=colors[1], linewidth=1.0, linestyle="--", alpha=0.7,
                  label="max member so far (selected on noise)")
        evals = [r for r in rows if r.comparison is not None and r.comparison.scored]
        if evals:
            eg = np.array([completed(r) for r in evals], float)
            ax_f.plot(eg, _column(r.comparison.mean for r in evals), color=colors[2], marker="o", markersize=4,
                      linestyle=":", linewidth=1.0, label=f"{subject} (fresh seeds)")
            ax_f.plot(eg, _column(r.comparison.ppo for r in evals), color=colors[3], marker="s", markersize=4,
                      linestyle=":", linewidth=1.0, label="PPO (same seeds)")
            if any(finite(r.comparison.start) for r in evals):
                ax_f.plot(eg, _column(r.comparison.start for r in evals), color=colors[7], marker="^", markersize=4,
                          linestyle=":", linewidth=1.0, label="its start (same seeds)")
        validated = [r for r in rows if r.validation is not None]  # RunConfig.validation: never trained on
        chosen = selection(validated)  # the best of the ES means and the start, as the run kept it
        if chosen.record is not None:
            vg = np.array([completed(r) for r in validated], float)
            ax_f.plot(vg, _column(r.validation.mean for r in validated), color=colors[5], marker="D", markersize=4,
                      linestyle="-", linewidth=1.0, label="mean on validation (fresh seeds)")
            if any(finite(r.validation.start) for r in validated):
                ax_f.plot(vg, _column(r.validation.start for r in validated), color=colors[7], marker="v",
                          markersize=4, linestyle="-", linewidth=1.0, label="its start on validation")
            ax_f.plot(completed(chosen.record), chosen.score, color=colors[7 if chosen.start else 5], marker="*",
                      markersize=12, linestyle="none",
                      label="selected: the start (best validation)" if chosen.start else "selected (best validation)")
        ax_f.set_ylabel(fitness_label)
        ax_f.set_title("Meta-training progress")
        ax_f.legend(frameon=False, fontsize="small", ncols=2)
        ax_f.set_label("curves/fitness")
        if measured:
            _health_panel(axes[1], gen, cos, colors)
        sigma = _column(r.sigma for r in rows)
        ax_s.plot(gen, sigma, color=colors[4], linewidth=1.3, marker="." if len(rows) < 30 else None)
        shown = sigma[np.isfinite(sigma)]
        if shown.size and np.all(shown > 0):
            ax_s.set_yscale("log")
            if shown.max() / shown.min() < 3.0:  # (nearly) constant: a readable decade around it
                centre = math.sqrt(shown.max() * shown.min())
                ax_s.set_ylim(centre / 3.0, centre * 3.0)
        ax_s.set_ylabel("ES step size σ")
        ax_s.set_xlabel("generation")
        ax_s.set_label("curves/sigma")
        if len(rows) < 15:
            ax_s.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    return fig


def _health_panel(ax, gen, cos, colors, window: int = 5) -> None:
    """The split-half cosine of the ES gradient per generation, its running mean, and the line
    below which the gradient is mostly seed noise."""
    ax.plot(gen, cos, color=colors[5], linewidth=0, marker=".", markersize=3, alpha=0.6)
    finite = np.where(np.isfinite(cos), cos, 0.0)
    counts = np.convolve(np.isfinite(cos), np.ones(window), "full")[: len(cos)]
    running = np.convolve(finite, np.ones(window), "full")[: len(cos)] / np.maximum(counts, 1)
    ax.plot(gen, np.where(counts > 0, running, np.nan), color=colors[5], linewidth=1.4,
            label=f"running mean ({window} gen.)")
    ax.axhline(NOISY_COSINE, color="0.4", linestyle=":", linewidth=1.0, label="below: mostly seed noise")
    ax.axhline(0.0, color="0.7", linewidth=0.6)
    ax.set_ylim(-1.05, 1.05)
    ax.set_ylabel("gradient cosine\n(seed halves)")
    ax.legend(frameon=False, fontsize="x-small", loc="lower right", ncols=2)
    ax.set_label("curves/health")

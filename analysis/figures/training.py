"""The training-curves figure: ES fitness over generations and the ES step size."""

from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from analysis.figures.style import theme

__all__ = ["training_curves_figure"]


def _column(rows, key):
    return np.asarray([np.nan if r.get(key) is None else float(r[key]) for r in rows], np.float64)


def training_curves_figure(metrics_rows, fitness_label: str = "fitness"):
    """Fitness over generations (top) and the ES step size sigma (bottom).

    Top: population mean (line) with the min-max band, best so far, and, on generations that
    were evaluated, the ES mean vs PPO on the same fresh seeds (markers). Bottom: sigma (log
    scale when positive). Returns the Figure.
    """
    rows = [r for r in metrics_rows if isinstance(r, dict) and "generation" in r]
    if not rows:
        raise ValueError("training_curves_figure needs at least one metrics row with a 'generation'")
    gen = _column(rows, "generation")
    mean, lo, hi = (_column(rows, k) for k in ("fitness_mean", "fitness_min", "fitness_max"))
    best = _column(rows, "best_fitness") if any("best_fitness" in r for r in rows) else hi
    best = np.fmax.accumulate(np.where(np.isnan(best), -np.inf, best))
    best[np.isneginf(best)] = np.nan
    colors = sns.color_palette("colorblind")
    with theme():
        fig, (ax_f, ax_s) = plt.subplots(2, 1, figsize=(6.0, 4.6), sharex=True, layout="constrained",
                                         height_ratios=(2.2, 1.0))
        ax_f.fill_between(gen, lo, hi, color=colors[0], alpha=0.2, linewidth=0, label="population min–max")
        ax_f.plot(gen, mean, color=colors[0], linewidth=1.5, label="population mean")
        ax_f.plot(gen, best, color=colors[1], linewidth=1.2, linestyle="--", label="best so far")
        evals = [r for r in rows if r.get("eval_mean_fitness") is not None]
        if evals:
            eg = _column(evals, "generation")
            ax_f.plot(eg, _column(evals, "eval_mean_fitness"), color=colors[2], marker="o", markersize=4,
                      linestyle=":", linewidth=1.0, label="ES mean (held-out seeds)")
            ax_f.plot(eg, _column(evals, "eval_ppo_fitness"), color=colors[3], marker="s", markersize=4,
                      linestyle=":", linewidth=1.0, label="PPO (same seeds)")
        ax_f.set_ylabel(fitness_label)
        ax_f.set_title("Meta-training progress")
        ax_f.legend(frameon=False, fontsize="small", ncols=2)
        ax_f.set_label("curves/fitness")
        sigma = _column(rows, "sigma")
        ax_s.plot(gen, sigma, color=colors[4], linewidth=1.3, marker="." if len(rows) < 30 else None)
        finite = sigma[np.isfinite(sigma)]
        if finite.size and np.all(finite > 0):
            ax_s.set_yscale("log")
            if finite.max() / finite.min() < 3.0:  # (nearly) constant: a readable decade around it
                centre = math.sqrt(finite.max() * finite.min())
                ax_s.set_ylim(centre / 3.0, centre * 3.0)
        ax_s.set_ylabel("ES step size σ")
        ax_s.set_xlabel("generation")
        ax_s.set_label("curves/sigma")
        if len(rows) < 15:
            ax_s.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    return fig

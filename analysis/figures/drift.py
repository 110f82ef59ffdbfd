"""Drift figures: D(r, A) surfaces beside PPO-clip and DPO, slices at fixed advantages, and a
progress-dependent drift (TA-LPO) over training progress.

`drifts` is a dict {column title: (drift objective, params)} (params None: `objective.init`);
a `DriftDifference` as one of them draws a - b, and the difference of the two policy-gradient weights,
on colour scales and colour bars of its own.
Panel axes carry labels ("surface/<title>", "gradient/<title>", "slice/A=<a>", "progress/<p>",
"progress_change/<p>") so callers and tests find panels without relying on their order.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from metadisco.analysis.figures.style import (
    A_LABEL,
    D_LABEL,
    DIVERGING,
    R_LABEL,
    SEQUENTIAL,
    cmap,
    colorbar_extend,
    contours,
    heatmap,
    mark_r1,
    params_or_init,
    robust_max,
    theme,
)
from metadisco.meta_objectives import DPO, PPOClip
from metadisco.meta_objectives.base import jitted_method

__all__ = [
    "DriftDifference", "GRAD_LABEL", "DIFF_LABEL", "DIFF_GRAD_LABEL", "SLICE_ADVANTAGES", "default_drift_comparison",
    "drift_surface_figure", "drift_slices_figure", "progress_surfaces_figure",
]

GRAD_LABEL = "policy-gradient weight\n∂(rA − D)/∂r"
# A DriftDifference column (its title names the two drifts, "a − b"): ΔD = D_a − D_b, and the
# difference of the two policy-gradient weights, ∂(rA − D_a)/∂r − ∂(rA − D_b)/∂r = −∂ΔD/∂r.
DIFF_LABEL = "drift difference ΔD(r, A)"
DIFF_GRAD_LABEL = "weight difference\n−∂ΔD/∂r"
SLICE_ADVANTAGES = (-2.0, -1.0, -0.5, 0.5, 1.0, 2.0)


def _drift_grid(r_range, a_range, num):
    r = np.linspace(*r_range, num, dtype=np.float32)
    if r_range[0] < 1.0 < r_range[1]:  # put r = 1 exactly on the grid
        r[np.argmin(np.abs(r - 1.0))] = 1.0
    a = np.linspace(*a_range, num, dtype=np.float32)
    return r, a


class DriftDifference:
    """A drift-like view of a - b (each a drift objective with its params), for a difference column.

    Its surface is D_a - D_b; its gradient panel is the difference of the two policy-gradient
    weights, d(rA - D_a)/dr - d(rA - D_b)/dr = -d(D_a - D_b)/dr (not the weight of the difference
    drift, A - d(D_a - D_b)/dr, which is about A wherever the two agree). Each side is evaluated
    on its own, so two identical drifts draw exactly 0."""

    title = "difference"

    def __init__(self, a, pa, b, pb):
        self.a, self.pa, self.b, self.pb = a, pa, b, pb

    @property
    def depends_on_progress(self) -> bool:
        return self.a.depends_on_progress or self.b.depends_on_progress

    def drift(self, params, ratio, advantage, progress):
        return self.a.drift(self.pa, ratio, advantage, progress) - self.b.drift(self.pb, ratio, advantage, progress)


def _drift_values(objective, params, R, A, progress):
    if isinstance(objective, DriftDifference):
        return (_drift_values(objective.a, objective.pa, R, A, progress)
                - _drift_values(objective.b, objective.pb, R, A, progress))
    d = jitted_method(objective, "drift")(params, jnp.asarray(R), jnp.asarray(A), jnp.float32(progress))
    return np.broadcast_to(np.asarray(d, np.float64), R.shape)


def _surrogate_grad(objective, params, R, A, progress):
    """d(rA - D)/dr at every grid point via jax.grad, vmapped over the flattened grid; for a
    DriftDifference, the difference of its two drifts' weights."""
    if isinstance(objective, DriftDifference):
        return (_surrogate_grad(objective.a, objective.pa, R, A, progress)
                - _surrogate_grad(objective.b, objective.pb, R, A, progress))
    drift = jitted_method(objective, "drift")

    def surrogate(r, a, params, p):
        return r * a - drift(params, r, a, p)

    grad = jax.vmap(jax.grad(surrogate), in_axes=(0, 0, None, None))
    g = grad(jnp.asarray(R).ravel(), jnp.asarray(A).ravel(), params, jnp.float32(progress))
    return np.asarray(g, np.float64).reshape(R.shape)


def default_drift_comparison(objective=None, params=None, label: str | None = None) -> dict:
    """{title: (objective, params)}: the given drift (if any), then PPO-clip and DPO (Lu et al. 2022)."""
    clip_eps = getattr(objective, "clip_eps", 0.2)
    drifts = {}
    if objective is not None:
        drifts[label or objective.title] = (objective, params_or_init(objective, params))
    ppo = PPOClip(clip_eps=clip_eps)
    dpo = DPO()
    drifts[f"PPO-clip (ε = {clip_eps:g})"] = (ppo, {})
    drifts[f"DPO (α = {dpo.alpha:g}, β = {dpo.beta:g})"] = (dpo, dpo.default_params())
    return drifts


def drift_surface_figure(
    drifts: dict,
    progress: float = 0.0,
    r_range: tuple[float, float] = (0.5, 2.0),
    a_range: tuple[float, float] = (-3.0, 3.0),
    num: int = 121,
    gradient: bool = True,
):
    """Heatmaps of D(r, A), one column per drift, over r in r_range and A in a_range.

    Row 1: D with contours and the r = 1 line, on ONE colour scale shared by the row's drifts
    (0 .. the 99.5th percentile of their panels; the colour bar extends if some cells are above).
    Row 2 (`gradient`): d(rA - D)/dr, the weight the policy gradient puts on grad log pi
    (PPO-clip: A inside the trust region, 0 where clipped), via jax.grad and jax.vmap, on one
    symmetric diverging scale (white = 0).
    DriftDifference columns are signed and of another size: they get scales and colour bars of their
    own in both rows (symmetric, diverging), labelled DIFF_LABEL and DIFF_GRAD_LABEL (the
    difference of the two weights). Returns the Figure.
    """
    if not drifts:
        raise ValueError("drift_surface_figure needs at least one drift")
    r, a = _drift_grid(r_range, a_range, num)
    R, A = np.meshgrid(r, a)  # [num_a, num_r]: rows are A, columns are r
    titles = list(drifts)
    values = {t: _drift_values(o, params_or_init(o, p), R, A, progress) for t, (o, p) in drifts.items()}
    grads = ({t: _surrogate_grad(o, params_or_init(o, p), R, A, progress) for t, (o, p) in drifts.items()}
             if gradient else {})
    is_difference = {t: isinstance(o, DriftDifference) for t, (o, _) in drifts.items()}
    nrows, ncols = (2 if gradient else 1), len(titles)
    with theme():
        fig, axes = plt.subplots(nrows, ncols, figsize=(1.2 + 2.35 * ncols, 0.4 + 2.3 * nrows),
                                 sharex=True, sharey=True, squeeze=False, layout="constrained")
        fig.get_layout_engine().set(wspace=0.06)  # keep edge tick labels of neighbours apart
        for difference in (False, True):
            cols = [c for c, t in enumerate(titles) if is_difference[t] == difference]
            if not cols:
                continue
            row = [values[titles[c]] for c in cols]
            if difference:
                vmin = -(vmax := robust_max([np.abs(v) for v in row], 99.0))
            else:
                vmin, vmax = 0.0, robust_max(row)
            levels = np.linspace(0.0, vmax, 7)[1:]
            for col in cols:
                ax, title = axes[0, col], titles[col]
                mesh = heatmap(ax, r, a, values[title], cmap(DIVERGING if difference else SEQUENTIAL), vmin, vmax)
                if not difference:
                    contours(ax, r, a, values[title], levels, "white")
                mark_r1(ax, "black" if difference else "white")
                ax.set_title(title)
                ax.set_label(f"surface/{title}")
            fig.colorbar(mesh, ax=axes[0, cols], label=DIFF_LABEL if difference else D_LABEL,
                         extend=colorbar_extend(vmin, vmax, row), shrink=0.95, pad=0.02)
            if gradient:
                row = [grads[titles[c]] for c in cols]
                gmax = robust_max([np.abs(g) for g in row], 99.0)
                for col in cols:
                    ax = axes[1, col]
                    mesh = heatmap(ax, r, a, grads[titles[col]], cmap(DIVERGING), -gmax, gmax)
                    mark_r1(ax, "black")
                    ax.set_label(f"gradient/{titles[col]}")
                fig.colorbar(mesh, ax=axes[1, cols], label=DIFF_GRAD_LABEL if difference else GRAD_LABEL,
                             extend=colorbar_extend(-gmax, gmax, row), shrink=0.95, pad=0.02)
        for ax in axes[-1, :]:
            ax.set_xlabel(R_LABEL)
        for ax in axes[:, 0]:
            ax.set_ylabel(A_LABEL)
        suffix = f" at training progress n/N = {progress:g}" if _any_progress(drifts) else ""
        fig.suptitle(f"Drift surfaces{suffix}: policy loss = −(rA − D)")
    return fig


def _any_progress(drifts) -> bool:
    return any(o.depends_on_progress for o, _ in drifts.values())


def drift_slices_figure(
    drifts: dict,
    advantages=SLICE_ADVANTAGES,
    progress: float = 0.0,
    r_range: tuple[float, float] = (0.5, 2.0),
    num: int = 301,
):
    """D(r) at fixed advantages: one panel per A (2 rows), one line per drift, r = 1 marked.

    Each panel holds exactly len(drifts) data lines (label = the drift's title) plus the
    dashed r = 1 line (gid "r=1"); one legend for the figure. Returns the Figure.
    """
    if not drifts:
        raise ValueError("drift_slices_figure needs at least one drift")
    advantages = tuple(float(x) for x in advantages)
    r = np.linspace(*r_range, num, dtype=np.float32)
    ncols = math.ceil(len(advantages) / 2) if len(advantages) > 3 else len(advantages)
    nrows = math.ceil(len(advantages) / ncols)
    styles = ["-", "--", "-.", ":"]
    with theme():
        fig, axes = plt.subplots(nrows, ncols, figsize=(1.0 + 2.4 * ncols, 0.6 + 2.0 * nrows),
                                 sharex=True, squeeze=False, layout="constrained")
        colors = sns.color_palette("colorblind", len(drifts))
        R, A = np.meshgrid(r, np.asarray(advantages, np.float32))  # [num_A, num_r]: one call per drift
        curves = {t: _drift_values(o, params_or_init(o, p), R, A, progress) for t, (o, p) in drifts.items()}
        for k, ax in enumerate(axes.flat):
            if k >= len(advantages):
                ax.set_visible(False)
                continue
            adv = advantages[k]
            for i, title in enumerate(drifts):
                ax.plot(r, curves[title][k], color=colors[i], linestyle=styles[i % len(styles)], linewidth=1.4,
                        label=title)
            mark_r1(ax, "0.4")
            ax.set_title(f"A = {adv:g}")
            ax.set_label(f"slice/A={adv:g}")
            ax.set_ylim(bottom=0.0)
            if k % ncols == 0:
                ax.set_ylabel(D_LABEL)
            if k >= len(advantages) - ncols:
                ax.set_xlabel(R_LABEL)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), frameon=False)
        suffix = f" (training progress n/N = {progress:g})" if _any_progress(drifts) else ""
        fig.suptitle(f"Drift slices D(r) at fixed advantage{suffix}")
    return fig


def progress_surfaces_figure(
    objective,
    params=None,
    progresses=(0.0, 0.25, 0.5, 0.75, 1.0),
    r_range: tuple[float, float] = (0.5, 2.0),
    a_range: tuple[float, float] = (-3.0, 3.0),
    num: int = 101,
    difference: bool = True,
):
    """A progress-dependent drift (TA-LPO) at several training progresses n/N.

    Row 1: D(r, A; n/N) with one shared sequential scale. Row 2 (`difference`): the change
    D(r, A; n/N) - D(r, A; first progress) on a shared symmetric diverging scale. Returns the Figure.
    """
    params = params_or_init(objective, params)
    progresses = tuple(float(p) for p in progresses)
    r, a = _drift_grid(r_range, a_range, num)
    R, A = np.meshgrid(r, a)
    values = [_drift_values(objective, params, R, A, p) for p in progresses]
    nrows, ncols = (2 if difference else 1), len(progresses)
    with theme():
        fig, axes = plt.subplots(nrows, ncols, figsize=(1.2 + 2.1 * ncols, 0.4 + 2.1 * nrows),
                                 sharex=True, sharey=True, squeeze=False, layout="constrained")
        fig.get_layout_engine().set(wspace=0.06)  # keep edge tick labels of neighbours apart
        vmax = robust_max(values)
        levels = np.linspace(0.0, vmax, 7)[1:]
        for col, (p, v) in enumerate(zip(progresses, values)):
            ax = axes[0, col]
            mesh = heatmap(ax, r, a, v, cmap(SEQUENTIAL), 0.0, vmax)
            contours(ax, r, a, v, levels, "white")
            mark_r1(ax, "white")
            ax.set_title(f"n/N = {p:g}")
            ax.set_label(f"progress/{p:g}")
        fig.colorbar(mesh, ax=axes[0, :], label=D_LABEL, extend=colorbar_extend(0.0, vmax, values), shrink=0.95, pad=0.02)
        if difference:
            diffs = [v - values[0] for v in values]
            dmax = robust_max([np.abs(d) for d in diffs], 99.0)
            for col, (p, dv) in enumerate(zip(progresses, diffs)):
                ax = axes[1, col]
                mesh = heatmap(ax, r, a, dv, cmap(DIVERGING), -dmax, dmax)
                mark_r1(ax, "black")
                ax.set_label(f"progress_change/{p:g}")
            fig.colorbar(mesh, ax=axes[1, :], label=f"D − D(n/N = {progresses[0]:g})",
                         extend=colorbar_extend(-dmax, dmax, diffs), shrink=0.95, pad=0.02)
        for ax in axes[-1, :]:
            ax.set_xlabel(R_LABEL)
        for ax in axes[:, 0]:
            ax.set_ylabel(A_LABEL)
        fig.suptitle(f"{objective.title} drift over training progress n/N")
    return fig

"""Figures that make a discovered objective legible, and a self-contained HTML report of a run.

Figure builders take objects (an objective and its params, metrics rows) and return a matplotlib
`Figure`; `plot_run` reads a run directory, draws every figure that applies, saves them and
writes `report.html`:

    drift_surface_figure(drifts)          D(r, A) heatmaps side by side (one colour scale per row)
                                          and d(rA - D)/dr, the policy-gradient weight (row 2)
    drift_slices_figure(drifts)           D(r) at fixed advantages, one panel per A
    progress_surfaces_figure(obj, p)      TA-LPO: D(r, A; n/N) at several training progresses
    value_loss_figure(obj, p)             a value loss and its gradient vs the error e = v - t
    shaping_figure(obj, p, low, high)     a learned potential Phi(s) over 2-D observation slices
    training_curves_figure(rows)          fitness and ES step size over generations
    plot_run(run_dir)                     all of the above that apply -> files + report.html

`drifts` is a dict {column title: (drift objective, params)} (params None: `objective.init`).
Every panel axis carries a label (`Axes.get_label()`), e.g. "surface/<title>",
"gradient/<title>", "slice/A=<a>", "progress/<p>", "value_loss/loss", "shaping/<i>,<j>",
"curves/fitness", "curves/sigma", so callers and tests can find panels without relying on
their order; colour-bar axes keep matplotlib's own label "<colorbar>".

Styling is seaborn's (`context="paper", style="whitegrid"`), applied inside each builder with an
rc context rather than `sns.set_theme`, so importing this module changes no global state.
Palettes are colour-blind safe: "colorblind" for lines, "mako" sequential, "vlag" diverging with
symmetric limits (white = 0). The Agg backend is selected when pyplot has not been imported yet,
so everything works headless; in a notebook the notebook's backend is left alone.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import functools
import html
import io
import itertools
import json
import math
import sys
import warnings
from pathlib import Path

import matplotlib

if "matplotlib.pyplot" not in sys.modules:
    matplotlib.use("Agg")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402

from meta_objectives import DPO, PPOClip  # noqa: E402
from meta_objectives.fileio import atomic_write_text  # noqa: E402
from meta_objectives.io import load_objectives  # noqa: E402

__all__ = [
    "PlotError", "R_LABEL", "A_LABEL", "drift_surface_figure", "drift_slices_figure",
    "progress_surfaces_figure", "value_loss_figure", "shaping_figure", "training_curves_figure",
    "observation_bounds", "default_drift_comparison", "plot_run", "write_report",
]

R_LABEL = "probability ratio r = π/π_old"
A_LABEL = "advantage A (normalised)"
D_LABEL = "drift D(r, A)"
GRAD_LABEL = "policy-gradient weight\n∂(rA − D)/∂r"
SLICE_ADVANTAGES = (-2.0, -1.0, -0.5, 0.5, 1.0, 2.0)
SEQUENTIAL = "mako"
DIVERGING = "vlag"
FORMATS = ("png", "pdf", "svg")
PNG_DPI = 200

# Observation dimensions of common environments, for axis labels (units where there are any).
OBS_NAMES = {
    "CartPole-v1": ("cart position (m)", "cart velocity (m/s)", "pole angle (rad)", "pole angular velocity (rad/s)"),
    "MountainCar-v0": ("car position", "car velocity"),
    "MountainCarContinuous-v0": ("car position", "car velocity"),
    "Pendulum-v1": ("cos θ", "sin θ", "angular velocity θ̇ (rad/s)"),
    "Acrobot-v1": ("cos θ₁", "sin θ₁", "cos θ₂", "sin θ₂", "θ̇₁ (rad/s)", "θ̇₂ (rad/s)"),
}


class PlotError(ValueError):
    """A run directory (or input) that cannot be plotted; the message says what to do."""


# ---------------------------------------------------------------------------------------------
# Style helpers
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _theme():
    """sns.set_theme(context="paper", style="whitegrid"), scoped to the enclosed block."""
    rc = {}
    rc.update(sns.axes_style("whitegrid"))
    rc.update(sns.plotting_context("paper"))
    rc.update({
        "axes.prop_cycle": matplotlib.cycler(color=sns.color_palette("colorblind")),
        "figure.dpi": 100,
        "savefig.dpi": PNG_DPI,
        "pdf.fonttype": 42,  # embed TrueType: text stays editable and searchable in the PDF
        "axes.titleweight": "regular",
    })
    with plt.rc_context(rc):
        yield


def _cmap(name: str):
    return sns.color_palette(name, as_cmap=True)


def _robust_max(values, q: float = 99.5) -> float:
    """The q-th percentile of the finite values (a few extreme cells do not flatten the rest)."""
    finite = np.concatenate([np.asarray(v, np.float64).ravel() for v in values])
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return 1.0
    top = float(np.percentile(finite, q))
    return top if top > 0 else (float(finite.max()) if finite.max() > 0 else 1.0)


def _extend(vmin, vmax, values) -> str:
    finite = np.concatenate([np.asarray(v, np.float64).ravel() for v in values])
    finite = finite[np.isfinite(finite)]
    lo = finite.size and finite.min() < vmin - 1e-9 * max(1.0, abs(vmin))
    hi = finite.size and finite.max() > vmax + 1e-9 * max(1.0, abs(vmax))
    return {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[(bool(lo), bool(hi))]


def _contours(ax, x, y, z, levels, color):
    z = np.ma.masked_invalid(z)
    if z.count() == 0 or np.ptp(z.compressed()) <= 0:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no contour levels were found" on flat panels
        ax.contour(x, y, z, levels=levels, colors=color, linewidths=0.6, alpha=0.8)


def _mark_r1(ax, color):
    """The r = 1 line (where every drift is 0 and flat): dashed, gid "r=1"."""
    line = ax.axvline(1.0, color=color, linestyle="--", linewidth=0.9, label="_r = 1")
    line.set_gid("r=1")
    return line


def _heatmap(ax, x, y, z, cmap, vmin, vmax):
    mesh = ax.pcolormesh(x, y, np.ma.masked_invalid(z), cmap=cmap, vmin=vmin, vmax=vmax,
                         shading="nearest", rasterized=True)
    ax.grid(False)
    return mesh


# ---------------------------------------------------------------------------------------------
# Drifts
# ---------------------------------------------------------------------------------------------


def _params(objective, params):
    return objective.init(jax.random.key(0)) if params is None else params


def _drift_grid(r_range, a_range, num):
    r = np.linspace(*r_range, num, dtype=np.float32)
    if r_range[0] < 1.0 < r_range[1]:  # put r = 1 exactly on the grid
        r[np.argmin(np.abs(r - 1.0))] = 1.0
    a = np.linspace(*a_range, num, dtype=np.float32)
    return r, a


def _drift_values(objective, params, R, A, progress):
    d = objective.drift(params, jnp.asarray(R), jnp.asarray(A), jnp.float32(progress))
    return np.broadcast_to(np.asarray(d, np.float64), R.shape)


def _surrogate_grad(objective, params, R, A, progress):
    """d(rA - D)/dr at every grid point via jax.grad, vmapped over the flattened grid."""
    p = jnp.float32(progress)

    def surrogate(r, a):
        return r * a - objective.drift(params, r, a, p)

    g = jax.jit(jax.vmap(jax.grad(surrogate)))(jnp.asarray(R).ravel(), jnp.asarray(A).ravel())
    return np.asarray(g, np.float64).reshape(R.shape)


def default_drift_comparison(objective=None, params=None, label: str | None = None) -> dict:
    """{title: (objective, params)}: the given drift (if any), then PPO-clip and DPO (Lu et al. 2022)."""
    clip_eps = getattr(objective, "clip_eps", 0.2)
    drifts = {}
    if objective is not None:
        drifts[label or _drift_title(objective)] = (objective, _params(objective, params))
    ppo = PPOClip(clip_eps=clip_eps)
    dpo = DPO()
    drifts[f"PPO-clip (ε = {clip_eps:g})"] = (ppo, {})
    drifts[f"DPO (α = {dpo.alpha:g}, β = {dpo.beta:g})"] = (dpo, dpo.init(jax.random.key(0)))
    return drifts


def _drift_title(objective) -> str:
    names = {"lpo": "learned (LPO)", "talpo": "learned (TA-LPO)", "closed_form": "closed form",
             "dpo": "evolved DPO", "ppo_clip": "PPO-clip"}
    return names.get(objective.name, objective.name)


def drift_surface_figure(
    drifts: dict,
    progress: float = 0.0,
    r_range: tuple[float, float] = (0.5, 2.0),
    a_range: tuple[float, float] = (-3.0, 3.0),
    num: int = 121,
    gradient: bool = True,
):
    """Heatmaps of D(r, A), one column per drift, over r in r_range and A in a_range.

    Row 1: D with contours and the r = 1 line, on ONE colour scale shared by the row
    (0 .. the 99.5th percentile of all panels; the colour bar extends if some cells are above).
    Row 2 (`gradient`): d(rA - D)/dr, the weight the policy gradient puts on grad log pi
    (PPO-clip: A inside the trust region, 0 where clipped), via jax.grad and jax.vmap, on one
    symmetric diverging scale (white = 0). Returns the Figure.
    """
    if not drifts:
        raise ValueError("drift_surface_figure needs at least one drift")
    r, a = _drift_grid(r_range, a_range, num)
    R, A = np.meshgrid(r, a)  # [num_a, num_r]: rows are A, columns are r
    titles = list(drifts)
    values = {t: _drift_values(o, _params(o, p), R, A, progress) for t, (o, p) in drifts.items()}
    grads = ({t: _surrogate_grad(o, _params(o, p), R, A, progress) for t, (o, p) in drifts.items()}
             if gradient else {})
    nrows, ncols = (2 if gradient else 1), len(titles)
    with _theme():
        fig, axes = plt.subplots(nrows, ncols, figsize=(1.2 + 2.35 * ncols, 0.4 + 2.3 * nrows),
                                 sharex=True, sharey=True, squeeze=False, layout="constrained")
        fig.get_layout_engine().set(wspace=0.06)  # keep edge tick labels of neighbours apart
        vmax = _robust_max(values.values())
        levels = np.linspace(0.0, vmax, 7)[1:]
        for col, title in enumerate(titles):
            ax = axes[0, col]
            mesh = _heatmap(ax, r, a, values[title], _cmap(SEQUENTIAL), 0.0, vmax)
            _contours(ax, r, a, values[title], levels, "white")
            _mark_r1(ax, "white")
            ax.set_title(title)
            ax.set_label(f"surface/{title}")
        fig.colorbar(mesh, ax=axes[0, :], label=D_LABEL, extend=_extend(0.0, vmax, values.values()),
                     shrink=0.95, pad=0.02)
        if gradient:
            gmax = _robust_max([np.abs(g) for g in grads.values()], 99.0)
            for col, title in enumerate(titles):
                ax = axes[1, col]
                mesh = _heatmap(ax, r, a, grads[title], _cmap(DIVERGING), -gmax, gmax)
                _mark_r1(ax, "black")
                ax.set_label(f"gradient/{title}")
            fig.colorbar(mesh, ax=axes[1, :], label=GRAD_LABEL,
                         extend=_extend(-gmax, gmax, grads.values()), shrink=0.95, pad=0.02)
        for ax in axes[-1, :]:
            ax.set_xlabel(R_LABEL)
        for ax in axes[:, 0]:
            ax.set_ylabel(A_LABEL)
        suffix = f" at training progress n/N = {progress:g}" if _any_progress(drifts) else ""
        fig.suptitle(f"Drift surfaces{suffix}: policy loss = −(rA − D)")
    return fig


def _any_progress(drifts) -> bool:
    return any(getattr(o, "progress_features", False) or getattr(o, "name", "") == "closed_form"
               for o, _ in drifts.values())


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
    with _theme():
        fig, axes = plt.subplots(nrows, ncols, figsize=(1.0 + 2.4 * ncols, 0.6 + 2.0 * nrows),
                                 sharex=True, squeeze=False, layout="constrained")
        colors = sns.color_palette("colorblind", len(drifts))
        R, A = np.meshgrid(r, np.asarray(advantages, np.float32))  # [num_A, num_r]: one call per drift
        curves = {t: _drift_values(o, _params(o, p), R, A, progress) for t, (o, p) in drifts.items()}
        for k, ax in enumerate(axes.flat):
            if k >= len(advantages):
                ax.set_visible(False)
                continue
            adv = advantages[k]
            for i, title in enumerate(drifts):
                ax.plot(r, curves[title][k], color=colors[i], linestyle=styles[i % len(styles)], linewidth=1.4,
                        label=title)
            _mark_r1(ax, "0.4")
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
    params = _params(objective, params)
    progresses = tuple(float(p) for p in progresses)
    r, a = _drift_grid(r_range, a_range, num)
    R, A = np.meshgrid(r, a)
    values = [_drift_values(objective, params, R, A, p) for p in progresses]
    nrows, ncols = (2 if difference else 1), len(progresses)
    with _theme():
        fig, axes = plt.subplots(nrows, ncols, figsize=(1.2 + 2.1 * ncols, 0.4 + 2.1 * nrows),
                                 sharex=True, sharey=True, squeeze=False, layout="constrained")
        fig.get_layout_engine().set(wspace=0.06)  # keep edge tick labels of neighbours apart
        vmax = _robust_max(values)
        levels = np.linspace(0.0, vmax, 7)[1:]
        for col, (p, v) in enumerate(zip(progresses, values)):
            ax = axes[0, col]
            mesh = _heatmap(ax, r, a, v, _cmap(SEQUENTIAL), 0.0, vmax)
            _contours(ax, r, a, v, levels, "white")
            _mark_r1(ax, "white")
            ax.set_title(f"n/N = {p:g}")
            ax.set_label(f"progress/{p:g}")
        fig.colorbar(mesh, ax=axes[0, :], label=D_LABEL, extend=_extend(0.0, vmax, values), shrink=0.95, pad=0.02)
        if difference:
            diffs = [v - values[0] for v in values]
            dmax = _robust_max([np.abs(d) for d in diffs], 99.0)
            for col, (p, dv) in enumerate(zip(progresses, diffs)):
                ax = axes[1, col]
                mesh = _heatmap(ax, r, a, dv, _cmap(DIVERGING), -dmax, dmax)
                _mark_r1(ax, "black")
                ax.set_label(f"progress_change/{p:g}")
            fig.colorbar(mesh, ax=axes[1, :], label=f"D − D(n/N = {progresses[0]:g})",
                         extend=_extend(-dmax, dmax, diffs), shrink=0.95, pad=0.02)
        for ax in axes[-1, :]:
            ax.set_xlabel(R_LABEL)
        for ax in axes[:, 0]:
            ax.set_ylabel(A_LABEL)
        fig.suptitle(f"{_drift_title(objective)} drift over training progress n/N")
    return fig


# ---------------------------------------------------------------------------------------------
# Value loss
# ---------------------------------------------------------------------------------------------


def value_loss_figure(objective, params=None, e_range: tuple[float, float] = (-3.0, 3.0), targets=None,
                      num: int = 301, compare: dict | None = None):
    """A value loss against the prediction error e = v - t, beside L2 = e^2 / 2.

    Three panels: the loss L, its difference from L2 (where a learned loss departs from the
    baseline, invisible on the first panel when small) and the gradient dL/dv the critic follows.
    One learned line per target t (`targets`, default (-1, 0, 1) when the loss sees the target,
    else (0,)); L2 is dashed black. `compare` {label: (objective, params)} adds dotted lines (at
    the first target), e.g. a distilled closed form. old_value = v (no clipping). Returns the Figure.
    """
    params = _params(objective, params)
    if targets is None:
        targets = (-1.0, 0.0, 1.0) if getattr(objective, "use_target", False) else (0.0,)
    targets = tuple(float(t) for t in targets)
    e = np.linspace(*e_range, num, dtype=np.float32)
    l2 = 0.5 * e.astype(np.float64) ** 2

    def loss(v, t):
        return objective.value_loss(params, v, t, v)

    grad = jax.jit(jax.vmap(jax.grad(loss), in_axes=(0, None)))
    with _theme():
        fig, (ax_l, ax_d, ax_g) = plt.subplots(1, 3, figsize=(9.0, 2.9), layout="constrained")
        colors = sns.color_palette("colorblind", len(targets))
        for color, t in zip(colors, targets):
            v = jnp.asarray(e + t)
            label = "learned" if len(targets) == 1 else f"learned, t = {t:g}"
            values = np.asarray(loss(v, jnp.float32(t)), np.float64)
            ax_l.plot(e, values, color=color, linewidth=1.4, label=label)
            ax_d.plot(e, values - l2, color=color, linewidth=1.4, label=label)
            ax_g.plot(e, np.asarray(grad(v, jnp.float32(t))), color=color, linewidth=1.4, label=label)
        extra_colors = sns.color_palette("dark", len(compare or {}))
        for color, (label, (other, other_params)) in zip(extra_colors, (compare or {}).items()):
            t = jnp.float32(targets[0])
            v = jnp.asarray(e) + t
            other_params = _params(other, other_params)
            values = np.asarray(other.value_loss(other_params, v, t, v), np.float64)
            other_grad = jax.vmap(jax.grad(lambda x: other.value_loss(other_params, x, t, x)))(v)
            ax_l.plot(e, values, color=color, linestyle=":", linewidth=1.8, label=label)
            ax_d.plot(e, values - l2, color=color, linestyle=":", linewidth=1.8, label=label)
            ax_g.plot(e, np.asarray(other_grad), color=color, linestyle=":", linewidth=1.8, label=label)
        ax_l.plot(e, l2, color="black", linestyle="--", linewidth=1.0, label="L2 = e²/2")
        ax_d.axhline(0.0, color="black", linestyle="--", linewidth=1.0, label="L2")
        ax_g.plot(e, e, color="black", linestyle="--", linewidth=1.0, label="L2")
        for ax in (ax_l, ax_d, ax_g):
            ax.axvline(0.0, color="0.6", linewidth=0.6, zorder=0)
            ax.set_xlabel("prediction error e = v − t")
        ax_l.set_ylabel("value loss L")
        ax_d.set_ylabel("L − e²/2")
        ax_g.set_ylabel("gradient ∂L/∂v")
        ax_l.set_title("loss")
        ax_d.set_title("departure from L2")
        ax_g.set_title("gradient (what the critic follows)")
        ax_l.set_label("value_loss/loss")
        ax_d.set_label("value_loss/difference")
        ax_g.set_label("value_loss/gradient")
        ax_l.legend(frameon=False)
        fig.suptitle(f"Value loss ({objective.name}) vs L2 (v, t in return units)")
    return fig


# ---------------------------------------------------------------------------------------------
# Shaping
# ---------------------------------------------------------------------------------------------


def shaping_figure(objective, params, obs_low, obs_high, max_pairs: int = 6, num: int = 81,
                   dim_names=None):
    """The learned potential Phi(s) over 2-D slices of the observation space.

    One heatmap per pair of dimensions (the first `max_pairs` pairs in order (0,1), (0,2), ...),
    the other dimensions held at the midpoint of [obs_low, obs_high]; one shared diverging scale
    (white = 0, the potential before training). A 1-D observation gives a line. Returns the Figure.
    """
    params = _params(objective, params)
    shape = tuple(getattr(objective, "obs_shape", ()))
    dim = int(np.prod(shape)) if shape else int(np.size(obs_low))
    low = np.broadcast_to(np.asarray(obs_low, np.float32).ravel(), (dim,)).astype(np.float32)
    high = np.broadcast_to(np.asarray(obs_high, np.float32).ravel(), (dim,)).astype(np.float32)
    if not np.all(high > low):
        raise ValueError("shaping_figure needs obs_high > obs_low in every dimension")
    names = list(dim_names) if dim_names is not None and len(dim_names) == dim else [f"obs[{i}]" for i in range(dim)]
    mid = (low + high) / 2

    def potential(flat):  # [..., dim] -> [...]
        obs = flat.reshape(flat.shape[:-1] + (shape or (dim,)))
        return np.asarray(objective.potential(params, jnp.asarray(obs)), np.float64)

    with _theme():
        if dim == 1:
            fig, ax = plt.subplots(figsize=(4.0, 2.8), layout="constrained")
            x = np.linspace(low[0], high[0], num, dtype=np.float32)
            ax.plot(x, potential(x[:, None]), linewidth=1.4)
            ax.set_xlabel(names[0])
            ax.set_ylabel("potential Φ(s)")
            ax.set_label("shaping/0")
            fig.suptitle("Learned potential Φ(s)")
            return fig
        pairs = list(itertools.islice(itertools.combinations(range(dim), 2), max_pairs))
        grids = []
        for i, j in pairs:
            xi = np.linspace(low[i], high[i], num, dtype=np.float32)
            xj = np.linspace(low[j], high[j], num, dtype=np.float32)
            Xi, Xj = np.meshgrid(xi, xj)  # rows: dim j (y), columns: dim i (x)
            obs = np.broadcast_to(mid, Xi.shape + (dim,)).copy()
            obs[..., i], obs[..., j] = Xi, Xj
            grids.append((xi, xj, potential(obs)))
        ncols = min(3, len(pairs))
        nrows = math.ceil(len(pairs) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(1.3 + 2.6 * ncols, 0.5 + 2.4 * nrows),
                                 squeeze=False, layout="constrained")
        vmax = _robust_max([np.abs(g[2]) for g in grids], 99.5)
        mesh = None
        for k, ax in enumerate(axes.flat):
            if k >= len(pairs):
                ax.set_visible(False)
                continue
            (i, j), (xi, xj, phi) = pairs[k], grids[k]
            mesh = _heatmap(ax, xi, xj, phi, _cmap(DIVERGING), -vmax, vmax)
            _contours(ax, xi, xj, phi, np.linspace(-vmax, vmax, 9), "0.25")
            ax.plot([mid[i]], [mid[j]], marker="+", color="black", markersize=6, linestyle="none")
            ax.set_xlabel(names[i])
            ax.set_ylabel(names[j])
            ax.set_label(f"shaping/{i},{j}")
        fig.colorbar(mesh, ax=axes, label="potential Φ(s)", extend=_extend(-vmax, vmax, [g[2] for g in grids]),
                     shrink=0.9, pad=0.02)
        fig.suptitle("Learned potential Φ(s) on 2-D slices (other dimensions at the midpoint, +)")
    return fig


def observation_bounds(env_name: str, num_envs: int = 16, num_steps: int = 128, seed: int = 0,
                       quantiles: tuple[float, float] = (0.01, 0.99)):
    """(low, high), each [obs_dim] float32: quantiles of observations a uniformly random policy
    visits from a few resets of `env_name` (inner_loops.make_env). Degenerate dims get +-1.
    Deterministic in its arguments, so results are cached per process."""
    low, high = _observation_bounds(env_name, num_envs, num_steps, seed, tuple(quantiles))
    return low.copy(), high.copy()


@functools.lru_cache(maxsize=16)
def _observation_bounds(env_name, num_envs, num_steps, seed, quantiles):
    from inner_loops import make_env

    env = make_env(env_name)
    low_a = -1.0 if env.action_low is None else env.action_low
    high_a = 1.0 if env.action_high is None else env.action_high

    def random_action(key):
        if env.discrete:
            return jax.random.randint(key, (), 0, env.num_actions)
        return jax.random.uniform(key, (env.num_actions,), minval=low_a, maxval=high_a)

    def rollout(key):
        k_reset, k_steps = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def step(state, k):
            k_act, k_env = jax.random.split(k)
            out = env.step(k_env, state, random_action(k_act))
            return out.state, out.obs

        _, seq = jax.lax.scan(step, state, jax.random.split(k_steps, num_steps))
        return jnp.concatenate([obs[None], seq], axis=0)

    keys = jax.random.split(jax.random.key(seed), num_envs)
    obs = np.asarray(jax.jit(jax.vmap(rollout))(keys), np.float64).reshape(num_envs * (num_steps + 1), -1)
    obs = obs[np.all(np.isfinite(obs), axis=1)]
    if obs.shape[0] == 0:
        raise ValueError(f"{env_name}: no finite observations sampled")
    low, high = np.quantile(obs, quantiles[0], axis=0), np.quantile(obs, quantiles[1], axis=0)
    flat = high - low < 1e-6
    low, high = np.where(flat, low - 1.0, low), np.where(flat, high + 1.0, high)
    return low.astype(np.float32), high.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Training curves
# ---------------------------------------------------------------------------------------------


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
    with _theme():
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


# ---------------------------------------------------------------------------------------------
# A run directory -> figures + report.html
# ---------------------------------------------------------------------------------------------


def _read_run(run_dir: Path):
    if not run_dir.is_dir():
        raise PlotError(f"no run directory at {run_dir}; `metadisco train --run-dir {run_dir}` creates one")
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        raise PlotError(f"{cfg_path} is missing: {run_dir} is not a complete metadisco run directory")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise PlotError(f"{cfg_path} is corrupt ({e})") from e
    rows = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a crash
    return config, rows


def _save(fig, out_dir: Path, name: str, formats) -> tuple[list[Path], bytes]:
    """Write `fig` in every format; return the paths and the PNG bytes (for the report)."""
    paths = []
    png = None
    try:
        for fmt in formats:
            path = out_dir / f"{name}.{fmt}"
            fig.savefig(path, format=fmt, dpi=PNG_DPI, bbox_inches="tight")
            paths.append(path)
            if fmt == "png":
                png = path.read_bytes()
        if png is None:
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=PNG_DPI, bbox_inches="tight")
            png = buf.getvalue()
    finally:
        plt.close(fig)
    return paths, png


CAPTIONS = {
    "training_curves": "Fitness of the ES population per generation (mean, min–max band, best so far) and, "
                       "where evaluated, the ES mean against PPO on the same fresh seeds; below, the ES step size σ.",
    "drift_surface": "Drift D(r, A) of the discovered objective beside PPO-clip and DPO on one colour scale "
                     "(dashed: r = 1, where every drift is 0 and flat). Second row: ∂(rA − D)/∂r, the weight "
                     "the policy gradient puts on ∇log π at each (r, A); 0 where the update is clipped.",
    "drift_slices": "D(r) at fixed advantages A.",
    "progress_surfaces": "TA-LPO drift at several training progresses n/N, and its change from the start.",
    "value_loss": "Learned value loss and its gradient against the prediction error, beside L2.",
    "shaping": "Learned potential Φ(s) on 2-D slices of the observation space (other dimensions at the "
               "midpoint of the range a random policy visits).",
}


def plot_run(run_dir, out_dir=None, formats=("png", "pdf"), which: str = "mean", report: bool = True,
             notes: list | None = None) -> dict:
    """Draw every figure that applies to a run directory; save them and report.html.

    Reads RUN_DIR/config.json, metrics.jsonl and objectives/<which>.json (which = "mean", the ES
    mean, or "best", the best member seen). Figures go to `out_dir` (default RUN_DIR/figures) in
    each of `formats`; the report (PNG figures embedded as data URIs, the config summary and the
    last metrics row) to RUN_DIR/report.html (out_dir/report.html when out_dir is given).

    Returns {figure name: [paths]} in drawing order, "report" last. Figures that were skipped
    or failed, and why, are listed in the report and appended to `notes` when a list is given.
    Raises PlotError (a ValueError) for a missing or incomplete run directory.
    """
    run_dir = Path(run_dir)
    if which not in ("mean", "best"):
        raise PlotError(f"--which must be 'mean' or 'best', got {which!r}")
    formats = tuple(f.strip().lower().lstrip(".") for f in formats if f.strip())
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise PlotError(f"unsupported figure format(s) {bad or formats}; choose from {', '.join(FORMATS)}")
    config, rows = _read_run(run_dir)
    notes = [] if notes is None else notes
    obj_path = run_dir / "objectives" / f"{which}.json"
    loaded = None
    if obj_path.is_file():
        loaded = load_objectives(obj_path)  # ObjectiveFileError (a ValueError) if corrupt
    else:
        others = sorted(p.name for p in (run_dir / "objectives").glob("*.json")) if (run_dir / "objectives").is_dir() else []
        notes.append(f"no objectives/{which}.json" + (f" (found {', '.join(others)}; try --which)" if others else
                     " (the run has not written a checkpoint yet)") + ": objective figures skipped")
    if loaded is None and not rows:
        raise PlotError(f"{run_dir} is incomplete: no metrics.jsonl rows and no objectives/{which}.json; "
                        "the run stopped before its first generation. Train it (`metadisco train --resume "
                        f"{run_dir}`) before plotting.")
    out_dir = Path(out_dir) if out_dir is not None else run_dir / "figures"
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path = (out_dir if out_dir != run_dir / "figures" else run_dir) / "report.html"

    written: dict[str, list[Path]] = {}
    pngs: dict[str, bytes] = {}

    def emit(name, make):
        try:
            fig = make()
        except Exception as e:  # one broken figure must not lose the others
            notes.append(f"{name}: not drawn ({type(e).__name__}: {e})")
            return
        written[name], pngs[name] = _save(fig, out_dir, name, formats)

    if rows:
        emit("training_curves", lambda: training_curves_figure(rows, f"fitness ({config.get('fitness', '?')})"))
    evolve = set((config.get("objectives") or {}).get("evolve") or ())
    if loaded is not None:
        objectives, params, _extra = loaded
        drift = objectives.drift
        if drift.learned or drift.name == "closed_form" or "drift" in evolve:
            title = _drift_title(drift) + (f" [{which}]" if drift.learned or "drift" in evolve else "")
            drifts = default_drift_comparison(drift, params.get("drift"), title)
            emit("drift_surface", lambda: drift_surface_figure(drifts))
            emit("drift_slices", lambda: drift_slices_figure(drifts))
            if getattr(drift, "progress_features", False):
                emit("progress_surfaces", lambda: progress_surfaces_figure(drift, params.get("drift")))
        vl = objectives.value_loss
        if vl.learned or "value_loss" in evolve:
            emit("value_loss", lambda: value_loss_figure(vl, params.get("value_loss")))
        shaping = objectives.shaping
        if shaping.learned:
            envs = list(config.get("envs") or [])
            low, high, names = _shaping_bounds(shaping, envs, notes)
            emit("shaping", lambda: shaping_figure(shaping, params.get("shaping"), low, high, dim_names=names))
    if report:
        write_report(report_path, run_dir, config, rows, pngs, written, notes, which,
                     loaded[2] if loaded is not None else {})
        written["report"] = [report_path]
    return written


def _shaping_bounds(shaping, envs, notes):
    dim = int(np.prod(shaping.obs_shape))
    env = envs[0] if envs else None
    names = OBS_NAMES.get(env) if env else None
    if env:
        try:
            low, high = observation_bounds(env)
            if low.shape == (dim,):
                return low, high, names
            notes.append(f"shaping: {env} observations have {low.size} dims, the potential takes {dim}; "
                         "plotted on [-1, 1]")
        except Exception as e:  # noqa: BLE001  (any failure: fall back to a fixed box)
            notes.append(f"shaping: could not sample {env} observations ({type(e).__name__}: {e}); "
                         "plotted on [-1, 1]")
    else:
        notes.append("shaping: the run names no environment; plotted on [-1, 1]")
    return -np.ones(dim, np.float32), np.ones(dim, np.float32), None


def _fmt(v) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.4g}" if (v == 0 or 1e-3 <= abs(v) < 1e6) else f"{v:.3e}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    if v is None:
        return "–"
    return str(v)


def _table(pairs) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in pairs)
    return f"<table>{body}</table>"


def _config_summary(config: dict) -> list[tuple[str, object]]:
    o = config.get("objectives") or {}
    es = config.get("es") or {}
    inner = {k: v for k, v in (config.get("inner") or {}).items() if v is not None}
    pairs = [
        ("name", config.get("name")),
        ("environments", config.get("envs")),
        ("drift / value loss / shaping", f"{o.get('drift')} / {o.get('value_loss')} / {o.get('shaping')}"),
        ("evolved plug points", o.get("evolve")),
        ("strategy", f"{es.get('strategy')}, population {es.get('population_size')}, σ₀ {es.get('sigma_init')}, "
                     f"lr {es.get('lr')}, {es.get('optimizer')}"),
        ("generations", config.get("generations")),
        ("fitness", f"{config.get('fitness')} over {config.get('seeds_per_member')} seed(s) per member"),
        ("inner PPO overrides", ", ".join(f"{k}={_fmt(v)}" for k, v in inner.items()) or "(preset)"),
        ("seed", config.get("seed")),
    ]
    return [(k, v) for k, v in pairs if v is not None]


def write_report(path, run_dir, config, rows, pngs: dict, written: dict, notes, which: str, extra: dict) -> Path:
    """One self-contained HTML page: config summary, last metrics row, figures as data URIs."""
    path = Path(path)
    last = rows[-1] if rows else {}
    last_eval = next((r for r in reversed(rows) if r.get("eval_mean_fitness") is not None), None)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>metadisco report: {html.escape(str(config.get('name', run_dir.name)))}</title>",
        "<style>body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1100px;margin:2em auto;"
        "padding:0 1em;color:#222;line-height:1.45}h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;"
        "border-bottom:1px solid #ddd}table{border-collapse:collapse;font-size:.9em;margin:.5em 0}"
        "th,td{padding:.25em .8em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}"
        "th{font-weight:600;color:#444}td{font-variant-numeric:tabular-nums}figure{margin:1.2em 0}"
        "img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:.9em;color:#555}"
        ".notes{background:#fff8e1;padding:.5em 1em;border-left:3px solid #f0b400}</style></head><body>",
        f"<h1>metadisco run: {html.escape(str(config.get('name', run_dir.name)))}</h1>",
        f"<p>Run directory <code>{html.escape(str(run_dir.resolve()))}</code>; objectives: <b>{html.escape(which)}</b>"
        + (f" (saved after {html.escape(_fmt(extra.get('generation')))} generations)"
           if extra.get("generation") is not None else "")
        + f"; generated {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}.</p>",
        "<h2>Configuration</h2>", _table(_config_summary(config)),
    ]
    if last:
        parts += [f"<h2>Last generation ({html.escape(_fmt(last.get('generation')))})</h2>", _table(last.items())]
    if last_eval is not None and last_eval is not last:
        parts += [f"<h2>Last evaluation (generation {html.escape(_fmt(last_eval.get('generation')))})</h2>",
                  _table((k, v) for k, v in last_eval.items() if k.startswith("eval"))]
    if notes:
        parts.append("<div class='notes'><b>Notes</b><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
                     + "</ul></div>")
    parts.append("<h2>Figures</h2>")
    for name, png in pngs.items():
        links = " ".join(
            f"<a href='{html.escape(_relative(p, path.parent))}'>{html.escape(p.suffix[1:].upper())}</a>"
            for p in written.get(name, []))
        data = base64.b64encode(png).decode("ascii")
        parts.append(
            f"<figure id='{html.escape(name)}'><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption><b>{html.escape(name.replace('_', ' '))}.</b> {html.escape(CAPTIONS.get(name, ''))} {links}"
            "</figcaption></figure>")
    parts.append("</body></html>")
    atomic_write_text(path, "\n".join(parts))
    path.chmod(0o644)  # a page to share (the atomic temporary file is created 0600)
    return path


def _relative(p: Path, base: Path) -> str:
    try:
        return p.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return p.resolve().as_uri()

"""What every metadisco figure shares: the seaborn theme (scoped, never global), palettes,
axis labels, and the heatmap helpers.

Styling is seaborn's (`context="paper", style="whitegrid"`), applied inside each builder with an
rc context rather than `sns.set_theme`, so importing a figure module changes no global state.
Palettes are colour-blind safe: "colorblind" for lines, "mako" sequential, "vlag" diverging with
symmetric limits (white = 0). The Agg backend is selected when pyplot has not been imported yet,
so everything works headless; in a notebook the notebook's backend is left alone.
"""

from __future__ import annotations

import contextlib
import sys
import warnings

import matplotlib

if "matplotlib.pyplot" not in sys.modules:
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402

__all__ = [
    "R_LABEL", "A_LABEL", "D_LABEL", "SEQUENTIAL", "DIVERGING", "PNG_DPI", "theme", "cmap", "robust_max",
    "colorbar_extend", "contours", "mark_r1", "heatmap", "params_or_init",
]

R_LABEL = "probability ratio r = π/π_old"
A_LABEL = "advantage A (normalised)"
D_LABEL = "drift D(r, A)"
SEQUENTIAL = "mako"
DIVERGING = "vlag"
PNG_DPI = 200


@contextlib.contextmanager
def theme():
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


def cmap(name: str):
    """A seaborn palette as a matplotlib colormap."""
    return sns.color_palette(name, as_cmap=True)


def robust_max(values, q: float = 99.5) -> float:
    """The q-th percentile of the finite values (a few extreme cells do not flatten the rest)."""
    finite = np.concatenate([np.asarray(v, np.float64).ravel() for v in values])
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return 1.0
    top = float(np.percentile(finite, q))
    return top if top > 0 else (float(finite.max()) if finite.max() > 0 else 1.0)


def colorbar_extend(vmin, vmax, values) -> str:
    """The colour bar's `extend` for values that fall outside [vmin, vmax]."""
    finite = np.concatenate([np.asarray(v, np.float64).ravel() for v in values])
    finite = finite[np.isfinite(finite)]
    lo = finite.size and finite.min() < vmin - 1e-9 * max(1.0, abs(vmin))
    hi = finite.size and finite.max() > vmax + 1e-9 * max(1.0, abs(vmax))
    return {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[(bool(lo), bool(hi))]


def contours(ax, x, y, z, levels, color):
    """Contour lines over a heatmap (nothing on an empty or flat panel)."""
    z = np.ma.masked_invalid(z)
    if z.count() == 0 or np.ptp(z.compressed()) <= 0:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no contour levels were found" on flat panels
        ax.contour(x, y, z, levels=levels, colors=color, linewidths=0.6, alpha=0.8)


def mark_r1(ax, color):
    """The r = 1 line (where every drift is 0 and flat): dashed, gid "r=1"."""
    line = ax.axvline(1.0, color=color, linestyle="--", linewidth=0.9, label="_r = 1")
    line.set_gid("r=1")
    return line


def heatmap(ax, x, y, z, cmap, vmin, vmax):
    """z [len(y), len(x)] as a rasterised mesh; NaN cells left blank."""
    mesh = ax.pcolormesh(x, y, np.ma.masked_invalid(z), cmap=cmap, vmin=vmin, vmax=vmax,
                         shading="nearest", rasterized=True)
    ax.grid(False)
    return mesh


def params_or_init(objective, params):
    """`params`, or the objective's initial parameters when None."""
    return objective.default_params() if params is None else params

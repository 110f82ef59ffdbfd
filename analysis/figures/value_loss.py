"""The value-loss figure: a value loss and its gradient against the prediction error, beside L2."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from metadisco.analysis.figures.style import params_or_init, theme

__all__ = ["value_loss_figure"]


def value_loss_figure(objective, params=None, e_range: tuple[float, float] = (-3.0, 3.0), targets=None,
                      num: int = 301, compare: dict | None = None):
    """A value loss against the prediction error e = v - t, beside L2 = e^2 / 2.

    Three panels: the loss L, its difference from L2 (where a learned loss departs from the
    baseline, invisible on the first panel when small) and the gradient dL/dv the critic follows.
    One learned line per target t (`targets`, default (-1, 0, 1) when the loss sees the target,
    else (0,)); L2 is dashed black. `compare` {label: (objective, params)} adds dotted lines (at
    the first target), e.g. a distilled closed form. old_value = v (no clipping). Returns the Figure.
    """
    params = params_or_init(objective, params)
    if targets is None:
        targets = (-1.0, 0.0, 1.0) if getattr(objective, "use_target", False) else (0.0,)
    targets = tuple(float(t) for t in targets)
    e = np.linspace(*e_range, num, dtype=np.float32)
    l2 = 0.5 * e.astype(np.float64) ** 2

    def loss(v, t):
        return objective.value_loss(params, v, t, v)

    grad = jax.jit(jax.vmap(jax.grad(loss), in_axes=(0, None)))
    with theme():
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
            other_params = params_or_init(other, other_params)
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
        fig.suptitle(f"Value loss ({objective.title}) vs L2 (v, t in return units)")
    return fig

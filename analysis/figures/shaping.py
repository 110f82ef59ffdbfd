"""The shaping figures: a learned potential Phi(s) over 2-D slices of the observation space, and
the observation box it is drawn over: the environment's own observation box where it declares a
bounded one (MountainCar's positions and speeds), else what a uniformly random policy visits; and
a learned potential beside its distilled closed form (`potential_comparison_figure`).
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from metadisco.analysis.figures.style import (
    DIVERGING,
    SEQUENTIAL,
    cmap,
    colorbar_extend,
    contours,
    heatmap,
    params_or_init,
    robust_max,
    theme,
)

__all__ = ["OBS_NAMES", "shaping_figure", "observation_bounds", "potential_comparison_figure", "shaping_bounds"]

# Observation dimensions of common environments, for axis labels (units where there are any).
OBS_NAMES = {
    "CartPole-v1": ("cart position (m)", "cart velocity (m/s)", "pole angle (rad)", "pole angular velocity (rad/s)"),
    "MountainCar-v0": ("car position", "car velocity"),
    "MountainCarContinuous-v0": ("car position", "car velocity"),
    "Pendulum-v1": ("cos θ", "sin θ", "angular velocity θ̇ (rad/s)"),
    "Acrobot-v1": ("cos θ₁", "sin θ₁", "cos θ₂", "sin θ₂", "θ̇₁ (rad/s)", "θ̇₂ (rad/s)"),
}


def shaping_figure(objective, params, obs_low, obs_high, max_pairs: int = 6, num: int = 81,
                   dim_names=None):
    """The learned potential Phi(s) over 2-D slices of the observation space.

    One heatmap per pair of dimensions (the first `max_pairs` pairs in order (0,1), (0,2), ...),
    the other dimensions held at the midpoint of [obs_low, obs_high]; one shared diverging scale
    (white = 0, the potential before training). A 1-D observation gives a line. Returns the Figure.
    """
    params = params_or_init(objective, params)
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

    with theme():
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
        vmax = robust_max([np.abs(g[2]) for g in grids], 99.5)
        mesh = None
        for k, ax in enumerate(axes.flat):
            if k >= len(pairs):
                ax.set_visible(False)
                continue
            (i, j), (xi, xj, phi) = pairs[k], grids[k]
            mesh = heatmap(ax, xi, xj, phi, cmap(DIVERGING), -vmax, vmax)
            contours(ax, xi, xj, phi, np.linspace(-vmax, vmax, 9), "0.25")
            ax.plot([mid[i]], [mid[j]], marker="+", color="black", markersize=6, linestyle="none")
            ax.set_xlabel(names[i])
            ax.set_ylabel(names[j])
            ax.set_label(f"shaping/{i},{j}")
        fig.colorbar(mesh, ax=axes, label="potential Φ(s)", extend=colorbar_extend(-vmax, vmax, [g[2] for g in grids]),
                     shrink=0.9, pad=0.02)
        fig.suptitle("Learned potential Φ(s) on 2-D slices (other dimensions at the midpoint, +)")
    return fig


def potential_comparison_figure(potentials: dict, axes, center, dim_names=None):
    """Potentials side by side over the first two observation variables, the others at `center`
    [obs_dim] (their visited mean), and the first minus the second: `potentials` {label: fn(obs
    [m, obs_dim]) -> Phi [m]} (learned, distilled), `axes` the variables' values ((num,) each, one
    or two: a line for a single variable). The two potentials share one colour scale."""
    center = np.asarray(center, np.float64)
    dim = center.size
    names = list(dim_names) if dim_names is not None and len(dim_names) == dim else [f"s{i}" for i in range(dim)]
    mesh = np.meshgrid(*axes, indexing="xy")  # rows: the second variable (y), columns: the first (x)
    obs = np.broadcast_to(center, mesh[0].shape + (dim,)).copy()
    for i, m in enumerate(mesh):
        obs[..., i] = m
    flat = obs.reshape(-1, dim).astype(np.float32)
    (label_a, fn_a), (label_b, fn_b) = list(potentials.items())[:2]
    values = [np.asarray(fn(flat), np.float64).reshape(mesh[0].shape) for fn in (fn_a, fn_b)]
    panels = [(label_a, values[0]), (label_b, values[1]), (f"{label_a} − {label_b}", values[0] - values[1])]
    rest = f" ({', '.join(names[2:])} at their visited mean)" if dim > 2 else ""
    with theme():
        fig, axs = plt.subplots(1, 3, figsize=(11.0, 3.2), layout="constrained")
        if len(axes) == 1:
            for ax, (label, z) in zip(axs, panels):
                ax.plot(axes[0], z, linewidth=1.4)
                ax.set_xlabel(names[0])
                ax.set_title(label)
                ax.set_label(f"shaping/{label}")
            axs[0].set_ylabel("potential Φ(s)")
        else:
            lo = min(float(np.nanmin(v)) for v in values)
            hi = max(float(np.nanmax(v)) for v in values)
            diff = robust_max([np.abs(panels[2][1])], 99.5)
            for k, (ax, (label, z)) in enumerate(zip(axs, panels)):
                scale = (cmap(SEQUENTIAL), lo, hi) if k < 2 else (cmap(DIVERGING), -diff, diff)
                im = heatmap(ax, axes[0], axes[1], z, *scale)
                contours(ax, axes[0], axes[1], z, np.linspace(scale[1], scale[2], 9), "0.25")
                ax.set_xlabel(names[0])
                ax.set_ylabel(names[1])
                ax.set_title(label)
                ax.set_label(f"shaping/{label}")
                if k > 0:
                    fig.colorbar(im, ax=axs[:2] if k == 1 else axs[2], label="potential Φ(s)" if k == 1 else "difference",
                                 shrink=0.9, pad=0.02)
        fig.suptitle(f"Potential Φ(s): learned and distilled on the visited range{rest}")
    return fig


def observation_bounds(env_name: str, num_envs: int = 16, num_steps: int = 128, seed: int = 0,
                       quantiles: tuple[float, float] = (0.01, 0.99)):
    """(low, high), each [obs_dim] float32: the environment's declared observation box when every
    bound is finite and below 1e6 (a sparse-reward task's random policy never leaves its start,
    where a learned potential matters least); otherwise quantiles of observations a uniformly
    random policy visits from a few resets of `env_name` (metadisco.inner_loops.make_env), degenerate dims
    +-1. Deterministic in its arguments, so results are cached per process."""
    low, high = _observation_bounds(env_name, num_envs, num_steps, seed, tuple(quantiles))
    return low.copy(), high.copy()


@functools.lru_cache(maxsize=16)
def _observation_bounds(env_name, num_envs, num_steps, seed, quantiles):
    from metadisco.inner_loops import make_env

    env = make_env(env_name)
    declared = _declared_box(env)
    if declared is not None:
        return declared
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


def _declared_box(env):
    """The gymnax observation space's (low, high), flattened to [obs_dim], when bounded (else None)."""
    try:
        space = env.core.observation_space(env.default_params)
        dim = math.prod(env.obs_shape)
        low = np.broadcast_to(np.asarray(space.low, np.float64), env.obs_shape).reshape(dim)
        high = np.broadcast_to(np.asarray(space.high, np.float64), env.obs_shape).reshape(dim)
    except (AttributeError, TypeError, ValueError):  # brax, a plug-in without a Box
        return None
    if not (np.all(np.abs(low) < 1e6) and np.all(np.abs(high) < 1e6) and np.all(high > low)):
        return None
    return low.astype(np.float32), high.astype(np.float32)


def shaping_bounds(shaping, envs, notes: list) -> tuple[np.ndarray, np.ndarray, tuple | None]:
    """(low, high, dimension names) to draw `shaping` over: the box the first of `envs` visits,
    else [-1, 1] in every dimension with a note saying why."""
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

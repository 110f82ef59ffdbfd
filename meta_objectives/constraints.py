"""Constraint checks: the conditions a drift or a value loss must meet before it is used or exported.

Drift (mirror learning, Lu et al. 2022): D >= 0, D = 0 and dD/dr = 0 at r = 1, no kink there.
Value loss: L finite, L(0, t) = 0, and the gradient step moves v toward its target outside a
small band around e = 0. Each check returns human-readable violations ([] = passes).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from meta_objectives.base import MetaObjective
from meta_objectives.closed_form import ClosedFormDrift
from meta_objectives.expressions import compile_kernel


def as_drift_fn(drift, params=None) -> Callable:
    """A plain callable (ratio, advantage, progress) -> D from an expression string, a drift
    objective (with `params`, default `drift.default_params()`) or a callable (returned as is)."""
    if isinstance(drift, str):
        obj = ClosedFormDrift(drift)
        return lambda ratio, advantage, progress=0.0: obj.drift({}, ratio, advantage, progress)
    if isinstance(drift, MetaObjective):
        if drift.plug != "drift":
            raise ValueError(f"expected a drift objective, got a {drift.plug} objective")
        if params is None:
            params = drift.default_params()
        return lambda ratio, advantage, progress=0.0: drift.drift(params, ratio, advantage, progress)
    if callable(drift):
        return drift
    raise TypeError(f"expected an expression, a drift objective or a callable, got {type(drift).__name__}")


def _slope_at_one(fn, a, progress):
    """dD/dr at r = 1 for each A in `a` (float32 array) via jax.grad; None if not traceable."""
    try:
        def total(r):
            return jnp.sum(jnp.asarray(fn(r, a, progress)))

        return np.asarray(jax.grad(total)(jnp.ones_like(a)), np.float64)
    except Exception:  # e.g. a numpy callable meeting a tracer
        return None


def check_drift_constraints(
    drift_fn,
    params=None,
    *,
    r_range: tuple[float, float] = (0.2, 3.0),
    a_range: tuple[float, float] = (-3.0, 3.0),
    progresses: tuple[float, ...] = (0.0, 0.5, 1.0),
    num: int = 61,
    value_tol: float = 1e-6,
    slope_tol: float = 1e-4,
) -> list[str]:
    """Mirror-learning conditions of a drift -> list of human-readable violations ([] = passes).

    `drift_fn`: callable (ratio, advantage, progress) -> D, a drift objective (+ `params`), or
    an expression string. Checks, for each progress in `progresses`:
      D >= -value_tol and finite on a num x num grid r in r_range, A in a_range;
      |D(1, A)| <= value_tol;  |dD/dr(1, A)| <= slope_tol (jax.grad; central differences if
      drift_fn is not jax-traceable); and no kink at r = 1 (one-sided difference quotients at
      h = 1e-2 and 1e-3 that do not shrink with h, which a subgradient convention would hide).
    """
    fn = as_drift_fn(drift_fn, params)
    rs = np.union1d(np.linspace(*r_range, num, dtype=np.float32), np.float32([1.0]))
    a = np.union1d(np.linspace(*a_range, num, dtype=np.float32), np.float32([0.0]))
    found: dict[str, list[float]] = {}  # violation -> the progress values where it occurs
    for prog in progresses:
        try:
            messages = _violations(fn, rs, a, float(prog), value_tol, slope_tol)
        except Exception as e:  # a user callable can fail in any way: report it, do not crash
            messages = [f"drift raised {type(e).__name__} on the check grid: {e}"]
        for message in messages:
            found.setdefault(message, []).append(float(prog))
    return [f"{m} (progress={', '.join(f'{q:g}' for q in progs)})" for m, progs in found.items()]


def _violations(fn, rs, a, prog, value_tol, slope_tol) -> list[str]:
    R, Aa = np.meshgrid(rs, a, indexing="ij")
    problems = []
    d = np.asarray(fn(jnp.asarray(R), jnp.asarray(Aa), jnp.float32(prog)), np.float64)
    d = np.broadcast_to(d, R.shape)
    bad = ~np.isfinite(d)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        problems.append(
            f"D is not finite at {bad.sum()} of {d.size} grid points, e.g. r={R[i]:.3g}, A={Aa[i]:.3g}"
        )
    finite = np.where(bad, 0.0, d)
    neg = finite < -value_tol
    if neg.any():
        i = np.unravel_index(np.argmin(finite), d.shape)
        problems.append(
            f"D < 0 at {neg.sum()} of {d.size} grid points: min D = {d[i]:.3g} at "
            f"r={R[i]:.3g}, A={Aa[i]:.3g}"
        )
    ones = np.ones_like(a)
    d1 = np.asarray(fn(jnp.asarray(ones), jnp.asarray(a), jnp.float32(prog)), np.float64)
    d1 = np.broadcast_to(d1, a.shape)
    err = np.where(np.isfinite(d1), np.abs(d1), np.inf)
    if err.max() > value_tol:
        i = int(np.argmax(err))
        problems.append(f"D(1, A) != 0: D(1, A) = {d1[i]:.3g} at A={a[i]:.3g}")
    slope = _slope_at_one(fn, jnp.asarray(a), jnp.float32(prog))
    if slope is None:  # not jax-traceable: central differences in the callable's own precision
        h = 1e-3
        up = np.asarray(fn(ones + h, a, prog), np.float64)
        down = np.asarray(fn(ones - h, a, prog), np.float64)
        slope = (up - down) / (2 * h)
    slope = np.broadcast_to(slope, a.shape)
    serr = np.where(np.isfinite(slope), np.abs(slope), np.inf)
    if serr.max() > slope_tol:
        i = int(np.argmax(serr))
        problems.append(f"dD/dr(1, A) != 0: |dD/dr| = {serr[i]:.3g} at A={a[i]:.3g}")
    else:
        kink = _kink_at_one(fn, a, prog, d1, slope_tol)
        if kink:
            problems.append(kink)
    return problems


def _kink_at_one(fn, a, prog, d1, slope_tol) -> str | None:
    def quotient(h, side):
        r = np.float32(1.0 + side * h) * np.ones_like(a)
        d = np.asarray(fn(jnp.asarray(r), jnp.asarray(a), jnp.float32(prog)), np.float64)
        return (np.broadcast_to(d, a.shape) - d1) / (r.astype(np.float64) - 1.0)

    for side, label in ((1, "right"), (-1, "left")):
        q1, q2 = quotient(1e-2, side), quotient(1e-3, side)
        flag = (np.abs(q2) > slope_tol) & (np.abs(q2) > 0.5 * np.abs(q1))
        if flag.any():
            i = int(np.argmax(np.where(flag, np.abs(q2), -1.0)))
            return (
                f"dD/dr jumps at r = 1 (kink): the {label} slope is about {q2[i]:.3g} at A={a[i]:.3g}"
            )
    return None


def check_value_loss_constraints(
    expression: str,
    *,
    e_range: tuple[float, float] = (-10.0, 10.0),
    t_range: tuple[float, float] = (-10.0, 10.0),
    num: int = 81,
    bias_band: float = 1.0,
    value_tol: float = 1e-6,
    slope_tol: float = 1e-6,
) -> list[str]:
    """Conditions for a value loss L(e, t), e = v - target -> list of violations ([] = passes).

    On a num x num grid e in e_range, t in t_range: L finite; L(0, t) = 0 (a perfect prediction
    costs nothing, as in every LearnedValueLoss); and e * dL/de >= 0 wherever |e| > bias_band
    (jax.grad): outside the band a gradient step always moves the prediction toward its target.
    Inside the band a loss may prefer a small bias, as a learned one can (L2 + c tanh(e), say);
    bias_band=0 demands the minimum exactly at e = 0.
    """
    fn = compile_kernel(expression, "value_loss")  # ValueError for an invalid expression
    es = np.union1d(np.linspace(*e_range, num, dtype=np.float32), np.float32([0.0]))
    ts = np.linspace(*t_range, num, dtype=np.float32)
    E, T = (jnp.asarray(x) for x in np.meshgrid(es, ts, indexing="ij"))
    problems = []
    loss = np.broadcast_to(np.asarray(fn(E, T), np.float64), E.shape)
    bad = ~np.isfinite(loss)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        problems.append(f"L is not finite at {bad.sum()} of {loss.size} grid points, e.g. e={E[i]:.3g}, t={T[i]:.3g}")
    at_zero = np.broadcast_to(np.asarray(fn(jnp.zeros_like(T[0]), T[0]), np.float64), T[0].shape)
    err = np.where(np.isfinite(at_zero), np.abs(at_zero), np.inf)
    if err.max() > value_tol:
        i = int(np.argmax(err))
        problems.append(f"L(0, t) != 0: L = {at_zero[i]:.3g} at t={float(T[0][i]):.3g}")
    slope = np.asarray(jax.grad(lambda e: jnp.sum(fn(e, T)))(E), np.float64)
    with np.errstate(invalid="ignore"):
        wrong = np.where(np.isfinite(slope), np.asarray(E) * slope, -np.inf)
    wrong = np.where(np.abs(np.asarray(E)) > bias_band, wrong, 0.0)
    if (wrong < -slope_tol).any():
        i = np.unravel_index(np.argmin(wrong), wrong.shape)
        problems.append(
            f"dL/de has the wrong sign for |e| > {bias_band:g} (the gradient step moves v away from its "
            f"target) at {(wrong < -slope_tol).sum()} grid points, e.g. e={float(E[i]):.3g}, t={float(T[i]):.3g}"
        )
    return problems

"""Constraint checks: the conditions a drift or a value loss must meet before it is used or exported.

Drift (mirror learning, Lu et al. 2022): D >= 0, D = 0 and dD/dr = 0 at r = 1, no kink there.
Value loss: L finite, L(0, t) = 0, and the gradient step moves v toward its target outside a
small band around e = 0. Shaping: the identity at its initial parameters, and potential-based
(a shaped return differs from the return by terms at the endpoints only).

Each check returns its violations ([] = passes): each a `Violation` (metadisco.core.records), a
record of its plug point, the constraint's name and the message with a counterexample.
`check_objective` runs the checks of an objective's plug point on any objective, a user's plug-in
as well as a built-in (`metadisco check module:attr`). `ConstraintsViolated` is the one refusal of an objective that
breaks them: `metadisco check`, `export` and `evaluate` raise it, with one wording.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from metadisco.core.errors import MetadiscoError
from metadisco.core.records import Violation
from metadisco.meta_objectives.base import MetaObjective, Params, jitted_method, same_params
from metadisco.meta_objectives.closed_form import ClosedFormDrift
from metadisco.meta_objectives.expressions import compile_kernel


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
        compiled = jitted_method(drift, "drift")
        return lambda ratio, advantage, progress=0.0: compiled(params, ratio, advantage, progress)
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
) -> list[Violation]:
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
    found: dict[Violation, list[float]] = {}  # violation -> the progress values where it occurs
    for prog in progresses:
        try:
            violations = _violations(fn, rs, a, float(prog), value_tol, slope_tol)
        except Exception as e:  # a user callable can fail in any way: report it, do not crash
            violations = [_drift("evaluates", f"drift raised {type(e).__name__} on the check grid: {e}")]
        for v in violations:
            found.setdefault(v, []).append(float(prog))
    return [dataclasses.replace(v, message=f"{v.message} (progress={', '.join(f'{q:g}' for q in progs)})")
            for v, progs in found.items()]


def _drift(constraint: str, message: str) -> Violation:
    return Violation("drift", constraint, message)


def _value_loss(constraint: str, message: str) -> Violation:
    return Violation("value_loss", constraint, message)


def _shaping(constraint: str, message: str) -> Violation:
    return Violation("shaping", constraint, message)


def _violations(fn, rs, a, prog, value_tol, slope_tol) -> list[Violation]:
    R, Aa = np.meshgrid(rs, a, indexing="ij")
    problems = []
    d = np.asarray(fn(jnp.asarray(R), jnp.asarray(Aa), jnp.float32(prog)), np.float64)
    d = np.broadcast_to(d, R.shape)
    bad = ~np.isfinite(d)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        problems.append(_drift(
            "finite", f"D is not finite at {bad.sum()} of {d.size} grid points, e.g. r={R[i]:.3g}, A={Aa[i]:.3g}"
        ))
    finite = np.where(bad, 0.0, d)
    neg = finite < -value_tol
    if neg.any():
        i = np.unravel_index(np.argmin(finite), d.shape)
        problems.append(_drift(
            "nonnegative", f"D < 0 at {neg.sum()} of {d.size} grid points: min D = {d[i]:.3g} at "
            f"r={R[i]:.3g}, A={Aa[i]:.3g}"
        ))
    grad = _gradient(fn, R, Aa, prog)
    if grad is not None and (~np.isfinite(grad) & ~bad).any():
        i = tuple(np.argwhere(~np.isfinite(grad) & ~bad)[0])
        problems.append(_drift("finite_gradient", f"dD/dr is not finite where D is, e.g. dD/dr = {grad[i]:.3g} "
                                                     f"at r={R[i]:.3g}, A={Aa[i]:.3g}"))
    ones = np.ones_like(a)
    d1 = np.asarray(fn(jnp.asarray(ones), jnp.asarray(a), jnp.float32(prog)), np.float64)
    d1 = np.broadcast_to(d1, a.shape)
    err = np.where(np.isfinite(d1), np.abs(d1), np.inf)
    if err.max() > value_tol:
        i = int(np.argmax(err))
        problems.append(_drift("zero_at_one", f"D(1, A) != 0: D(1, A) = {d1[i]:.3g} at A={a[i]:.3g}"))
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
        problems.append(_drift("flat_at_one", f"dD/dr(1, A) != 0: |dD/dr| = {serr[i]:.3g} at A={a[i]:.3g}"))
    else:
        kink = _kink_at_one(fn, a, prog, d1, slope_tol)
        if kink:
            problems.append(_drift("no_kink_at_one", kink))
    return problems


def _gradient(fn, R, Aa, prog) -> np.ndarray | None:
    """dD/dr on the grid (jax.grad); None if `fn` is not jax-traceable."""
    try:
        grad = jax.vmap(jax.grad(lambda r, a: jnp.sum(jnp.asarray(fn(r, a, jnp.float32(prog))))))
        return np.asarray(grad(jnp.asarray(R).ravel(), jnp.asarray(Aa).ravel()), np.float64).reshape(R.shape)
    except Exception:
        return None


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


def as_value_loss_fn(value_loss, params=None) -> Callable:
    """A plain callable (e, t) -> L, e = v - target, from an expression string, a value-loss
    objective (with `params`, default its `default_params()`; the first epoch, old value = v) or
    a callable (returned as is)."""
    if isinstance(value_loss, str):
        return compile_kernel(value_loss, "value_loss")  # ValueError for an invalid expression
    if isinstance(value_loss, MetaObjective):
        if value_loss.plug != "value_loss":
            raise ValueError(f"expected a value_loss objective, got a {value_loss.plug} objective")
        if params is None:
            params = value_loss.default_params()
        compiled = jitted_method(value_loss, "value_loss")
        return lambda e, t: compiled(params, t + e, t, t + e)
    if callable(value_loss):
        return value_loss
    raise TypeError(f"expected an expression, a value_loss objective or a callable, got {type(value_loss).__name__}")


def check_value_loss_constraints(
    expression,
    params=None,
    *,
    e_range: tuple[float, float] = (-10.0, 10.0),
    t_range: tuple[float, float] = (-10.0, 10.0),
    num: int = 81,
    e_wide: float = 100.0,
    bias_band: float = 1.0,
    value_tol: float = 1e-6,
    slope_tol: float = 1e-6,
    min_pull: float = 1e-3,
) -> list[Violation]:
    """Conditions for a value loss L(e, t), e = v - target -> list of violations ([] = passes).
    `expression`: an expression string, a value-loss objective (+ `params`) or a callable (e, t).

    On a num x num grid e in e_range, t in t_range, with num more errors out to +-e_wide (a critic's
    errors reach +-75 on CartPole; 0: none): L finite; L(0, t) = 0 (a perfect prediction
    costs nothing, as in every LearnedValueLoss); and e * dL/de >= 0 wherever |e| > bias_band
    (jax.grad): outside the band a gradient step always moves the prediction toward its target.
    Inside the band a loss may prefer a small bias, as a learned one can (L2 + c tanh(e), say);
    bias_band=0 demands the minimum exactly at e = 0. And it pulls somewhere: the largest
    |dL/de| on the grid is at least `min_pull` (L2's is 10 there): a loss that is 0 or flat
    everywhere never trains the critic (trains_the_critic).
    """
    fn = as_value_loss_fn(expression, params)
    es = np.union1d(np.linspace(*e_range, num, dtype=np.float32), np.float32([0.0]))
    if e_wide:
        es = np.union1d(es, np.linspace(-e_wide, e_wide, num, dtype=np.float32))
    ts = np.linspace(*t_range, num, dtype=np.float32)
    E, T = (jnp.asarray(x) for x in np.meshgrid(es, ts, indexing="ij"))
    problems = []
    loss = np.broadcast_to(np.asarray(fn(E, T), np.float64), E.shape)
    bad = ~np.isfinite(loss)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        problems.append(_value_loss("finite", f"L is not finite at {bad.sum()} of {loss.size} grid points, "
                                            f"e.g. e={E[i]:.3g}, t={T[i]:.3g}"))
    at_zero = np.broadcast_to(np.asarray(fn(jnp.zeros_like(T[0]), T[0]), np.float64), T[0].shape)
    err = np.where(np.isfinite(at_zero), np.abs(at_zero), np.inf)
    if err.max() > value_tol:
        i = int(np.argmax(err))
        problems.append(_value_loss("zero_at_target", f"L(0, t) != 0: L = {at_zero[i]:.3g} at t={float(T[0][i]):.3g}"))
    slope = np.asarray(jax.grad(lambda e: jnp.sum(fn(e, T)))(E), np.float64)
    if (~np.isfinite(slope) & ~bad).any():
        i = tuple(np.argwhere(~np.isfinite(slope) & ~bad)[0])
        problems.append(_value_loss("finite_gradient", f"dL/de is not finite where L is, e.g. at e={float(E[i]):.3g}, "
                                                     f"t={float(T[i]):.3g}"))
    pull = np.where(np.isfinite(slope), np.abs(slope), 0.0).max()
    if pull < min_pull:
        flat = "0 everywhere" if np.where(np.isfinite(loss), np.abs(loss), 0.0).max() <= value_tol else "flat everywhere"
        problems.append(_value_loss(
            "trains_the_critic",
            f"the value loss is {flat} (|dL/de| <= {pull:.3g} on the whole grid, |e| <= {max(map(abs, e_range)):g}): "
            "no gradient step moves v toward its target, so the critic is never trained"))
        return problems
    with np.errstate(invalid="ignore"):
        wrong = np.where(np.isfinite(slope), np.asarray(E) * slope, -np.inf)
    wrong = np.where(np.abs(np.asarray(E)) > bias_band, wrong, 0.0)
    if (wrong < -slope_tol).any():
        i = np.unravel_index(np.argmin(wrong), wrong.shape)
        problems.append(_value_loss(
            "pulls_toward_target",
            f"dL/de has the wrong sign for |e| > {bias_band:g} (the gradient step moves v away from its "
            f"target) at {(wrong < -slope_tol).sum()} grid points, e.g. e={float(E[i]):.3g}, t={float(T[i]):.3g}"
        ))
    return problems


def check_shaping_constraints(shaping: MetaObjective, params: Params, *, initial: bool = False,
                              obs_dim: int = 3, steps: int = 6, gamma: float = 0.9, seed: int = 1) -> list[Violation]:
    """Conditions for a reward shaping at `params` -> list of violations ([] = passes).

    Shaped rewards finite; potential-based: along two trajectories from the same start to the same
    end through different states and rewards, the discounted shaped return differs from the return
    by the same amount (gamma^T Phi(s_T) - Phi(s_0), the endpoints only), so returns keep their
    order between policies (Ng et al. 1999). initial=True: `params` are the initial parameters,
    at which a shaping with parameters to evolve must leave every reward unchanged (PPO exactly at
    the start of evolution); one without any (a closed-form potential) is where it starts and ends.
    """
    shaping = shaping.for_env(shaping.observation_shape() or (obs_dim,))  # (a no-op for a shaping that reads none)
    obs_dim = math.prod(shaping.observation_shape() or (obs_dim,))
    k_s, k_m, k_r = jax.random.split(jax.random.key(seed), 3)
    reward = jax.random.normal(k_r, (steps,))
    start_end = jax.random.normal(k_s, (2, obs_dim))
    not_done = jnp.zeros(steps, bool)
    paths = [jnp.concatenate([start_end[:1], jax.random.normal(k, (steps - 1, obs_dim)), start_end[1:]])
             for k in jax.random.split(k_m, 2)]
    rewards = [reward, reward[::-1] * 3.0]
    discount = gamma ** jnp.arange(steps)
    try:
        shape_reward = jitted_method(shaping, "shape_reward")
        shaped = [np.asarray(shape_reward(params, path[:-1], r, path[1:], not_done, gamma), np.float64)
                  for path, r in zip(paths, rewards)]
    except Exception as e:  # a user objective can fail in any way: report it, do not crash
        return [_shaping("evaluates", f"shape_reward raised {type(e).__name__}: {e}")]
    if not all(np.isfinite(s).all() for s in shaped):
        return [_shaping("finite", "shaped rewards are not finite on a random trajectory")]
    problems = []
    evolvable = bool(jax.tree.leaves(params))
    if initial and evolvable and not np.allclose(shaped[0], np.asarray(rewards[0]), rtol=0, atol=1e-6):
        i = int(np.argmax(np.abs(shaped[0] - np.asarray(rewards[0]))))
        problems.append(_shaping("identity_at_init", f"shaping changes rewards at its initial parameters: "
                                                      f"reward {float(rewards[0][i]):.3g} -> {shaped[0][i]:.3g}"))
    terms = [np.asarray(discount) * (s - np.asarray(r)) for s, r in zip(shaped, rewards)]
    gaps = [float(np.sum(t)) for t in terms]
    # float32 potentials far from the start (|Phi| in the hundreds) telescope with rounding error
    # in proportion to the terms, not to the gap they sum to
    magnitude = max(float(np.sum(np.abs(t))) for t in terms)
    if not np.isclose(gaps[0], gaps[1], rtol=0, atol=1e-5 * (1 + magnitude)):
        problems.append(_shaping(
            "potential_based", f"the shaped-return gap depends on the path, not only its endpoints: {gaps[0]:.4g} "
            f"vs {gaps[1]:.4g} on two paths between the same states (not potential-based: it can change which "
            "policy is best)"))
    return problems


def perturbed_params(objective: MetaObjective, key: jax.Array, scale: float) -> Params:
    """Random parameters around `objective.default_params()`: output layers (w2) random normal *
    scale, hidden layers (w1) kept, every other non-zero leaf (DPO's alpha, a user's constant)
    scaled by a positive factor, and zero leaves (a family's weights or log-multipliers at their
    start) moved by random normal * scale, as the ES moves them, so that each constraint is checked
    away from the initial point too."""
    params = objective.default_params()
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    keys = jax.random.split(key, max(1, len(leaves)))
    out = []
    for (path, leaf), k in zip(leaves, keys):
        last = getattr(path[-1], "key", None) if path else None
        if last == "w2":
            out.append(scale * jax.random.normal(k, jnp.shape(leaf)))
        elif last == "w1":
            out.append(leaf)
        else:
            noise = jax.random.normal(k, jnp.shape(leaf))
            out.append(jnp.where(leaf == 0, scale * noise, leaf * jnp.exp(noise)))
    return jax.tree_util.tree_unflatten(treedef, out)


# Demanded at the initial parameters only: a learned drift's features (LPO's) may put a kink at r = 1
# once evolution moves them (a kink that breaks flatness is still caught, by flat_at_one's finite
# difference). The rest hold for any parameters evolution proposes.
AT_INITIAL_ONLY = ("no_kink_at_one",)
# Demanded at the initial and at given parameters (what a run found, a saved file), not at the random
# perturbations `check` adds: an untrained network drawn at random may push the wrong way where no
# run would keep it, while a found one that pushes v away from its target (outside the small-bias
# band |e| <= 1 that a learned value loss may keep) is not a valid value loss.
AT_CLAIMED_ONLY = ("pulls_toward_target",)


def check_objective(objective: MetaObjective, params: Params = None, *, samples: int = 3, seed: int = 0,
                    initial: bool | None = None) -> list[Violation]:
    """Every constraint of `objective`'s plug point -> list of `Violation`s ([] = all hold), each
    naming its constraint with a counterexample; a constraint is reported once (its first
    counterexample). Checked at `params` when given, else at the initial parameters and at
    `samples` perturbed ones (`perturbed_params`). AT_INITIAL_ONLY are demanded at the initial
    parameters only, AT_CLAIMED_ONLY at the initial or given ones, not at the perturbations.
    initial: whether `params` are initial parameters, where a run starts (`start_params(seed)`, as
    train and RUN_DIR:init know); None: when they equal `default_params()` (a seed-0 start, or a
    closed form's empty parameters).
    Drift: finite, nonnegative, finite_gradient, zero_at_one, flat_at_one, no_kink_at_one.
    Value loss: finite, zero_at_target, finite_gradient, trains_the_critic, pulls_toward_target.
    Shaping: finite, identity_at_init, potential_based."""
    if objective.plug == "shaping":
        # a potential reads observations: size it for the check's states
        objective = objective.for_env(objective.observation_shape() or (3,))
    if initial is None:
        initial = params is None or same_params(params, objective.default_params())
    points = [("initial parameters" if initial else "the given parameters",
               objective.default_params() if params is None else params)]
    if params is None:
        keys = jax.random.split(jax.random.key(seed), samples)
        points += [(f"perturbed parameters #{i + 1}", perturbed_params(objective, k, scale))
                   for i, (k, scale) in enumerate(zip(keys, (0.1, 1.0, 10.0) * samples))]
    found: dict[str, Violation] = {}
    for j, (where, p) in enumerate(points):
        if objective.plug == "drift":
            problems = check_drift_constraints(objective, p)
        elif objective.plug == "value_loss":
            problems = check_value_loss_constraints(objective, p)
        else:
            problems = check_shaping_constraints(objective, p, initial=initial and j == 0)
        for v in problems:
            claimed = j == 0  # the initial or the given parameters, not a perturbation
            if (claimed and initial) or (claimed and v.constraint not in AT_INITIAL_ONLY) or (
                    v.constraint not in AT_INITIAL_ONLY + AT_CLAIMED_ONLY):
                found.setdefault(v.constraint, dataclasses.replace(v, where=where))
    return list(found.values())


def check_evolved(objectives, params: dict, plugs) -> list[Violation]:
    """What evolution found, through its plugs' checks: `objectives` (meta_objectives.Objectives)
    at `params` ({plug: params}, every plug), for each plug in `plugs` (the evolved ones), as
    check_objective runs them at given parameters. Returns the Violations, each naming its plug
    point (those parameters are what was found: no `where`); [] = every evolved objective is valid."""
    return [dataclasses.replace(v, where=None)
            for plug in plugs for v in check_objective(getattr(objectives, plug), params[plug])]


class ConstraintsViolated(MetadiscoError):
    """An objective that breaks a constraint of its plug point (exit code 2). The one wording of
    that refusal: "refusing to <refusing>: <subject> is not a valid <plug>: it violates N
    constraint(s) (names):", each violation with its counterexample, then `hint`."""

    def __init__(self, subject: str, plug: str, violations: list[Violation], refusing: str = "", hint: str = ""):
        self.violations = list(violations)
        names = ", ".join(v.constraint for v in self.violations)
        super().__init__((f"refusing to {refusing}: " if refusing else "")
                         + f"{subject} is not a valid {plug.replace('_', ' ')}: it violates {len(self.violations)} "
                         f"constraint(s) ({names}):\n  - " + "\n  - ".join(map(str, self.violations))
                         + (f"\n{hint}" if hint else ""))


def require_valid(subject: str, objective: MetaObjective, params: Params = None, *, refusing: str = "",
                  hint: str = "", **options) -> None:
    """ConstraintsViolated naming `subject` when `check_objective(objective, params, **options)`
    finds any violation; nothing otherwise."""
    violations = check_objective(objective, params, **options)
    if violations:
        raise ConstraintsViolated(subject, objective.plug, violations, refusing, hint)

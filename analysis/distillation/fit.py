"""Distil a learned drift D(r, A) into a closed form (as LPO was distilled into DPO, Lu et al. 2022),
a learned value loss L(e, t) into L2 plus a sparse sum of valid loss terms, and a learned shaping
potential Phi(s) into a formula over the observation's numbers s0, s1, ...

    distil_drift(drift_fn, samples)           fit_dpo, fit_sparse and fit_symbolic on the same points
    distil_over_progress(drift_fn, samples)   a TA-LPO drift: fitted at both ends of training, interpolated
    distil_value_loss(loss_fn, errors, targets)   the departure of a value loss from L2
    distil_shaping(potential_fn, observations)    a potential on the observations training visits

Data: the fit points are where training actually goes. Pass visited (ratio, advantage) samples
from training; without them points are drawn from a default prior, A ~ N(0, 1) (advantages are
normalised per minibatch) and log r ~ N(0, 0.2^2). Errors are also reported on a fixed grid
r in [0.5, 2], A in [-3, 3]. A candidate is a Candidate and each distillation a
DistillationReport (metadisco.analysis.distillation.report): the expression (a sympy string for
meta_objectives.ClosedFormDrift), its size, its errors on the fit points and on the grid, of its
values and of its slopes.

`drift_fn(ratio, advantage, progress) -> D` is a plain callable (jax or numpy); a drift objective
(with its params, via metadisco.meta_objectives.constraints.as_drift_fn) or an expression string also work.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from metadisco.analysis.distillation.data import (
    GRID_A,
    GRID_NUM,
    GRID_R,
    FitData,
    candidate,
    choose,
    fit_metrics,
    observation_grid,
    prepare_drift,
    target_slope,
    valid_subsample,
    visitation_samples,
)
from metadisco.analysis.distillation.methods import (
    fit_dpo,
    fit_plane,
    fit_sparse,
    fit_symbolic,
    shaping_library,
    value_loss_library,
)
from metadisco.analysis.distillation.report import DistillationReport, End, FitPoints, Reference
from metadisco.core.errors import MetadiscoError
from metadisco.meta_objectives.constraints import check_drift_constraints
from metadisco.meta_objectives.expressions import evaluate_shaping_numpy

# ---------------------------------------------------------------------------------------------
# All together
# ---------------------------------------------------------------------------------------------


def distil_drift(
    drift_fn,
    samples=None,
    seed: int = 0,
    symbolic: bool = True,
    progress: float = 0.0,
    max_terms: int = 3,
    complexity_penalty: float = 1e-3,
    n_points: int = 4096,
    symbolic_kwargs: dict | None = None,
    fit: str = "value",
) -> DistillationReport:
    """Run fit_dpo, fit_sparse and (optionally) fit_symbolic on the same fit points (`prepare_drift`).

    Returns a DistillationReport (metadisco.analysis.distillation.report): every candidate, sorted
    by error, with its violations and score; the Pareto front of the valid ones (complexity against
    error); the chosen one (the front's lowest score = error / std(target) + complexity_penalty *
    complexity); the DPO fit; the symbolic search's counts; what was fitted, on which points.
    """
    data = prepare_drift(drift_fn, samples, progress, seed, n_points, fit)
    candidates = [fit_dpo(data)] + fit_sparse(data, max_terms)
    counts = ()
    if symbolic:
        found, stats = fit_symbolic(data, seed=seed, **(symbolic_kwargs or {}))
        candidates, counts = candidates + found, (stats,)
    scored, pareto, chosen = choose(candidates, data, complexity_penalty)
    return DistillationReport(candidates=scored, pareto=pareto, chosen=chosen, fit=fit, data=_data_summary(data),
                              complexity_penalty=complexity_penalty, symbolic=counts,
                              dpo_fit=next(c for c in scored if c.method == "dpo"))


def _data_summary(data) -> FitPoints:
    return FitPoints(source=data.source, n_points=int(data.r.size),
                     progress=float(data.progress) if data.scalar_progress else "per point",
                     grid={"r": list(GRID_R), "A": list(GRID_A), "num": GRID_NUM},
                     target_std=float(np.std(data.d)), slope_std=float(np.std(data.s)))


def distil_over_progress(drift_fn, samples=None, seed: int = 0, symbolic: bool = True,
                         progresses: tuple[float, float] = (0.0, 1.0), n_points: int = 4096,
                         complexity_penalty: float = 1e-3, **kwargs) -> DistillationReport:
    """Distil a progress-dependent (TA-LPO) drift as D(r, A, p) = (1 - w) D_0(r, A) + w D_1(r, A),
    w = (p - p0) / (p1 - p0).

    D_0 and D_1 are fitted at the two ends of training (`progresses`), each on the samples of its
    half of training when `samples` carry a progress column ([n, 3]: ratio, advantage, progress;
    [n, 2]: all samples at both ends). A convex combination of two valid drifts is a valid drift,
    so every pair from the two ends' Pareto fronts is a candidate, scored on every sample at its
    own progress and on the grid at p0, the middle and p1. Returns a DistillationReport, as
    `distil_drift` does, with the two ends' fits in its `ends`.
    """
    p0, p1 = progresses
    mid = (p0 + p1) / 2
    rows = None if samples is None else _rows(samples)
    halves = [None, None]
    if rows is not None:
        halves = [rows[:, :2], rows[:, :2]]
        if rows.shape[1] == 3:
            for k, half in enumerate((rows[rows[:, 2] < mid], rows[rows[:, 2] >= mid])):
                if len(half) >= 20:
                    halves[k] = half[:, :2]
    ends = [distil_drift(drift_fn, h, seed=seed, symbolic=symbolic, progress=p, n_points=n_points,
                   complexity_penalty=complexity_penalty, **kwargs) for h, p in zip(halves, progresses)]
    # every sample at its own progress (the prior: progress uniform over [p0, p1])
    rng = np.random.default_rng(seed)
    if rows is None or rows.shape[1] < 3:
        r, a = visitation_samples(None if rows is None else rows[:, :2], n_points, seed)
        p = rng.uniform(p0, p1, r.size)
    else:
        ok = np.isfinite(rows).all(axis=1) & (rows[:, 0] > 0)
        rows = rows[ok]
        rows = rows[rng.choice(len(rows), min(n_points, len(rows)), replace=False)]
        r, a, p = rows.T
    data = prepare_drift(drift_fn, (r, a), np.clip(p, p0, p1), seed, n_points, kwargs.get("fit", "value"),
                         grid_progresses=(p0, mid, p1))
    span = p1 - p0
    weight = "p" if (p0, p1) == (0.0, 1.0) else f"(p - {p0!r})/{span!r}"
    candidates = []
    for c0, c1 in itertools.product(*(e.front for e in ends)):
        expression = f"(1 - {weight})*({c0.expression}) + {weight}*({c1.expression})"
        c = candidate(expression, data, "interpolated", c0.n_terms + c1.n_terms,
                      ends=(c0.expression, c1.expression), progresses=(p0, p1))
        candidates.append(replace(c, violations=()))  # a convex combination of two valid drifts (checked when chosen)
    scored, pareto, chosen = choose(candidates, data, complexity_penalty)
    if chosen is not None:
        violations = tuple(check_drift_constraints(chosen.expression))
        if violations:  # recorded on the candidate, and nothing is chosen
            scored = tuple(replace(c, violations=violations) if c == chosen else c for c in scored)
            chosen = None
    return DistillationReport(
        candidates=scored, pareto=pareto, chosen=chosen, fit=kwargs.get("fit", "value"), data=_data_summary(data),
        complexity_penalty=complexity_penalty, symbolic=tuple(s for e in ends for s in e.symbolic),
        dpo_fit=ends[0].dpo_fit,
        ends=tuple(End(q, e.chosen, e.dpo_fit, len(e.pareto)) for q, e in zip(progresses, ends)))


def _rows(samples) -> np.ndarray:
    """Samples as float64 rows [n, 2] (ratio, advantage) or [n, 3] (with progress)."""
    if isinstance(samples, (tuple, list)) and len(samples) in (2, 3) and np.ndim(samples[0]) == 1:
        return np.stack([np.asarray(x, np.float64) for x in samples], axis=1)
    if isinstance(samples, dict):
        return np.stack([np.asarray(samples[k], np.float64).ravel() for k in ("ratio", "advantage")], axis=1)
    arr = np.asarray(samples, np.float64)
    if arr.ndim < 2 or arr.shape[-1] not in (2, 3):
        raise ValueError(f"samples must be [n, 2] (ratio, advantage) or [n, 3] (and progress), got {arr.shape}")
    return arr.reshape(-1, arr.shape[-1])


def distil_value_loss(
    loss_fn,
    errors,
    targets=None,
    seed: int = 0,
    max_terms: int = 3,
    complexity_penalty: float = 1e-3,
    n_points: int = 4096,
    symbolic: bool = False,
    symbolic_kwargs: dict | None = None,
    fit: str = "value",
) -> DistillationReport:
    """Distil a learned value loss L(e, t) as L2 plus a sparse sum of `value_loss_library` terms
    (and, with `symbolic`, the valid-by-construction search's departures from L2).

    The fit is to the departure L - e^2/2, which is what evolution learned (LearnedValueLoss is
    L2 plus a learned residual): fitting L itself would let the e^2 scale swamp it, and every
    candidate would score R^2 = 1. R^2 and errors are reported on the departure (fit="slope":
    on its slope along e).
    loss_fn(value, target) -> per-sample L (jax or numpy). errors, targets: visited prediction
    errors v - target and targets, (n,) each (targets None: 0). The report grid is e in
    [-3s, 3s] (s = std of the errors) at the median target. Returns a DistillationReport, as
    `distil_drift` does; each candidate's expression is the whole loss (e**2/2 + its departure),
    checked with `check_value_loss_constraints`.
    """
    errors = np.asarray(errors, np.float64).ravel()
    targets = np.zeros_like(errors) if targets is None else np.asarray(targets, np.float64).ravel()
    errors, targets = valid_subsample(errors, targets, True, "finite value", n_points, seed)
    scale = float(np.std(errors)) or 1.0

    def loss(e, t):
        t32 = t.astype(np.float32)
        return np.asarray(loss_fn(t32 + np.asarray(e, np.float32), t32))

    def departure(e, t):
        out = np.asarray(loss(e, t), np.float64)
        if not np.isfinite(out).all():
            raise MetadiscoError("the value loss to distil is not finite at some fit points: the run's objectives "
                                 "are broken; try --which best")
        return np.broadcast_to(out, e.shape) - e**2 / 2

    def departure_slope(e, t):
        return target_slope(lambda v, tt: loss_fn(tt + v, tt), e, t) - e

    grid_e = np.linspace(-3 * scale, 3 * scale, GRID_NUM)
    grid_t = np.full_like(grid_e, float(np.median(targets)))
    density = np.exp(-0.5 * (grid_e / scale) ** 2)
    data = FitData(
        r=errors, a=targets, d=departure(errors, targets), grid_r=grid_e, grid_a=grid_t,
        grid_d=departure(grid_e, grid_t), grid_w=density / density.sum(), progress=0.0,
        source="samples", kind="value_loss", fit=fit,
        s=departure_slope(errors, targets), grid_s=departure_slope(grid_e, grid_t),
    )
    residuals = fit_sparse(data, max_terms, value_loss_library(scale))
    l2 = candidate("0", data, "l2", 0)  # no departure at all: the L2 loss evolution started from
    candidates = [l2] + residuals
    counts = ()
    if symbolic:
        found, stats = fit_symbolic(data, seed=seed, **(symbolic_kwargs or {}))
        candidates, counts = candidates + found, (stats,)
    candidates = [replace(c, departure=c.expression,
                          expression="e**2/2" if c.expression == "0" else f"e**2/2 + {c.expression}")
                  for c in candidates]
    scored, pareto, chosen = choose(candidates, data, complexity_penalty)
    points = FitPoints(source=data.source, n_points=int(errors.size), error_std=scale,
                       fit="departure from L2 = e**2/2",
                       grid={"e": [-3 * scale, 3 * scale], "t": float(grid_t[0]), "num": GRID_NUM},
                       target_std=float(np.std(data.d)))
    return DistillationReport(candidates=scored, pareto=pareto, chosen=chosen, fit=fit, data=points,
                              complexity_penalty=complexity_penalty, symbolic=counts)


# Named potentials of an environment (its default parameters), over its raw observation s0, s1, ...
# MountainCar-v0 (gymnax, environments/classic_control/mountain_car.py): v' = v + (a - 1) force -
# cos(3 x) gravity with gravity = 0.0025, so -d/dx of gravity sin(3x)/3 is the hill's pull and the
# car's mechanical energy per unit mass is v^2/2 + gravity sin(3x)/3 (s0 = x position, s1 = v).
REFERENCE_POTENTIALS = {
    "MountainCar-v0": ("mechanical energy", "s1**2/2 + 0.0025*sin(3*s0)/3",
                       "gymnax MountainCar-v0 dynamics (environments/classic_control/mountain_car.py: gravity 0.0025)"),
}


def distil_shaping(potential_fn, observations, seed: int = 0, symbolic: bool = True, max_terms: int = 3,
                   complexity_penalty: float = 1e-3, n_points: int = 4096, symbolic_kwargs: dict | None = None,
                   env: str | None = None) -> DistillationReport:
    """Distil a learned potential Phi(s) on visited observations [n, obs_dim] (raw, flattened):
    the best plane (`fit_plane`), sparse fits over `shaping_library` (with a free offset) and,
    with `symbolic`, the search's b + c g(s). Every potential is a valid shaping, so each candidate
    is scored only on its error. potential_fn(obs [m, obs_dim]) -> Phi [m] (jax or numpy).

    Errors are also reported on `observation_grid` (the first two variables over their visited
    range, the others at their mean). Returns a DistillationReport, as `distil_drift` does, with
    the plane in `plane_fit` and, where `env` has one in REFERENCE_POTENTIALS, the learned
    potential's correlation with it in `reference`.
    """
    obs = np.asarray(observations, np.float64)
    obs = obs.reshape(len(obs), -1)
    obs = obs[np.isfinite(obs).all(axis=1)]
    if len(obs) < 20:
        raise MetadiscoError(f"only {len(obs)} finite observations to fit a potential on; need at least 20: "
                             "train longer (more updates) before distilling")
    if len(obs) > n_points:
        obs = obs[np.random.default_rng(seed).choice(len(obs), n_points, replace=False)]

    def potential(points):
        out = np.asarray(potential_fn(points.astype(np.float32)), np.float64)
        if not np.isfinite(out).all():
            raise MetadiscoError("the potential to distil is not finite at some visited observations: the run's "
                                 "objectives are broken; try --which best")
        return out

    grid, axes = observation_grid(obs)
    data = FitData(r=obs, a=np.zeros(0), d=potential(obs), grid_r=grid, grid_a=np.zeros(0), grid_d=potential(grid),
                   grid_w=np.full(len(grid), 1.0 / len(grid)), progress=0.0, source="samples", kind="shaping")
    plane = fit_plane(data)
    candidates = [plane] + fit_sparse(data, max_terms, shaping_library(obs, data.d), intercept=True)
    counts = ()
    if symbolic:
        found, stats = fit_symbolic(data, seed=seed, **(symbolic_kwargs or {}))
        candidates, counts = candidates + found, (stats,)
    scored, pareto, chosen = choose(candidates, data, complexity_penalty)
    names = data.variables
    points = FitPoints(source="samples", n_points=len(obs), fit="potential Phi(s) on visited observations",
                       grid={"variables": list(names), "ranges": [[float(a[0]), float(a[-1])] for a in axes],
                             "at": [float(v) for v in obs.mean(0)[2:]], "num": len(axes[0])},
                       target_std=float(np.std(data.d)))
    return DistillationReport(candidates=scored, pareto=pareto, chosen=chosen, fit="value", data=points,
                              complexity_penalty=complexity_penalty, symbolic=counts,
                              plane_fit=next(c for c in scored if c.method == "plane"),
                              reference=reference_fit(env, obs, data.d))


def reference_fit(env: str | None, obs, phi) -> Reference | None:
    """The learned potential `phi` [n] beside `env`'s named one (REFERENCE_POTENTIALS) on the
    observations obs [n, obs_dim]; None where the environment has none (or other dimensions)."""
    if env not in REFERENCE_POTENTIALS:
        return None
    name, expression, source = REFERENCE_POTENTIALS[env]
    try:
        ref = evaluate_shaping_numpy(expression, obs)
    except (ValueError, IndexError):  # observations of another size than the reference's
        return None
    if np.std(ref) == 0 or np.std(phi) == 0:
        return Reference(name, expression, source, None, None)
    correlation = float(np.corrcoef(phi, ref)[0, 1])
    affine = np.polyval(np.polyfit(ref, phi, 1), ref)
    return Reference(name, expression, source, correlation, fit_metrics(affine, phi).r2)

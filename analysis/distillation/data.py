"""The data of a distillation and how a candidate closed form is scored.

    sample_prior / visitation_weights / visitation_samples   fit points (r, A) where training goes
    evaluation_grid                                          the fixed report grid
    observation_grid(obs)                                    a potential's grid: over its first two variables
    FitData, prepare_drift                                   fit points, targets and grid of one fit
    candidate(expression, data, method, n_terms)             a scored Candidate (values and slopes)
    choose(candidates, data, penalty)                        constraints, the Pareto front, the chosen one

A Candidate and the report it is chosen into are records (metadisco.analysis.distillation.report).

A fit matches either the values D (fit="value") or the slopes dD/dr (fit="slope"): the slope is
what drives learning (the policy-gradient weight of a sample is A - dD/dr), so a fit with a good
R^2 on D can still give different updates near the walls. Every candidate reports both errors,
on the fit points and on the grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import sympy as sp

from metadisco.analysis.distillation.report import Candidate, Errors
from metadisco.core.errors import MetadiscoError
from metadisco.core.records import Violation
from metadisco.meta_objectives.constraints import as_drift_fn, check_drift_constraints, check_value_loss_constraints
from metadisco.meta_objectives.expressions import (
    DRIFT_VARIABLES,
    VALUE_LOSS_VARIABLES,
    evaluate_numpy,
    evaluate_shaping_numpy,
    evaluate_value_loss_numpy,
    parse_expression,
    shaping_variables,
)

LOG_RATIO_STD = 0.2  # default prior: log r ~ N(0, LOG_RATIO_STD^2), A ~ N(0, 1)
GRID_R = (0.5, 2.0)
GRID_A = (-3.0, 3.0)
GRID_NUM = 61
SIG_DIGITS = 6  # constants in candidate expressions are rounded to this many significant digits
FITS = ("value", "slope")
SLOPE_STEP = 1e-6  # central differences of a candidate expression in float64


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def sample_prior(n: int = 4096, seed: int = 0, log_ratio_std: float = LOG_RATIO_STD):
    """(ratio, advantage), each (n,) float64, from the default visitation prior."""
    rng = np.random.default_rng(seed)
    advantage = rng.standard_normal(n)
    ratio = np.exp(log_ratio_std * rng.standard_normal(n))
    return ratio, advantage


def visitation_weights(ratio, advantage, log_ratio_std: float = LOG_RATIO_STD) -> np.ndarray:
    """Weights (same shape as the broadcast inputs, summing to 1): the density of the default
    prior (A ~ N(0, 1), log r ~ N(0, log_ratio_std^2)) at each (r, A), e.g. to weight grid errors."""
    r, a = np.broadcast_arrays(np.asarray(ratio, np.float64), np.asarray(advantage, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_r = np.log(r)
        density = np.exp(-0.5 * a**2 - 0.5 * (log_r / log_ratio_std) ** 2) / r
    density = np.where(np.isfinite(density) & (r > 0), density, 0.0)
    total = density.sum()
    if total <= 0:
        raise ValueError("no point has positive weight under the visitation prior (is r > 0?)")
    return density / total


def visitation_samples(samples=None, n: int = 4096, seed: int = 0):
    """Fit points (ratio, advantage), each (m,) float64, m <= n.

    `samples`: None (draw n from the default prior), a pair (ratio, advantage) of arrays, a dict
    with keys "ratio"/"advantage" (or "r"/"A"), or an (..., 2) array such as PPO's recorded
    `visited[..., :2]` [num_updates, record_samples, 2]. Invalid points (non-finite,
    r <= 0) are dropped; more than n points are subsampled without replacement.
    """
    if samples is None:
        return sample_prior(n, seed)
    if isinstance(samples, dict):
        ratio = samples.get("ratio", samples.get("r"))
        advantage = samples.get("advantage", samples.get("A"))
        if ratio is None or advantage is None:
            raise ValueError("samples dict needs keys 'ratio' and 'advantage' (or 'r' and 'A')")
    elif isinstance(samples, (tuple, list)) and len(samples) == 2:
        ratio, advantage = samples
    else:
        arr = np.asarray(samples)
        if arr.ndim < 2 or arr.shape[-1] != 2:
            raise ValueError(
                f"samples must be (ratio, advantage) or an (..., 2) array, got shape {arr.shape}"
            )
        arr = arr.reshape(-1, 2)
        ratio, advantage = arr[:, 0], arr[:, 1]
    ratio = np.asarray(ratio, np.float64).ravel()
    advantage = np.asarray(advantage, np.float64).ravel()
    if ratio.shape != advantage.shape:
        raise ValueError(f"ratio and advantage samples differ in size: {ratio.size} vs {advantage.size}")
    return valid_subsample(ratio, advantage, ratio > 0, "finite, r > 0", n, seed)


def valid_subsample(x, y, ok, what: str, n: int, seed: int):
    """Keep the points where x, y are finite and `ok` holds (at least 20), at most n of them."""
    ok = ok & np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 20:
        raise MetadiscoError(f"only {x.size} valid ({what}) samples; need at least 20: train longer or lower --prior-fraction")
    if x.size > n:
        keep = np.random.default_rng(seed).choice(x.size, n, replace=False)
        x, y = x[keep], y[keep]
    return x, y


def evaluation_grid(num: int = GRID_NUM):
    """The fixed report grid r in [0.5, 2] x A in [-3, 3], flattened -> (ratio, advantage)."""
    R, A = np.meshgrid(np.linspace(*GRID_R, num), np.linspace(*GRID_A, num), indexing="ij")
    return R.ravel(), A.ravel()


def observation_grid(obs, num: int = GRID_NUM):
    """A potential's report grid: observations [num * num, obs_dim] over the visited range of the
    first two variables (num for one), the others at their mean over `obs` [n, obs_dim]; and the
    two axes it spans ((num,) each; one for a single variable)."""
    obs = np.asarray(obs, np.float64)
    low, high = obs.min(0), obs.max(0)
    axes = [np.linspace(lo, hi if hi > lo else lo + 1.0, num) for lo, hi in zip(low[:2], high[:2])]
    mesh = np.meshgrid(*axes, indexing="ij")
    grid = np.broadcast_to(obs.mean(0), mesh[0].shape + obs.shape[-1:]).copy()
    for i, m in enumerate(mesh):
        grid[..., i] = m
    return grid.reshape(-1, obs.shape[-1]), tuple(axes)


def evaluate_target(fn, ratio, advantage, progress) -> np.ndarray:
    out = fn(ratio.astype(np.float32), advantage.astype(np.float32), np.asarray(progress, np.float32))
    return _finite(np.broadcast_to(np.asarray(out, np.float64), ratio.shape), "drift")


def target_slope(fn, x, y, *rest) -> np.ndarray:
    """d fn / d x at each point (fn elementwise in x; float32 in, float64 out): jax.grad when fn
    traces, central differences (step 1e-3 x) otherwise."""
    import jax
    import jax.numpy as jnp

    args = [np.asarray(a, np.float32) for a in (y, *rest)]
    try:
        out = jax.grad(lambda v: jnp.sum(jnp.asarray(fn(v, *args))))(jnp.asarray(x, jnp.float32))
    except Exception:  # a numpy callable meeting a tracer
        h = np.float32(1e-3) * np.maximum(np.abs(x), 1.0).astype(np.float32)
        up = np.asarray(fn((x + h).astype(np.float32), *args), np.float64)
        down = np.asarray(fn((x - h).astype(np.float32), *args), np.float64)
        out = (up - down) / (2 * h.astype(np.float64))
    return _finite(np.broadcast_to(np.asarray(out, np.float64), np.shape(x)), "slope of the objective")


def _finite(values, what):
    if not np.isfinite(values).all():
        raise MetadiscoError(f"the {what} to distil is not finite at some fit points: the run's objectives are "
                             "broken; try --which best")
    return values


@dataclass
class FitData:
    """Fit points and the report grid of one distillation. kind "drift": inputs r, a and the
    progress (one value, or one per point: `progress` for the fit points, `grid_progress` for the
    grid); kind "value_loss": inputs r := e (prediction error), a := t (target); kind "shaping":
    r := the observations [n, obs_dim] (grid_r: `observation_grid`'s), a and grid_a unused.
    d, s: the target's values and slopes along r (or e) at the fit points; grid_d, grid_s on the
    grid. fit: which of the two the fitters match ("value" or "slope")."""

    r: np.ndarray
    a: np.ndarray
    d: np.ndarray
    grid_r: np.ndarray
    grid_a: np.ndarray
    grid_d: np.ndarray
    grid_w: np.ndarray
    progress: float | np.ndarray
    source: str
    kind: str = "drift"
    s: np.ndarray | None = None
    grid_s: np.ndarray | None = None
    fit: str = "value"
    grid_progress: float | np.ndarray | None = None

    def __post_init__(self):
        if self.fit not in FITS:
            raise MetadiscoError(f"fit must be one of {', '.join(FITS)}, got {self.fit!r}")
        if self.grid_progress is None:
            self.grid_progress = self.progress

    def values(self, expression: str, grid: bool = False, shift: float = 0.0, **constants) -> np.ndarray:
        """The expression on the fit points (grid: on the plot grid), r (or e) shifted by `shift`."""
        x, y = (self.grid_r, self.grid_a) if grid else (self.r, self.a)
        if self.kind == "shaping":
            return evaluate_shaping_numpy(expression, x)
        if self.kind == "drift":
            return evaluate_numpy(expression, x + shift, y, self.grid_progress if grid else self.progress, **constants)
        return evaluate_value_loss_numpy(expression, x + shift, y)

    def slope(self, expression: str, grid: bool = False, **constants) -> np.ndarray:
        """d expression / d r (or d e) by central differences in float64."""
        up = self.values(expression, grid, SLOPE_STEP, **constants)
        down = self.values(expression, grid, -SLOPE_STEP, **constants)
        return (up - down) / (2 * SLOPE_STEP)

    def column(self, expression: str, **constants) -> np.ndarray:
        """The expression on the fit points in the fit mode (values or slopes)."""
        return (self.values if self.fit == "value" else self.slope)(expression, **constants)

    @property
    def target(self) -> np.ndarray:
        """What the fitters match: d (fit="value") or s (fit="slope")."""
        return self.d if self.fit == "value" else self.s

    @property
    def scalar_progress(self) -> bool:
        return np.ndim(self.progress) == 0

    @property
    def variables(self) -> tuple[str, ...]:
        if self.kind == "shaping":
            return shaping_variables(self.r.shape[-1])
        return DRIFT_VARIABLES if self.kind == "drift" else VALUE_LOSS_VARIABLES

    def violations(self, expression: str) -> list[Violation]:
        if self.kind == "shaping":  # every potential is a valid (policy-invariant) shaping; a non-finite one has no error
            return []
        if self.kind == "drift":
            return check_drift_constraints(expression)
        return check_value_loss_constraints(expression)


def prepare_drift(drift_fn, samples=None, progress=0.0, seed: int = 0, n_points: int = 4096, fit: str = "value",
                  grid_progresses: tuple[float, ...] | None = None) -> FitData:
    """Fit points (visited `samples` or the prior), the target's values and slopes there and on
    the grid. progress: one value, or one per sample (then `samples` are used as given, aligned
    with it). grid_progresses: the grid repeated at each of these progresses (default: `progress`)."""
    fn = as_drift_fn(drift_fn)
    if np.ndim(progress):
        r, a = (np.asarray(x, np.float64) for x in samples)
        progress = np.asarray(progress, np.float64)
    else:
        r, a = visitation_samples(samples, n_points, seed)
        progress = float(progress)
    gr, ga = evaluation_grid()
    gw = visitation_weights(gr, ga)
    gp = progress
    if grid_progresses is not None:
        k = len(grid_progresses)
        gr, ga, gw = np.tile(gr, k), np.tile(ga, k), np.tile(gw, k) / k
        gp = np.repeat(np.asarray(grid_progresses, np.float64), len(gr) // k)
    return FitData(
        r=r, a=a, d=evaluate_target(fn, r, a, progress), s=target_slope(fn, r, a, progress),
        grid_r=gr, grid_a=ga, grid_d=evaluate_target(fn, gr, ga, gp), grid_s=target_slope(fn, gr, ga, gp),
        grid_w=gw, progress=progress, grid_progress=gp,
        source="prior" if samples is None else "samples", fit=fit,
    )


# ---------------------------------------------------------------------------------------------
# Metrics and candidates
# ---------------------------------------------------------------------------------------------


def fit_metrics(pred, target, weights=None) -> Errors:
    """The Errors of `pred` against `target` (with `weights`: also the weighted rmse); all None
    where a prediction is not finite."""
    err = pred - target
    if not np.isfinite(err).all():
        return Errors(None, None, None)
    ss_res = float(np.sum(err**2))
    ss_tot = float(np.sum((target - target.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    weighted = None if weights is None else float(np.sqrt(np.sum(weights * err**2)))
    return Errors(r2, float(np.max(np.abs(err))), float(np.sqrt(np.mean(err**2))), weighted)


def round_sig(x: float) -> float:
    return float(f"{float(x):.{SIG_DIGITS}g}")


def candidate(expression: str, data: FitData, method: str, n_terms: int, **extra) -> Candidate:
    """Score an expression string on the fit points and the grid -> Candidate: its value errors on
    the fit points and on the grid, its slope errors (on both); `error` is the rmse of what the fit
    matches (values or slopes) on the fit points. `extra`: what the fitter adds (Candidate's alpha,
    beta, terms, program, ends, progresses)."""
    expr = parse_expression(expression, data.variables)
    fit = fit_metrics(data.values(expression), data.d)
    grid = fit_metrics(data.values(expression, grid=True), data.grid_d, data.grid_w)
    slope = None
    if data.s is not None:
        slope = replace(fit_metrics(data.slope(expression), data.s),
                        grid=fit_metrics(data.slope(expression, grid=True), data.grid_s, data.grid_w))
    error = fit.rmse if data.fit == "value" else None if slope is None else slope.rmse
    extra = {k: tuple(v) if isinstance(v, list) else v for k, v in extra.items()}
    return Candidate(method=method, expression=expression, complexity=int(sp.count_ops(expr)), n_terms=int(n_terms),
                     r2=fit.r2, max_abs_error=fit.max_abs_error, rmse=fit.rmse, grid=grid, slope=slope, error=error,
                     **extra)



def choose(candidates: list[Candidate], data: FitData,
           complexity_penalty: float) -> tuple[tuple[Candidate, ...], tuple[int, ...], Candidate | None]:
    """Check, score and sort candidates -> (candidates by error, pareto, chosen).

    pareto: indices into the candidates of the valid ones that no other valid one beats on both
    complexity and error (the rmse of what the fit matches), by increasing complexity; the user
    picks one by its position in this list (`metadisco export --candidate N`). chosen: the front's
    lowest error / std(target) + complexity_penalty * complexity (None where none is valid). A
    candidate's violations are checked here unless it carries them already.
    """
    scale = float(np.std(data.target)) or 1.0
    scored = []
    for c in candidates:
        violations = tuple(data.violations(c.expression)) if c.violations is None else c.violations
        score = None if c.error is None else c.error / scale + complexity_penalty * c.complexity
        scored.append(replace(c, violations=violations, score=score))
    scored.sort(key=lambda c: math.inf if c.error is None else c.error)
    passing = [i for i, c in enumerate(scored) if c.valid and c.score is not None]
    front, best = [], math.inf
    for i in sorted(passing, key=lambda i: (scored[i].complexity, scored[i].error)):
        if scored[i].error < best:
            front.append(i)
            best = scored[i].error
    chosen = min((scored[i] for i in front), key=lambda c: c.score) if front else None
    return tuple(scored), tuple(front), chosen

"""The data of a distillation and how a candidate closed form is scored (analysis.distil's base).

    sample_prior / visitation_weights / visitation_samples   fit points (r, A) where training goes
    evaluation_grid                                          the fixed report grid
    FitData, prepare_drift                                   fit points, targets and grid of one fit
    candidate(expression, data, method, n_terms)             a scored candidate dict
    choose(candidates, data, penalty)                        constraints, score, the chosen one
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp

from meta_objectives.constraints import as_drift_fn, check_drift_constraints, check_value_loss_constraints
from meta_objectives.errors import MetadiscoError
from meta_objectives.expressions import (
    DRIFT_VARIABLES,
    VALUE_LOSS_VARIABLES,
    evaluate_numpy,
    evaluate_value_loss_numpy,
    parse_expression,
)

LOG_RATIO_STD = 0.2  # default prior: log r ~ N(0, LOG_RATIO_STD^2), A ~ N(0, 1)
GRID_R = (0.5, 2.0)
GRID_A = (-3.0, 3.0)
GRID_NUM = 61
SIG_DIGITS = 6  # constants in candidate expressions are rounded to this many significant digits


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


def evaluate_target(fn, ratio, advantage, progress) -> np.ndarray:
    out = fn(ratio.astype(np.float32), advantage.astype(np.float32), np.float32(progress))
    out = np.broadcast_to(np.asarray(out, np.float64), ratio.shape)
    if not np.isfinite(out).all():
        raise MetadiscoError("the drift to distil is not finite at some fit points: the run's objectives are "
                             "broken; try --which best")
    return out


@dataclass
class FitData:
    """Fit points and the report grid of one distillation. kind "drift": inputs r, a (and the
    fixed progress); kind "value_loss": inputs r := e (prediction error), a := t (target)."""

    r: np.ndarray
    a: np.ndarray
    d: np.ndarray
    grid_r: np.ndarray
    grid_a: np.ndarray
    grid_d: np.ndarray
    grid_w: np.ndarray
    progress: float
    source: str
    kind: str = "drift"

    def evaluate(self, expression: str, grid: bool = False, **constants) -> np.ndarray:
        x, y = (self.grid_r, self.grid_a) if grid else (self.r, self.a)
        if self.kind == "drift":
            return evaluate_numpy(expression, x, y, self.progress, **constants)
        return evaluate_value_loss_numpy(expression, x, y)

    @property
    def variables(self) -> tuple[str, ...]:
        return DRIFT_VARIABLES if self.kind == "drift" else VALUE_LOSS_VARIABLES

    def violations(self, expression: str) -> list[str]:
        if self.kind == "drift":
            return check_drift_constraints(expression)
        return check_value_loss_constraints(expression)


def prepare_drift(drift_fn, samples, progress, seed, n_points) -> FitData:
    fn = as_drift_fn(drift_fn)
    r, a = visitation_samples(samples, n_points, seed)
    gr, ga = evaluation_grid()
    return FitData(
        r=r, a=a, d=evaluate_target(fn, r, a, progress),
        grid_r=gr, grid_a=ga, grid_d=evaluate_target(fn, gr, ga, progress),
        grid_w=visitation_weights(gr, ga), progress=float(progress),
        source="prior" if samples is None else "samples",
    )


# ---------------------------------------------------------------------------------------------
# Metrics and candidates
# ---------------------------------------------------------------------------------------------


def fit_metrics(pred, target, weights=None) -> dict:
    err = pred - target
    if not np.isfinite(err).all():
        return {"r2": None, "max_abs_error": None, "rmse": None}
    ss_res = float(np.sum(err**2))
    ss_tot = float(np.sum((target - target.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    out = {"r2": r2, "max_abs_error": float(np.max(np.abs(err))), "rmse": float(np.sqrt(np.mean(err**2)))}
    if weights is not None:
        out["weighted_rmse"] = float(np.sqrt(np.sum(weights * err**2)))
    return out


def round_sig(x: float) -> float:
    return float(f"{float(x):.{SIG_DIGITS}g}")


def candidate(expression: str, data: FitData, method: str, n_terms: int, **extra) -> dict:
    """Score an expression string on the fit points and the grid -> candidate dict."""
    expr = parse_expression(expression, data.variables)
    fit = fit_metrics(data.evaluate(expression), data.d)
    grid = fit_metrics(data.evaluate(expression, grid=True), data.grid_d, data.grid_w)
    return {
        "method": method, "expression": expression, "complexity": int(sp.count_ops(expr)),
        "n_terms": int(n_terms), **fit, "grid": grid, **extra,
    }



def choose(candidates: list[dict], data: FitData, complexity_penalty: float) -> dict:
    """Check, score and sort candidates -> {"candidates", "chosen"}: chosen is the one passing its
    plug's constraints with the lowest rmse / std(target) + complexity_penalty * complexity."""
    scale = float(np.std(data.d)) or 1.0
    for c in candidates:
        if "violations" not in c:
            c["violations"] = data.violations(c["expression"])
        c["score"] = None if c["rmse"] is None else c["rmse"] / scale + complexity_penalty * c["complexity"]
    candidates.sort(key=lambda c: math.inf if c["rmse"] is None else c["rmse"])
    passing = [c for c in candidates if not c["violations"] and c["score"] is not None]
    return {"candidates": candidates, "chosen": min(passing, key=lambda c: c["score"]) if passing else None}

"""Distil a learned drift D(r, A) into a closed form (as LPO was distilled into DPO, Lu et al. 2022),
and a learned value loss L(e, t) into a sparse sum of valid loss terms (`distil_value_loss`).

Three fitters over the same data, each giving candidates in one format:

  fit_dpo              least squares of the DPO family (alpha, beta > 0) to D
  sparse_regression    non-negative least squares over a library of terms that satisfy the drift
                       constraints by construction (>= 0, zero value and slope at r = 1), best
                       subsets of 1..k terms plus sequential thresholding
  symbolic_regression  gplearn genetic programming over r - 1, log r, A; only candidates that pass
                       `check_drift_constraints` are kept (the others are counted as rejected)

Data: the fit points are where training actually goes. Pass visited (ratio, advantage) samples
from training; without them points are drawn from a default prior, A ~ N(0, 1) (advantages are
normalised per minibatch) and log r ~ N(0, 0.2^2). Errors are also reported on a fixed grid
r in [0.5, 2], A in [-3, 3]. A candidate is a JSON-able dict:

  {"method", "expression" (a sympy string for meta_objectives.ClosedFormDrift), "complexity"
   (sympy count_ops), "n_terms", "r2", "max_abs_error", "rmse" (on the fit points),
   "grid": {"r2", "max_abs_error", "rmse", "weighted_rmse"}}

The fit points and scoring live in analysis.distil_data, the fitting methods and term libraries
in analysis.distil_methods; this module is the entry point (names from both are re-exported).

`drift_fn(ratio, advantage, progress) -> D` is a plain callable (jax or numpy); a drift objective
(with its params, via meta_objectives.constraints.as_drift_fn) or an expression string also work.
"""

from __future__ import annotations

import numpy as np

from analysis.distil_data import (  # noqa: F401  (re-exported: part of this module's API)
    GRID_A,
    GRID_NUM,
    GRID_R,
    FitData,
    candidate,
    choose,
    evaluation_grid,
    prepare_drift,
    round_sig,
    sample_prior,
    valid_subsample,
    visitation_samples,
    visitation_weights,
)
from analysis.distil_methods import (  # noqa: F401
    DPO_FAMILY,
    drift_library,
    fit_dpo_data,
    sparse_fit,
    symbolic_fit,
    value_loss_library,
)
from meta_objectives.constraints import check_drift_constraints
from meta_objectives.errors import MetadiscoError
from meta_objectives.fileio import to_jsonable


def fit_dpo(drift_fn, samples=None, progress: float = 0.0, seed: int = 0, n_points: int = 4096) -> dict:
    """Least-squares fit of the DPO family (Lu et al. 2022) to D on the fit points.

    Returns a candidate dict plus "alpha", "beta" (both > 0, rounded to 6 significant digits as
    in "expression"). Fitted in log(alpha), log(beta), multi-start from DPO_STARTS.
    """
    return fit_dpo_data(prepare_drift(drift_fn, samples, progress, seed, n_points))


def sparse_regression(
    drift_fn,
    samples=None,
    progress: float = 0.0,
    seed: int = 0,
    max_terms: int = 3,
    library: list[tuple[str, str]] | None = None,
    max_subsets: int = 2000,
    beam_width: int = 20,
    threshold: float = 0.05,
    n_points: int = 4096,
) -> list[dict]:
    """Sparse non-negative fits D ~ sum_i w_i term_i (w_i >= 0, so the sum stays a valid drift).

    For each size 1..max_terms: the best subset of `library` (default `drift_library()`), found
    exhaustively while there are at most `max_subsets` subsets and by beam search beyond; plus
    sequential thresholding of the full NNLS fit (drop terms contributing < `threshold` of the
    largest, refit). Returns candidate dicts sorted by rmse.
    """
    data = prepare_drift(drift_fn, samples, progress, seed, n_points)
    return sparse_fit(data, max_terms, library, max_subsets, beam_width, threshold)


def symbolic_regression(
    drift_fn,
    samples=None,
    generations: int = 10,
    seed: int = 0,
    progress: float = 0.0,
    population_size: int = 500,
    n_candidates: int = 20,
    parsimony: float = 1e-3,
    n_points: int = 4096,
) -> dict:
    """gplearn SymbolicRegressor over features r - 1, log r, A (+, -, *, max, min, abs, neg, tanh).

    Small by default (population 500, 10 generations: seconds). The parsimony coefficient is
    `parsimony` * std(D), i.e. relative to the scale of the drift.

    Its programs are not constrained, so the best `n_candidates` distinct programs of the last
    generation are checked with `check_drift_constraints` and only those that pass are kept.
    Returns {"candidates": [...sorted by rmse], "n_considered", "n_rejected",
    "rejected": [{"expression", "violations"}]}.
    """
    data = prepare_drift(drift_fn, samples, progress, seed, n_points)
    return symbolic_fit(data, generations, seed, population_size, n_candidates, parsimony)



# ---------------------------------------------------------------------------------------------
# All together
# ---------------------------------------------------------------------------------------------


def distil(
    drift_fn,
    samples=None,
    seed: int = 0,
    symbolic: bool = True,
    progress: float = 0.0,
    max_terms: int = 3,
    complexity_penalty: float = 1e-3,
    n_points: int = 4096,
    symbolic_kwargs: dict | None = None,
) -> dict:
    """Run fit_dpo, sparse_regression and (optionally) symbolic_regression on the same points.

    Returns a JSON-able dict {"dpo_fit", "candidates" (all, sorted by rmse, each with its
    "violations" and "score"), "chosen", "symbolic" (counts, or None), "data"}. "chosen" is the
    candidate passing `check_drift_constraints` with the lowest score = rmse / std(D) +
    complexity_penalty * complexity (sympy count_ops).
    """
    data = prepare_drift(drift_fn, samples, progress, seed, n_points)
    dpo = fit_dpo_data(data)
    candidates = [dpo] + sparse_fit(data, max_terms)
    sym = None
    if symbolic:
        sym = symbolic_fit(data, seed=seed, **(symbolic_kwargs or {}))
        candidates += sym["candidates"]
    return to_jsonable({
        "dpo_fit": dpo,
        **choose(candidates, data, complexity_penalty),
        "symbolic": None if sym is None else {k: sym[k] for k in ("n_considered", "n_rejected", "rejected")},
        "data": {"source": data.source, "n_points": int(data.r.size), "progress": data.progress,
                 "grid": {"r": list(GRID_R), "A": list(GRID_A), "num": GRID_NUM},
                 "target_std": float(np.std(data.d))},
        "complexity_penalty": complexity_penalty,
    })


def distil_over_progress(drift_fn, samples=None, seed: int = 0, symbolic: bool = True,
                         progresses: tuple[float, float] = (0.0, 1.0), **kwargs) -> dict:
    """Distil a progress-dependent (TA-LPO) drift as D(r, A, p) = (1 - p) D_0(r, A) + p D_1(r, A).

    D_0 and D_1 are `distil`'s chosen forms at the two ends of training (`progresses`); a convex
    combination of two valid drifts is a valid drift, so the interpolation passes the constraints
    at every p in [0, 1]. Returns `distil`'s report at the middle progress, whose "chosen" is the
    interpolated form scored at the middle (the ends' reports are kept under "ends").
    """
    p0, p1 = progresses
    ends = [distil(drift_fn, samples, seed=seed, symbolic=symbolic, progress=p, **kwargs) for p in (p0, p1)]
    middle = distil(drift_fn, samples, seed=seed, symbolic=False, progress=(p0 + p1) / 2, **kwargs)
    if all(e["chosen"] for e in ends):
        (e0, e1), span = (e["chosen"]["expression"] for e in ends), p1 - p0
        weight = "p" if (p0, p1) == (0.0, 1.0) else f"(p - {p0!r})/{span!r}"
        expression = f"(1 - {weight})*({e0}) + {weight}*({e1})"
        data = prepare_drift(drift_fn, samples, (p0 + p1) / 2, seed, kwargs.get("n_points", 4096))
        interpolated = candidate(expression, data, "interpolated", 2, ends=[e0, e1], progresses=[p0, p1])
        interpolated["violations"] = check_drift_constraints(expression)
        penalty = kwargs.get("complexity_penalty", 1e-3)
        interpolated["score"] = interpolated["rmse"] / (float(np.std(data.d)) or 1.0) + penalty * interpolated["complexity"]
        middle["candidates"].insert(0, to_jsonable(interpolated))
        middle["chosen"] = None if interpolated["violations"] else to_jsonable(interpolated)
    middle["ends"] = [{"progress": p, "chosen": e["chosen"], "dpo_fit": e["dpo_fit"]} for p, e in zip((p0, p1), ends)]
    return middle


def distil_value_loss(
    loss_fn,
    errors,
    targets=None,
    seed: int = 0,
    max_terms: int = 3,
    complexity_penalty: float = 1e-3,
    n_points: int = 4096,
) -> dict:
    """Distil a learned value loss L(e, t) as L2 plus a sparse sum of `value_loss_library` terms.

    The fit is to the departure L - e^2/2, which is what evolution learned (LearnedValueLoss is
    L2 plus a learned residual): fitting L itself would let the e^2 scale swamp it, and every
    candidate would score R^2 = 1. R^2 and errors are reported on the departure.
    loss_fn(value, target) -> per-sample L (jax or numpy). errors, targets: visited prediction
    errors v - target and targets, (n,) each (targets None: 0). The report grid is e in
    [-3s, 3s] (s = std of the errors) at the median target. Returns {"candidates", "chosen",
    "data", "complexity_penalty"} in the format of `distil`; each candidate's "expression" is the
    whole loss (e**2/2 + ...), checked with `check_value_loss_constraints`.
    """
    errors = np.asarray(errors, np.float64).ravel()
    targets = np.zeros_like(errors) if targets is None else np.asarray(targets, np.float64).ravel()
    errors, targets = valid_subsample(errors, targets, True, "finite value", n_points, seed)
    scale = float(np.std(errors)) or 1.0

    def departure(e, t):
        t32 = t.astype(np.float32)
        out = np.asarray(loss_fn(t32 + e.astype(np.float32), t32), np.float64)
        if not np.isfinite(out).all():
            raise MetadiscoError("the value loss to distil is not finite at some fit points: the run's objectives "
                                 "are broken; try --which best")
        return np.broadcast_to(out, e.shape) - e**2 / 2

    grid_e = np.linspace(-3 * scale, 3 * scale, GRID_NUM)
    grid_t = np.full_like(grid_e, float(np.median(targets)))
    density = np.exp(-0.5 * (grid_e / scale) ** 2)
    data = FitData(
        r=errors, a=targets, d=departure(errors, targets), grid_r=grid_e, grid_a=grid_t,
        grid_d=departure(grid_e, grid_t), grid_w=density / density.sum(), progress=0.0,
        source="samples", kind="value_loss",
    )
    residuals = sparse_fit(data, max_terms, value_loss_library(scale))
    l2 = candidate("0", data, "l2", 0)  # no departure at all: the L2 loss evolution started from
    candidates = [l2] + residuals
    for c in candidates:
        c["departure"] = c["expression"]
        c["expression"] = "e**2/2" if c["expression"] == "0" else f"e**2/2 + {c['expression']}"
    return to_jsonable({
        **choose(candidates, data, complexity_penalty),
        "data": {"source": data.source, "n_points": int(errors.size), "error_std": scale,
                 "fit": "departure from L2 = e**2/2",
                 "grid": {"e": [-3 * scale, 3 * scale], "t": float(grid_t[0]), "num": GRID_NUM},
                 "target_std": float(np.std(data.d))},
        "complexity_penalty": complexity_penalty,
    })

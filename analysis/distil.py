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

`drift_fn(ratio, advantage, progress) -> D` is a plain callable (jax or numpy); a drift objective
(with its params, via meta_objectives.closed_form.as_drift_fn) or an expression string also work.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import sympy as sp
from scipy.optimize import least_squares, nnls

from meta_objectives.closed_form import (
    DPO_TEMPLATE,
    DRIFT_VARIABLES,
    VALUE_LOSS_VARIABLES,
    A_sym,
    as_drift_fn,
    check_drift_constraints,
    check_value_loss_constraints,
    dpo_expression,
    evaluate_numpy,
    evaluate_value_loss_numpy,
    parse_expression,
    r_sym,
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
    return _valid_subsample(ratio, advantage, ratio > 0, "finite, r > 0", n, seed)


def _valid_subsample(x, y, ok, what: str, n: int, seed: int):
    """Keep the points where x, y are finite and `ok` holds (at least 20), at most n of them."""
    ok = ok & np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 20:
        raise ValueError(f"only {x.size} valid ({what}) samples; need at least 20")
    if x.size > n:
        keep = np.random.default_rng(seed).choice(x.size, n, replace=False)
        x, y = x[keep], y[keep]
    return x, y


def evaluation_grid(num: int = GRID_NUM):
    """The fixed report grid r in [0.5, 2] x A in [-3, 3], flattened -> (ratio, advantage)."""
    R, A = np.meshgrid(np.linspace(*GRID_R, num), np.linspace(*GRID_A, num), indexing="ij")
    return R.ravel(), A.ravel()


def _evaluate_target(fn, ratio, advantage, progress) -> np.ndarray:
    out = fn(ratio.astype(np.float32), advantage.astype(np.float32), np.float32(progress))
    out = np.broadcast_to(np.asarray(out, np.float64), ratio.shape)
    if not np.isfinite(out).all():
        raise ValueError("the drift to distil is not finite at some fit points")
    return out


@dataclass
class _Data:
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


def _prepare(drift_fn, samples, progress, seed, n_points) -> _Data:
    fn = as_drift_fn(drift_fn)
    r, a = visitation_samples(samples, n_points, seed)
    gr, ga = evaluation_grid()
    return _Data(
        r=r, a=a, d=_evaluate_target(fn, r, a, progress),
        grid_r=gr, grid_a=ga, grid_d=_evaluate_target(fn, gr, ga, progress),
        grid_w=visitation_weights(gr, ga), progress=float(progress),
        source="prior" if samples is None else "samples",
    )


# ---------------------------------------------------------------------------------------------
# Metrics and candidates
# ---------------------------------------------------------------------------------------------


def _metrics(pred, target, weights=None) -> dict:
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


def _round(x: float) -> float:
    return float(f"{float(x):.{SIG_DIGITS}g}")


def _candidate(expression: str, data: _Data, method: str, n_terms: int, **extra) -> dict:
    """Score an expression string on the fit points and the grid -> candidate dict."""
    expr = parse_expression(expression, data.variables)
    fit = _metrics(data.evaluate(expression), data.d)
    grid = _metrics(data.evaluate(expression, grid=True), data.grid_d, data.grid_w)
    return {
        "method": method, "expression": expression, "complexity": int(sp.count_ops(expr)),
        "n_terms": int(n_terms), **fit, "grid": grid, **extra,
    }


# ---------------------------------------------------------------------------------------------
# DPO family
# ---------------------------------------------------------------------------------------------

DPO_FAMILY = DPO_TEMPLATE.format(alpha="alpha", beta="beta")  # symbols alpha, beta > 0
DPO_STARTS = ((2.0, 0.6), (1.0, 1.0), (0.5, 0.3), (4.0, 2.0))


def fit_dpo(drift_fn, samples=None, progress: float = 0.0, seed: int = 0, n_points: int = 4096) -> dict:
    """Least-squares fit of the DPO family (Lu et al. 2022) to D on the fit points.

    Returns a candidate dict plus "alpha", "beta" (both > 0, rounded to 6 significant digits as
    in "expression"). Fitted in log(alpha), log(beta), multi-start from DPO_STARTS.
    """
    return _fit_dpo(_prepare(drift_fn, samples, progress, seed, n_points))


def _fit_dpo(data: _Data) -> dict:
    def residual(theta):
        alpha, beta = np.exp(theta)
        return data.evaluate(DPO_FAMILY, alpha=alpha, beta=beta) - data.d

    best = None
    bounds = (np.log([1e-3, 1e-3]), np.log([1e3, 1e3]))
    for start in DPO_STARTS:
        res = least_squares(residual, np.log(start), bounds=bounds, x_scale=1.0)
        if best is None or res.cost < best.cost:
            best = res
    alpha, beta = (_round(v) for v in np.exp(best.x))
    return _candidate(dpo_expression(alpha, beta), data, "dpo", 2, alpha=alpha, beta=beta)


# ---------------------------------------------------------------------------------------------
# Sparse regression over a constrained library
# ---------------------------------------------------------------------------------------------

_SIDES = {"A>=0": "A >= 0", "A<0": "A < 0"}


def _on_side(term: str, side: str | None) -> str:
    return term if side is None else f"Piecewise(({term}, {_SIDES[side]}), (0, True))"


def drift_library(tanh_scales=(0.5, 1.0, 2.0), clip_eps=(0.1, 0.2, 0.3)) -> list[tuple[str, str]]:
    """Candidate terms (name, expression), each >= 0 and 0 with zero slope at r = 1 for every A.

    With x in {(r-1)A, log(r)A}: DPO-style hinges relu(x - c tanh(x/c)) and relu(c tanh(x/c) - x)
    (O(x^3) at x = 0), relu(+-x)^2, (r-1)^2, log(r)^2, (r-1)^2 |A|, (r-1)^2 A^2, the PPO-clip
    term relu((r - clip(r, 1-eps, 1+eps)) A) and smooth walls relu(r - 1 - eps)^2 |A|,
    relu(1 - eps - r)^2 |A|; each alone and restricted to A >= 0 or A < 0.
    """
    xs = {"(r-1)A": "(r - 1)*A", "log(r)A": "log(r)*A"}
    terms: list[tuple[str, str]] = []
    for xname, x in xs.items():
        for c in tanh_scales:
            for side in _SIDES:
                terms.append((f"relu({xname} - {c}tanh(x/{c}))[{side}]",
                              _on_side(f"Max(0, {x} - {c}*tanh({x}/{c}))", side)))
                terms.append((f"relu({c}tanh(x/{c}) - {xname})[{side}]",
                              _on_side(f"Max(0, {c}*tanh({x}/{c}) - {x})", side)))
        for side in _SIDES:
            terms.append((f"relu({xname})^2[{side}]", _on_side(f"Max(0, {x})**2", side)))
            terms.append((f"relu(-{xname})^2[{side}]", _on_side(f"Max(0, -{x})**2", side)))
    smooth = {"(r-1)^2": "(r - 1)**2", "log(r)^2": "log(r)**2", "(r-1)^2|A|": "(r - 1)**2*Abs(A)",
              "(r-1)^2A^2": "(r - 1)**2*A**2"}
    for eps in clip_eps:
        smooth[f"ppo_clip({eps})"] = f"Max(0, (r - Min(Max(r, {1 - eps!r}), {1 + eps!r}))*A)"
        # smooth walls beyond 1 +- eps: learned networks make walls that bend, not PPO's kink
        smooth[f"wall_up({eps})"] = f"Max(0, r - {1 + eps!r})**2*Abs(A)"
        smooth[f"wall_down({eps})"] = f"Max(0, {1 - eps!r} - r)**2*Abs(A)"
    for name, term in smooth.items():
        terms.append((name, term))
        for side in _SIDES:
            terms.append((f"{name}[{side}]", _on_side(term, side)))
    return terms


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
    data = _prepare(drift_fn, samples, progress, seed, n_points)
    return _sparse(data, max_terms, library, max_subsets, beam_width, threshold)


def _sparse(data, max_terms=3, library=None, max_subsets=2000, beam_width=20, threshold=0.05):
    library = drift_library() if library is None else list(library)
    columns, names, terms = [], [], []
    for name, term in library:
        col = data.evaluate(term)
        if np.isfinite(col).all() and np.linalg.norm(col) > 1e-12:
            columns.append(col)
            names.append(name)
            terms.append(term)
    if not columns:
        return []
    X = np.stack(columns, axis=1)
    norms = np.linalg.norm(X, axis=0)
    Xs = X / norms
    y = data.d

    def solve(subset):
        w, rnorm = nnls(Xs[:, list(subset)], y)
        return rnorm, w

    chosen: dict[frozenset, tuple] = {}  # support -> (subset, weights)
    beam: list[tuple] = [()]
    for size in range(1, max_terms + 1):
        if math.comb(len(terms), size) <= max_subsets:
            subsets = itertools.combinations(range(len(terms)), size)
        else:
            subsets = {tuple(sorted(set(b) | {j})) for b in beam for j in range(len(terms)) if j not in b}
        scored = sorted((solve(s)[0], s) for s in subsets)
        beam = [s for _, s in scored[:beam_width]]
        if scored:
            _, best = scored[0]
            _record(chosen, best, solve(best)[1])
    # sequential thresholding from the full fit
    support = list(range(len(terms)))
    for _ in range(20):
        _, w = solve(support)  # columns are unit-norm: w_i is term i's contribution
        if w.max() <= 0:
            break
        keep = [s for s, wi in zip(support, w) if wi >= threshold * w.max()]
        if keep == support:
            break
        support = keep
    _record(chosen, tuple(support), solve(support)[1], method="sparse_threshold")

    out = []
    for support, (subset, w, method) in chosen.items():
        parts = [(names[i], terms[i], _round(wi / norms[i])) for i, wi in zip(subset, w) if i in support]
        if not parts:
            continue
        expression = " + ".join(f"{wi!r}*{term}" for _, term, wi in parts)
        out.append(_candidate(expression, data, method, len(parts), terms=[n for n, _, _ in parts]))
    return sorted(out, key=lambda c: c["rmse"])


def _record(chosen, subset, w, method="sparse", rel_tol=1e-4):
    """Keep a fit under its support (terms contributing > rel_tol of the largest), once."""
    w = np.asarray(w)
    cut = rel_tol * w.max() if w.size else 0.0
    support = frozenset(i for i, wi in zip(subset, w) if wi > cut)
    if support and support not in chosen:
        chosen[support] = (subset, w, method)


# ---------------------------------------------------------------------------------------------
# Symbolic regression (gplearn)
# ---------------------------------------------------------------------------------------------

_FEATURES = (r_sym - 1, sp.log(r_sym), A_sym)  # gplearn X0, X1, X2


def _program_to_sympy(program) -> sp.Expr:
    """A gplearn program (prefix list of functions, feature indices, constants) -> sympy."""
    from gplearn.functions import _Function

    ops = {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "neg": lambda a: -a, "abs": sp.Abs, "max": sp.Max, "min": sp.Min, "tanh": sp.tanh,
    }
    nodes = iter(program)

    def build():
        node = next(nodes)
        if isinstance(node, _Function):
            args = [build() for _ in range(node.arity)]
            return ops[node.name](*args)
        if isinstance(node, (int, np.integer)):
            return _FEATURES[int(node)]
        return sp.Float(float(node))

    return build()


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
    data = _prepare(drift_fn, samples, progress, seed, n_points)
    return _symbolic(data, generations, seed, population_size, n_candidates, parsimony)


def _symbolic(data, generations=10, seed=0, population_size=500, n_candidates=20, parsimony=1e-3) -> dict:
    from gplearn.functions import make_function
    from gplearn.genetic import SymbolicRegressor

    tanh = make_function(function=np.tanh, name="tanh", arity=1)
    X = np.stack([data.r - 1.0, np.log(data.r), data.a], axis=1)
    est = SymbolicRegressor(
        population_size=population_size, generations=generations, random_state=seed,
        function_set=("add", "sub", "mul", "max", "min", "abs", "neg", tanh),
        metric="rmse", parsimony_coefficient=parsimony * float(np.std(data.d) or 1.0),
        init_depth=(2, 4), const_range=(-1.0, 1.0),
        n_jobs=1, verbose=0,
    )
    est.fit(X, data.d)
    programs = [p for p in est._programs[-1] if p is not None]
    programs.sort(key=lambda p: p.raw_fitness_)
    seen, kept, rejected = set(), [], []
    for prog in programs:
        if len(seen) >= n_candidates:
            break
        if str(prog) in seen:
            continue
        seen.add(str(prog))
        try:
            expression = str(_program_to_sympy(prog.program))
        except Exception as e:  # a program sympy cannot build
            rejected.append({"expression": str(prog), "violations": [f"cannot convert to sympy: {e}"]})
            continue
        try:
            violations = check_drift_constraints(expression)
        except ValueError as e:
            violations = [str(e)]
        if violations:
            rejected.append({"expression": expression, "violations": violations})
            continue
        kept.append(_candidate(expression, data, "symbolic", 1, program=str(prog)))
    return {
        "candidates": sorted(kept, key=lambda c: c["rmse"]),
        "n_considered": len(seen),
        "n_rejected": len(rejected),
        "rejected": rejected,
    }


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
    data = _prepare(drift_fn, samples, progress, seed, n_points)
    dpo = _fit_dpo(data)
    candidates = [dpo] + _sparse(data, max_terms)
    sym = None
    if symbolic:
        sym = _symbolic(data, seed=seed, **(symbolic_kwargs or {}))
        candidates += sym["candidates"]
    return _jsonable({
        "dpo_fit": dpo,
        **_choose(candidates, data, complexity_penalty),
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
        data = _prepare(drift_fn, samples, (p0 + p1) / 2, seed, kwargs.get("n_points", 4096))
        interpolated = _candidate(expression, data, "interpolated", 2, ends=[e0, e1], progresses=[p0, p1])
        interpolated["violations"] = check_drift_constraints(expression)
        penalty = kwargs.get("complexity_penalty", 1e-3)
        interpolated["score"] = interpolated["rmse"] / (float(np.std(data.d)) or 1.0) + penalty * interpolated["complexity"]
        middle["candidates"].insert(0, _jsonable(interpolated))
        middle["chosen"] = None if interpolated["violations"] else _jsonable(interpolated)
    middle["ends"] = [{"progress": p, "chosen": e["chosen"], "dpo_fit": e["dpo_fit"]} for p, e in zip((p0, p1), ends)]
    return middle


def _choose(candidates: list[dict], data: _Data, complexity_penalty: float) -> dict:
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


# ---------------------------------------------------------------------------------------------
# Value losses
# ---------------------------------------------------------------------------------------------


def value_loss_library(error_scale: float = 1.0) -> list[tuple[str, str]]:
    """Candidate terms (name, expression over e = v - target and t = target) for the *departure*
    of a learned value loss from L2, each 0 at e = 0, each with its negation so a non-negative
    fit is a signed one: e^2/2 (a rescaled L2), its halves for over- and under-prediction
    (expectile-like asymmetry), |e|, pseudo-Huber c^2 (sqrt(1 + (e/c)^2) - 1), the odd c tanh(e/c)
    (a bias of the critic toward over- or under-prediction, which LearnedValueLoss can express)
    at c = 0.25, 1 and 4 times `error_scale`, and e^2 (1 +- tanh t)/2 (target-dependent weights)."""
    terms = [
        ("e^2/2", "e**2/2"),
        ("e^2/2[e>=0]", "Piecewise((e**2/2, e >= 0), (0, True))"),
        ("e^2/2[e<0]", "Piecewise((e**2/2, e < 0), (0, True))"),
        ("|e|", "Abs(e)"),
        ("e^2(1+tanh t)/2", "e**2*(1 + tanh(t))/2"),
        ("e^2(1-tanh t)/2", "e**2*(1 - tanh(t))/2"),
    ]
    for k in (0.25, 1.0, 4.0):
        c = _round(k * error_scale)
        terms.append((f"pseudo_huber({c})", f"{c!r}**2*(sqrt(1 + (e/{c!r})**2) - 1)"))
        terms.append((f"{c}tanh(e/{c})", f"{c!r}*tanh(e/{c!r})"))
    return terms + [(f"-{name}", f"-({term})") for name, term in terms]


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
    errors, targets = _valid_subsample(errors, targets, True, "finite value", n_points, seed)
    scale = float(np.std(errors)) or 1.0

    def departure(e, t):
        t32 = t.astype(np.float32)
        out = np.asarray(loss_fn(t32 + e.astype(np.float32), t32), np.float64)
        if not np.isfinite(out).all():
            raise ValueError("the value loss to distil is not finite at some fit points")
        return np.broadcast_to(out, e.shape) - e**2 / 2

    grid_e = np.linspace(-3 * scale, 3 * scale, GRID_NUM)
    grid_t = np.full_like(grid_e, float(np.median(targets)))
    density = np.exp(-0.5 * (grid_e / scale) ** 2)
    data = _Data(
        r=errors, a=targets, d=departure(errors, targets), grid_r=grid_e, grid_a=grid_t,
        grid_d=departure(grid_e, grid_t), grid_w=density / density.sum(), progress=0.0,
        source="samples", kind="value_loss",
    )
    residuals = _sparse(data, max_terms, value_loss_library(scale))
    l2 = _candidate("0", data, "l2", 0)  # no departure at all: the L2 loss evolution started from
    candidates = [l2] + residuals
    for c in candidates:
        c["departure"] = c["expression"]
        c["expression"] = "e**2/2" if c["expression"] == "0" else f"e**2/2 + {c['expression']}"
    return _jsonable({
        **_choose(candidates, data, complexity_penalty),
        "data": {"source": data.source, "n_points": int(errors.size), "error_std": scale,
                 "fit": "departure from L2 = e**2/2",
                 "grid": {"e": [-3 * scale, 3 * scale], "t": float(grid_t[0]), "num": GRID_NUM},
                 "target_std": float(np.std(data.d))},
        "complexity_penalty": complexity_penalty,
    })


def _jsonable(x):
    """Plain Python types only; NaN/inf become None (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x

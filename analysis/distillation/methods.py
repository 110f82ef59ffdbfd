"""The fitting methods of a distillation, each over a FitData, each giving candidates in one format.

    fit_dpo(data)                least squares of the DPO family (alpha, beta > 0)
    fit_plane(data)              a potential's least-squares plane b + sum_i a_i s_i
    fit_sparse(data, library)    non-negative best subsets of a term library, plus thresholding
    fit_symbolic(data)           genetic programming whose candidates are valid by construction
                                 (metadisco.analysis.distillation.search): its Pareto front of size against error
    drift_library(), value_loss_library(scale), shaping_library(obs, target)
                                 the term libraries fit_sparse draws from
                                                 (drift_library lives in metadisco.meta_objectives.drift_terms)

`data` is a FitData (`metadisco.analysis.distillation.data.prepare_drift` for a drift). Each matches what
`data.fit` says: the target's values or its slopes along r (or e).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
from scipy.optimize import least_squares, minimize_scalar, nnls

from metadisco.analysis.distillation.data import FitData, candidate, round_sig
from metadisco.analysis.distillation.report import Candidate, SearchCounts
from metadisco.analysis.distillation.search import Plug, Problem, search, transform_expression, tree_str
from metadisco.meta_objectives.drift_terms import drift_library
from metadisco.meta_objectives.formulas import DPO_FORMULA, dpo_expression

# ---------------------------------------------------------------------------------------------
# DPO family
# ---------------------------------------------------------------------------------------------

DPO_FAMILY = DPO_FORMULA.template  # symbols alpha, beta > 0
DPO_STARTS = ((2.0, 0.6), (1.0, 1.0), (0.5, 0.3), (4.0, 2.0))


def fit_dpo(data: FitData) -> Candidate:
    """Least-squares fit of the DPO family (Lu et al. 2022) to the target on the fit points.

    Returns a Candidate with its alpha, beta (both > 0, rounded to 6 significant digits as in its
    expression). Fitted in log(alpha), log(beta), multi-start from DPO_STARTS.
    """
    def residual(theta):
        alpha, beta = np.exp(theta)
        return data.column(DPO_FAMILY, alpha=alpha, beta=beta) - data.target

    best = None
    bounds = (np.log([1e-3, 1e-3]), np.log([1e3, 1e3]))
    for start in DPO_STARTS:
        res = least_squares(residual, np.log(start), bounds=bounds, x_scale=1.0)
        if best is None or res.cost < best.cost:
            best = res
    alpha, beta = (round_sig(v) for v in np.exp(best.x))
    return candidate(dpo_expression(alpha, beta), data, "dpo", 2, alpha=alpha, beta=beta)


# ---------------------------------------------------------------------------------------------
# Sparse regression over a constrained library
# ---------------------------------------------------------------------------------------------

def fit_sparse(data: FitData, max_terms: int = 3, library: list[tuple[str, str]] | None = None,
               max_subsets: int = 2000, beam_width: int = 20, threshold: float = 0.05,
               intercept: bool = False) -> list[Candidate]:
    """Sparse non-negative fits target ~ sum_i w_i term_i (w_i >= 0, so a sum of valid drifts stays
    valid); with `intercept`, target ~ b + sum_i w_i term_i with a free offset b that is not a term
    (a potential's: Phi and Phi + b shape alike).

    For each size 1..max_terms: the best subset of `library` (default `drift_library()`), found
    exhaustively while there are at most `max_subsets` subsets and by beam search beyond; plus
    sequential thresholding of the full NNLS fit (drop terms contributing < `threshold` of the
    largest, refit). Returns Candidates (with their terms' names) sorted by rmse.
    """
    library = drift_library() if library is None else list(library)
    columns, names, terms = [], [], []
    for name, term in library:
        col = data.column(term)
        if np.isfinite(col).all() and np.linalg.norm(col) > 1e-12:
            columns.append(col)
            names.append(name)
            terms.append(term)
    if not columns:
        return []
    X = np.stack(columns, axis=1)
    y = data.target
    x_mean, y_mean = (X.mean(0), y.mean()) if intercept else (np.zeros(X.shape[1]), 0.0)
    X, y = X - x_mean, y - y_mean
    norms = np.linalg.norm(X, axis=0)
    norms[norms <= 1e-12] = np.inf  # constant on the fit points: the offset already says it
    Xs = X / norms

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
        parts = [(names[i], terms[i], round_sig(wi / norms[i]), i) for i, wi in zip(subset, w) if i in support]
        if not parts:
            continue
        expression = " + ".join(f"{wi!r}*{term}" for _, term, wi, _ in parts)
        if intercept:
            expression = f"{round_sig(y_mean - sum(wi * x_mean[i] for *_, wi, i in parts))!r} + {expression}"
        out.append(candidate(expression, data, method, len(parts), terms=[n for n, *_ in parts]))
    return sorted(out, key=lambda c: c.rmse)


def _record(chosen, subset, w, method="sparse", rel_tol=1e-4):
    """Keep a fit under its support (terms contributing > rel_tol of the largest), once."""
    w = np.asarray(w)
    cut = rel_tol * w.max() if w.size else 0.0
    support = frozenset(i for i, wi in zip(subset, w) if wi > cut)
    if support and support not in chosen:
        chosen[support] = (subset, w, method)


# ---------------------------------------------------------------------------------------------
# Symbolic regression, valid by construction
# ---------------------------------------------------------------------------------------------


def fit_symbolic(data: FitData, generations: int = 20, seed: int = 0, population_size: int = 200,
                 max_size: int = 15, parsimony: float = 1e-3,
                 time_limit: float | None = None) -> tuple[list[Candidate], SearchCounts]:
    """The valid-by-construction search (metadisco.analysis.distillation.search) over `data` (at one
    progress) -> (the search's Pareto front as Candidates, with their programs; its SearchCounts).

    generations, population_size, max_size (nodes), parsimony, time_limit (seconds): the search's budget.

    A drift candidate is c * relu(g - T_1[g] - DELTA); a value-loss departure from L2 is
    (b - 1) e^2/2 + c * relu(g - T_0[g] - DELTA), b, c >= 0 (the whole loss b e^2/2 + c ...); a
    potential b + c * g, b and c free.
    """
    if not data.scalar_progress:
        raise ValueError("fit_symbolic fits one progress at a time; distil_over_progress interpolates")
    plug = Plug(data.kind, data.variables if data.kind == "shaping" else ())
    base = ()
    if data.kind == "value_loss":  # the departure's e^2/2 coefficient may fall to -1 (b >= 0)
        base = ((data.r**2 / 2, data.r, -1.0),)
    if data.kind == "shaping":  # a potential's free offset
        ones = np.ones(len(data.r))
        base = ((ones, 0 * ones, -np.inf),)
    problem = Problem(plug, data.r, data.a, data.d, data.s if data.s is not None else np.zeros_like(data.d),
                      fit=data.fit, base=base)
    result = search(problem, generations=generations, population_size=population_size, seed=seed,
                    max_size=max_size, parsimony=parsimony, time_limit=time_limit)
    out, unreadable = [], []
    for member in result.front:
        *b, c = (round_sig(w) for w in member["coefficients"])
        shape = transform_expression(plug, member["tree"])
        parts = [f"{b[0]!r}*e**2/2"] if b and b[0] != 0 and data.kind == "value_loss" else []
        if data.kind == "shaping":
            parts = [f"{b[0]!r}"] + ([f"{c!r}*({shape})"] if c != 0 else [])
        elif c > 0 and shape != 0:
            parts.append(f"{c!r}*({shape})")
        if not parts:  # nothing but zero: L2 itself, or no drift at all
            continue
        term = " + ".join(parts)
        try:
            out.append(candidate(term, data, "symbolic", 1, program=tree_str(member["tree"])))
        except ValueError as e:  # an expression the safe parser refuses (counted, not kept)
            unreadable.append(f"{tree_str(member['tree'])}: {e}")
    return out, replace(result.stats, unreadable=tuple(unreadable) or None)


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
        c = round_sig(k * error_scale)
        terms.append((f"pseudo_huber({c})", f"{c!r}**2*(sqrt(1 + (e/{c!r})**2) - 1)"))
        terms.append((f"{c}tanh(e/{c})", f"{c!r}*tanh(e/{c!r})"))
    return terms + [(f"-{name}", f"-({term})") for name, term in terms]


# ---------------------------------------------------------------------------------------------
# Shaping potentials
# ---------------------------------------------------------------------------------------------


def fit_plane(data: FitData) -> Candidate:
    """A potential's least-squares plane b + sum_i a_i s_i over every observation variable (what
    a potential that only says "further along, faster" is)."""
    design = np.column_stack([np.ones(len(data.r)), data.r])
    coefficients, *_ = np.linalg.lstsq(design, data.target, rcond=None)
    b, *a = (round_sig(c) for c in coefficients)
    expression = " + ".join([repr(b)] + [f"{ai!r}*{name}" for ai, name in zip(a, data.variables)])
    return candidate(expression, data, "plane", len(a))


SHAPING_PERIODS = (0.25, 3.0)  # the periods a potential's sin and cos may span over a variable's visited range
MAX_PAIRED_VARIABLES = 6  # products s_i s_j only below this many variables (their number grows as the square)


def shaping_library(obs, target) -> list[tuple[str, str]]:
    """Candidate terms (name, expression over s0, s1, ...) of a potential fitted on observations
    obs [n, obs_dim] to `target` [n] (fit_sparse adds the offset): each variable, its square, the
    products of two (up to MAX_PAIRED_VARIABLES variables), and sin and cos of each at the
    frequency `tuned_frequency` finds; each with its negation, so a non-negative fit is a signed
    one. With these the library writes a plane and MountainCar's mechanical energy exactly."""
    obs = np.asarray(obs, np.float64)
    names = [f"s{i}" for i in range(obs.shape[1])]
    terms = []
    for i, s in enumerate(names):
        terms += [(s, s), (f"{s}^2", f"{s}**2")]
        w = tuned_frequency(obs, target, i)
        if w is not None:
            terms += [(f"sin({w:g}{s})", f"sin({w!r}*{s})"), (f"cos({w:g}{s})", f"cos({w!r}*{s})")]
    if len(names) <= MAX_PAIRED_VARIABLES:
        terms += [(f"{a}*{b}", f"{a}*{b}") for a, b in itertools.combinations(names, 2)]
    return terms + [(f"-{name}", f"-({term})") for name, term in terms]


def tuned_frequency(obs, target, i: int, num: int = 56) -> float | None:
    """The frequency w at which sin(w s_i) and cos(w s_i) best explain `target` beside a quadratic
    in every variable (a periodogram over SHAPING_PERIODS periods across s_i's visited range, refined
    between its neighbours), to 6 digits; None where s_i does not vary."""
    x = obs[:, i]
    span = float(np.ptp(x))
    if span <= 0:
        return None
    base = np.column_stack([np.ones(len(x)), obs, obs**2])

    def residual(w):
        design = np.column_stack([base, np.sin(w * x), np.cos(w * x)])
        fitted = design @ np.linalg.lstsq(design, target, rcond=None)[0]
        return float(np.sum((target - fitted) ** 2))

    grid = 2 * np.pi * np.linspace(*SHAPING_PERIODS, num) / span
    k = int(np.argmin([residual(w) for w in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, num - 1)]
    return round_sig(minimize_scalar(residual, bounds=(lo, hi), method="bounded", options={"xatol": 1e-7}).x)

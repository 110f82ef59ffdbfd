"""Symbolic search whose candidates are valid by construction (drifts and value losses).

Genetic programming over small expression trees g, each turned into a valid objective by one
transform before it is scored, so that the search spends its budget on valid formulas:

    drift       D(r, A)  = c * relu(g(r, A) - T_1[g](r, A) - DELTA),   c >= 0
    value loss  L(e, t)  = b * e^2/2 + c * relu(g(e, t) - T_0[g](e, t) - DELTA),   b, c >= 0
    shaping     Phi(s)   = b + c * g(s0, s1, ...),   b, c free (any potential is valid)

T_x0[g] is the one-sided first-order expansion of g at the pivot x0 (r = 1 for a drift, e = 0
for a value loss): g(x0) + g'_+(x0) (x - x0) for x >= x0 and g(x0) + g'_-(x0) (x - x0) below, with
the one-sided derivatives computed exactly by forward-mode directional derivatives (relu and
abs at 0 included). So g - T[g] = o(|x - x0|) for any piecewise-smooth g, and the relu makes it
non-negative: every candidate is >= 0, exactly 0 at the pivot, with zero slope on both sides (no
kink). For convex g it is g's Bregman divergence (g = -log r gives the KL-like r - 1 - log r).
DELTA (1e-5) makes the zero at the pivot robust to float32 rounding of the printed expression.
The sum of non-negative multiples of valid forms is valid, hence the non-negative scaling.

What the transform cannot guarantee is checked: finiteness (exp can overflow) and, for a value
loss, that the gradient step moves v toward its target (e dL/de >= 0 for |e| > 1) on the check
grid of metadisco.meta_objectives.constraints. Those candidates count as considered and invalid.

One set of rules (`tree_values` over `_unary` / `_binary`) evaluates a tree both ways: numerically
with directional derivatives (numpy backend; the search) and symbolically (sympy backend; the
expression strings handed back, `transform_expression`).

    result = search(Problem(Plug("drift"), r, A, D, dD_dr, fit="value"), generations=20, seed=0)
    result.front   [{"tree", "size", "rmse", "coefficients"}] the Pareto front of size against error
    result.stats   SearchCounts (metadisco.analysis.distillation.report): considered, valid, seconds, ...

Why a transform rather than a filter (gplearn's programs, checked afterwards) or a grammar of
validity-preserving operations: the filter wastes most of the budget (an unconstrained program is
almost never exactly flat at r = 1), and a grammar of products with (r - 1)^2 cannot write the
KL-like r - 1 - log r, a Bregman divergence, without an infinite series. The transform keeps the
search over unconstrained g (so crossover and mutation stay simple) and makes every g count.

The drift's terminals are u = r - 1, l = log r, A and the generators f of the f-divergences
D_f(pi_new || pi_old) = E_old[f(r)] (Csiszar 1967) that trust-region and mirror-learning drifts are
built from (Schulman et al. 2015 KL; Belousov & Peters 2019 f- and alpha-divergence regions; Kuba
et al. 2022, mirror learning), each with f(1) = f'(1) = 0 (so T_1[f] = 0: a generator is its own
candidate, of size 1): kl = r log r - r + 1 (KL), hel = (sqrt r - 1)^2 (squared Hellinger),
js = (r log r - (1 + r) log((1 + r)/2))/2 (Jensen-Shannon). The others are already small trees:
reverse KL r - 1 - log r is neg(l), Pearson chi^2 (r - 1)^2 is sq(u), the alpha-divergences
r^a - 1 - a (r - 1) are exp(a l) (a polished constant). Total variation |r - 1|/2 kinks at r = 1,
which a drift may not (the transform maps abs(u) to 0); relu(abs(u) - eps) is its flat variant.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import sympy as sp
from scipy.optimize import least_squares, lsq_linear

from metadisco.analysis.distillation.report import SearchCounts
from metadisco.meta_objectives.expressions import A_sym, e_sym, r_sym, t_sym

DELTA = 1e-5  # the transform's dead band, larger than float32 rounding of g at the pivot

UNARY = ("neg", "sq", "relu", "abs", "tanh", "exp")
SHAPING_UNARY = UNARY + ("sin", "cos")  # a potential over positions may be periodic (MountainCar's hill)
BINARY = ("add", "sub", "mul")
# f-divergence generators f(r), f(1) = f'(1) = 0 (module docstring); values and slopes derived from these
DIVERGENCES = {
    "kl": r_sym * sp.log(r_sym) - r_sym + 1,
    "hel": (sp.sqrt(r_sym) - 1) ** 2,
    "js": (r_sym * sp.log(r_sym) - (1 + r_sym) * sp.log((1 + r_sym) / 2)) / 2,
}
TERMINALS = {"drift": ("u", "l", "A", *DIVERGENCES), "value_loss": ("e", "t")}  # u = r - 1, l = log r
_DIVERGENCE_FNS = {k: (sp.lambdify(r_sym, f, "numpy"), sp.lambdify(r_sym, sp.diff(f, r_sym), "numpy"))
                   for k, f in DIVERGENCES.items()}


# ---------------------------------------------------------------------------------------------
# One set of rules, two backends
# ---------------------------------------------------------------------------------------------


class _Numeric:
    """numpy backend: values and directional derivatives of arrays."""

    @staticmethod
    def select(x, pos, neg, zero):  # where(x > 0, pos, where(x < 0, neg, zero))
        return np.where(x > 0, pos, np.where(x < 0, neg, zero))

    relu = staticmethod(lambda x: np.maximum(x, 0.0))
    abs = staticmethod(np.abs)
    tanh = staticmethod(np.tanh)
    exp = staticmethod(np.exp)
    sin = staticmethod(np.sin)
    cos = staticmethod(np.cos)


class _Symbolic:
    """sympy backend: the same rules build expressions."""

    @staticmethod
    def select(x, pos, neg, zero):
        pos, neg, zero = map(sp.sympify, (pos, neg, zero))
        if pos == neg == zero:
            return pos
        return sp.Piecewise((pos, x > 0), (neg, x < 0), (zero, True))

    relu = staticmethod(lambda x: sp.Max(0, x))
    abs = staticmethod(sp.Abs)
    tanh = staticmethod(sp.tanh)
    exp = staticmethod(sp.exp)
    sin = staticmethod(sp.sin)
    cos = staticmethod(sp.cos)


def _unary(op, B, a, da):
    """(value, directional derivative) of op applied to (a, da)."""
    if op == "neg":
        return -a, -da
    if op == "sq":
        return a * a, 2 * a * da
    if op == "relu":
        return B.relu(a), B.select(a, da, 0 * da, B.relu(da))
    if op == "abs":
        return B.abs(a), B.select(a, da, -da, B.abs(da))
    if op == "tanh":
        v = B.tanh(a)
        return v, (1 - v * v) * da
    if op == "exp":
        v = B.exp(a)
        return v, v * da
    if op == "sin":
        return B.sin(a), B.cos(a) * da
    if op == "cos":
        return B.cos(a), -B.sin(a) * da
    raise ValueError(f"unknown operation {op!r}")


def _binary(op, a, da, b, db):
    if op == "add":
        return a + b, da + db
    if op == "sub":
        return a - b, da - db
    if op == "mul":
        return a * b, a * db + b * da
    raise ValueError(f"unknown operation {op!r}")


def tree_values(tree, env: dict, B=_Numeric):
    """(g, dg) of `tree`: env maps each terminal to (value, directional derivative)."""
    head = tree[0]
    if head == "x":
        return env[tree[1]]
    if head == "c":
        return tree[1], 0.0
    if head in BINARY:
        return _binary(head, *tree_values(tree[1], env, B), *tree_values(tree[2], env, B))
    return _unary(head, B, *tree_values(tree[1], env, B))


def fold(tree):
    """The tree with every constant subtree replaced by its value (rounded to 6 digits)."""
    if tree[0] in ("x", "c"):
        return tree
    children = [fold(t) for t in tree[1:]]
    node = (tree[0], *children)
    if all(c[0] == "c" for c in children):
        with np.errstate(all="ignore"):
            value = float(tree_values(node, {})[0])
        if math.isfinite(value) and abs(value) < 1e6:
            return ("c", float(f"{value:.6g}"))
    return node


def tree_size(tree) -> int:
    return 1 if tree[0] in ("x", "c") else 1 + sum(tree_size(t) for t in tree[1:])


def tree_str(tree) -> str:
    if tree[0] == "x":
        return tree[1]
    if tree[0] == "c":
        return f"{tree[1]:.6g}"
    return f"{tree[0]}({', '.join(tree_str(t) for t in tree[1:])})"


def constants_of(tree) -> list[float]:
    if tree[0] == "c":
        return [tree[1]]
    if tree[0] == "x":
        return []
    return [c for t in tree[1:] for c in constants_of(t)]


def with_tree_constants(tree, values):
    """`tree` (a candidate of the symbolic search) with its constant leaves replaced, in order, by
    `values` (metadisco.meta_objectives.formulas.with_constants fills a formula's named constants instead)."""
    it = iter(values)

    def rebuild(t):
        if t[0] == "c":
            return ("c", float(next(it)))
        if t[0] == "x":
            return t
        return (t[0], *(rebuild(s) for s in t[1:]))

    return rebuild(tree)


# ---------------------------------------------------------------------------------------------
# The plug points: terminals, pivot and what the transform cannot guarantee
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plug:
    """How trees become one plug's objectives. pivot: the point where the objective and its slope
    vanish (drift r = 1, value loss e = 0; a shaping has none: its trees are used as they are).
    names: a shaping's variables (s0, s1, ...), the columns of its points x [n, obs_dim]."""

    kind: str
    names: tuple[str, ...] = ()

    @property
    def terminals(self):
        return self.names if self.kind == "shaping" else TERMINALS[self.kind]

    @property
    def unary(self):
        return SHAPING_UNARY if self.kind == "shaping" else UNARY

    @property
    def lower(self) -> float:
        """The bound of the tree's coefficient c: >= 0 keeps a drift or a loss valid; free for a potential."""
        return -np.inf if self.kind == "shaping" else 0.0

    def env(self, x, y, direction: float = 1.0):
        """Terminal values and derivatives along the pivot variable (x: r or e; y: A or t; a
        shaping's x: the points [n, obs_dim], y unused)."""
        x = np.asarray(x, np.float64)
        if self.kind == "shaping":
            return {name: (x[..., i], 0.0) for i, name in enumerate(self.names)}
        y = np.asarray(y, np.float64)
        if self.kind == "drift":
            return {"u": (x - 1.0, direction * np.ones_like(x)), "l": (np.log(x), direction / x),
                    "A": (y, np.zeros_like(y)),
                    **{k: (f(x), direction * df(x)) for k, (f, df) in _DIVERGENCE_FNS.items()}}
        return {"e": (x, direction * np.ones_like(x)), "t": (y, np.zeros_like(y))}

    @property
    def pivot(self) -> float:
        return 1.0 if self.kind == "drift" else 0.0

    def symbolic_env(self, at_pivot: bool, direction: float = 1.0):
        if self.kind == "shaping":
            return {name: (sp.Symbol(name, real=True), 0) for name in self.names}
        if self.kind == "drift":
            if at_pivot:  # every generator is 0 and flat at r = 1
                return {"u": (sp.S.Zero, direction), "l": (sp.S.Zero, direction), "A": (A_sym, 0),
                        **{k: (sp.S.Zero, sp.S.Zero) for k in DIVERGENCES}}
            return {"u": (r_sym - 1, 1), "l": (sp.log(r_sym), 1 / r_sym), "A": (A_sym, 0),
                    **{k: (f, sp.diff(f, r_sym)) for k, f in DIVERGENCES.items()}}
        if at_pivot:
            return {"e": (sp.S.Zero, direction), "t": (t_sym, 0)}
        return {"e": (e_sym, 1), "t": (t_sym, 0)}

    @property
    def pivot_symbol(self):
        return r_sym if self.kind == "drift" else e_sym


def transform(plug: Plug, tree, x, y):
    """(value, slope along x) of relu(g - T[g] - DELTA) at points (x, y) (float64 arrays); a
    shaping's tree is its own candidate: (g, 0) at the points x [n, obs_dim]."""
    if plug.kind == "shaping":
        with np.errstate(all="ignore"):
            g, _ = tree_values(tree, plug.env(x, y))
        value = np.broadcast_to(np.asarray(g, np.float64), np.shape(x)[:-1])
        return value, np.zeros_like(value)
    with np.errstate(all="ignore"):  # overflow is caught as non-finite by Problem.valid
        g, dg = tree_values(tree, plug.env(x, y))
        g0, d_plus = tree_values(tree, plug.env(np.full_like(x, plug.pivot), y, 1.0))
        _, d_minus = tree_values(tree, plug.env(np.full_like(x, plug.pivot), y, -1.0))
        slope0 = np.where(x >= plug.pivot, d_plus, -np.asarray(d_minus))  # one-sided slopes at the pivot
        inner = g - g0 - slope0 * (x - plug.pivot) - DELTA
        value = np.maximum(inner, 0.0)
        slope = np.where(inner > 0, dg - slope0, 0.0)
    return np.broadcast_to(value, x.shape), np.broadcast_to(slope, x.shape)


def transform_expression(plug: Plug, tree) -> sp.Expr:
    """The sympy expression of relu(g - T[g] - DELTA) (what `transform` evaluates; a shaping's: g)."""
    g, _ = tree_values(tree, plug.symbolic_env(False), _Symbolic)
    if plug.kind == "shaping":
        return sp.sympify(g)
    g0, d_plus = tree_values(tree, plug.symbolic_env(True, 1.0), _Symbolic)
    _, d_minus = tree_values(tree, plug.symbolic_env(True, -1.0), _Symbolic)
    x = plug.pivot_symbol - plug.pivot
    d_plus, d_minus = sp.sympify(d_plus), -sp.sympify(d_minus)
    linear = d_plus * x if d_plus == d_minus else sp.Piecewise((d_plus * x, plug.pivot_symbol >= plug.pivot),
                                                               (d_minus * x, True))
    return sp.Max(0, g - g0 - linear - sp.Float(DELTA))


# ---------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------


@dataclass
class Problem:
    """What one search fits: fit points (x, y), target values `d` and slopes `s` along x, which of
    the two to match (`fit`), and the check grid for what the transform cannot guarantee."""

    plug: Plug
    x: np.ndarray
    y: np.ndarray
    d: np.ndarray
    s: np.ndarray
    fit: str = "value"  # "value": match d; "slope": match s
    base: tuple[tuple[np.ndarray, np.ndarray, float], ...] = ()  # (value, slope, lower bound) columns
    check: tuple[np.ndarray, np.ndarray] = field(default=None)

    def __post_init__(self):
        if self.fit not in ("value", "slope"):
            raise ValueError(f"fit must be 'value' or 'slope', got {self.fit!r}")
        if self.check is None:
            if self.plug.kind == "shaping":  # a potential is only used where it was fitted
                R, Y = self.x, self.y
            elif self.plug.kind == "drift":  # metadisco.meta_objectives.constraints' drift grid, coarser
                R, Y = np.meshgrid(np.linspace(0.2, 3.0, 15), np.linspace(-3.0, 3.0, 13), indexing="ij")
            else:
                R, Y = np.meshgrid(np.linspace(-10.0, 10.0, 21), np.linspace(-10.0, 10.0, 11), indexing="ij")
            self.check = (R, Y) if self.plug.kind == "shaping" else (R.ravel(), Y.ravel())

    @property
    def target(self) -> np.ndarray:
        return self.d if self.fit == "value" else self.s

    def columns(self, tree):
        """Design columns [n, k] (base columns then the tree's) in the fit mode, with lower bounds."""
        value, slope = transform(self.plug, tree, self.x, self.y)
        col = value if self.fit == "value" else slope
        base = [b[0] if self.fit == "value" else b[1] for b in self.base]
        return np.stack([*base, col], axis=1), [b[2] for b in self.base] + [self.plug.lower]

    def valid(self, tree) -> bool:
        """What the transform does not guarantee: finite on the fit points and the check grid;
        for a value loss, the step toward the target outside |e| <= 1."""
        value, slope = transform(self.plug, tree, *self.check)
        if not (np.isfinite(value).all() and np.isfinite(slope).all()):
            return False
        if self.plug.kind == "value_loss":
            e = self.check[0]
            if np.any((np.abs(e) > 1.0) & (e * slope < -1e-9)):
                return False
        return True


def fit_coefficients(X, lower, y):
    """Least squares y ~ X w with w >= lower -> (w, rmse); rmse is inf where a column's values are so
    large that the fit overflows (the candidate is then never chosen: the search counts it invalid)."""
    # expected for a candidate whose terms explode on some points (e**8, exp(e)): scipy's solver
    # overflows inside and would warn once per such candidate
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if X.shape[1] == 1 and lower[0] == 0.0:
            col = X[:, 0]
            norm = float(col @ col)
            w = np.array([max(0.0, float(col @ y) / norm)]) if norm > 0 else np.zeros(1)
        elif np.isneginf(lower).all():  # unbounded (a potential's offset and scale): plain least squares
            try:
                w = np.linalg.lstsq(X, y, rcond=None)[0]
            except np.linalg.LinAlgError:
                w = np.full(len(lower), np.nan)
        else:
            try:
                w = lsq_linear(X, y, bounds=(np.asarray(lower), np.full(len(lower), np.inf))).x
            except np.linalg.LinAlgError:
                w = np.full(len(lower), np.nan)
        rmse = float(np.sqrt(np.mean((X @ w - y) ** 2)))
    if not (np.isfinite(w).all() and np.isfinite(rmse)):
        return np.zeros_like(np.asarray(lower, np.float64)), float("inf")
    return w, rmse


@dataclass
class SearchResult:
    front: list[dict]  # {"tree", "size", "rmse", "coefficients"} on the Pareto front, by size
    stats: SearchCounts


def search(problem: Problem, generations: int = 20, population_size: int = 200, seed: int = 0,
           max_size: int = 15, parsimony: float = 1e-3, tournament: int = 4, polish: int = 8,
           time_limit: float | None = None) -> SearchResult:
    """Genetic programming over trees, each scored after the transform (valid by construction).

    Fitness: rmse / std(target) after the best bounded linear scaling, + parsimony * size.
    Returns the Pareto front of size against rmse over every tree considered; the `polish`
    smallest-error front members get their constants refined by least squares.
    """
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    scale = float(np.std(problem.target)) or 1.0
    terminals, unary = problem.plug.terminals, problem.plug.unary
    seen: dict[str, dict | None] = {}  # tree_str -> {"tree", "size", "fitness", "rmse", "coefficients"} or None

    def score(tree):
        key = tree_str(tree)
        if key not in seen:
            if not problem.valid(tree):
                seen[key] = None
            else:
                X, lower = problem.columns(tree)
                if not np.isfinite(X).all():
                    seen[key] = None
                else:
                    w, rmse = fit_coefficients(X, lower, problem.target)
                    size = tree_size(tree)
                    seen[key] = {"tree": tree, "size": size, "fitness": rmse / scale + parsimony * size,
                                 "rmse": rmse, "coefficients": w}
        return seen[key]

    def random_tree(depth, full=False):
        if depth <= 0 or (not full and rng.random() < 0.3):
            if rng.random() < 0.25:
                return ("c", float(np.round(rng.uniform(-2.0, 2.0), 2)))
            return ("x", terminals[rng.integers(len(terminals))])
        if rng.random() < 0.5:
            return (BINARY[rng.integers(len(BINARY))], random_tree(depth - 1, full), random_tree(depth - 1, full))
        return (unary[rng.integers(len(unary))], random_tree(depth - 1, full))

    def subtrees(tree, path=()):
        yield path, tree
        if tree[0] not in ("x", "c"):
            for i, child in enumerate(tree[1:], 1):
                yield from subtrees(child, path + (i,))

    def replace(tree, path, new):
        if not path:
            return new
        i = path[0]
        return tree[:i] + (replace(tree[i], path[1:], new),) + tree[i + 1:]

    def pick(tree):
        nodes = list(subtrees(tree))
        return nodes[rng.integers(len(nodes))]

    def vary(a, b):
        roll = rng.random()
        if roll < 0.5:  # subtree crossover
            path, _ = pick(a)
            _, donor = pick(b)
            child = replace(a, path, donor)
        elif roll < 0.75:  # subtree mutation
            path, _ = pick(a)
            child = replace(a, path, random_tree(2))
        elif roll < 0.9:  # constant jitter
            consts = constants_of(a)
            if not consts:
                return replace(a, pick(a)[0], random_tree(1))
            child = with_tree_constants(a, np.round(np.asarray(consts) * np.exp(rng.normal(0, 0.3, len(consts)))
                                               + rng.normal(0, 0.1, len(consts)), 4))
        else:  # hoist: a subtree alone
            child = pick(a)[1]
        child = fold(child)
        return child if tree_size(child) <= max_size else a

    def fitness(tree):
        s = score(tree)
        return math.inf if s is None else s["fitness"]

    population = atoms(problem.plug)[:population_size]
    population += [fold(random_tree(int(rng.integers(1, 4)), full=bool(rng.random() < 0.5)))
                   for _ in range(population_size - len(population))]
    gens_done = 0
    for _ in range(generations):
        fits = np.array([fitness(t) for t in population])
        if time_limit is not None and time.perf_counter() - start > time_limit:
            break
        elite = [population[i] for i in np.argsort(fits)[: max(1, population_size // 20)]]

        def select():
            idx = rng.integers(len(population), size=tournament)
            return population[idx[np.argmin(fits[idx])]]

        population = elite + [vary(select(), select()) for _ in range(population_size - len(elite))]
        gens_done += 1
    for t in population:
        fitness(t)

    front = pareto([m for m in seen.values() if m is not None])
    front = pareto(front + [p for m in sorted(front, key=lambda m: m["rmse"])[:polish]
                            if (p := _polish(problem, m)) is not None])
    n_valid = sum(v is not None for v in seen.values())
    return SearchResult(front, SearchCounts(
        n_considered=len(seen), n_valid=n_valid, valid_share=n_valid / max(1, len(seen)), generations=gens_done,
        population_size=population_size, seconds=time.perf_counter() - start))


def atoms(plug: Plug) -> list:
    """The grammar's smallest trees, the start of every search: each terminal, each unary operation
    of one, and for a drift each r-terminal scaled by A and by |A| (so the f-divergence generators
    and their advantage-weighted forms are scored from the first generation, not left to chance);
    for a shaping sin and cos of a scaled terminal (a frequency that polishing refines)."""
    xs = [("x", t) for t in plug.terminals]
    trees = xs + [(op, x) for op in plug.unary for x in xs]
    if plug.kind == "shaping":
        trees += [(op, ("mul", ("c", k), x)) for op in ("sin", "cos") for x in xs for k in (1.0, 3.0)]
    if plug.kind == "drift":
        trees += [("mul", scale, x) for scale in (("x", "A"), ("abs", ("x", "A"))) for x in xs if x[1] != "A"]
    return trees


def pareto(members: list[dict], size: str = "size", error: str = "rmse") -> list[dict]:
    """The members no other beats on both size and error, by increasing size (ties: the first)."""
    front, best = [], math.inf
    for m in sorted(members, key=lambda m: (m[size], m[error])):
        if m[error] < best:
            front.append(m)
            best = m[error]
    return front


def _polish(problem: Problem, member: dict, max_nfev: int = 60) -> dict | None:
    """Refine a tree's constants by least squares (the scaling re-fitted inside) -> a new member,
    or None when there is nothing to refine, it does not improve, or the result is not valid."""
    tree = member["tree"]
    theta0 = np.asarray(constants_of(tree), np.float64)
    if theta0.size == 0:
        return None
    y = problem.target

    def residual(theta):
        X, lower = problem.columns(with_tree_constants(tree, theta))
        if not np.isfinite(X).all():
            return np.full(y.shape, 1e6)
        w, rmse = fit_coefficients(X, lower, y)
        return X @ w - y if np.isfinite(rmse) else np.full(y.shape, 1e6)

    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # as in fit_coefficients
            res = least_squares(residual, theta0, max_nfev=max_nfev, x_scale=np.maximum(np.abs(theta0), 0.1))
    except ValueError:
        return None
    polished = with_tree_constants(tree, [float(f"{v:.6g}") for v in res.x])
    if not problem.valid(polished):
        return None
    X, lower = problem.columns(polished)
    if not np.isfinite(X).all():
        return None
    w, rmse = fit_coefficients(X, lower, y)
    if rmse >= member["rmse"]:
        return None
    return {**member, "tree": polished, "rmse": rmse, "coefficients": w, "polished": True}

"""Valid drift terms: the building blocks of distillation's library and of the drift-mix family.

Every term T(r, A) here is >= 0 and 0 with zero slope at r = 1 for every A (the mirror-learning
conditions, Lu et al. 2022), so any non-negative combination of them, restricted to a sign of A
or not, is a valid drift too. Each term is an expression string (metadisco.meta_objectives.expressions),
so a combination *is* a closed form: nothing is fitted to write it down.

    hinge_terms(x, c)        relu(x - c tanh(x/c)), relu(c tanh(x/c) - x): O(x^3) at x = 0 (DPO's shape)
    square_terms(x)          relu(x)^2, relu(-x)^2
    smooth_terms(clip_eps)   (r-1)^2, log(r)^2, (r-1)^2|A|, (r-1)^2 A^2, PPO-clip's term and smooth
                             walls relu(r - 1 - eps)^2 |A|, relu(1 - eps - r)^2 |A|
    on_side(term, side)      the term where A >= 0 ("A>=0") or A < 0 ("A<0"), else 0
    drift_library(...)       every term alone and on each side (what distillation regresses on)

x is (r - 1) A or log(r) A (X_TERMS), both 0 at r = 1.
"""

from __future__ import annotations

SIDES = {"A>=0": "A >= 0", "A<0": "A < 0"}
X_TERMS = {"(r-1)A": "(r - 1)*A", "log(r)A": "log(r)*A"}


def on_side(term: str, side: str | None) -> str:
    """`term` where the advantage has sign `side` ("A>=0" | "A<0"), 0 elsewhere; None: everywhere."""
    return term if side is None else f"Piecewise(({term}, {SIDES[side]}), (0, True))"


def hinge_terms(xname: str, c: float) -> list[tuple[str, str]]:
    """DPO-style hinges of x = X_TERMS[xname] at scale c: relu(x - c tanh(x/c)) (penalises x > 0)
    and relu(c tanh(x/c) - x) (penalises x < 0)."""
    x = X_TERMS[xname]
    return [(f"relu({xname} - {c}tanh(x/{c}))", f"Max(0, {x} - {c}*tanh({x}/{c}))"),
            (f"relu({c}tanh(x/{c}) - {xname})", f"Max(0, {c}*tanh({x}/{c}) - {x})")]


def square_terms(xname: str) -> list[tuple[str, str]]:
    """relu(x)^2 and relu(-x)^2 of x = X_TERMS[xname]."""
    x = X_TERMS[xname]
    return [(f"relu({xname})^2", f"Max(0, {x})**2"), (f"relu(-{xname})^2", f"Max(0, -{x})**2")]


def ppo_clip_term(eps: float) -> str:
    """PPO-clip's drift relu((r - clip(r, 1-eps, 1+eps)) A) with numbers (formulas.PPO_CLIP_FORMULA)."""
    return f"Max(0, (r - Min(Max(r, {1 - eps!r}), {1 + eps!r}))*A)"


def wall_terms(eps: float) -> list[tuple[str, str]]:
    """Smooth walls beyond 1 +- eps, relu(r - 1 - eps)^2 |A| and relu(1 - eps - r)^2 |A|: learned
    networks make walls that bend, not PPO's kink."""
    return [(f"wall_up({eps})", f"Max(0, r - {1 + eps!r})**2*Abs(A)"),
            (f"wall_down({eps})", f"Max(0, {1 - eps!r} - r)**2*Abs(A)")]


def smooth_terms(clip_eps=(0.1, 0.2, 0.3)) -> list[tuple[str, str]]:
    """Quadratic trust regions, and PPO-clip's term and the smooth walls at each eps."""
    terms = [("(r-1)^2", "(r - 1)**2"), ("log(r)^2", "log(r)**2"), ("(r-1)^2|A|", "(r - 1)**2*Abs(A)"),
             ("(r-1)^2A^2", "(r - 1)**2*A**2")]
    for eps in clip_eps:
        terms += [(f"ppo_clip({eps})", ppo_clip_term(eps)), *wall_terms(eps)]
    return terms


def drift_library(tanh_scales=(0.5, 1.0, 2.0), clip_eps=(0.1, 0.2, 0.3)) -> list[tuple[str, str]]:
    """Candidate terms (name, expression) for distillation's sparse regression: the hinges and
    squares of x in {(r-1)A, log(r)A}, each restricted to A >= 0 or A < 0, then `smooth_terms`,
    each alone and restricted to A >= 0 or A < 0."""
    terms: list[tuple[str, str]] = []
    for xname in X_TERMS:
        for c in tanh_scales:
            for side in SIDES:
                terms += [(f"{name}[{side}]", on_side(term, side)) for name, term in hinge_terms(xname, c)]
        for side in SIDES:
            terms += [(f"{name}[{side}]", on_side(term, side)) for name, term in square_terms(xname)]
    for name, term in smooth_terms(clip_eps):
        terms.append((name, term))
        terms += [(f"{name}[{side}]", on_side(term, side)) for side in SIDES]
    return terms


def mix_terms(clip_eps: float = 0.2) -> list[tuple[str, str]]:
    """The terms of the drift-mix family (metadisco.meta_objectives.families.DriftMix), PPO-clip's first:
    PPO's kinked wall, smooth walls at the same eps, a quadratic trust region scaled by |A|, a
    KL-like log(r)^2, the squares of (r-1)A on either side of 0 (relu(-(r-1)A)^2 is the "push a good
    action back up" term that three distillations found), DPO's two hinges (alpha = 2 on (r-1)A,
    beta = 0.5 on log(r)A) and the reverse hinge at 0.5. Ten terms, each weighted per sign of A."""
    (smooth_up, smooth_down) = wall_terms(clip_eps)
    return [(f"ppo_clip({clip_eps})", ppo_clip_term(clip_eps)), smooth_up, smooth_down,
            ("(r-1)^2|A|", "(r - 1)**2*Abs(A)"), ("log(r)^2", "log(r)**2"), *square_terms("(r-1)A"),
            hinge_terms("(r-1)A", 2.0)[0], hinge_terms("log(r)A", 0.5)[0], hinge_terms("(r-1)A", 0.5)[1]]

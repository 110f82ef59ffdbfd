"""The hand-designed formulas, each written once as a `Formula` (Lu et al. 2022, Schulman et al. 2017).

drift.PPOClip, the PPO-clip term inside drift.LPO, drift.DPO, the closed forms' default, the DPO
family that distillation fits and every exported module derive from these two expressions.
"""

from __future__ import annotations

import re

import numpy as np

from meta_objectives.expressions import VARIABLES, ExpressionError, Formula, parse_expression

PPO_CLIP_FORMULA = Formula("Max(0, (r - Min(Max(r, 1 - eps), 1 + eps))*A)", ("eps",))
"""PPO-clip as a drift: min(rA, clip(r, 1-eps, 1+eps)A) = rA - relu((r - clip(r, 1-eps, 1+eps))A)."""

DPO_FORMULA = Formula(
    "Piecewise((Max(0, (r - 1)*A - alpha*tanh((r - 1)*A/alpha)), A >= 0), "
    "(Max(0, log(r)*A - beta*tanh(log(r)*A/beta)), True))",
    ("alpha", "beta"),
)
"""DPO (Lu et al. 2022): A >= 0: relu((r-1)A - alpha tanh((r-1)A/alpha)); A < 0: relu(log(r)A -
beta tanh(log(r)A/beta)). alpha = 2, beta = 0.6 in the paper."""


def ppo_clip_expression(eps: float = 0.2) -> str:
    """PPO-clip's drift as an expression string, exact for the given eps."""
    return PPO_CLIP_FORMULA.expression(eps=eps)


def dpo_expression(alpha: float = 2.0, beta: float = 0.6) -> str:
    """The DPO drift as an expression string, exact for the given constants (finite, > 0)."""
    return DPO_FORMULA.expression(alpha=alpha, beta=beta)

L2_EXPRESSION = "e**2/2"
"""The L2 value loss over e = v - target (value_loss.l2 computes 0.5 (v - t)^2, the same number)."""


def with_constants(formula: Formula, **expressions: str) -> str:
    """`formula`'s template with each constant replaced by an expression over the plug's variables,
    e.g. DPO with alpha = "2.0*exp(0.3*p)": a constant that depends on training progress.
    ExpressionError if a constant is missing or the result does not parse."""
    if set(expressions) != set(formula.constants):
        raise ExpressionError(f"give the constants {formula.constants}, got {sorted(expressions)}")
    pattern = r"\b(" + "|".join(map(re.escape, formula.constants)) + r")\b"
    out = re.sub(pattern, lambda m: f"({expressions[m.group(1)]})", formula.template)
    parse_expression(out, VARIABLES[formula.kind])
    return out


def number(x) -> str:
    """The shortest decimal that reads back as the same float32 (what a closed form prints for a
    float32 parameter): 0.1 for float32(0.1), not 0.10000000149011612."""
    return repr(float(np.format_float_positional(np.float32(x), unique=True, trim="-")))

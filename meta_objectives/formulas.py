"""The hand-designed drifts, each written once as a `Formula` (Lu et al. 2022, Schulman et al. 2017).

drift.PPOClip, the PPO-clip term inside drift.LPO, drift.DPO, the closed forms' default, the DPO
family that distillation fits and every exported module derive from these two expressions.
"""

from __future__ import annotations

from meta_objectives.expressions import Formula

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

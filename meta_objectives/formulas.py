"""The hand-designed formulas (Schulman et al. 2017, Lu et al. 2022), each a plain jax.numpy
function beside the same formula as an expression string (a `Formula`).

drift.PPOClip, the PPO-clip term inside drift.LPO and the families, and drift.DPO call the
functions; the closed forms' default, the DPO family that distillation fits and every exported
module use the expressions. tests/test_objectives.py holds each function equal to its compiled
expression (values and gradients).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from metadisco.meta_objectives.expressions import VARIABLES, ExpressionError, Formula, parse_expression


def _as_drift(out, r, A, progress):
    """`out` broadcast to the shape of (r, A, progress), in the float dtype of r and A (the
    shape and dtype of every drift, as the printed closed forms return them)."""
    shape = jnp.broadcast_shapes(jnp.shape(r), jnp.shape(A), jnp.shape(progress))
    return jnp.broadcast_to(jnp.asarray(out, dtype=jnp.result_type(r, A, float)), shape)


def ppo_clip_drift(ratio, advantage, progress=0.0, *, eps):
    """PPO-clip (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", eq. 7) as a drift.

    The clipped surrogate L^CLIP = min(rA, clip(r, 1 - eps, 1 + eps) A) is rA - D with
    D = relu((r - clip(r, 1 - eps, 1 + eps)) A): 0 inside the trust region and wherever the
    update moves r back towards it, the surrogate's excess over its clipped value outside."""
    r, A = jnp.asarray(ratio), jnp.asarray(advantage)
    return _as_drift(jax.nn.relu((r - jnp.clip(r, 1.0 - eps, 1.0 + eps)) * A), r, A, progress)


def dpo_drift(ratio, advantage, progress=0.0, *, alpha, beta):
    """The DPO drift (Lu et al. 2022, "Discovered Policy Optimisation", NeurIPS), the closed form
    distilled from LPO; alpha = 2, beta = 0.6 in the paper.

        A >= 0:  relu((r - 1) A - alpha tanh((r - 1) A / alpha))
        A <  0:  relu(log(r) A - beta tanh(log(r) A / beta))
    """
    r, A = jnp.asarray(ratio), jnp.asarray(advantage)
    # tanh's argument grouped as A (1/alpha) (r - 1), as the printed expression groups it: this
    # function and the compiled expression give the same floats, gradients included
    out = jnp.where(A >= 0.0,
                    jax.nn.relu((r - 1.0) * A - alpha * jnp.tanh(A * (1 / alpha) * (r - 1.0))),
                    jax.nn.relu(jnp.log(r) * A - beta * jnp.tanh(A * (1 / beta) * jnp.log(r))))
    return _as_drift(out, r, A, progress)


PPO_CLIP_FORMULA = Formula("Max(0, (r - Min(Max(r, 1 - eps), 1 + eps))*A)", ("eps",), ppo_clip_drift)
"""PPO-clip as a drift: min(rA, clip(r, 1-eps, 1+eps)A) = rA - relu((r - clip(r, 1-eps, 1+eps))A)."""

DPO_FORMULA = Formula(
    "Piecewise((Max(0, (r - 1)*A - alpha*tanh((r - 1)*A/alpha)), A >= 0), "
    "(Max(0, log(r)*A - beta*tanh(log(r)*A/beta)), True))",
    ("alpha", "beta"),
    dpo_drift,
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

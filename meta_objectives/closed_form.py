"""Closed-form objectives: a drift, a value loss or a shaping potential given by one sympy expression string.

The expression is the one representation (see expressions.py): the objective evaluates the
function that `expressions.jax_module_source` exports, compiled from the same printed text; its
LaTeX comes from `expressions.to_latex` and its JSON from `metadisco.meta_objectives.io` (the spec stores
the string). Constraint checks live in constraints.py.
"""

from __future__ import annotations

import math
import re
from dataclasses import field, replace

import jax.numpy as jnp

from metadisco.meta_objectives.base import FROM_ENV, MetaObjective, register
from metadisco.meta_objectives.expressions import (
    VALUE_LOSS_VARIABLES,
    compile_function,
    p_sym,
    parse_expression,
    shaping_variables,
    to_latex,
)
from metadisco.meta_objectives.formulas import L2_EXPRESSION, ppo_clip_expression
from metadisco.meta_objectives.shaping import potential_based
from metadisco.meta_objectives.value_loss import clipped_l2_latex, value_clipping

PPO_CLIP_EXPRESSION = ppo_clip_expression(0.2)
VALUE_LOSS_L2_EXPRESSION = L2_EXPRESSION


@register
class ClosedFormDrift(MetaObjective):
    """A drift given by a sympy expression string over r (ratio), A (advantage), p (progress).

    E.g. "Max(0, (r-1)*A - 2*tanh((r-1)*A/2))". No parameters: `init` returns {}; `drift`
    evaluates the expression with jax.numpy (jit/vmap/grad-able). Invalid strings raise
    ValueError at construction. The default expression is PPO-clip's drift (eps = 0.2).
    """

    expression: str = PPO_CLIP_EXPRESSION
    plug = "drift"
    name = "closed_form"
    title = "closed form"

    def __post_init__(self):
        parse_expression(self.expression)

    @property
    def depends_on_progress(self) -> bool:
        return p_sym in parse_expression(self.expression).free_symbols

    @property
    def drawn_when_fixed(self) -> bool:
        return True

    def init(self, key):
        return {}

    def drift(self, params, ratio, advantage, progress):
        return compile_function(self.expression, "drift")(ratio, advantage, progress)

    def closed_form(self, params) -> str:
        return self.expression

    def latex(self) -> str:
        return to_latex(self.expression)


VALUE_LOSS_BASES = ("none", "clipped_l2")  # what a closed-form value loss's expression is applied to


@register
class ClosedFormValueLoss(MetaObjective):
    """A value loss given by a sympy expression string over e (= value - target) and t (target).

    E.g. "e**2/2 + 0.1*Abs(e)**3". No parameters. Invalid strings raise ValueError at
    construction. The default expression is L2.
    base: "none" (default): the expression is the whole loss. "clipped_l2": the expression with
    PPO's value clipping at clip_eps applied as in LearnedValueLoss(base="clipped_l2"),
      L = expression(e, t) + value_clipping(v, t, v_old) = expression + clipped_l2 - e^2/2,
    which is the expression where v_old = v (where distillation fits it) and PPO's clipped loss
    exactly for the expression e**2/2. It reads the old value, so `closed_form` is None for it.
    """

    expression: str = VALUE_LOSS_L2_EXPRESSION
    base: str = "none"
    clip_eps: float = 0.2
    plug = "value_loss"
    name = "closed_form"
    title = "closed form"

    def __post_init__(self):
        parse_expression(self.expression, VALUE_LOSS_VARIABLES)
        if self.base not in VALUE_LOSS_BASES:
            raise ValueError(f"value_loss {self.name!r}: base must be one of {', '.join(VALUE_LOSS_BASES)}, "
                             f"got {self.base!r}")
        if not (math.isfinite(self.clip_eps) and self.clip_eps > 0):
            raise ValueError(f"value_loss {self.name!r}: clip_eps must be finite and > 0, got {self.clip_eps}")

    @property
    def clipped(self) -> bool:
        return self.base == "clipped_l2"

    @property
    def drawn_when_fixed(self) -> bool:
        return True

    def init(self, key):
        return {}

    def value_loss(self, params, value, target, old_value):
        loss = compile_function(self.expression, "value_loss")(value, target)
        if self.clipped:
            loss = loss + value_clipping(value, target, old_value, self.clip_eps)
        return loss

    def closed_form(self, params) -> str | None:
        return None if self.clipped else self.expression

    def describe(self) -> str:
        """The whole loss in one line: the expression, and the clipping when it is applied."""
        expression = " ".join(self.expression.split())
        if not self.clipped:
            return expression
        return (f"{expression}, with PPO's value clipping (clip_eps = {self.clip_eps:g}): "
                "+ clipped_l2(v, t, v_old) - e**2/2")

    def latex(self) -> str:
        latex = to_latex(self.expression, variables=VALUE_LOSS_VARIABLES)
        if not self.clipped:
            return latex
        return rf"{latex} + {clipped_l2_latex(self.clip_eps)} - \tfrac{{1}}{{2}} e^{{2}}"


def closed_form_base(loss) -> dict:
    """The ClosedFormValueLoss options (base, clip_eps) under which an expression fitted to `loss`
    at v_old = v (as distillation samples it) means the same loss: {"base": "clipped_l2",
    "clip_eps": ...} for a loss on PPO's clipped base (LearnedValueLoss(base="clipped_l2"),
    learned_clipped), else {"base": "none"} (the expression is the whole loss)."""
    if getattr(loss, "base", None) == "clipped_l2":
        return {"base": "clipped_l2", "clip_eps": float(loss.clip_eps)}
    return {"base": "none"}


@register
class ClosedFormShaping(MetaObjective):
    """Potential-based shaping r + gamma Phi(s') - Phi(s) with Phi given by a sympy expression
    string over the observation's numbers s0, s1, ... (raw, flattened), e.g. MountainCar's
    mechanical energy "s1**2/2 + 0.0025*sin(3*s0)/3". No parameters; policy-invariant at any
    expression (Ng et al. 1999). obs_shape: one observation's shape (set from the environment).
    Invalid strings raise ValueError at construction."""

    expression: str = "0"
    obs_shape: tuple[int, ...] = field(default=(), metadata={FROM_ENV: True})
    plug = "shaping"
    name = "closed_form"
    title = "closed-form potential"
    reads_observations = True

    def __post_init__(self):
        object.__setattr__(self, "obs_shape", tuple(int(d) for d in self.obs_shape))
        if self.obs_shape and self.reads > self.obs_dim:
            raise ValueError(f"shaping potential {self.expression!r} reads s{self.reads - 1}, but observations of "
                             f"shape {self.obs_shape} have {self.obs_dim} numbers (s0 ... s{self.obs_dim - 1})")
        parse_expression(self.expression, shaping_variables(max(self.obs_dim, self.reads)))

    @property
    def reads(self) -> int:
        """How many observation numbers the expression needs (1 + its largest s<i>; 0 for none)."""
        return 1 + max((int(i) for i in re.findall(r"\bs(\d+)\b", self.expression)), default=-1)

    @property
    def obs_dim(self) -> int:
        return math.prod(self.obs_shape) if self.obs_shape else 0

    @property
    def drawn_when_fixed(self) -> bool:
        return True

    def for_env(self, obs_shape):
        return replace(self, obs_shape=tuple(obs_shape))

    def observation_shape(self):
        return self.obs_shape or ((self.reads,) if self.reads else None)

    def incompatibility(self, obs_shape, env_name="the environment"):
        shape = tuple(int(d) for d in obs_shape)
        dim = math.prod(shape)
        if self.obs_shape and shape != self.obs_shape:
            return (f"its shaping potential was fitted on observations of shape {self.obs_shape}, but {env_name} "
                    f"has observations of shape {shape}; choose environments like the one it was found on")
        if self.reads > dim:
            return (f"its shaping potential reads s{self.reads - 1}, but {env_name} has observations of "
                    f"{dim} numbers; choose environments with at least {self.reads} (e.g. the one it was found on)")
        return None

    def init(self, key):
        return {}

    def potential(self, params, obs):
        """obs: [..., *obs_shape] -> Phi: [...]."""
        shape = self.obs_shape or obs.shape[-1:]
        flat = jnp.asarray(obs).reshape(obs.shape[: obs.ndim - len(shape)] + (math.prod(shape),))
        return compile_function(self.expression, "shaping", obs_dim=flat.shape[-1])(flat)

    def shape_reward(self, params, obs, reward, next_obs, terminated, gamma):
        return potential_based(lambda o: self.potential(params, o), obs, reward, next_obs, terminated, gamma)

    def closed_form(self, params) -> str:
        return self.expression

    def latex(self) -> str:
        return to_latex(self.expression, variables=shaping_variables(max(self.obs_dim, self.reads)))

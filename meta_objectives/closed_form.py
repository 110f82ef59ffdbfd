"""Closed-form objectives: a drift or a value loss given by one sympy expression string.

The expression is the one representation (see expressions.py): the objective evaluates the
function that `expressions.jax_module_source` exports, compiled from the same printed text; its
LaTeX comes from `expressions.to_latex` and its JSON from `meta_objectives.io` (the spec stores
the string). Constraint checks live in constraints.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from meta_objectives.base import MetaObjective, register
from meta_objectives.expressions import (
    VALUE_LOSS_VARIABLES,
    compile_function,
    p_sym,
    parse_expression,
    to_latex,
)
from meta_objectives.formulas import L2_EXPRESSION, ppo_clip_expression

PPO_CLIP_EXPRESSION = ppo_clip_expression(0.2)
VALUE_LOSS_L2_EXPRESSION = L2_EXPRESSION


@register
@dataclass(frozen=True)
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
    def plotted(self) -> bool:
        return True

    def init(self, key):
        return {}

    def drift(self, params, ratio, advantage, progress):
        return compile_function(self.expression, "drift")(ratio, advantage, progress)

    def closed_form(self, params) -> str:
        return self.expression

    def latex(self) -> str:
        return to_latex(self.expression)


@register
@dataclass(frozen=True)
class ClosedFormValueLoss(MetaObjective):
    """A value loss given by a sympy expression string over e (= value - target) and t (target).

    E.g. "e**2/2 + 0.1*Abs(e)**3". No parameters. Invalid strings raise ValueError at
    construction. The default expression is L2.
    """

    expression: str = VALUE_LOSS_L2_EXPRESSION
    plug = "value_loss"
    name = "closed_form"
    title = "closed form"

    def __post_init__(self):
        parse_expression(self.expression, VALUE_LOSS_VARIABLES)

    @property
    def plotted(self) -> bool:
        return True

    def init(self, key):
        return {}

    def value_loss(self, params, value, target, old_value):
        return compile_function(self.expression, "value_loss")(value, target)

    def closed_form(self, params) -> str:
        return self.expression

    def latex(self) -> str:
        return to_latex(self.expression, variables=VALUE_LOSS_VARIABLES)

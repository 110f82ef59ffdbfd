"""Closed-form objectives: one sympy expression string from which everything else is derived.

A discovered drift D(r, A, p) is stored as a sympy expression string over the symbols `r`
(ratio pi_new / pi_old, > 0), `A` (advantage, normalised per minibatch) and `p` (progress n / N
in [0, 1]); a discovered value loss L(e, t) over `e` (prediction error v - target) and `t` (the
target). From that string alone come: the meta-objective evaluation loads (`ClosedFormDrift`,
`ClosedFormValueLoss`), its LaTeX (`to_latex`), the standalone JAX module
(`to_jax_module_source`) and, through `meta_objectives.io`, its JSON. No second hand-written
copy of a formula exists.

Parsing is restricted: the string is checked on its Python syntax tree first (only numbers,
the plug's variable names, E, pi, True, calls of whitelisted functions, arithmetic and
comparisons), then parsed by sympy with no builtins and no automatic symbols. Anything else
raises ValueError.

The evaluator walks the sympy tree and maps each node onto an array function (jax.numpy for
the objective, numpy for fast fitting in analysis.distil), so drifts are jit/vmap/grad-able.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import sympy as sp
from sympy.parsing.sympy_parser import auto_number, convert_xor, parse_expr

from meta_objectives.base import MetaObjective, register

# ---------------------------------------------------------------------------------------------
# Symbols and the whitelist
# ---------------------------------------------------------------------------------------------

r_sym = sp.Symbol("r", positive=True)  # ratio pi_new / pi_old
A_sym = sp.Symbol("A", real=True)  # normalised advantage
p_sym = sp.Symbol("p", real=True)  # training progress n / N
e_sym = sp.Symbol("e", real=True)  # value prediction error v - target
t_sym = sp.Symbol("t", real=True)  # value target
SYMBOLS = {"r": r_sym, "A": A_sym, "p": p_sym, "e": e_sym, "t": t_sym}
DRIFT_VARIABLES = ("r", "A", "p")
VALUE_LOSS_VARIABLES = ("e", "t")

FUNCTIONS = {
    "Max": sp.Max, "Min": sp.Min, "Abs": sp.Abs, "tanh": sp.tanh, "exp": sp.exp, "log": sp.log,
    "sqrt": sp.sqrt, "Piecewise": sp.Piecewise, "sign": sp.sign, "Heaviside": sp.Heaviside,
}
CONSTANTS = {"E": sp.E, "pi": sp.pi}

MAX_EXPRESSION_CHARS = 20_000
MAX_CONSTANT_EXPONENT = 64

_AST_OPS = (
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.BitXor, ast.BitAnd, ast.BitOr,
    ast.USub, ast.UAdd, ast.Invert, ast.Gt, ast.GtE, ast.Lt, ast.LtE,
)
_AST_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.Name, ast.Load,
    ast.Constant, ast.Tuple,
) + _AST_OPS


def _check_syntax(expression: str, allowed_names: set[str]) -> None:
    """Reject anything but arithmetic over allowed names, numbers and whitelisted calls."""
    if not isinstance(expression, str):
        raise ValueError(f"a closed-form expression must be a string, got {type(expression).__name__}")
    if not expression.strip():
        raise ValueError("empty closed-form expression")
    if "\\" in expression:
        raise ValueError(f"expression {expression!r} contains a backslash")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression too long ({len(expression)} > {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"expression {expression!r} is not valid syntax: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise ValueError("expression is nested too deeply") from None
    for node in ast.walk(tree):
        if not isinstance(node, _AST_NODES):
            raise ValueError(
                f"expression {expression!r} uses unsupported syntax ({type(node).__name__}); only "
                f"numbers, {', '.join(sorted(allowed_names - set(CONSTANTS)))}, arithmetic, comparisons "
                "and the functions "
                f"{', '.join(sorted(FUNCTIONS))} are allowed"
            )
        if isinstance(node, ast.Constant) and not (
            isinstance(node.value, (int, float)) and not isinstance(node.value, complex)
        ):
            raise ValueError(f"expression {expression!r} contains a non-numeric constant {node.value!r}")
        if isinstance(node, ast.Name) and node.id not in allowed_names and node.id not in FUNCTIONS:
            raise ValueError(
                f"expression {expression!r} uses unknown name {node.id!r}; allowed symbols are "
                f"{', '.join(sorted(allowed_names))} and functions {', '.join(sorted(FUNCTIONS))}"
            )
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ValueError(
                    f"expression {expression!r} calls {name!r}, which is not an allowed function "
                    f"({', '.join(sorted(FUNCTIONS))})"
                )
            if node.keywords:
                raise ValueError(f"expression {expression!r}: keyword arguments are not allowed")
        if isinstance(node, ast.Compare) and len(node.ops) != 1:
            raise ValueError(f"expression {expression!r}: chained comparisons are not allowed")
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.BitXor)):
            # Guard sympy's exact arithmetic against huge numbers such as 9**9**9.
            def symbolic(n):
                return any(isinstance(m, ast.Name) for m in ast.walk(n))

            if not symbolic(node.right):
                value = _literal_number(node.right)
                if value is None or abs(value) > MAX_CONSTANT_EXPONENT:
                    raise ValueError(
                        f"expression {expression!r}: a constant exponent must be a plain number "
                        f"of magnitude <= {MAX_CONSTANT_EXPONENT}"
                    )
                if not symbolic(node.left) and _literal_number(node.left) is None:
                    raise ValueError(
                        f"expression {expression!r}: the base of a constant power must be a plain number"
                    )


def _literal_number(node) -> float | None:
    """Value of a literal number, -number, or a/b of literals; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _literal_number(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        a, b = _literal_number(node.left), _literal_number(node.right)
        if a is None or b is None or b == 0:
            return None
        return a / b
    return None


def _parse(expression: str, variables: tuple[str, ...] = DRIFT_VARIABLES,
           extra_symbols: tuple[str, ...] = ()) -> sp.Expr:
    symbols = {name: SYMBOLS[name] for name in variables}
    symbols.update({name: sp.Symbol(name, positive=True) for name in extra_symbols})
    _check_syntax(expression, set(symbols) | set(CONSTANTS))
    local_dict = {**symbols, **FUNCTIONS, **CONSTANTS}
    global_dict = {
        "__builtins__": {}, "Integer": sp.Integer, "Float": sp.Float, "Rational": sp.Rational,
        "Symbol": sp.Symbol, "True": True, "False": False,
    }
    try:
        expr = parse_expr(
            expression.strip(), local_dict=local_dict, global_dict=global_dict,
            transformations=(auto_number, convert_xor), evaluate=True,
        )
    except Exception as e:  # sympy raises many types for malformed input
        raise ValueError(f"cannot parse expression {expression!r}: {type(e).__name__}: {e}") from None
    if not isinstance(expr, sp.Basic) or isinstance(expr, sp.logic.boolalg.Boolean):
        raise ValueError(f"expression {expression!r} is not a numeric expression")
    unknown = expr.free_symbols - set(symbols.values())
    if unknown:
        raise ValueError(f"expression {expression!r} has unknown symbols {sorted(map(str, unknown))}")
    # Building the evaluator walks the whole tree and rejects unsupported nodes (I, zoo, nan, ...).
    try:
        _build(expr, np, tuple(symbols))
    except RecursionError:
        raise ValueError("expression is nested too deeply") from None
    return expr


@functools.lru_cache(maxsize=512)
def parse_expression(expression: str, variables: tuple[str, ...] = DRIFT_VARIABLES) -> sp.Expr:
    """Safely parse an expression over `variables` (a drift's r, A, p by default; a value loss's
    e, t) -> sympy expression (ValueError if invalid)."""
    return _parse(expression, variables)


# ---------------------------------------------------------------------------------------------
# One table, two uses: array evaluation (jnp or np) and source printing (jnp)
# ---------------------------------------------------------------------------------------------

_UNARY = {sp.tanh: "tanh", sp.exp: "exp", sp.log: "log", sp.Abs: "abs", sp.sign: "sign"}
_RELATIONS = {
    sp.GreaterThan: (">=", operator.ge), sp.StrictGreaterThan: (">", operator.gt),
    sp.LessThan: ("<=", operator.le), sp.StrictLessThan: ("<", operator.lt),
}


def _constant(expr) -> float:
    value = float(expr)
    if not math.isfinite(value):
        raise ValueError(f"non-finite constant {expr} in expression")
    return value


def _build(expr, xp, names: tuple[str, ...]) -> Callable[[dict], Any]:
    """Compile a sympy tree into env -> array, with `xp` (jax.numpy or numpy) as backend."""
    if expr.is_Symbol:
        if expr.name not in names:
            raise ValueError(f"unknown symbol {expr.name!r}")
        name = expr.name
        return lambda env: env[name]
    if expr is sp.true:
        return lambda env: True
    if expr is sp.false:
        return lambda env: False
    if expr.is_Number or expr.is_NumberSymbol:
        if not expr.is_real:
            raise ValueError(f"non-real constant {expr} in expression")
        value = _constant(expr)
        return lambda env: value
    args = [_build(a, xp, names) for a in expr.args] if not isinstance(expr, sp.Piecewise) else None
    if isinstance(expr, sp.Add):
        return lambda env: functools.reduce(operator.add, [f(env) for f in args])
    if isinstance(expr, sp.Mul):
        return lambda env: functools.reduce(operator.mul, [f(env) for f in args])
    if isinstance(expr, sp.Pow):
        base, exp_expr = args[0], expr.args[1]
        if exp_expr.is_Integer:
            n = int(exp_expr)
            return lambda env: base(env) ** n
        if exp_expr == sp.Rational(1, 2):
            return lambda env: xp.sqrt(base(env))
        if exp_expr == sp.Rational(-1, 2):
            return lambda env: 1.0 / xp.sqrt(base(env))
        exponent = args[1]
        return lambda env: xp.power(base(env), exponent(env))
    if isinstance(expr, (sp.Max, sp.Min)):
        fn = xp.maximum if isinstance(expr, sp.Max) else xp.minimum
        return lambda env: functools.reduce(fn, [f(env) for f in args])
    for cls, name in _UNARY.items():
        if isinstance(expr, cls):
            if len(args) != 1:
                raise ValueError(f"{name} takes one argument")
            fn, (a,) = getattr(xp, name), args
            return lambda env: fn(a(env))
    if isinstance(expr, sp.Heaviside):
        x, h0 = args
        return lambda env: xp.heaviside(x(env), h0(env))
    if isinstance(expr, sp.Piecewise):
        pieces = [(_build(e, xp, names), _build(c, xp, names)) for e, c in expr.args]

        def piecewise(env):
            out = xp.nan
            for (value, cond), (_, c) in zip(reversed(pieces), reversed(expr.args)):
                out = value(env) if c is sp.true else xp.where(cond(env), value(env), out)
            return out

        return piecewise
    for cls, (_, op) in _RELATIONS.items():
        if isinstance(expr, cls):
            lhs, rhs = args
            return lambda env: op(lhs(env), rhs(env))
    if isinstance(expr, (sp.And, sp.Or)):
        fn = xp.logical_and if isinstance(expr, sp.And) else xp.logical_or
        return lambda env: functools.reduce(fn, [f(env) for f in args])
    if isinstance(expr, sp.Not):
        (a,) = args
        return lambda env: xp.logical_not(a(env))
    raise ValueError(
        f"unsupported operation {type(expr).__name__} in expression (allowed: + - * / **, "
        f"{', '.join(sorted(FUNCTIONS))}, comparisons inside Piecewise)"
    )


def _print(expr) -> str:
    """Python source (jax.numpy as jnp) for a sympy tree; same operations, same order as _build."""
    if expr.is_Symbol:
        return expr.name
    if expr is sp.true:
        return "True"
    if expr is sp.false:
        return "False"
    if expr.is_Number or expr.is_NumberSymbol:
        return repr(_constant(expr))
    if isinstance(expr, sp.Piecewise):
        out = "jnp.nan"
        for e, c in reversed(expr.args):
            out = _print(e) if c is sp.true else f"jnp.where({_print(c)}, {_print(e)}, {out})"
        return out
    args = [_print(a) for a in expr.args]
    if isinstance(expr, sp.Add):
        return functools.reduce(lambda a, b: f"({a} + {b})", args)
    if isinstance(expr, sp.Mul):
        return functools.reduce(lambda a, b: f"({a} * {b})", args)
    if isinstance(expr, sp.Pow):
        exp_expr = expr.args[1]
        if exp_expr.is_Integer:
            return f"({args[0]} ** {int(exp_expr)})"
        if exp_expr == sp.Rational(1, 2):
            return f"jnp.sqrt({args[0]})"
        if exp_expr == sp.Rational(-1, 2):
            return f"(1.0 / jnp.sqrt({args[0]}))"
        return f"jnp.power({args[0]}, {args[1]})"
    if isinstance(expr, (sp.Max, sp.Min)):
        fn = "jnp.maximum" if isinstance(expr, sp.Max) else "jnp.minimum"
        return functools.reduce(lambda a, b: f"{fn}({a}, {b})", args)
    for cls, name in _UNARY.items():
        if isinstance(expr, cls):
            return f"jnp.{name}({args[0]})"
    if isinstance(expr, sp.Heaviside):
        return f"jnp.heaviside({args[0]}, {args[1]})"
    for cls, (symbol, _) in _RELATIONS.items():
        if isinstance(expr, cls):
            return f"({args[0]} {symbol} {args[1]})"
    if isinstance(expr, (sp.And, sp.Or)):
        fn = "jnp.logical_and" if isinstance(expr, sp.And) else "jnp.logical_or"
        return functools.reduce(lambda a, b: f"{fn}({a}, {b})", args)
    if isinstance(expr, sp.Not):
        return f"jnp.logical_not({args[0]})"
    raise ValueError(f"unsupported operation {type(expr).__name__} in expression")


@functools.lru_cache(maxsize=512)
def _jax_callable(expression: str, variables: tuple[str, ...] = DRIFT_VARIABLES):
    fn = _build(parse_expression(expression, variables), jnp, variables)
    return lambda *args: fn(dict(zip(variables, args)))


@functools.lru_cache(maxsize=512)
def _numpy_callable(expression: str, extra_symbols: tuple[str, ...] = (),
                    variables: tuple[str, ...] = DRIFT_VARIABLES):
    fn = _build(_parse(expression, variables, extra_symbols), np, variables + extra_symbols)
    return lambda **env: fn(env)


def evaluate_numpy(expression: str, ratio, advantage, progress=0.0, **constants) -> np.ndarray:
    """Evaluate an expression in float64 numpy (for fitting); `constants` binds extra symbols.

    ratio, advantage, progress broadcast together -> D of the broadcast shape.
    """
    fn = _numpy_callable(expression, tuple(sorted(constants)))
    r = np.asarray(ratio, np.float64)
    a = np.asarray(advantage, np.float64)
    p = np.asarray(progress, np.float64)
    with np.errstate(all="ignore"):
        out = fn(r=r, A=a, p=p, **{k: np.float64(v) for k, v in constants.items()})
    shape = np.broadcast_shapes(r.shape, a.shape, p.shape)
    return np.broadcast_to(np.asarray(out, np.float64), shape)


def evaluate_value_loss_numpy(expression: str, error, target=0.0) -> np.ndarray:
    """Evaluate a value-loss expression L(e, t) in float64 numpy; arrays broadcast together."""
    fn = _numpy_callable(expression, (), VALUE_LOSS_VARIABLES)
    e = np.asarray(error, np.float64)
    t = np.asarray(target, np.float64)
    with np.errstate(all="ignore"):
        out = fn(e=e, t=t)
    return np.broadcast_to(np.asarray(out, np.float64), np.broadcast_shapes(e.shape, t.shape))


def _evaluate_jax(fn, ratio, advantage, progress):
    # Kept line for line identical to the body printed by `to_jax_module_source`.
    r = jnp.asarray(ratio)
    A = jnp.asarray(advantage)
    p = jnp.asarray(progress)
    out = fn(r, A, p)
    shape = jnp.broadcast_shapes(jnp.shape(r), jnp.shape(A), jnp.shape(p))
    return jnp.broadcast_to(jnp.asarray(out, dtype=jnp.result_type(r, A, float)), shape)


# ---------------------------------------------------------------------------------------------
# The objective
# ---------------------------------------------------------------------------------------------


PPO_CLIP_EXPRESSION = "Max(0, (r - Min(Max(r, 0.8), 1.2))*A)"  # relu((r - clip(r, 0.8, 1.2)) A)


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
        return _evaluate_jax(_jax_callable(self.expression), ratio, advantage, progress)

    def latex(self) -> str:
        return to_latex(self.expression)


VALUE_LOSS_L2_EXPRESSION = "e**2/2"


def _evaluate_value_loss_jax(fn, value, target):
    # Kept line for line identical to the body printed by `to_jax_module_source(kind="value_loss")`.
    t = jnp.asarray(target)
    e = jnp.asarray(value) - t
    out = fn(e, t)
    return jnp.broadcast_to(jnp.asarray(out, dtype=jnp.result_type(e, float)), jnp.shape(e))


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
        return _evaluate_value_loss_jax(_jax_callable(self.expression, VALUE_LOSS_VARIABLES), value, target)

    def latex(self) -> str:
        return to_latex(self.expression, variables=VALUE_LOSS_VARIABLES)


# ---------------------------------------------------------------------------------------------
# Derived forms
# ---------------------------------------------------------------------------------------------

DPO_TEMPLATE = (
    "Piecewise((Max(0, (r - 1)*A - {alpha}*tanh((r - 1)*A/{alpha})), A >= 0), "
    "(Max(0, log(r)*A - {beta}*tanh(log(r)*A/{beta})), True))"
)


def dpo_expression(alpha: float = 2.0, beta: float = 0.6) -> str:
    """The DPO drift (Lu et al. 2022) as an expression string, exact for the given constants.

    A >= 0: relu((r-1)A - alpha tanh((r-1)A/alpha));  A < 0: relu(log(r)A - beta tanh(log(r)A/beta)).
    """
    alpha, beta = float(alpha), float(beta)
    if not (alpha > 0 and beta > 0 and math.isfinite(alpha) and math.isfinite(beta)):
        raise ValueError(f"DPO needs finite alpha, beta > 0, got alpha={alpha}, beta={beta}")
    return DPO_TEMPLATE.format(alpha=repr(alpha), beta=repr(beta))


def to_latex(expression: str, digits: int | None = None, variables: tuple[str, ...] = DRIFT_VARIABLES) -> str:
    """LaTeX of the expression (its variables as symbols); `digits` rounds floats for display."""
    expr = parse_expression(expression, variables)
    if digits is not None:
        expr = expr.xreplace({f: sp.Float(f, digits) for f in expr.atoms(sp.Float)})
    return sp.latex(expr)


_MODULE_DOCS = {
    "drift": ("Closed-form drift D(r, A, p)", """\
Mirror-learning drift (Lu et al. 2022, "Discovered Policy Optimisation"): the policy loss is
-(r*A - D), with r = pi_new / pi_old, A the advantage normalised per minibatch and p = n / N the
training progress. D >= 0, and D = 0 with dD/dr = 0 at r = 1."""),
    "value_loss": ("Closed-form value loss L(e, t)", """\
Per-sample critic loss with e = v - target (the prediction error) and t = target; PPO
averages it over the minibatch. L(0, t) = 0, and L decreases toward e = 0 from either side."""),
}


def to_jax_module_source(expression: str, function_name: str = "drift", kind: str = "drift") -> str:
    """Text of a standalone Python module (imports only jax.numpy) defining the objective.

    kind "drift": `<function_name>(ratio, advantage, progress=0.0) -> D`; kind "value_loss":
    `<function_name>(value, target) -> L`. Arrays broadcast; the module also defines
    `EXPRESSION`, the sympy string it was generated from.
    """
    return jax_module_source({kind: expression}, {kind: function_name})


def jax_module_source(expressions: dict[str, str], function_names: dict[str, str] | None = None) -> str:
    """A standalone module defining one function per entry of {kind: expression} (kinds "drift"
    and "value_loss", functions named after the kind unless `function_names` says otherwise).
    With one entry the module's source string is `EXPRESSION`; with several, `<KIND>_EXPRESSION`."""
    if not expressions:
        raise ValueError("no expression to write")
    unknown = set(expressions) - set(_MODULE_DOCS)
    if unknown:
        raise ValueError(f"kind must be one of {sorted(_MODULE_DOCS)}, got {sorted(unknown)}")
    function_names = {**{k: k for k in expressions}, **(function_names or {})}
    docs, constants, functions = [], [], []
    for kind, expression in expressions.items():
        variables = DRIFT_VARIABLES if kind == "drift" else VALUE_LOSS_VARIABLES
        name = function_names[kind]
        if not name.isidentifier() or name in {"jnp", *variables}:
            raise ValueError(f"function_name must be a Python identifier, got {name!r}")
        code = _print(parse_expression(expression, variables))
        title, doc = _MODULE_DOCS[kind]
        constant = "EXPRESSION" if len(expressions) == 1 else f"{kind.upper()}_EXPRESSION"
        docs.append(f"{title}:\n{doc}\n\nExpression: {' '.join(expression.split())}")
        constants.append(f"{constant} = {expression!r}")
        if kind == "drift":
            functions.append(f'''def {name}(ratio, advantage, progress=0.0):
    """D(r, A, p) for arrays that broadcast together; returns the broadcast shape."""
    r = jnp.asarray(ratio)
    A = jnp.asarray(advantage)
    p = jnp.asarray(progress)
    out = {code}
    shape = jnp.broadcast_shapes(jnp.shape(r), jnp.shape(A), jnp.shape(p))
    return jnp.broadcast_to(jnp.asarray(out, dtype=jnp.result_type(r, A, float)), shape)
''')
        else:
            functions.append(f'''def {name}(value, target):
    """L(value - target, target) for arrays that broadcast together; returns the broadcast shape."""
    t = jnp.asarray(target)
    e = jnp.asarray(value) - t
    out = {code}
    return jnp.broadcast_to(jnp.asarray(out, dtype=jnp.result_type(e, float)), jnp.shape(e))
''')
    header = "Generated by metadisco from sympy expressions.\n\n" + "\n\n".join(docs)
    return (f'"""{header}\n"""\n\nimport jax.numpy as jnp\n\n' + "\n".join(constants) + "\n\n\n"
            + "\n\n".join(functions))


# ---------------------------------------------------------------------------------------------
# Constraint check
# ---------------------------------------------------------------------------------------------


def as_drift_fn(drift, params=None) -> Callable:
    """A plain callable (ratio, advantage, progress) -> D from an expression string, a drift
    objective (with `params`, default `drift.init(key(0))`) or a callable (returned as is)."""
    if isinstance(drift, str):
        obj = ClosedFormDrift(drift)
        return lambda ratio, advantage, progress=0.0: obj.drift({}, ratio, advantage, progress)
    if isinstance(drift, MetaObjective):
        if drift.plug != "drift":
            raise ValueError(f"expected a drift objective, got a {drift.plug} objective")
        if params is None:
            params = drift.default_params()
        return lambda ratio, advantage, progress=0.0: drift.drift(params, ratio, advantage, progress)
    if callable(drift):
        return drift
    raise TypeError(f"expected an expression, a drift objective or a callable, got {type(drift).__name__}")


def _slope_at_one(fn, a, progress):
    """dD/dr at r = 1 for each A in `a` (float32 array) via jax.grad; None if not traceable."""
    try:
        def total(r):
            return jnp.sum(jnp.asarray(fn(r, a, progress)))

        return np.asarray(jax.grad(total)(jnp.ones_like(a)), np.float64)
    except Exception:  # e.g. a numpy callable meeting a tracer
        return None


def check_drift_constraints(
    drift_fn,
    params=None,
    *,
    r_range: tuple[float, float] = (0.2, 3.0),
    a_range: tuple[float, float] = (-3.0, 3.0),
    progresses: tuple[float, ...] = (0.0, 0.5, 1.0),
    num: int = 61,
    value_tol: float = 1e-6,
    slope_tol: float = 1e-4,
) -> list[str]:
    """Mirror-learning conditions of a drift -> list of human-readable violations ([] = passes).

    `drift_fn`: callable (ratio, advantage, progress) -> D, a drift objective (+ `params`), or
    an expression string. Checks, for each progress in `progresses`:
      D >= -value_tol and finite on a num x num grid r in r_range, A in a_range;
      |D(1, A)| <= value_tol;  |dD/dr(1, A)| <= slope_tol (jax.grad; central differences if
      drift_fn is not jax-traceable); and no kink at r = 1 (one-sided difference quotients at
      h = 1e-2 and 1e-3 that do not shrink with h, which a subgradient convention would hide).
    """
    fn = as_drift_fn(drift_fn, params)
    rs = np.union1d(np.linspace(*r_range, num, dtype=np.float32), np.float32([1.0]))
    a = np.union1d(np.linspace(*a_range, num, dtype=np.float32), np.float32([0.0]))
    found: dict[str, list[float]] = {}  # violation -> the progress values where it occurs
    for prog in progresses:
        try:
            messages = _violations(fn, rs, a, float(prog), value_tol, slope_tol)
        except Exception as e:  # a user callable can fail in any way: report it, do not crash
            messages = [f"drift raised {type(e).__name__} on the check grid: {e}"]
        for message in messages:
            found.setdefault(message, []).append(float(prog))
    return [f"{m} (progress={', '.join(f'{q:g}' for q in progs)})" for m, progs in found.items()]


def _violations(fn, rs, a, prog, value_tol, slope_tol) -> list[str]:
    R, Aa = np.meshgrid(rs, a, indexing="ij")
    problems = []
    d = np.asarray(fn(jnp.asarray(R), jnp.asarray(Aa), jnp.float32(prog)), np.float64)
    d = np.broadcast_to(d, R.shape)
    bad = ~np.isfinite(d)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        problems.append(
            f"D is not finite at {bad.sum()} of {d.size} grid points, e.g. r={R[i]:.3g}, A={Aa[i]:.3g}"
        )
    finite = np.where(bad, 0.0, d)
    neg = finite < -value_tol
    if neg.any():
        i = np.unravel_index(np.argmin(finite), d.shape)
        problems.append(
            f"D < 0 at {neg.sum()} of {d.size} grid points: min D = {d[i]:.3g} at "
            f"r={R[i]:.3g}, A={Aa[i]:.3g}"
        )
    ones = np.ones_like(a)
    d1 = np.asarray(fn(jnp.asarray(ones), jnp.asarray(a), jnp.float32(prog)), np.float64)
    d1 = np.broadcast_to(d1, a.shape)
    err = np.where(np.isfinite(d1), np.abs(d1), np.inf)
    if err.max() > value_tol:
        i = int(np.argmax(err))
        problems.append(f"D(1, A) != 0: D(1, A) = {d1[i]:.3g} at A={a[i]:.3g}")
    slope = _slope_at_one(fn, jnp.asarray(a), jnp.float32(prog))
    if slope is None:  # not jax-traceable: central differences in the callable's own precision
        h = 1e-3
        up = np.asarray(fn(ones + h, a, prog), np.float64)
        down = np.asarray(fn(ones - h, a, prog), np.float64)
        slope = (up - down) / (2 * h)
    slope = np.broadcast_to(slope, a.shape)
    serr = np.where(np.isfinite(slope), np.abs(slope), np.inf)
    if serr.max() > slope_tol:
        i = int(np.argmax(serr))
        problems.append(f"dD/dr(1, A) != 0: |dD/dr| = {serr[i]:.3g} at A={a[i]:.3g}")
    else:
        kink = _kink_at_one(fn, a, prog, d1, slope_tol)
        if kink:
            problems.append(kink)
    return problems


def _kink_at_one(fn, a, prog, d1, slope_tol) -> str | None:
    def quotient(h, side):
        r = np.float32(1.0 + side * h) * np.ones_like(a)
        d = np.asarray(fn(jnp.asarray(r), jnp.asarray(a), jnp.float32(prog)), np.float64)
        return (np.broadcast_to(d, a.shape) - d1) / (r.astype(np.float64) - 1.0)

    for side, label in ((1, "right"), (-1, "left")):
        q1, q2 = quotient(1e-2, side), quotient(1e-3, side)
        flag = (np.abs(q2) > slope_tol) & (np.abs(q2) > 0.5 * np.abs(q1))
        if flag.any():
            i = int(np.argmax(np.where(flag, np.abs(q2), -1.0)))
            return (
                f"dD/dr jumps at r = 1 (kink): the {label} slope is about {q2[i]:.3g} at A={a[i]:.3g}"
            )
    return None


def check_value_loss_constraints(
    expression: str,
    *,
    e_range: tuple[float, float] = (-10.0, 10.0),
    t_range: tuple[float, float] = (-10.0, 10.0),
    num: int = 81,
    bias_band: float = 1.0,
    value_tol: float = 1e-6,
    slope_tol: float = 1e-6,
) -> list[str]:
    """Conditions for a value loss L(e, t), e = v - target -> list of violations ([] = passes).

    On a num x num grid e in e_range, t in t_range: L finite; L(0, t) = 0 (a perfect prediction
    costs nothing, as in every LearnedValueLoss); and e * dL/de >= 0 wherever |e| > bias_band
    (jax.grad): outside the band a gradient step always moves the prediction toward its target.
    Inside the band a loss may prefer a small bias, as a learned one can (L2 + c tanh(e), say);
    bias_band=0 demands the minimum exactly at e = 0.
    """
    fn = _jax_callable(expression, VALUE_LOSS_VARIABLES)  # ValueError for an invalid expression
    es = np.union1d(np.linspace(*e_range, num, dtype=np.float32), np.float32([0.0]))
    ts = np.linspace(*t_range, num, dtype=np.float32)
    E, T = (jnp.asarray(x) for x in np.meshgrid(es, ts, indexing="ij"))
    problems = []
    loss = np.broadcast_to(np.asarray(fn(E, T), np.float64), E.shape)
    bad = ~np.isfinite(loss)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        problems.append(f"L is not finite at {bad.sum()} of {loss.size} grid points, e.g. e={E[i]:.3g}, t={T[i]:.3g}")
    at_zero = np.broadcast_to(np.asarray(fn(jnp.zeros_like(T[0]), T[0]), np.float64), T[0].shape)
    err = np.where(np.isfinite(at_zero), np.abs(at_zero), np.inf)
    if err.max() > value_tol:
        i = int(np.argmax(err))
        problems.append(f"L(0, t) != 0: L = {at_zero[i]:.3g} at t={float(T[0][i]):.3g}")
    slope = np.asarray(jax.grad(lambda e: jnp.sum(fn(e, T)))(E), np.float64)
    with np.errstate(invalid="ignore"):
        wrong = np.where(np.isfinite(slope), np.asarray(E) * slope, -np.inf)
    wrong = np.where(np.abs(np.asarray(E)) > bias_band, wrong, 0.0)
    if (wrong < -slope_tol).any():
        i = np.unravel_index(np.argmin(wrong), wrong.shape)
        problems.append(
            f"dL/de has the wrong sign for |e| > {bias_band:g} (the gradient step moves v away from its "
            f"target) at {(wrong < -slope_tol).sum()} grid points, e.g. e={float(E[i]):.3g}, t={float(T[i]):.3g}"
        )
    return problems

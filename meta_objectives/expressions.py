"""Closed-form expressions: safe parsing, and one printer from which every form is derived.

A formula is a sympy expression string: a drift D(r, A, p) over `r` (ratio pi_new / pi_old, > 0),
`A` (advantage, normalised per minibatch) and `p` (progress n / N in [0, 1]); a value loss
L(e, t) over `e` (prediction error v - target) and `t` (the target); a shaping potential Phi(s)
over the observation's numbers `s0`, `s1`, ... (the flattened observation, raw). Parsing is restricted: the
string is checked on its Python syntax tree first (only numbers, the plug's variable names, E,
pi, True, calls of whitelisted functions, arithmetic and comparisons), then parsed by sympy with
no builtins and no automatic symbols. Anything else raises ValueError.

One tree walker, `_source`, prints a sympy tree as array code. `function_source` wraps it into
the function that the standalone module exports (`jax_module_source`), and `compile_function`
compiles that very text for the in-process objective, so the exported module and the objective
run the same code. `compile_kernel` compiles the same printed body over the raw variables with
numpy (float64 fitting in metadisco.analysis.distillation) or jax.numpy. `Formula` pairs a hand-designed
formula's plain jax.numpy function with its expression over named constants (PPO-clip's eps,
DPO's alpha and beta; see formulas.py).
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
import sympy as sp
from sympy.parsing.sympy_parser import auto_number, convert_xor, parse_expr

from metadisco.core.errors import MetadiscoError

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
VARIABLES = {"drift": DRIFT_VARIABLES, "value_loss": VALUE_LOSS_VARIABLES}  # per plug point


def shaping_variables(obs_dim: int) -> tuple[str, ...]:
    """A potential's variables: the observation's numbers s0 ... s{obs_dim - 1}."""
    return tuple(f"s{i}" for i in range(obs_dim))


def variables_of(kind: str, obs_dim: int = 0) -> tuple[str, ...]:
    """The variables of an expression of plug `kind` (a shaping's: `shaping_variables(obs_dim)`)."""
    return shaping_variables(obs_dim) if kind == "shaping" else VARIABLES[kind]


def _symbol(name: str) -> sp.Symbol:
    return SYMBOLS.get(name) or sp.Symbol(name, real=True)  # an observation number s<i>


class ExpressionError(MetadiscoError):
    """An expression that cannot be read, or one outside the safe grammar (the message says why)."""


FUNCTIONS = {
    "Max": sp.Max, "Min": sp.Min, "Abs": sp.Abs, "tanh": sp.tanh, "exp": sp.exp, "log": sp.log,
    "sqrt": sp.sqrt, "Piecewise": sp.Piecewise, "sign": sp.sign, "Heaviside": sp.Heaviside,
    "sin": sp.sin, "cos": sp.cos,
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
        raise ExpressionError(f"a closed-form expression must be a string, got {type(expression).__name__}")
    if not expression.strip():
        raise ExpressionError("empty closed-form expression")
    if "\\" in expression:
        raise ExpressionError(f"expression {expression!r} contains a backslash")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression too long ({len(expression)} > {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"expression {expression!r} is not valid syntax: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise ExpressionError("expression is nested too deeply") from None
    for node in ast.walk(tree):
        if not isinstance(node, _AST_NODES):
            raise ExpressionError(
                f"expression {expression!r} uses unsupported syntax ({type(node).__name__}); only "
                f"numbers, {', '.join(sorted(allowed_names - set(CONSTANTS)))}, arithmetic, comparisons "
                "and the functions "
                f"{', '.join(sorted(FUNCTIONS))} are allowed"
            )
        if isinstance(node, ast.Constant) and not (
            isinstance(node.value, (int, float)) and not isinstance(node.value, complex)
        ):
            raise ExpressionError(f"expression {expression!r} contains a non-numeric constant {node.value!r}")
        if isinstance(node, ast.Name) and node.id not in allowed_names and node.id not in FUNCTIONS:
            raise ExpressionError(
                f"expression {expression!r} uses unknown name {node.id!r}; allowed symbols are "
                f"{', '.join(sorted(allowed_names))} and functions {', '.join(sorted(FUNCTIONS))}"
            )
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExpressionError(
                    f"expression {expression!r} calls {name!r}, which is not an allowed function "
                    f"({', '.join(sorted(FUNCTIONS))})"
                )
            if node.keywords:
                raise ExpressionError(f"expression {expression!r}: keyword arguments are not allowed")
        if isinstance(node, ast.Compare) and len(node.ops) != 1:
            raise ExpressionError(f"expression {expression!r}: chained comparisons are not allowed")
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.BitXor)):
            # Guard sympy's exact arithmetic against huge numbers such as 9**9**9.
            def symbolic(n):
                return any(isinstance(m, ast.Name) for m in ast.walk(n))

            if not symbolic(node.right):
                value = _literal_number(node.right)
                if value is None or abs(value) > MAX_CONSTANT_EXPONENT:
                    raise ExpressionError(
                        f"expression {expression!r}: a constant exponent must be a plain number "
                        f"of magnitude <= {MAX_CONSTANT_EXPONENT}"
                    )
                if not symbolic(node.left) and _literal_number(node.left) is None:
                    raise ExpressionError(
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
    """`expression` over `variables` and the positive constants `extra_symbols` -> sympy tree."""
    symbols = {name: _symbol(name) for name in variables}
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
        raise ExpressionError(f"cannot parse expression {expression!r}: {type(e).__name__}: {e}") from None
    if not isinstance(expr, sp.Basic) or (isinstance(expr, sp.logic.boolalg.Boolean) and not expr.is_Symbol):
        raise ExpressionError(f"expression {expression!r} is not a numeric expression")
    unknown = expr.free_symbols - set(symbols.values())
    if unknown:
        raise ExpressionError(f"expression {expression!r} has unknown symbols {sorted(map(str, unknown))}")
    # Printing walks the whole tree and rejects unsupported nodes (I, zoo, nan, ...).
    try:
        _source(expr, "np")
    except RecursionError:
        raise ExpressionError("expression is nested too deeply") from None
    return expr


@functools.lru_cache(maxsize=512)
def parse_expression(expression: str, variables: tuple[str, ...] = DRIFT_VARIABLES) -> sp.Expr:
    """Safely parse an expression over `variables` (a drift's r, A, p by default; a value loss's
    e, t) -> sympy expression (ValueError if invalid)."""
    return _parse(expression, variables)


# ---------------------------------------------------------------------------------------------
# The printer: one tree walker for every evaluated form
# ---------------------------------------------------------------------------------------------

_UNARY = {sp.tanh: "tanh", sp.exp: "exp", sp.log: "log", sp.Abs: "abs", sp.sign: "sign", sp.sin: "sin",
          sp.cos: "cos"}
_RELATIONS = {sp.GreaterThan: ">=", sp.StrictGreaterThan: ">", sp.LessThan: "<=", sp.StrictLessThan: "<"}
_BACKENDS = {"jnp": jnp, "np": np}


def _constant(expr) -> str:
    if not expr.is_real:
        raise ExpressionError(f"non-real constant {expr} in expression")
    value = float(expr)
    if not math.isfinite(value):
        raise ExpressionError(f"non-finite constant {expr} in expression")
    return repr(value) if value >= 0 else f"({value!r})"


def _source(expr, xp: str) -> str:
    """Python source of a sympy tree with `xp` ("jnp" or "np") as the array module. Sums and
    products are printed flat, `(a + b + c)`, which Python evaluates left to right."""
    if expr.is_Symbol:
        return expr.name
    if expr is sp.true or expr is sp.false:
        return str(bool(expr))
    if expr.is_Number or expr.is_NumberSymbol:
        return _constant(expr)
    if isinstance(expr, sp.Piecewise):
        out = f"{xp}.nan"
        for e, c in reversed(expr.args):
            out = _source(e, xp) if c is sp.true else f"{xp}.where({_source(c, xp)}, {_source(e, xp)}, {out})"
        return out
    args = [_source(a, xp) for a in expr.args]
    if isinstance(expr, (sp.Add, sp.Mul)):
        return "(" + (" + " if isinstance(expr, sp.Add) else " * ").join(args) + ")"
    if isinstance(expr, sp.Pow):
        exp_expr = expr.args[1]
        if exp_expr.is_Integer:
            return f"({args[0]} ** {int(exp_expr)})"
        if exp_expr == sp.Rational(1, 2):
            return f"{xp}.sqrt({args[0]})"
        if exp_expr == sp.Rational(-1, 2):
            return f"(1.0 / {xp}.sqrt({args[0]}))"
        return f"{xp}.power({args[0]}, {args[1]})"
    if isinstance(expr, sp.Max) and len(expr.args) == 2 and sp.S.Zero in expr.args:
        # relu, printed so that its gradient at 0 is 0 as jax.nn.relu's (maximum splits a tie):
        # PPO-clip from its formula then trains exactly as the hand-written relu did
        x = args[1 - expr.args.index(sp.S.Zero)]
        return f"{xp}.where({x} > 0, {x}, 0.0)"
    if isinstance(expr, (sp.Max, sp.Min)):
        fn = f"{xp}.maximum" if isinstance(expr, sp.Max) else f"{xp}.minimum"
        return functools.reduce(lambda a, b: f"{fn}({a}, {b})", args)
    for cls, name in _UNARY.items():
        if isinstance(expr, cls):
            if len(args) != 1:
                raise ExpressionError(f"{name} takes one argument")
            return f"{xp}.{name}({args[0]})"
    if isinstance(expr, sp.Heaviside):
        return f"{xp}.heaviside({args[0]}, {args[1]})"
    for cls, symbol in _RELATIONS.items():
        if isinstance(expr, cls):
            return f"({args[0]} {symbol} {args[1]})"
    if isinstance(expr, (sp.And, sp.Or)):
        fn = f"{xp}.logical_and" if isinstance(expr, sp.And) else f"{xp}.logical_or"
        return functools.reduce(lambda a, b: f"{fn}({a}, {b})", args)
    if isinstance(expr, sp.Not):
        return f"{xp}.logical_not({args[0]})"
    raise ExpressionError(
        f"unsupported operation {type(expr).__name__} in expression (allowed: + - * / **, "
        f"{', '.join(sorted(FUNCTIONS))}, comparisons inside Piecewise)"
    )


_FUNCTION_TEMPLATES = {
    "drift": '''def {name}(ratio, advantage, progress=0.0{constants}):
    """D(r, A, p) for arrays that broadcast together; returns the broadcast shape."""
    r = jnp.asarray(ratio)
    A = jnp.asarray(advantage)
    p = jnp.asarray(progress)
    out = {code}
    shape = jnp.broadcast_shapes(jnp.shape(r), jnp.shape(A), jnp.shape(p))
    return jnp.broadcast_to(jnp.asarray(out, dtype=jnp.result_type(r, A, float)), shape)
''',
    "value_loss": '''def {name}(value, target{constants}):
    """L(value - target, target) for arrays that broadcast together; returns the broadcast shape."""
    t = jnp.asarray(target)
    e = jnp.asarray(value) - t
    out = {code}
    return jnp.broadcast_to(jnp.asarray(out, dtype=jnp.result_type(e, float)), jnp.shape(e))
''',
    "shaping": '''def {name}(obs{constants}):
    """Phi(s) for observations obs [..., {obs_dim}] (raw, flattened: s<i> = obs[..., i]); returns [...]."""
    obs = jnp.asarray(obs)
{bindings}    out = {code}
    return jnp.broadcast_to(jnp.asarray(out, dtype=jnp.result_type(obs, float)), jnp.shape(obs)[:-1])
''',
}


def _bindings(expr, indent: str = "    ") -> str:
    """Lines binding each observation number the expression reads, s<i> = obs[..., i]."""
    used = sorted(int(s.name[1:]) for s in expr.free_symbols if re.fullmatch(r"s\d+", s.name))
    return "".join(f"{indent}s{i} = obs[..., {i}]\n" for i in used)


def function_source(kind: str, name: str, expr: sp.Expr, constants: tuple[str, ...] = (), obs_dim: int = 0) -> str:
    """Source of the jax.numpy function `name` evaluating `expr` for plug `kind` ("drift":
    name(ratio, advantage, progress=0.0), "value_loss": name(value, target), "shaping":
    name(obs), obs [..., obs_dim]); each of `constants` becomes a keyword-only argument."""
    if kind not in _FUNCTION_TEMPLATES:
        raise ValueError(f"kind must be one of {sorted(_FUNCTION_TEMPLATES)}, got {kind!r}")
    if not name.isidentifier() or name in {"jnp", "obs", *variables_of(kind, obs_dim), *constants}:
        raise ExpressionError(f"function_name must be a Python identifier, got {name!r}")
    extra = (", *, " + ", ".join(constants)) if constants else ""
    return _FUNCTION_TEMPLATES[kind].format(name=name, constants=extra, code=_source(expr, "jnp"), obs_dim=obs_dim,
                                            bindings=_bindings(expr))


def _exec(source: str, namespace: dict, label: str) -> dict:
    try:
        exec(compile(source, label, "exec"), namespace)  # printed by _source from a checked tree
    except (SyntaxError, RecursionError, MemoryError):
        raise ExpressionError("expression is nested too deeply") from None
    return namespace


@functools.lru_cache(maxsize=512)
def compile_function(expression: str, kind: str = "drift", constants: tuple[str, ...] = (), obs_dim: int = 0):
    """The function `function_source` prints (the exported module's), compiled in-process."""
    expr = _parse(expression, variables_of(kind, obs_dim), constants)
    return _exec(function_source(kind, "f", expr, constants, obs_dim), {"jnp": jnp}, f"<{kind}>")["f"]


@functools.lru_cache(maxsize=512)
def compile_kernel(expression: str, kind: str = "drift", constants: tuple[str, ...] = (), xp: str = "jnp",
                   obs_dim: int = 0):
    """The printed body as f(*variables, **constants) (a shaping's: f(obs, **constants), obs
    [..., obs_dim]) with `xp` ("jnp" or "np") arrays, no broadcasting or casting (for the
    constraint checks and for fitting)."""
    variables = variables_of(kind, obs_dim)
    expr = _parse(expression, variables, constants)
    extra = (", *, " + ", ".join(constants)) if constants else ""
    arguments, bindings = ("obs", _bindings(expr)) if kind == "shaping" else (", ".join(variables), "")
    source = f"def f({arguments}{extra}):\n{bindings}    return {_source(expr, xp)}\n"
    return _exec(source, {xp: _BACKENDS[xp]}, f"<{kind} kernel>")["f"]


def evaluate_numpy(expression: str, ratio, advantage, progress=0.0, **constants) -> np.ndarray:
    """Evaluate a drift expression in float64 numpy (for fitting); `constants` binds extra symbols.

    ratio, advantage, progress broadcast together -> D of the broadcast shape.
    """
    fn = compile_kernel(expression, "drift", tuple(sorted(constants)), "np")
    r = np.asarray(ratio, np.float64)
    a = np.asarray(advantage, np.float64)
    p = np.asarray(progress, np.float64)
    with np.errstate(all="ignore"):
        out = fn(r, a, p, **{k: np.float64(v) for k, v in constants.items()})
    shape = np.broadcast_shapes(r.shape, a.shape, p.shape)
    return np.broadcast_to(np.asarray(out, np.float64), shape)


def evaluate_value_loss_numpy(expression: str, error, target=0.0) -> np.ndarray:
    """Evaluate a value-loss expression L(e, t) in float64 numpy; arrays broadcast together."""
    fn = compile_kernel(expression, "value_loss", (), "np")
    e = np.asarray(error, np.float64)
    t = np.asarray(target, np.float64)
    with np.errstate(all="ignore"):
        out = fn(e, t)
    return np.broadcast_to(np.asarray(out, np.float64), np.broadcast_shapes(e.shape, t.shape))


def evaluate_shaping_numpy(expression: str, obs) -> np.ndarray:
    """Evaluate a potential Phi(s) in float64 numpy: obs [..., obs_dim] -> [...]."""
    obs = np.asarray(obs, np.float64)
    fn = compile_kernel(expression, "shaping", (), "np", obs.shape[-1])
    with np.errstate(all="ignore"):
        out = fn(obs)
    return np.broadcast_to(np.asarray(out, np.float64), obs.shape[:-1])


def to_latex(expression: str, digits: int | None = None, variables: tuple[str, ...] = DRIFT_VARIABLES) -> str:
    """LaTeX of the expression (its variables as symbols); `digits` rounds floats for display."""
    expr = parse_expression(expression, variables)
    if digits is not None:
        expr = expr.xreplace({f: sp.Float(f, digits) for f in expr.atoms(sp.Float)})
    return sp.latex(expr)


# ---------------------------------------------------------------------------------------------
# The standalone module
# ---------------------------------------------------------------------------------------------

_MODULE_DOCS = {
    "drift": ("Closed-form drift D(r, A, p)", """\
Mirror-learning drift (Lu et al. 2022, "Discovered Policy Optimisation"): the policy loss is
-(r*A - D), with r = pi_new / pi_old, A the advantage normalised per minibatch and p = n / N the
training progress. D >= 0, and D = 0 with dD/dr = 0 at r = 1."""),
    "value_loss": ("Closed-form value loss L(e, t)", """\
Per-sample critic loss with e = v - target (the prediction error) and t = target; PPO
averages it over the minibatch. L(0, t) = 0, and L decreases toward e = 0 from either side."""),
    "shaping": ("Closed-form shaping potential Phi(s)", """\
Potential-based reward shaping (Ng et al. 1999): PPO learns from r + gamma * Phi(s') - Phi(s),
Phi(s') dropped where the episode terminated (`shaped_reward`), which changes how fast it learns,
never which policy is optimal. s<i> is the i-th number of the raw, flattened observation."""),
}

# potential-based shaping around the module's `potential`, as meta_objectives.shaping computes it
_SHAPED_REWARD = '''def shaped_reward(obs, reward, next_obs, terminated, gamma):
    """reward + gamma * potential(next_obs) - potential(obs), the future dropped where terminated."""
    future = jnp.where(terminated, 0.0, potential(next_obs))
    return reward + gamma * future - potential(obs)
'''
FUNCTION_NAMES = {"drift": "drift", "value_loss": "value_loss", "shaping": "potential"}  # a module's defaults


def to_jax_module_source(expression: str, function_name: str = "drift", kind: str = "drift") -> str:
    """Text of a standalone Python module (imports only jax.numpy) defining the objective.

    kind "drift": `<function_name>(ratio, advantage, progress=0.0) -> D`; kind "value_loss":
    `<function_name>(value, target) -> L`. Arrays broadcast; the module also defines
    `EXPRESSION`, the sympy string it was generated from.
    """
    return jax_module_source({kind: expression}, {kind: function_name})


def jax_module_source(expressions: dict[str, str], function_names: dict[str, str] | None = None,
                      obs_dim: int = 0) -> str:
    """A standalone module defining one function per entry of {kind: expression} (kinds "drift",
    "value_loss" and "shaping", functions named by FUNCTION_NAMES unless `function_names` says
    otherwise; a shaping's potential(obs), obs [..., obs_dim], and shaped_reward beside it).
    With one entry the module's source string is `EXPRESSION`; with several, `<KIND>_EXPRESSION`."""
    if not expressions:
        raise ExpressionError("no expression to write")
    unknown = set(expressions) - set(_MODULE_DOCS)
    if unknown:
        raise ValueError(f"kind must be one of {sorted(_MODULE_DOCS)}, got {sorted(unknown)}")
    function_names = {**FUNCTION_NAMES, **(function_names or {})}
    docs, constants, functions = [], [], []
    for kind, expression in expressions.items():
        parsed = parse_expression(expression, variables_of(kind, obs_dim))
        source = function_source(kind, function_names[kind], parsed, obs_dim=obs_dim)
        if kind == "shaping" and function_names[kind] == "potential":
            source += "\n\n" + _SHAPED_REWARD
        title, doc = _MODULE_DOCS[kind]
        constant = "EXPRESSION" if len(expressions) == 1 else f"{kind.upper()}_EXPRESSION"
        docs.append(f"{title}:\n{doc}\n\nExpression: {' '.join(expression.split())}")
        constants.append(f"{constant} = {expression!r}")
        functions.append(source)
    header = "Generated by metadisco from sympy expressions.\n\n" + "\n\n".join(docs)
    return (f'"""{header}\n"""\n\nimport jax.numpy as jnp\n\n' + "\n".join(constants) + "\n\n\n"
            + "\n\n".join(functions))


# ---------------------------------------------------------------------------------------------
# Hand-designed formulas with named constants
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Formula:
    """A hand-designed formula: a plain jax.numpy function and the same formula as an expression
    over a plug's variables and named positive constants.

    template: the expression with each constant as a bare symbol, e.g. "Max(0, (r - 1)*A - a*r)"
    with constants ("a",). function: the plug function (drift: ratio, advantage, progress;
    value_loss: value, target) with the constants as keyword-only arguments, what `__call__`
    runs. From the template come the expression string with numbers (`expression`, for closed
    forms and export) and its LaTeX; a test holds the function equal to the compiled template.
    """

    template: str
    constants: tuple[str, ...]
    function: Callable
    kind: str = "drift"

    def __post_init__(self):
        _parse(self.template, VARIABLES[self.kind], self.constants)  # ValueError if invalid

    def __call__(self, *args, **constants):
        """The plug function with the constants as keywords (floats or traced arrays)."""
        return self.function(*args, **constants)

    def expression(self, **values: float) -> str:
        """The template with each constant replaced by its value (finite, > 0)."""
        if set(values) != set(self.constants):
            raise ExpressionError(f"give the constants {self.constants}, got {sorted(values)}")
        numbers = {k: float(v) for k, v in values.items()}
        bad = {k: v for k, v in numbers.items() if not (math.isfinite(v) and v > 0)}
        if bad:
            raise ExpressionError(f"the constants must be finite and > 0, got {bad}")
        pattern = r"\b(" + "|".join(map(re.escape, self.constants)) + r")\b"
        return re.sub(pattern, lambda m: repr(numbers[m.group(1)]), self.template)

    def latex(self) -> str:
        return sp.latex(_parse(self.template, VARIABLES[self.kind], self.constants))

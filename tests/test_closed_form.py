"""ClosedFormDrift: safe parsing, jnp evaluation equal to DPO (Lu et al. 2022), derived forms,
and the drift constraint check."""

import ast
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import metadisco.meta_objectives as mo
from metadisco.meta_objectives.closed_form import ClosedFormDrift, ClosedFormValueLoss
from metadisco.meta_objectives.constraints import check_drift_constraints, check_value_loss_constraints
from metadisco.meta_objectives.expressions import evaluate_numpy, evaluate_value_loss_numpy, to_jax_module_source, to_latex
from metadisco.meta_objectives.formulas import dpo_expression


def _points(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    r = np.exp(rng.normal(0.0, 0.5, n)).astype(np.float32)
    a = (2.0 * rng.standard_normal(n)).astype(np.float32)
    return r, a


def test_dpo_expression_equals_dpo_values_jit_and_grad():
    r, a = _points()
    assert (a > 0).any() and (a < 0).any()
    closed = ClosedFormDrift(dpo_expression(2.0, 0.6))
    dpo = mo.DPO()
    dpo_params = dpo.init(jax.random.key(0))
    want = dpo.drift(dpo_params, r, a, 0.0)
    got = closed.drift(closed.init(jax.random.key(0)), r, a, 0.0)
    assert got.shape == want.shape and got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.jit(closed.drift)({}, r, a, 0.0), want, rtol=1e-5, atol=1e-6)

    def grads(fn):
        return jax.vmap(jax.grad(fn, argnums=(0, 1)))(jnp.asarray(r), jnp.asarray(a))

    g_closed = grads(lambda x, y: closed.drift({}, x, y, 0.0))
    g_dpo = grads(lambda x, y: dpo.drift(dpo_params, x, y, 0.0))
    for gc, gd in zip(g_closed, g_dpo):
        assert np.isfinite(gc).all()
        np.testing.assert_allclose(gc, gd, rtol=1e-4, atol=1e-5)
    g_jit = jax.jit(jax.vmap(jax.grad(lambda x, y: closed.drift({}, x, y, 0.0))))(r, a)
    np.testing.assert_allclose(g_jit, g_dpo[0], rtol=1e-4, atol=1e-5)


def test_numpy_evaluation_matches_jax():
    r, a = _points(500, seed=1)
    expr = dpo_expression(1.3, 0.9)
    np.testing.assert_allclose(
        evaluate_numpy(expr, r, a), ClosedFormDrift(expr).drift({}, r, a, 0.0), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(
    "bad",
    [
        "__import__('os')", "foo(r)", "r + x", "r.__class__", "'r'", "lambda: r", "[r]",
        "open('f')", "exec('1')", "9**9**9", "r == 1", "1/0", "sqrt(-1)", "", "Max", "A >= 0",
        "eval('r')", "r if A else 1", "sinh(r)", "Symbol('x')",
    ],
)
def test_parse_rejects_unknown_names_functions_and_syntax(bad):
    with pytest.raises(ValueError):
        ClosedFormDrift(bad)


def test_parse_accepts_whitelisted_forms_and_progress():
    expr = (
        "Heaviside(A)*Max(0, (r-1)*A - 2*tanh((r-1)*A/2))"
        " + (1 - sign(A))/2*p*Min(1, log(r)**2) + exp(0)*Abs(A)*(sqrt(r) - 1)**2"
    )
    d = ClosedFormDrift(expr)
    r = jnp.linspace(0.5, 2.0, 7)
    out = d.drift({}, r[:, None], jnp.linspace(-2, 2, 5)[None, :], jnp.float32(0.5))
    assert out.shape == (7, 5) and np.isfinite(out).all()
    # a scalar expression still broadcasts to the input shape, in float32
    zero = ClosedFormDrift("0").drift({}, r, jnp.ones(7), 0.0)
    assert zero.shape == (7,) and zero.dtype == jnp.float32
    assert check_drift_constraints(expr) == []


def test_registry_spec_and_hashable_for_jit():
    expr = dpo_expression(1.0, 1.0)
    made = mo.make_objective("drift", "closed_form", expression=expr)
    assert made == ClosedFormDrift(expr) and hash(made) == hash(ClosedFormDrift(expr))
    assert mo.from_spec(made.spec()) == made
    assert "closed_form" in mo.names("drift")
    vm = jax.vmap(lambda x: made.drift({}, x, 1.0, 0.0))(jnp.linspace(0.5, 2.0, 4))
    assert vm.shape == (4,)


def test_default_is_ppo_clip():
    r, a = _points(500, seed=3)
    ppo = mo.PPOClip()
    np.testing.assert_allclose(ClosedFormDrift().drift({}, r, a, 0.0), ppo.drift({}, r, a, 0.0), atol=1e-7)


def test_latex_and_standalone_module_source():
    expr = dpo_expression(2.0, 0.6)
    tex = to_latex(expr)
    assert "\\tanh" in tex and "\\max" in tex and "\\log" in tex
    src = to_jax_module_source(expr, function_name="my_drift")
    tree = ast.parse(src)
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [(a.name, a.asname) for n in imports for a in n.names] == [("jax.numpy", "jnp")]
    namespace = {}
    exec(compile(src, "<generated>", "exec"), namespace)
    r, a = _points(300, seed=2)
    np.testing.assert_allclose(
        namespace["my_drift"](r, a), ClosedFormDrift(expr).drift({}, r, a, 0.0), rtol=0, atol=0
    )
    assert namespace["EXPRESSION"] == expr
    with pytest.raises(ValueError):
        to_jax_module_source(expr, function_name="not valid")


@pytest.mark.parametrize("name", ["ppo_clip", "dpo", "lpo", "talpo"])
def test_constraints_pass_for_baselines(name):
    objective = mo.make_objective("drift", name)
    assert check_drift_constraints(objective) == []
    params = objective.init(jax.random.key(1))
    assert check_drift_constraints(lambda r, a, p: objective.drift(params, r, a, p)) == []


@pytest.mark.parametrize(
    "expr, fragment",
    [
        ("(r-1)*A", "D < 0"),
        ("(r-1)*A", "dD/dr(1, A)"),
        ("(r-1)**2 + 0.1", "D(1, A) != 0"),
        ("Max(0, (r-1)*A)", "dD/dr"),
        ("Abs(r-1)", "dD/dr"),
        ("Piecewise(((r-1)**2, A >= 0))", "not finite"),
        ("p*((r-1)**2 - 0.01)", "progress=0.5"),
    ],
)
def test_constraints_flag_bad_drifts(expr, fragment):
    problems = check_drift_constraints(expr)
    assert problems and any(fragment in p.message for p in problems), problems
    if "p" in expr:  # fine at progress 0, so nothing is reported there
        assert not any("progress=0)" in p.message or "progress=0," in p.message for p in problems), problems


def test_constraints_for_a_numpy_callable_use_finite_differences():
    def bad(r, a, p):  # not jax-traceable
        return np.asarray(r, np.float64) ** 2 - 1.0

    problems = check_drift_constraints(bad)
    assert any("D < 0" in p.message for p in problems) and any("dD/dr(1, A)" in p.message for p in problems)

    def good(r, a, p):
        return (np.asarray(r, np.float64) - 1.0) ** 2 * np.asarray(a, np.float64) ** 2

    assert check_drift_constraints(good) == []


# ---------------------------------------------------------------------------------------------
# Closed-form value losses
# ---------------------------------------------------------------------------------------------


def test_closed_form_value_loss_equals_the_built_in_l2_and_its_module():
    rng = np.random.default_rng(0)
    value, target = (jnp.asarray(10 * rng.standard_normal(512), jnp.float32) for _ in range(2))
    np.testing.assert_array_equal(ClosedFormValueLoss().value_loss({}, value, target, value),
                                  mo.L2().value_loss({}, value, target, value))
    expr = "e**2/2 + 0.1*Abs(e)**3*(1 + tanh(t))"
    loss = ClosedFormValueLoss(expr)
    want = np.asarray(loss.value_loss({}, value, target, value))
    e, t = np.asarray(value - target, np.float64), np.asarray(target, np.float64)
    np.testing.assert_allclose(want, e**2 / 2 + 0.1 * np.abs(e) ** 3 * (1 + np.tanh(t)), rtol=1e-5)
    np.testing.assert_allclose(evaluate_value_loss_numpy(expr, e, t), want, rtol=1e-5)
    namespace: dict = {}
    exec(to_jax_module_source(expr, "critic_loss", kind="value_loss"), namespace)
    np.testing.assert_allclose(namespace["critic_loss"](value, target), want, rtol=1e-6)
    assert namespace["EXPRESSION"] == expr and "tanh" in to_latex(expr, variables=("e", "t"))
    with pytest.raises(ValueError, match="unknown name 'r'"):
        ClosedFormValueLoss("r**2")  # a value loss sees e and t only


@pytest.mark.parametrize("expr, fragment", [
    ("e**2/2", None),
    ("Piecewise((e**2, e >= 0), (0.1*e**2, True))", None),
    ("e**2/2 + 0.4*tanh(e)", None),     # a small learned bias: minimum at e = -0.3, inside the band
    ("e**2/2 - 3*e", "wrong sign"),     # minimum at e = 3: pushes v away from t outside the band
    ("e**2/2 + 0.1*t**2", "L(0, t) != 0"),
    ("log(e)", "not finite"),
    ("1e-6*e**2", "never trained"),     # pulls, but too little to move a critic (|dL/de| <= 2e-4)
])
def test_value_loss_constraints(expr, fragment):
    problems = check_value_loss_constraints(expr)
    if fragment is None:
        assert problems == []
    else:
        assert any(fragment in p.message for p in problems), problems


def test_closed_form_value_loss_on_the_clipped_base_is_ppo_clipped_l2(tmp_path):
    """base="clipped_l2" applies PPO's value clipping to the expression: for e**2/2 it is PPO's
    clipped value loss, and it equals the bare expression where v_old = v."""
    from metadisco.meta_objectives.value_loss import clipped_l2

    keys = jax.random.split(jax.random.key(3), 3)
    value, target, old_value = (2.0 * jax.random.normal(k, (2048,)) for k in keys)
    for eps in (0.2, 0.5):
        loss = ClosedFormValueLoss("e**2/2", base="clipped_l2", clip_eps=eps)
        want = clipped_l2(value, target, old_value, eps)
        np.testing.assert_allclose(loss.value_loss({}, value, target, old_value), want, rtol=1e-6, atol=1e-5)
        assert float(jnp.abs(want - mo.L2().value_loss({}, value, target, old_value)).max()) > 0.1
    expr = "e**2/2 + 0.1*Abs(e)**3*(1 + tanh(t))"
    clipped, bare = ClosedFormValueLoss(expr, base="clipped_l2"), ClosedFormValueLoss(expr)
    np.testing.assert_allclose(clipped.value_loss({}, value, target, value), bare.value_loss({}, value, target, value),
                               rtol=1e-6, atol=1e-6)
    assert clipped.closed_form({}) is None and bare.closed_form({}) == expr  # it reads v_old: no e, t form
    assert "clip" in clipped.latex() and "clip" in clipped.describe() and "clip" not in bare.latex()
    assert mo.from_spec(clipped.spec()) == clipped
    assert mo.from_spec({"plug": "value_loss", "name": "closed_form", "config": {"expression": expr}}) == bare
    objectives = mo.Objectives(value_loss=clipped)  # the objectives JSON keeps the base ...
    mo.save_objectives(tmp_path / "clipped.json", objectives, objectives.default_params())
    assert mo.load_objectives(tmp_path / "clipped.json")[0].value_loss == clipped
    doc = json.loads((tmp_path / "clipped.json").read_text())  # ... and a file from before it reads as base none
    for key in ("base", "clip_eps"):
        del doc["spec"]["value_loss"]["config"][key]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert mo.load_objectives(tmp_path / "old.json")[0].value_loss == bare
    with pytest.raises(ValueError, match="base must be one of"):
        ClosedFormValueLoss(expr, base="huber")


def test_an_objectives_check_compiles_a_program_per_grid_not_one_per_operation(caplog):
    """check_drift_constraints runs an objective as a few jitted programs (one per grid shape), not op
    by op: op by op compiles a program per operation and shape, seconds of every run's start (TALPO's
    check took 4.0 s on the CPU, 1.5 s jitted). Grids of a size no other test uses: nothing cached."""
    objective = mo.make_objective("drift", "talpo")
    params = objective.default_params()
    with jax.log_compiles(True), caplog.at_level("WARNING", logger="jax"):
        assert check_drift_constraints(objective, params, num=23) == []
    compiled = [r for r in caplog.records if r.getMessage().startswith("Compiling")]
    assert len(compiled) <= 15, [r.getMessage()[:60] for r in compiled]


def test_a_plug_in_objective_written_in_numpy_is_checked_op_by_op():
    """An objective whose drift cannot be traced (numpy) is checked as before: op by op, with finite
    differences where jax.grad cannot follow it."""

    class NumpySquare(mo.MetaObjective):
        plug, name = "drift", "numpy_square"

        def init(self, key):
            return {}

        def drift(self, params, ratio, advantage, progress):
            return (np.asarray(ratio, np.float64) - 1.0) ** 2 * np.abs(np.asarray(advantage, np.float64))

    assert check_drift_constraints(NumpySquare()) == []

    class NumpyTilted(NumpySquare):
        name = "numpy_tilted"

        def drift(self, params, ratio, advantage, progress):
            return np.asarray(ratio, np.float64) - 1.0

    assert {v.constraint for v in check_drift_constraints(NumpyTilted())} >= {"nonnegative", "flat_at_one"}


def test_an_objective_is_checked_far_from_its_start_as_well_as_near_it():
    """check_objective checks perturbations at three scales (0.1, 1, 10 x a normal draw): a drift that
    goes negative only once a parameter leaves [-1, 1] is valid at its start and near it, and caught."""

    class NegativeFarOut(mo.MetaObjective):
        plug, name = "drift", "negative_far_out"

        def init(self, key):
            return {"w2": jnp.zeros(8)}

        def drift(self, params, ratio, advantage, progress):
            far = jnp.sum(jax.nn.relu(jnp.abs(params["w2"]) - 1.0))
            return (ratio - 1.0) ** 2 * jnp.abs(advantage) - far * jnp.abs(advantage)

    from metadisco.meta_objectives.constraints import check_objective

    objective = NegativeFarOut()
    assert check_drift_constraints(objective) == []  # at its start
    assert {v.constraint for v in check_objective(objective, samples=1)} == set()  # 0.1 only: near it
    found = check_objective(objective)
    assert "nonnegative" in {v.constraint for v in found}
    assert all(v.where.startswith("perturbed parameters") for v in found)


def test_a_shaping_that_rescales_rewards_by_one_percent_is_not_potential_based():
    """The potential-based check's tolerance is rounding's, not a percent: r' = 1.01 r changes which
    path is better by 1% of the rewards' difference, and is caught."""
    from metadisco.meta_objectives.constraints import check_shaping_constraints

    class Rescaled(mo.MetaObjective):
        plug, name = "shaping", "rescaled"

        def init(self, key):
            return {}

        def shape_reward(self, params, obs, reward, next_obs, terminated, gamma):
            return 1.01 * reward

    assert [v.constraint for v in check_shaping_constraints(Rescaled(), {})] == ["potential_based"]

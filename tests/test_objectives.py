"""Meta-objectives: drift constraints, baselines at init, formulas, vmap in training, files.

The drift property tests are driven by the registry (every name in
`metadisco.meta_objectives.names("drift")`), as optax tests every entry of its optimiser table.
"""

import functools
import json
import math
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from evosax.algorithms import Open_ES
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from metadisco import meta_objectives
from metadisco.inner_loops import make_env, make_train
from metadisco.meta_objectives import (
    DPO,
    L2,
    LPO,
    TALPO,
    ClippedL2,
    LearnedValueLoss,
    NoShaping,
    ObjectiveFileError,
    Objectives,
    PotentialShaping,
    PPOClip,
    load_objectives,
    make_objective,
    save_objectives,
)
from metadisco.meta_objectives.constraints import check_objective, check_value_loss_constraints, perturbed_params
from metadisco.meta_objectives.shaping import monotone_transform
from tests.helpers import TINY_PPO as TINY

DRIFTS = meta_objectives.names("drift")
N = 32  # samples per hypothesis example (fixed, so each drift compiles once)


random_params = perturbed_params  # the same perturbation `metadisco check` uses


@functools.cache
def drift_checks(name):
    """Jitted (seed, scale, r, A, progress) -> (D(r, A), D(1, A), dD/dr at r = 1)."""
    objective = make_objective("drift", name)

    @jax.jit
    def checks(seed, scale, ratio, adv, progress):
        params = random_params(objective, jax.random.key(seed), scale)
        drift = objective.drift(params, ratio, adv, progress)
        ones = jnp.ones_like(adv)
        at_one = objective.drift(params, ones, adv, progress)
        slope = jax.vmap(jax.grad(lambda r, a: objective.drift(params, r, a, progress)))(ones, adv)
        return drift, at_one, slope

    return checks


def _f32(lo, hi):
    lo, hi = float(np.float32(lo)), float(np.float32(hi))
    return arrays(np.float32, (N,), elements=st.floats(lo, hi, width=32))


drift_inputs = dict(
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([0.0, 0.01, 0.1, 1.0, 10.0]),
    ratio=_f32(0.05, 5.0),
    adv=_f32(-5.0, 5.0),
    progress=st.floats(0.0, 1.0, width=32).map(np.float32),
)


def test_registry_has_the_drifts():
    assert {"ppo_clip", "dpo", "lpo", "talpo"} <= set(DRIFTS)


@pytest.mark.parametrize("name", DRIFTS)
@settings(max_examples=40, deadline=None)
@given(**drift_inputs)
def test_drift_is_nonnegative(name, seed, scale, ratio, adv, progress):
    drift, _, _ = drift_checks(name)(seed, scale, ratio, adv, progress)
    drift = np.asarray(drift)
    assert np.isfinite(drift).all()
    assert (drift >= 0).all(), f"{name}: D < 0 at r={ratio[drift < 0]}, A={adv[drift < 0]}"


@pytest.mark.parametrize("name", DRIFTS)
@settings(max_examples=40, deadline=None)
@given(**drift_inputs)
def test_drift_is_zero_and_flat_at_ratio_one(name, seed, scale, ratio, adv, progress):
    _, at_one, slope = drift_checks(name)(seed, scale, ratio, adv, progress)
    np.testing.assert_allclose(at_one, 0.0, atol=1e-6, err_msg=f"{name}: D(1, A) != 0")
    np.testing.assert_allclose(slope, 0.0, atol=1e-6, err_msg=f"{name}: dD/dr(1, A) != 0")


# --------------------------------------------------------------------------------------------
# Initial meta-parameters reproduce the hand-designed baselines
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("learned", [LPO(), TALPO(), LPO(hidden=8, clip_eps=0.3)])
def test_learned_drift_at_init_is_ppo_clip_exactly(learned):
    k_r, k_a, k_p = jax.random.split(jax.random.key(0), 3)
    ratio = jnp.exp(jax.random.normal(k_r, (4096,)))
    adv = 3.0 * jax.random.normal(k_a, (4096,))
    progress = jax.random.uniform(k_p, ())
    for seed in range(3):
        params = learned.init(jax.random.key(seed))
        assert float(jnp.abs(params["w1"]).sum()) > 0, "the hidden layer is random (not a zero start)"
        got = learned.drift(params, ratio, adv, progress)
        np.testing.assert_array_equal(got, PPOClip(clip_eps=learned.clip_eps).drift({}, ratio, adv, progress))


def test_learned_value_loss_at_init_is_l2_exactly():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    value, target, old = (10 * jax.random.normal(k, (4096,)) for k in (k1, k2, k3))
    expected = L2().value_loss({}, value, target, old)
    for objective in (LearnedValueLoss(), LearnedValueLoss(use_target=True, hidden=4)):
        params = objective.init(jax.random.key(1))
        np.testing.assert_array_equal(objective.value_loss(params, value, target, old), expected)


@pytest.mark.parametrize("transform", [False, True])
def test_potential_shaping_at_init_leaves_rewards_unchanged(transform):
    shaping = PotentialShaping(obs_shape=(4,), transform=transform)
    params = shaping.init(jax.random.key(0))
    k1, k2, k3, k4 = jax.random.split(jax.random.key(1), 4)
    obs, next_obs = jax.random.normal(k1, (256, 4)), jax.random.normal(k2, (256, 4))
    reward = 10 * jax.random.normal(k3, (256,))
    terminated = jax.random.bernoulli(k4, 0.3, (256,))
    shaped = shaping.shape_reward(params, obs, reward, next_obs, terminated, 0.99)
    np.testing.assert_array_equal(shaped, reward)
    np.testing.assert_array_equal(shaped, NoShaping().shape_reward({}, obs, reward, next_obs, terminated, 0.99))




@pytest.fixture(scope="module")
def cartpole():
    return make_env("CartPole-v1")


@pytest.mark.slow
def test_ppo_run_with_lpo_at_init_is_bit_identical_to_ppo(cartpole):
    key = jax.random.key(3)
    ppo = jax.jit(make_train(cartpole, TINY))(key, {})
    objectives = Objectives(drift=LPO())
    lpo = jax.jit(make_train(cartpole, TINY, objectives))(key, objectives.init(jax.random.key(5), plugs=("drift",)))
    np.testing.assert_array_equal(np.asarray(lpo.returns), np.asarray(ppo.returns))
    assert np.asarray(ppo.returns).std() > 0  # a real learning curve, not a constant


# --------------------------------------------------------------------------------------------
# Why init is "zero output layer over a random hidden layer": the OpenES signal
# --------------------------------------------------------------------------------------------


def _one_openes_generation(start, optimizer=optax.sgd(0.1)):
    lpo = LPO()
    ratio = jnp.exp(jax.random.uniform(jax.random.key(1), (256,), minval=-1.0, maxval=1.0))
    adv = jax.random.normal(jax.random.key(2), (256,))

    def fitness(params):  # cheap, smooth in distribution: the mean drift on a fixed batch
        return jnp.mean(lpo.drift(params, ratio, adv, 0.0))

    es = Open_ES(
        population_size=8, solution=start, use_antithetic_sampling=True, optimizer=optimizer,
        std_schedule=optax.constant_schedule(0.05),
    )
    params = es.default_params
    state = es.init(jax.random.key(0), start, params)
    population, state = es.ask(jax.random.key(1), state, params)
    fit = jax.vmap(fitness)(population)
    new_state, _ = es.tell(jax.random.key(2), population, fit, state, params)
    return np.asarray(fit), es.get_mean(state), np.asarray(new_state.mean - state.mean)


def test_openes_from_init_gets_a_signal_but_not_from_all_zeros():
    init = LPO().init(jax.random.key(0))
    fit, mean, step = _one_openes_generation(init)
    np.testing.assert_array_equal(mean["w1"], init["w1"])  # the ES starts at the LPO init:
    np.testing.assert_array_equal(mean["w2"], 0.0)  # random hidden layer, zero output layer
    assert not np.array_equal(fit[:4], fit[4:]), "antithetic members must differ"
    assert np.abs(step).max() > 0.1, "the ES mean should move from the LPO init"

    # All-zero start: f(W1, W2) = f(-W1, -W2), so each antithetic pair is bitwise identical and
    # the ES gradient is zero up to the rounding of its sum ...
    zeros = jax.tree.map(jnp.zeros_like, init)
    fit, _, step = _one_openes_generation(zeros)
    np.testing.assert_array_equal(fit[:4], fit[4:])
    assert np.abs(step).max() < 1e-6
    # ... which Adam, normalising by the gradient's size, turns into full-size random steps.
    _, _, adam_step = _one_openes_generation(zeros, optax.adam(0.01))
    assert np.abs(adam_step).mean() > 1e-3


# --------------------------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------------------------


def _dpo_by_hand(r, a, alpha=2.0, beta=0.6):
    if a >= 0:
        x = (r - 1) * a
        return max(0.0, x - alpha * math.tanh(x / alpha))
    x = math.log(r) * a
    return max(0.0, x - beta * math.tanh(x / beta))


@pytest.mark.parametrize(
    "r, a, expected",
    [
        (1.5, 1.0, 0.5 - 2 * math.tanh(0.25)),  # A >= 0 branch
        (0.5, -1.0, math.log(2) - 0.6 * math.tanh(math.log(2) / 0.6)),  # A < 0 branch
        (2.0, 3.0, 3.0 - 2 * math.tanh(1.5)),
        (0.5, 1.0, 0.0),  # (r-1)A < 0: the relu
        (2.0, -1.0, 0.0),  # log(r)A < 0: the relu
        (3.0, 0.0, 0.0),
    ],
)
def test_dpo_matches_formula(r, a, expected):
    assert _dpo_by_hand(r, a) == pytest.approx(expected, abs=1e-12)
    dpo = DPO()
    got = float(dpo.drift(dpo.init(None), jnp.float32(r), jnp.float32(a), 0.0))
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-7)
    # alpha and beta are parameters, not constants
    got = float(dpo.drift({"alpha": jnp.float32(1.0), "beta": jnp.float32(0.3)}, jnp.float32(r), jnp.float32(a), 0.0))
    assert got == pytest.approx(_dpo_by_hand(r, a, 1.0, 0.3), rel=1e-5, abs=1e-7)


def _tanh_potential():
    """PotentialShaping over 1-d observations with Phi(s) = tanh(s) (hidden 1, unit weights)."""
    shaping = PotentialShaping(obs_shape=(1,), hidden=1, transform=True)
    params = shaping.init(jax.random.key(0))
    one = jnp.ones((1, 1))
    params["potential"] = {"w1": one, "b1": jnp.zeros(1), "w2": one, "b2": jnp.zeros(1)}
    return shaping, params


def test_potential_shaping_sign_and_episode_ends():
    shaping, params = _tanh_potential()
    obs = jnp.array([[0.3], [0.3], [-1.0]])
    next_obs = jnp.array([[0.8], [0.8], [2.0]])
    reward = jnp.array([2.0, 2.0, -1.0])
    terminated = jnp.array([False, True, False])  # a truncated step is not terminated
    gamma = 0.9
    np.testing.assert_allclose(shaping.potential(params, obs), np.tanh([0.3, 0.3, -1.0]), rtol=1e-6)
    shaped = np.asarray(shaping.shape_reward(params, obs, reward, next_obs, terminated, gamma))
    expected = [
        2.0 + gamma * math.tanh(0.8) - math.tanh(0.3),  # r + gamma Phi(s') - Phi(s)
        2.0 - math.tanh(0.3),  # terminated: no future, Phi(s') dropped
        -1.0 + gamma * math.tanh(2.0) - math.tanh(-1.0),  # not terminated (e.g. truncated): kept
    ]
    np.testing.assert_allclose(shaped, expected, rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(a=st.floats(-3, 3), b=st.floats(-3, 3))
def test_monotone_reward_transform_is_strictly_increasing(a, b):
    rewards = jnp.asarray(np.arange(-500, 501, dtype=np.float32) / 50)  # rewards[500] == 0
    out = np.asarray(_monotone(jnp.float32(a), jnp.float32(b), rewards))
    assert np.isfinite(out).all()
    assert (np.diff(out) > 0).all()
    assert out[500] == 0.0  # g(0) = 0 for every a, b


@jax.jit
def _monotone(a, b, rewards):
    return monotone_transform({"a": a, "b": b}, rewards)


# --------------------------------------------------------------------------------------------
# Each learned objective trains under vmap over a population inside the inner loop
# --------------------------------------------------------------------------------------------


def _perturb(params, key, scale=0.2):
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree_util.tree_unflatten(treedef, [x + scale * jax.random.normal(k, jnp.shape(x)) for x, k in zip(leaves, keys)])


# One program per drift class: LPO shares its program with the learned value loss and the potential
# shaping (all three plug points learned at once; each member below moves one plug's parameters), so
# five objectives cost three compilations.
POPULATION_CASES = {
    "lpo+learned_value_loss+potential_shaping": lambda env: {
        "drift": LPO(hidden=16), "value_loss": LearnedValueLoss(use_target=True),
        "shaping": PotentialShaping(obs_shape=env.obs_shape, hidden=8, transform=True)},
    "talpo": lambda env: {"drift": TALPO(hidden=16)},
    "dpo": lambda env: {"drift": DPO()},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(POPULATION_CASES))
def test_objective_trains_vmapped_over_population(cartpole, case):
    plugs = POPULATION_CASES[case](cartpole)
    objectives = Objectives(**plugs)
    base = objectives.init(jax.random.key(0), plugs=tuple(plugs))
    if case == "dpo":
        members = [{"drift": {"alpha": jnp.float32(2.0), "beta": jnp.float32(0.6)}},
                   {"drift": {"alpha": jnp.float32(0.05), "beta": jnp.float32(0.05)}}]
    else:
        # member 0: every plug perturbed; member i: plug i perturbed otherwise, the rest as member 0
        first = _perturb(base, jax.random.key(1))
        members = [first] + [{**first, plug: _perturb(base[plug], jax.random.key(2 + i))} for i, plug in enumerate(plugs)]
    population = jax.tree.map(lambda *x: jnp.stack(x), *members)
    train = make_train(cartpole, TINY, objectives)
    result = jax.jit(jax.vmap(train, in_axes=(None, 0)))(jax.random.key(0), population)
    returns = np.asarray(result.returns)
    assert returns.shape == (len(members), TINY.num_updates)
    assert np.isfinite(returns).all()
    np.testing.assert_array_equal(np.asarray(result.diverged), [False] * len(members))
    # Same key, different parameters: each plug's parameters really reach the inner loop.
    for i in range(1, len(members)):
        assert not np.array_equal(returns[0], returns[i]), (case, i)


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def _saved_objectives():
    objectives = Objectives(
        drift=TALPO(hidden=8),
        value_loss=LearnedValueLoss(use_target=True, hidden=4),
        shaping=PotentialShaping(obs_shape=(2, 3), hidden=5, transform=True),
    )
    params = _perturb(objectives.init(jax.random.key(0)), jax.random.key(1), scale=0.37)
    return objectives, params


def test_save_load_round_trip_is_exact(tmp_path):
    objectives, params = _saved_objectives()
    path = tmp_path / "sub" / "objectives.json"
    save_objectives(path, objectives, params, extra={"generation": 7})
    loaded, loaded_params, extra = load_objectives(path)
    assert loaded == objectives
    assert extra == {"generation": 7}
    assert jax.tree.structure(loaded_params) == jax.tree.structure(params)
    for got, want in zip(jax.tree.leaves(loaded_params), jax.tree.leaves(params)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    # A partial dict (only the evolved plugs) and the parameter-free baselines round-trip too.
    base = Objectives(drift=DPO(alpha=1.5), value_loss=ClippedL2(clip_eps=0.1))
    save_objectives(tmp_path / "dpo.json", base, {"drift": {"alpha": jnp.float32(1.25), "beta": jnp.float32(0.5)}})
    loaded, loaded_params, _ = load_objectives(tmp_path / "dpo.json")
    assert loaded == base
    assert float(loaded_params["drift"]["alpha"]) == 1.25 and set(loaded_params) == {"drift"}


def test_corrupt_or_foreign_or_mismatched_files_raise_objective_file_error(tmp_path):
    objectives, params = _saved_objectives()
    good = tmp_path / "good.json"
    save_objectives(good, objectives, params)
    text = good.read_text()

    truncated = tmp_path / "truncated.json"
    truncated.write_text(text[: len(text) // 2])
    with pytest.raises(ObjectiveFileError, match="not valid JSON"):
        load_objectives(truncated)

    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"format": "something.else", "version": 1}))
    with pytest.raises(ObjectiveFileError, match="not a metadisco objectives file"):
        load_objectives(foreign)

    doc = json.loads(text)
    doc["params"]["drift"]["w1"]["shape"] = [8, 8]  # TA-LPO has 16 inputs
    doc["params"]["drift"]["w1"]["data"] = doc["params"]["drift"]["w1"]["data"][:64]
    mismatched = tmp_path / "mismatched.json"
    mismatched.write_text(json.dumps(doc))
    with pytest.raises(ObjectiveFileError, match="do not match"):
        load_objectives(mismatched)

    doc = json.loads(text)
    del doc["params"]["value_loss"]["w2"]
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps(doc))
    with pytest.raises(ObjectiveFileError, match="do not match"):
        load_objectives(missing)

    doc = json.loads(text)
    doc["spec"]["drift"]["name"] = "no_such_drift"
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps(doc))
    with pytest.raises(ObjectiveFileError, match="no_such_drift"):
        load_objectives(unknown)

    with pytest.raises(ObjectiveFileError, match="no objectives file"):
        load_objectives(tmp_path / "absent.json")


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # unpickling this would create the marker file
        return (open, (self.marker, "w"))


def test_loading_never_executes_code(tmp_path):
    marker = tmp_path / "executed"
    pickled = tmp_path / "objectives.pkl"
    pickled.write_bytes(pickle.dumps(_Payload(str(marker))))
    with pytest.raises(ObjectiveFileError):
        load_objectives(pickled)
    assert not marker.exists()

    # A closed-form drift whose "expression" is Python code is rejected, not run.
    objectives, params = _saved_objectives()
    path = tmp_path / "code.json"
    save_objectives(path, objectives, {})
    doc = json.loads(path.read_text())
    doc["spec"]["drift"] = {
        "plug": "drift", "name": "closed_form",
        "config": {"expression": f"__import__('pathlib').Path({str(marker)!r}).touch()"},
    }
    path.write_text(json.dumps(doc))
    with pytest.raises(ObjectiveFileError):
        load_objectives(path)
    assert not marker.exists()


def test_make_objective_unknown_name_lists_close_matches():
    with pytest.raises(ValueError, match="unknown drift objective 'lpoo'") as err:
        make_objective("drift", "lpoo")
    assert "lpo" in str(err.value).split("Did you mean")[1]
    with pytest.raises(ValueError, match="Did you mean.*clipped_l2"):
        make_objective("value_loss", "clipped-l2")
    with pytest.raises(ValueError, match="unknown plug point"):
        make_objective("policy", "lpo")
    with pytest.raises(ValueError, match="no option"):
        make_objective("drift", "dpo", gamma=1.0)
    assert make_objective("drift", "dpo", alpha=1.0) == DPO(alpha=1.0)


# --------------------------------------------------------------------------------------------
# Registry tables: every value loss, every shaping
# --------------------------------------------------------------------------------------------

VALUE_LOSSES = meta_objectives.names("value_loss")
SHAPINGS = meta_objectives.names("shaping")


@pytest.mark.parametrize("name", VALUE_LOSSES)
def test_every_value_loss_is_zero_at_the_target_and_pulls_toward_it(name):
    objective = make_objective("value_loss", name)
    k_t, k_e, k_p = jax.random.split(jax.random.key(0), 3)
    target = 10 * jax.random.normal(k_t, (512,))
    error = 5 * jax.random.normal(k_e, (512,))
    # L(v = t) = 0 for any parameters (old_value = value, as in the first epoch)
    for params in (objective.default_params(), random_params(objective, k_p, 1.0)):
        at_target = objective.value_loss(params, target, target, target)
        np.testing.assert_array_equal(at_target, 0.0)
    # at its baseline parameters the gradient step moves v toward t (dL/dv has the sign of v - t)
    params = objective.default_params()
    grad = jax.vmap(jax.grad(lambda v, t: objective.value_loss(params, v, t, v)))(target + error, target)
    assert (np.sign(np.asarray(grad)) == np.sign(np.asarray(error))).all(), name


@pytest.mark.parametrize("name", SHAPINGS)
def test_every_shaping_is_identity_at_init_and_potential_based(name):
    shaping = make_objective("shaping", name).for_env((3,))
    k_s, k_m, k_r, k_p = jax.random.split(jax.random.key(1), 4)
    gamma, steps = 0.9, 6
    reward = jax.random.normal(k_r, (steps,))
    start_end = jax.random.normal(k_s, (2, 3))
    not_done = jnp.zeros(steps, bool)
    # two trajectories from the same start to the same end through different states and rewards
    paths = [jnp.concatenate([start_end[:1], jax.random.normal(k, (steps - 1, 3)), start_end[1:]]) for k in
             jax.random.split(k_m, 2)]
    rewards = [reward, reward[::-1] * 3.0]
    discount = gamma ** jnp.arange(steps)

    init = shaping.default_params()
    shaped = shaping.shape_reward(init, paths[0][:-1], reward, paths[0][1:], not_done, gamma)
    np.testing.assert_array_equal(shaped, reward)  # zero output layer: no shaping at all

    # potential-based: the shaped return differs from the return by gamma^T Phi(s_T) - Phi(s_0),
    # which depends on the endpoints only, so returns keep their order between policies
    params = random_params(shaping, k_p, 1.0)
    gaps = []
    for path, r in zip(paths, rewards):
        shaped = shaping.shape_reward(params, path[:-1], r, path[1:], not_done, gamma)
        gaps.append(float(jnp.sum(discount * (shaped - r))))
    assert gaps[0] == pytest.approx(gaps[1], rel=1e-5, abs=1e-5)


def test_the_shaping_check_tells_a_path_dependent_shaping_from_a_potential_far_from_its_start():
    """`metadisco check`'s potential_based: a learned reward transform (monotone, not
    policy-invariant) changes the return gap with the path; a potential alone, its output layer at
    scale 100 (|Phi| in the hundreds, float32 rounding in the telescoping sum), does not."""
    from metadisco.meta_objectives.constraints import check_shaping_constraints

    transform = PotentialShaping(obs_shape=(3,), transform=True)
    params = transform.default_params()
    params["transform"] = {"a": jnp.float32(1.0), "b": jnp.float32(0.5)}
    assert [v.constraint for v in check_shaping_constraints(transform, params)] == ["potential_based"]
    potential = PotentialShaping(obs_shape=(3,))
    for seed in range(20):
        far = random_params(potential, jax.random.key(seed), 100.0)
        assert check_shaping_constraints(potential, far) == [], seed


# --------------------------------------------------------------------------------------------
# The contract: register, options, hooks
# --------------------------------------------------------------------------------------------


def test_register_refuses_a_misspelled_plug_method_and_a_reused_name():
    from dataclasses import dataclass

    from metadisco.meta_objectives import MetaObjective, register

    with pytest.raises(TypeError, match="no method 'drift'.*'drfit'"):
        @register
        @dataclass(frozen=True)
        class Typo(MetaObjective):
            plug = "drift"
            name = "typo"
            title = "typo"

            def init(self, key):
                return {}

            def drfit(self, params, ratio, advantage, progress):
                return ratio * 0

    with pytest.raises(TypeError, match="own `name`"):
        @register
        @dataclass(frozen=True)
        class Copy(LPO):
            title = "copy"

    with pytest.raises(TypeError, match="option"):
        @register
        @dataclass(frozen=True)
        class BadOption(MetaObjective):
            sizes: list = None
            plug = "value_loss"
            name = "bad_option"
            title = "bad"

            def init(self, key):
                return {}

            def value_loss(self, params, value, target, old_value):
                return value
    assert "typo" not in meta_objectives.names("drift")


@pytest.mark.parametrize("decorated", [False, True])
def test_every_objective_is_a_frozen_dataclass_by_itself_and_a_decorator_changes_nothing(decorated):
    """MetaObjective.__init_subclass__ makes the dataclass; an explicit @dataclass(frozen=True)
    runs a second pass that must build the same fields (metadata included) and not fail."""
    import dataclasses

    from metadisco.meta_objectives import MetaObjective, check_contract
    from metadisco.meta_objectives.base import FROM_ENV

    class Sized(MetaObjective):
        plug = "shaping"
        name = "sized_thing"
        scale: float = 2.0
        obs_shape: tuple[int, ...] = dataclasses.field(default=(), metadata={FROM_ENV: True})

        def init(self, key):
            return {}

        def shape_reward(self, params, obs, reward, next_obs, terminated, gamma):
            return self.scale * reward

    if decorated:
        Sized = dataclasses.dataclass(frozen=True)(Sized)
    assert check_contract(Sized) is Sized and Sized.title == "sized thing"
    assert [(f.name, dict(f.metadata)) for f in dataclasses.fields(Sized)] == [
        ("scale", {}), ("obs_shape", {FROM_ENV: True})]
    assert Sized.options() == {"scale": (float, 2.0)}  # obs_shape is the environment's
    obj = Sized(scale=3.0, obs_shape=(4,))
    assert obj == Sized(3.0, (4,)) and hash(obj) == hash(Sized(3.0, (4,))) and obj != Sized()
    with pytest.raises(dataclasses.FrozenInstanceError):
        obj.scale = 1.0
    assert dataclasses.replace(obj, scale=1.0).scale == 1.0 and repr(Sized()).endswith(".Sized(scale=2.0, obs_shape=())")


def test_options_are_checked_with_close_matches_and_types():
    with pytest.raises(ValueError, match="no option 'hiden'. Did you mean hidden"):
        make_objective("drift", "lpo", hiden=8)
    with pytest.raises(ValueError, match="option hidden must be int"):
        make_objective("drift", "lpo", hidden="8")
    with pytest.raises(ValueError, match="environment sets it"):
        meta_objectives.check_options("shaping", "potential", {"obs_shape": (4,)}, settable=True)
    assert set(LPO.options()) == {"hidden", "clip_eps", "offset", "progress_features"}
    assert "obs_shape" not in PotentialShaping.options()
    assert make_objective("drift", "dpo", alpha=1) == DPO(alpha=1.0)


def test_hooks_answer_for_the_objective():
    from metadisco.meta_objectives import ClosedFormDrift

    assert TALPO().depends_on_progress and not LPO().depends_on_progress
    assert ClosedFormDrift("p*(r - 1)**2").depends_on_progress and not ClosedFormDrift().depends_on_progress
    assert LPO().drawn_when_fixed and ClosedFormDrift().drawn_when_fixed
    assert not PPOClip().drawn_when_fixed and not DPO().drawn_when_fixed
    assert (LPO().title, TALPO().title, ClosedFormDrift().title) == ("learned (LPO)", "learned (TA-LPO)", "closed form")
    objectives = Objectives(shaping=PotentialShaping()).for_env((4,))
    assert objectives.shaping.obs_shape == (4,) and objectives.reads_observations
    assert objectives.incompatibility((4,), "CartPole-v1") is None
    assert "shape (4,)" in objectives.incompatibility((6,), "Acrobot-v1")
    assert Objectives().incompatibility((6,)) is None


@pytest.mark.parametrize("formula, constants", [
    ("ppo_clip", {"eps": 0.2}), ("ppo_clip", {"eps": 0.3}),
    ("dpo", {"alpha": 2.0, "beta": 0.6}), ("dpo", {"alpha": 1.3, "beta": 0.9}),
])
def test_baseline_functions_equal_their_expressions(formula, constants):
    """PPO-clip and DPO are plain jnp functions beside their expression strings: on a grid of
    (r, A), the trust region's edges, r = 1 and A = 0 included, each function gives the compiled
    expression's values and gradients (d/dr, d/dA, and d/dalpha, d/dbeta, traced)."""
    from metadisco.meta_objectives.expressions import compile_function
    from metadisco.meta_objectives.formulas import DPO_FORMULA, PPO_CLIP_FORMULA, dpo_drift, ppo_clip_drift

    f, fn = {"ppo_clip": (PPO_CLIP_FORMULA, ppo_clip_drift), "dpo": (DPO_FORMULA, dpo_drift)}[formula]
    assert f.function is fn and f.constants == tuple(constants)
    compiled = compile_function(f.template, f.kind, f.constants)
    edges = [1.0, 1.0 - constants.get("eps", 0.2), 1.0 + constants.get("eps", 0.2)]
    r = np.concatenate([np.linspace(0.05, 3.0, 120), edges]).astype(np.float32)
    a = np.concatenate([np.linspace(-4.0, 4.0, 81), [0.0]]).astype(np.float32)
    R, A = (x.ravel() for x in np.meshgrid(r, a))
    consts = {k: jnp.float32(v) for k, v in constants.items()}

    def values(g):
        return np.asarray(jax.jit(lambda r, a, c: g(r, a, 0.0, **c))(R, A, consts))

    def grads(g):
        return jax.jit(jax.vmap(jax.grad(lambda r, a, c: g(r, a, 0.0, **c), argnums=(0, 1, 2)),
                                in_axes=(0, 0, None)))(R, A, consts)

    np.testing.assert_array_equal(values(f), values(compiled))
    np.testing.assert_array_equal(f(R, A, **constants), compiled(R, A, **constants))  # python floats, eager
    assert f(R[:3], A[:3], **constants).dtype == jnp.float32
    assert f(jnp.float32(1.5), A, **constants).shape == A.shape
    for mine, want in zip(jax.tree.leaves(grads(f)), jax.tree.leaves(grads(compiled)), strict=True):
        np.testing.assert_allclose(np.asarray(mine), np.asarray(want), rtol=1e-5, atol=1e-8)
    assert np.abs(values(f)).max() > 0.1  # not a grid where both are 0


def test_formulas_are_written_once():
    """PPO-clip and DPO: the objective, its closed form and its exported module are one formula."""
    from metadisco.meta_objectives import ClosedFormDrift
    from metadisco.meta_objectives.expressions import to_jax_module_source
    from metadisco.meta_objectives.formulas import dpo_expression, ppo_clip_expression

    k_r, k_a = jax.random.split(jax.random.key(2))
    ratio = jnp.exp(0.5 * jax.random.normal(k_r, (2048,)))
    adv = 2 * jax.random.normal(k_a, (2048,))
    for objective, expression in ((PPOClip(clip_eps=0.3), ppo_clip_expression(0.3)),
                                  (DPO(alpha=1.5, beta=0.4), dpo_expression(1.5, 0.4))):
        want = np.asarray(objective.drift(objective.default_params(), ratio, adv, 0.0))
        np.testing.assert_allclose(ClosedFormDrift(expression).drift({}, ratio, adv, 0.0), want, rtol=1e-6, atol=1e-7)
        namespace: dict = {}
        exec(to_jax_module_source(expression), namespace)
        np.testing.assert_array_equal(namespace["drift"](ratio, adv), ClosedFormDrift(expression).drift({}, ratio, adv, 0.0))


# --------------------------------------------------------------------------------------------
# Options from an experiment file and the command line; old run directories
# --------------------------------------------------------------------------------------------


def test_options_from_an_experiment_file_reach_the_objective(tmp_path):
    from metadisco.config import resolve, run_plan
    from metadisco.core.errors import ConfigError
    from metadisco.engine import MetaTrainer

    path = tmp_path / "exp.toml"
    path.write_text('[inner]\ntotal_timesteps = 2048\n[objectives]\nevolve = ["value_loss"]\n'
                    '[objectives.value_loss]\nname = "learned"\nuse_target = true\nhidden = 4\n')
    cfg = resolve(str(path))
    assert run_plan(cfg).objectives.for_env((4,)).value_loss == LearnedValueLoss(hidden=4, use_target=True)
    trainer = MetaTrainer(run_plan(cfg))
    assert trainer.objectives.value_loss == LearnedValueLoss(hidden=4, use_target=True)
    assert trainer.initial_solution["value_loss"]["w1"].shape == (4, 4)  # 4 features with use_target

    # the command line: a string for a section is the name; options in either order
    for overrides in (["objectives.drift=dpo", "objectives.drift.alpha=1.5"],
                      ["objectives.drift.alpha=1.5", "objectives.drift=dpo"]):
        assert run_plan(resolve(None, overrides)).objectives.for_env((4,)).drift == DPO(alpha=1.5)
    # naming another objective drops the options given for the previous one
    assert resolve(str(path), ["objectives.value_loss=l2", "objectives.evolve=drift"]).objectives.value_loss.options == ()
    with pytest.raises(ConfigError, match="objectives.value_loss=l2 has no parameters to evolve"):  # nothing left
        resolve(str(path), ["objectives.value_loss=l2"])


@pytest.mark.parametrize("override, message", [
    ("objectives.drift.hiden=8", "no option 'hiden'. Did you mean hidden"),
    ("objectives.drift.hidden=abc", "objectives.drift.hidden: cannot read 'abc' as int"),
    ("objectives.drift=lpoo", "Did you mean lpo"),
    ("objectives.shaping=potential objectives.shaping.obs_shape=4", "environment sets it"),
    ("objectives.drift=closed_form objectives.drift.expression=os(r)", "not an allowed function"),
])
def test_bad_objective_options_fail_before_compute(override, message):
    from metadisco.config import resolve
    from metadisco.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve(None, override.split())


def test_potential_reads_the_observation_in_its_scale_and_unit():
    """obs_scale divides each observation number before the network, scale multiplies Phi: the
    potential equals scale x the same network on obs / obs_scale; a length that does not match
    the environment is named before any compute, and the constraint checks run at its size."""
    from metadisco.meta_objectives.constraints import check_objective

    plain = PotentialShaping().for_env((2,))
    scaled = PotentialShaping(obs_scale=(1.0, 0.07), scale=30.0).for_env((2,))
    params = perturbed_params(plain, jax.random.key(1), 1.0)  # a nonzero output layer
    obs = jnp.array([[-0.5, 0.035], [0.4, -0.07]])
    np.testing.assert_allclose(scaled.potential(params, obs),
                               30.0 * plain.potential(params, obs / jnp.array([1.0, 0.07])), rtol=1e-5)
    assert scaled.incompatibility((2,), "MountainCar-v0") is None
    # unsized (a config's), the scale is the user's to fix; sized (a run's), the observations are what differ
    assert "obs_scale" in PotentialShaping(obs_scale=(1.0, 0.07)).incompatibility((4,), "CartPole-v1")
    assert "built for observations of shape (2,)" in scaled.incompatibility((4,), "CartPole-v1")
    assert check_objective(PotentialShaping(obs_scale=(1.0, 0.07), scale=30.0)) == []
    with pytest.raises(ValueError, match="obs_scale must be positive"):
        PotentialShaping(obs_scale=(1.0, 0.0))


def test_a_potential_sized_for_other_observations_fails_before_compute():
    from metadisco.config import resolve, validate

    with pytest.raises(Exception, match="obs_scale = \\[1.0, 0.07\\].*CartPole-v1") as error:
        validate(resolve("rediscover_shaping", ["envs=CartPole-v1"]))
    assert type(error.value).__name__ == "ConfigError"


# --------------------------------------------------------------------------------------------
# Families that contain PPO exactly (Objectives.params_reproducing): evaluate trains PPO through them
# --------------------------------------------------------------------------------------------


EXPRESSING_PPO = {("drift", "lpo"), ("drift", "talpo"), ("drift", "drift_mix"), ("value_loss", "learned_clipped"),
                  ("value_loss", "value_loss_mix")}


@pytest.mark.parametrize("plug", ["drift", "value_loss"])
def test_a_family_that_says_it_contains_ppo_computes_ppo_bit_for_bit(plug):
    """Every registered objective is asked; those that answer with parameters compute PPO's own
    plug (PPO-clip; the clipped value loss) exactly, values and gradients, at those parameters."""
    ppo = getattr(Objectives(), plug)
    k = jax.random.split(jax.random.key(0), 4)
    x = jnp.exp(0.5 * jax.random.normal(k[0], (512,)))  # a ratio, or a value
    y = jax.random.normal(k[1], (512,))  # an advantage, or a target
    z = jax.random.uniform(k[2], (512,))  # progress, or the old value
    answered = set()
    for name in meta_objectives.names(plug):
        obj = meta_objectives.make_objective(plug, name)
        params = obj.params_reproducing(ppo)
        if params is None:
            continue
        answered.add((plug, name))
        method = getattr(obj, meta_objectives.PLUG_METHODS[plug])
        reference = getattr(ppo, meta_objectives.PLUG_METHODS[plug])
        np.testing.assert_array_equal(method(params, x, y, z), reference({}, x, y, z))
        grad = jax.grad(lambda a: jnp.sum(method(params, a, y, z)))(x)
        np.testing.assert_array_equal(grad, jax.grad(lambda a: jnp.sum(reference({}, a, y, z)))(x))
    assert answered == {e for e in EXPRESSING_PPO if e[0] == plug} | {(plug, ppo.name)}
    for drift in (meta_objectives.make_objective("drift", "lpo", clip_eps=0.3), meta_objectives.make_objective("drift", "dpo")):
        assert Objectives(drift=drift).params_reproducing(Objectives()) is None


class PushesAwayNearThree(meta_objectives.MetaObjective):
    """L = e^2/2 - 5 c^2 e^2 exp(-(|e| - 3)^2 / 2): L2 at c = 0 (its start); at c = 1 it pushes v
    away from its target near |e| = 3."""

    plug = "value_loss"
    name = "pushes_away_near_three"

    def init(self, key):
        return {"c": jnp.float32(0.0)}

    def value_loss(self, params, value, target, old_value):
        e = value - target
        return e**2 / 2 - 5 * params["c"] ** 2 * e**2 * jnp.exp(-((jnp.abs(e) - 3) ** 2) / 2)


def test_a_value_loss_that_pushes_away_at_its_found_parameters_fails_its_checks():
    from metadisco.meta_objectives.constraints import check_evolved

    loss = PushesAwayNearThree()
    assert check_objective(loss) == []  # at its start it is L2
    found = {"c": jnp.float32(1.0)}
    assert [v.constraint for v in check_objective(loss, found)] == ["pulls_toward_target"]
    evolved = check_evolved(Objectives(value_loss=loss), {"drift": {}, "value_loss": found, "shaping": {}},
                            ["value_loss"])
    assert [v.constraint for v in evolved] == ["pulls_toward_target"]
    assert evolved[0].plug == "value_loss" and evolved[0].where is None  # what was found, not "the given parameters"


def test_a_value_loss_that_turns_only_beyond_the_old_grid_is_caught():
    # pulls toward the target up to |e| = 20, away beyond: the errors a CartPole critic makes reach 75
    def fn(e, t):  # slope e - e^3 / 400: toward the target for |e| < 20, away beyond
        return e**2 / 2 - e**4 / 1600

    assert [v.constraint for v in check_value_loss_constraints(fn)] == ["pulls_toward_target"]
    assert check_value_loss_constraints(fn, e_wide=0) == []  # what the check saw before: |e| <= 10


class BiasedShaping(meta_objectives.MetaObjective):
    """A plug-in shaping r + b whose init draws b at random: not the identity at any start
    (named tests.test_objectives:BiasedShaping)."""

    plug = "shaping"
    name = "biased_shaping"

    def init(self, key):
        return {"b": jax.random.uniform(key, (), minval=0.5, maxval=1.5)}

    def shape_reward(self, params, obs, reward, next_obs, terminated, gamma):
        return reward + params["b"]


@pytest.mark.parametrize("plug, name", [(plug, name) for plug in ("drift", "value_loss", "shaping")
                                        for name in meta_objectives.names(plug)])
def test_where_a_run_starts_has_one_definition(plug, name):
    """A plug's start at seed s is its init with its share of the run's START stream, whichever
    way it is asked for: the objective alone or the objectives together (the engine: below);
    default_params is seed 0's start."""
    from metadisco.core import streams
    from metadisco.meta_objectives.base import same_params

    objective = make_objective(plug, name).for_env((3,))
    objectives = Objectives(**{plug: objective})
    for seed in (0, 3):
        assert same_params(objective.start_params(seed), objectives.start_params(seed)[plug])
        assert same_params(objectives.start_params(seed), objectives.init(streams.key(seed, streams.Stream.START)))
    assert same_params(objective.default_params(), objective.start_params(0))
    assert same_params(objectives.default_params(), objectives.start_params(0))


def test_a_start_is_checked_as_initial_parameters_whatever_the_seed():
    """The checks demanded at initial parameters (here the identity at init) hold a run's start to
    them at any seed: train refuses such a start, and only parameters the checks are not told are
    a start, and that differ from seed 0's, are checked as given ones."""
    from metadisco.config import ObjectivesConfig, RunConfig, run_plan, validate
    from metadisco.engine import MetaTrainer
    from metadisco.meta_objectives.base import same_params
    from metadisco.meta_objectives.constraints import ConstraintsViolated
    from metadisco.train import refuse_invalid_start

    objective = BiasedShaping()
    start = objective.start_params(3)
    assert [v.constraint for v in check_objective(objective, start, initial=True)] == ["identity_at_init"]
    assert check_objective(objective, start) == []  # given parameters need not be the identity
    assert [v.constraint for v in check_objective(objective)] == ["identity_at_init"]  # seed 0's start
    cfg = validate(RunConfig(seed=3, objectives=ObjectivesConfig(shaping="tests.test_objectives:BiasedShaping",
                                                                 evolve=("shaping",))))
    trainer = MetaTrainer(run_plan(cfg))
    assert same_params(trainer.default_params, trainer.objectives.start_params(3))  # where the engine starts
    with pytest.raises(ConstraintsViolated, match="identity_at_init"):
        refuse_invalid_start(trainer)

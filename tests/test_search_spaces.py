"""Search spaces made for small budgets: the closed-form drift families, the learned
value loss from PPO's clipped loss, and the label on the reward transform.

What a user relies on: every member the ES proposes is a valid drift (not only the start), the
families start exactly at the baseline they name (in a full PPO run, bit for bit), and the member
evolution found is its own closed form.
"""

import functools

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from metadisco import meta_objectives
from metadisco.inner_loops import make_env, make_train
from metadisco.meta_objectives import (
    DPO,
    ClippedL2,
    ClosedFormDrift,
    DPOSchedule,
    DriftMix,
    LearnedClippedValueLoss,
    LearnedValueLoss,
    Objectives,
    PotentialShaping,
    PPOClip,
    ValueLossMix,
)
from metadisco.meta_objectives.constraints import check_drift_constraints, check_objective
from tests.helpers import TINY_PPO as TINY

FROM_SCRATCH = DriftMix(ppo_weight=0.0, terms=("ppo_clip(0.2)", "(r-1)^2|A|"), schedule=False)  # the demo's space
FAMILIES = {"dpo_schedule": DPOSchedule(), "drift_mix": DriftMix(), "drift_mix(eps=0.3)": DriftMix(clip_eps=0.3),
            "drift_mix(from scratch)": FROM_SCRATCH}
ES_SCALES = (0.01, 0.05, 0.3, 1.0, 10.0)  # sigma of a member around its mean; the larger ones stand for a mean that moved
N = 32


def es_member(objective, key, scale):
    """What an evolution strategy proposes: the mean (here the initial parameters) plus Gaussian
    noise of std `scale` on every parameter (additive, as OpenES / SNES / CMA-ES sample)."""
    params = objective.default_params()
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(treedef, [x + scale * jax.random.normal(k, jnp.shape(x)) for x, k in zip(leaves, keys)])


def test_the_families_are_registered_and_picked_up_by_the_registry_tests():
    drifts, losses = meta_objectives.names("drift"), meta_objectives.names("value_loss")
    assert {"dpo_schedule", "drift_mix"} <= set(drifts)  # tests/test_objectives.py parametrises over these
    assert "learned_clipped" in losses
    assert DPOSchedule.options() == {"alpha": (float, 2.0), "beta": (float, 0.6)}
    assert sum(np.size(x) for x in jax.tree.leaves(DriftMix().default_params())) == 40  # tens, not a thousand
    assert sum(np.size(x) for x in jax.tree.leaves(DPOSchedule().default_params())) == 4


def _moves_with_progress(objective, params, ratio, adv) -> bool:
    """Whether the drift at `params` differs anywhere on (ratio, adv) between progress 0 and 1."""
    return not np.array_equal(objective.drift(params, ratio, adv, 0.0), objective.drift(params, ratio, adv, 1.0))


@pytest.mark.parametrize("name", FAMILIES)
def test_depends_on_progress_is_true_exactly_when_members_change_over_training(name):
    """Analysis draws a drift over training progress, and distils it over p, where
    `depends_on_progress` says so: it must hold exactly where the members' drift moves with p
    (the weights of a mix with schedule=False do not)."""
    objective = FAMILIES[name]
    k_r, k_a = jax.random.split(jax.random.key(2))
    ratio, adv = jnp.exp(0.5 * jax.random.normal(k_r, (512,))), 2.0 * jax.random.normal(k_a, (512,))
    moves = [_moves_with_progress(objective, es_member(objective, jax.random.key(i), 1.0), ratio, adv) for i in range(3)]
    assert objective.depends_on_progress == any(moves), (name, moves)


@functools.cache
def member_checks(name):
    """Jitted (seed, scale, r, A, progress) -> (D, D(1, A), dD/dr at 1) for an ES member."""
    objective = FAMILIES[name]

    @jax.jit
    def checks(seed, scale, ratio, adv, progress):
        params = es_member(objective, jax.random.key(seed), scale)
        ones = jnp.ones_like(adv)
        slope = jax.vmap(jax.grad(lambda r, a: objective.drift(params, r, a, progress)))(ones, adv)
        return objective.drift(params, ratio, adv, progress), objective.drift(params, ones, adv, progress), slope

    return checks


def _f32(lo, hi):
    return arrays(np.float32, (N,), elements=st.floats(float(np.float32(lo)), float(np.float32(hi)), width=32))


@pytest.mark.parametrize("name", FAMILIES)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.sampled_from(ES_SCALES), ratio=_f32(0.05, 5.0), adv=_f32(-5.0, 5.0),
       progress=st.floats(0.0, 1.0, width=32).map(np.float32))
def test_every_member_the_es_proposes_is_a_valid_drift(name, seed, scale, ratio, adv, progress):
    drift, at_one, slope = member_checks(name)(seed, scale, ratio, adv, progress)
    assert np.isfinite(drift).all(), name
    assert (np.asarray(drift) >= 0).all(), f"{name}: D < 0 at a member"
    np.testing.assert_allclose(at_one, 0.0, atol=1e-6, err_msg=f"{name}: D(1, A) != 0")
    np.testing.assert_allclose(slope, 0.0, atol=1e-6, err_msg=f"{name}: dD/dr(1, A) != 0")


@pytest.mark.parametrize("name", FAMILIES)
def test_members_pass_the_constraint_checker_including_no_kink(name):
    objective = FAMILIES[name]
    assert check_objective(objective) == []
    for i, scale in enumerate((0.05, 1.0, 10.0)):
        params = es_member(objective, jax.random.key(100 + i), scale)
        assert check_drift_constraints(objective, params) == [], (name, scale)


@pytest.mark.parametrize("family, baseline", [(DriftMix(), PPOClip()), (DriftMix(clip_eps=0.3), PPOClip(clip_eps=0.3)),
                                              (DPOSchedule(), DPO()), (DPOSchedule(alpha=1.0, beta=2.0), DPO(1.0, 2.0))])
def test_a_family_at_its_initial_parameters_is_its_baseline_exactly(family, baseline):
    k_r, k_a = jax.random.split(jax.random.key(0))
    ratio, adv = jnp.exp(jax.random.normal(k_r, (4096,))), 3.0 * jax.random.normal(k_a, (4096,))
    for progress in (0.0, 0.37, 1.0):
        np.testing.assert_array_equal(family.drift(family.default_params(), ratio, adv, progress),
                                      baseline.drift(baseline.default_params(), ratio, adv, progress))
    # ... and so is its closed form, which is the baseline's own expression
    assert ClosedFormDrift(family.closed_form(family.default_params())).drift({}, 1.3, 2.0, 0.5) == \
        pytest.approx(float(baseline.drift(baseline.default_params(), 1.3, 2.0, 0.5)))


@pytest.mark.parametrize("name", FAMILIES)
def test_the_member_is_its_own_closed_form(name):
    objective = FAMILIES[name]
    k_r, k_a = jax.random.split(jax.random.key(1))
    ratio, adv = jnp.exp(0.5 * jax.random.normal(k_r, (2048,))), 2.0 * jax.random.normal(k_a, (2048,))
    for i, scale in enumerate((0.05, 1.0)):
        params = es_member(objective, jax.random.key(i), scale)
        expression = objective.closed_form(params)
        closed = ClosedFormDrift(expression)  # parses under the safe grammar
        # it reads p exactly when the member changes with p (analysis plots and distils over p by this)
        assert closed.depends_on_progress == _moves_with_progress(objective, params, ratio, adv), expression
        for progress in (0.0, 0.5, 1.0):
            np.testing.assert_allclose(closed.drift({}, ratio, adv, progress), objective.drift(params, ratio, adv, progress),
                                       rtol=1e-5, atol=1e-5, err_msg=f"{name} at p={progress}: {expression}")


@pytest.mark.parametrize("plug, name", [(plug, name) for plug in ("drift", "value_loss")
                                         for name in meta_objectives.names(plug)])
def test_every_closed_form_hook_is_its_objective(plug, name):
    """Where an objective answers closed_form(params), the expression computes what it computes
    (export writes that string); None where it has none (a network, a loss reading the old value)."""
    objective = meta_objectives.make_objective(plug, name)
    params = objective.default_params()
    expression = objective.closed_form(params)
    if expression is None:
        # (clipped_l2 and value_loss_mix at its start read the old value, which an expression cannot)
        assert objective.learned or name in ("clipped_l2", "value_loss_mix"), f"{plug} {name} should have a closed form"
        return
    closed = meta_objectives.make_objective(plug, "closed_form", expression=expression)
    k1, k2 = jax.random.split(jax.random.key(4))
    x, y = jnp.exp(0.5 * jax.random.normal(k1, (512,))), 2.0 * jax.random.normal(k2, (512,))
    if plug == "drift":
        got, want = closed.drift({}, x, y, 0.5), objective.drift(params, x, y, 0.5)
    else:
        got, want = closed.value_loss({}, y, x, y), objective.value_loss(params, y, x, y)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=expression)


def test_a_mix_from_scratch_starts_at_no_drift_and_spans_what_it_names():
    """ppo_weight=0 is D = 0 (the plain surrogate r A); `terms` picks the terms, `schedule=False`
    one constant weight per term and sign of A (4 parameters for two terms)."""
    params = FROM_SCRATCH.default_params()
    assert jax.tree.map(jnp.shape, params) == {"start": (2, 2)} and not FROM_SCRATCH.depends_on_progress
    ratio = jnp.exp(jnp.linspace(-1, 1, 101))
    assert float(jnp.abs(FROM_SCRATCH.drift(params, ratio, 1.0, 0.3)).max()) == 0.0
    assert FROM_SCRATCH.closed_form(params) == "0"
    weighted = {"start": params["start"].at[0, 0].set(1.0)}  # PPO-clip's term for A >= 0 only
    np.testing.assert_array_equal(FROM_SCRATCH.drift(weighted, ratio, 2.0, 0.0), PPOClip().drift({}, ratio, 2.0, 0.0))
    assert float(jnp.abs(FROM_SCRATCH.drift(weighted, ratio, -2.0, 0.0)).max()) == 0.0
    with pytest.raises(ValueError, match="the terms are"):
        DriftMix(terms=("no such term",))
    with pytest.raises(ValueError, match="ppo_weight"):
        DriftMix(terms=("(r-1)^2|A|",))  # PPO-clip's weight 1 on a term left out


def test_value_loss_mix_starts_at_ppo_and_is_its_closed_form_once_it_leaves_the_squared_loss():
    from metadisco.meta_objectives import ClosedFormValueLoss, ValueLossMix
    from metadisco.meta_objectives.value_loss import clipped_l2

    mix = ValueLossMix(version=2)  # sparsemax: a member can leave PPO's loss entirely
    k1, k2 = jax.random.split(jax.random.key(7))
    value, target = 3.0 * jax.random.normal(k1, (1024,)), 3.0 * jax.random.normal(k2, (1024,))
    old = value + 0.5 * jax.random.normal(k1, (1024,))
    np.testing.assert_array_equal(mix.value_loss(mix.default_params(), value, target, old),
                                  clipped_l2(value, target, old, 0.2))  # PPO's loss, bit for bit
    assert mix.closed_form(mix.default_params()) is None  # it reads v_old
    robust = {"scores": jnp.asarray([2.5, 2.0])}  # sparsemax([1, 2.5, 2]) = [0, 0.75, 0.25]
    closed = ClosedFormValueLoss(mix.closed_form(robust))
    np.testing.assert_allclose(closed.value_loss({}, value, target, old), mix.value_loss(robust, value, target, old),
                               rtol=1e-5, atol=1e-6)
    slope = jax.vmap(jax.grad(lambda v: mix.value_loss(robust, v, 0.0, v)))(jnp.asarray([10.0, 100.0]))
    assert float(jnp.abs(slope).max()) <= 1.0 + 1e-6  # bounded: Huber's slope 1, log(1+e^2)'s <= 1
    assert mix.describe(robust) == "0.75*huber(1) + 0.25*log(1+e^2)"
    # the weights are a point of the simplex for any scores: the loss never vanishes
    for scores in ([-50.0, -50.0], [0.3, -0.2], [40.0, 41.0]):
        w = np.asarray(mix.weights({"scores": jnp.asarray(scores)}))
        assert (w >= 0).all() and w.sum() == pytest.approx(1.0), (scores, w)


def test_value_loss_mix_3_starts_at_ppo_and_moves_weight_with_every_score():
    from metadisco.meta_objectives.value_loss import clipped_l2

    mix = ValueLossMix()
    assert mix.version == 3 and [name for name, _ in mix.terms] == ["clipped_l2", "huber(1)", "log(1+e^2)", "l2"]
    value, target = 3.0 * jax.random.normal(jax.random.key(1), (256,)), jnp.zeros(256)
    np.testing.assert_array_equal(mix.value_loss(mix.default_params(), value, target, value + 1.0),
                                  clipped_l2(value, target, value + 1.0, 0.2))  # PPO's loss, bit for bit
    np.testing.assert_allclose(mix.weights({"scores": jnp.asarray([3.0, -1.0])}), [0.2, 0.6, 0.0, 0.2])
    assert mix.describe({"scores": jnp.asarray([3.0, -1.0])}) == "0.2*clipped_l2 + 0.6*huber(1) + 0.2*l2"
    for scores in ([-50.0, -50.0], [0.3, -0.2], [40.0, 41.0]):
        w = np.asarray(mix.weights({"scores": jnp.asarray(scores)}))
        assert (w > 0).any() and (w >= 0).all() and w.sum() == pytest.approx(1.0) and w[0] > 0, (scores, w)


VALID_FOR_EVERY_MEMBER = [(plug, name) for plug in meta_objectives.PLUGS for name in meta_objectives.names(plug)
                          if meta_objectives.make_objective(plug, name).valid_for_every_member]


def test_the_search_spaces_that_claim_validity_include_every_family():
    assert {("drift", "dpo_schedule"), ("drift", "drift_mix"), ("value_loss", "value_loss_mix"),
            ("shaping", "potential")} <= set(VALID_FOR_EVERY_MEMBER)


@pytest.mark.parametrize("plug, name", VALID_FOR_EVERY_MEMBER)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.sampled_from((0.1, 1.0, 10.0, 100.0)))
@example(seed=42703, scale=100.0)  # a potential in the hundreds: float32 rounding, not a path dependence
def test_every_member_of_a_space_that_claims_validity_passes_its_plugs_checks(plug, name, seed, scale):
    """Parameters drawn around the start and far from it (scale 100: a mean that wandered): every
    constraint `metadisco check` demands of an evolved objective holds, so no verdict can call a
    member of these spaces DEGENERATE."""
    objective = meta_objectives.make_objective(plug, name)
    objective = objective.for_env(objective.observation_shape() or (3,))
    assert check_objective(objective, es_member(objective, jax.random.key(seed), scale)) == []


def family_outputs(objective, params) -> np.ndarray:
    """The objective's values on a grid of its inputs: a drift's D(r, A, p), a value loss's L(v, t, v_old)."""
    if objective.plug == "drift":
        r, a, p = np.meshgrid(np.linspace(0.5, 1.6, 12), [-2.0, -0.5, 0.5, 2.0], [0.0, 0.5, 1.0], indexing="ij")
        return np.asarray(objective.drift(params, jnp.asarray(r), jnp.asarray(a), jnp.asarray(p)))
    v, t = np.meshgrid(np.linspace(-20, 20, 41), [-3.0, 0.0, 3.0], indexing="ij")
    return np.asarray(objective.value_loss(params, jnp.asarray(v), jnp.asarray(t), jnp.asarray(v + 1.0)))


def flat_parameters(objective, params, step=0.05) -> list[int]:
    """The parameters (flat indices) that neither a step up nor a step down moves: where a
    population differs only in them, every member trains the same objective."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    base = family_outputs(objective, params)
    return [i for i in range(flat.size)
            if all(np.array_equal(family_outputs(objective, unravel(flat.at[i].add(d))), base) for d in (step, -step))]


@pytest.mark.parametrize("objective", [DriftMix(), DriftMix(ppo_weight=0.0, schedule=False), ValueLossMix()],
                         ids=["drift_mix", "drift_mix_from_zero", "value_loss_mix"])
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.sampled_from((0.0, 0.3, 3.0, 30.0)))
def test_the_families_have_no_flat_region(objective, seed, scale):
    """Wherever the ES mean is (the start, near it, far from it, a vertex), a step of any
    parameter changes the objective, so no population collapses onto one objective."""
    assert flat_parameters(objective, es_member(objective, jax.random.key(seed), scale)) == []


def test_the_earlier_versions_had_the_flat_regions_their_successors_remove():
    sparsemax = ValueLossMix(version=2)
    assert flat_parameters(sparsemax, {"scores": jnp.asarray([-1.0, -2.0])}) == [0, 1]  # PPO's loss throughout
    assert flat_parameters(sparsemax, {"scores": jnp.asarray([3.0, -1.0])}) == [0, 1]  # a vertex: Huber alone
    relu = DriftMix(version=1)
    dead = {k: v - 0.5 for k, v in relu.default_params().items()}  # every weight but PPO-clip's below 0
    assert len(flat_parameters(relu, dead)) == 36  # all but PPO-clip's four
    assert flat_parameters(DriftMix(), dead) == []


def test_the_first_value_loss_mix_is_kept_for_its_runs_and_its_dead_zone_is_caught():
    """version = 1 (relu weights) resumes the runs made with it; its members with every weight
    <= 0 (the demo's ES mean once) are a loss that is 0 everywhere, which the checks name."""
    from metadisco.meta_objectives import ValueLossMix

    old = ValueLossMix(version=1)
    assert not old.valid_for_every_member
    dead = {"weights": jnp.asarray([-0.72, -0.78, -0.33])}
    [violation] = check_objective(old, dead)
    assert violation.constraint == "trains_the_critic" and "0 everywhere" in violation.message
    with pytest.raises(ValueError, match="version 4 does not exist"):
        ValueLossMix(version=4)


def test_closed_forms_are_readable():
    # weights that are 0 are left out; progress dependence reads as start + slope * p
    mix = DriftMix()
    params = mix.default_params()
    params = {"start": params["start"].at[6, 0].set(0.5), "end": params["end"].at[6, 0].set(1.5)}
    expression = mix.closed_form(params)
    assert expression.count("Piecewise") == 1 and "(0.5 + 1.0*p)*" in expression, expression
    params = {"start": params["start"].at[6, 0].set(0.0), "end": params["end"]}
    assert "+ 1.5*p*Piecewise" in mix.closed_form(params)
    assert "log(r)" not in expression  # the terms at weight 0 are not written
    assert mix.closed_form(mix.default_params()) == PPOClip().closed_form({})
    schedule = DPOSchedule()
    assert schedule.closed_form({"log_alpha": jnp.float32([0.0, np.log(2.0)]), "log_beta": jnp.zeros(2)}).count("exp(") == 2


# --------------------------------------------------------------------------------------------
# Value loss: from PPO's own clipped loss, symmetric changes as well as asymmetric ones
# --------------------------------------------------------------------------------------------


def test_learned_clipped_value_loss_at_init_is_ppos_clipped_loss_exactly():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    value, target, old = (10 * jax.random.normal(k, (4096,)) for k in (k1, k2, k3))
    for objective in (LearnedClippedValueLoss(), LearnedClippedValueLoss(use_target=True, clip_eps=0.5)):
        for seed in range(2):
            params = objective.init(jax.random.key(seed))
            np.testing.assert_array_equal(objective.value_loss(params, value, target, old),
                                          ClippedL2(objective.clip_eps).value_loss({}, value, target, old))


def _residual(objective, params, e):
    """The learned part L - base at error e (old value = value, where the clip does not act)."""
    t = jnp.zeros_like(e)
    return objective.value_loss(params, e, t, e) - objective.base_loss(e, t, e)


def test_even_features_learn_symmetric_changes_odd_ones_cannot():
    e = jnp.linspace(-3.0, 3.0, 61)
    odd_only = LearnedValueLoss()
    for seed in range(3):  # any parameters: the learned part of the odd family is odd in e
        params = es_member(odd_only, jax.random.key(seed), 1.0)
        np.testing.assert_allclose(_residual(odd_only, params, e), -_residual(odd_only, params, -e), atol=1e-5)
    both = LearnedClippedValueLoss()
    params = both.default_params()
    params = {"w1": params["w1"].at[:2].set(0.0), "w2": jnp.ones_like(params["w2"])}  # read only e^2, |e|^3
    symmetric = _residual(both, params, e)
    np.testing.assert_allclose(symmetric, _residual(both, params, -e), atol=1e-6)
    assert float(jnp.abs(symmetric).max()) > 0.1  # a real, symmetric change of the loss
    assert _residual(both, params, jnp.zeros(1))[0] == 0.0  # a perfect prediction still costs nothing


def test_value_loss_base_is_checked():
    with pytest.raises(ValueError, match="base must be one of l2, clipped_l2"):
        LearnedValueLoss(base="huber")


def test_the_reward_transform_is_labelled_for_what_it_is():
    assert PotentialShaping(obs_shape=(3,)).title == "learned potential"
    assert "not policy-invariant" in PotentialShaping(obs_shape=(3,), transform=True).title
    assert PotentialShaping.options()["transform"] == (bool, False)  # potential-based shaping alone by default


# --------------------------------------------------------------------------------------------
# A full PPO run: the families start at PPO bit for bit
# --------------------------------------------------------------------------------------------

# TINY is tests/test_objectives.py's too: its PPO program (key 3 too) is this test's reference as well,
# compiled once in the suite (the workers share one compile cache).


def test_a_ppo_run_with_drift_mix_and_learned_clipped_at_init_is_ppo_bit_for_bit():
    env = make_env("CartPole-v1")
    key = jax.random.key(3)
    ppo = jax.jit(make_train(env, TINY))(key, {})
    objectives = Objectives(drift=DriftMix(), value_loss=LearnedClippedValueLoss())
    params = objectives.init(jax.random.key(5), plugs=("drift", "value_loss"))
    evolved_start = jax.jit(make_train(env, TINY, objectives))(key, params)
    for field, want in vars(ppo).items():
        np.testing.assert_array_equal(np.asarray(getattr(evolved_start, field)), np.asarray(want), err_msg=field)
    assert np.asarray(ppo.returns).std() > 0  # a real learning curve, not a constant


@pytest.mark.slow
def test_export_of_a_run_that_evolved_a_family_writes_the_member_itself(tmp_path, capsys):
    """No distillation: `metadisco export RUN` writes the evolved member's own closed form.
    (`metadisco` in this process: the command's `main`, without a process's start-up.)"""
    from metadisco.cli import main
    from metadisco.meta_objectives import load_objectives
    from tests.helpers import LPO
    from tests.helpers import TINY as TINY_RUN

    run_dir = tmp_path / "run"
    main(["train", *LPO, "generations=1", *TINY_RUN, "objectives.drift=drift_mix", "es.sigma_init=0.3",
          "--run-dir", str(run_dir), "--no-progress"])  # a failure raises SystemExit, failing the test
    capsys.readouterr()
    main(["export", str(run_dir)])
    assert "own closed form, no fit" in capsys.readouterr().out and not (run_dir / "distil").exists()
    mean, params, _ = load_objectives(run_dir / "objectives" / "mean.json")
    exported, _, _ = load_objectives(run_dir / "export" / "discovered_drift.json")
    assert exported.drift.expression == mean.drift.closed_form(params["drift"])


def test_a_stored_run_or_objectives_file_keeps_the_family_version_it_evolved():
    """Run directories and objectives files written before a family had versions ran its first:
    they read (resume, evaluate) as version 1; one that names its version keeps it; a new config
    records the newest (value_loss_mix 3, drift_mix 2)."""
    from metadisco.config import resolve
    from metadisco.core.run_config import RunConfig
    from metadisco.meta_objectives import from_spec

    new = resolve("rediscover_value_loss", ["generations=2", "objectives.drift=drift_mix"])
    stored = new.to_dict()
    assert stored["objectives"]["value_loss"] == {"name": "value_loss_mix", "version": 3}
    assert stored["objectives"]["drift"] == {"name": "drift_mix", "version": 2}
    for plug in ("value_loss", "drift"):
        del stored["objectives"][plug]["version"]  # as config.json was written before versions
    old = RunConfig.from_stored(stored).objectives
    assert old.value_loss.options == (("version", 1),) and old.drift.options == (("version", 1),)
    stored["objectives"]["value_loss"]["version"] = 2  # a run of the sparsemax version
    assert RunConfig.from_stored(stored).objectives.value_loss.options == (("version", 2),)
    assert RunConfig.from_stored(new.to_dict()).objectives.value_loss.options == (("version", 3),)
    old_file_spec = {"plug": "value_loss", "name": "value_loss_mix", "config": {"clip_eps": 0.2}}
    assert from_spec(old_file_spec).version == 1
    assert from_spec({"plug": "drift", "name": "drift_mix", "config": {}}).version == 1
    assert "weights" in from_spec(old_file_spec).default_params()

"""The PPO inner loop: it learns, its objective is PPO's, it vmaps, it bootstraps correctly.

Compiled train functions are shared through module-scoped fixtures (a PPO compile costs
seconds on the CPU); every config here is small.
"""

import collections
import dataclasses
import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from metadisco.core.catalog import DEFAULT_BRAX_BACKEND
from metadisco.inner_loops import (
    PRESETS,
    Env,
    PPOConfig,
    PPOHyperparams,
    available_envs,
    gae,
    make_env,
    make_train,
    preset_for,
    preset_name,
)
from metadisco.inner_loops import envs as envs_module
from metadisco.inner_loops.envs import from_brax, from_gymnax
from metadisco.inner_loops.ppo import (
    PPO,
    Batch,
    ObsNorm,
    RewardNorm,
    carry_forward,
    evaluate_policy,
    initial_network,
    ppo_loss,
)
from metadisco.inner_loops.ppo import train as ppo_train
from metadisco.meta_objectives import LPO, Objectives
from metadisco.meta_objectives.value_loss import ClippedL2

# A small CartPole config shared by the vmap and recompilation tests: 32 updates of 128 steps.
TINY = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4096, hidden=(32,), num_minibatches=2)
# The same without the evaluation episodes (its loop is ~1-2 s of compile), for the runs that read
# only the learning curve.
TINY_NO_EVAL = TINY.replace(eval_episodes=0)
# TINY at 10 updates with 4 evaluation episodes: the one plain CartPole run (key 3) that the
# evaluation-curve, reward-noise and classic-preset tests share (`_run` keeps it).
TEN = TINY.replace(total_timesteps=TINY.batch_size * 10, eval_episodes=4)


@functools.cache
def _run(env_name: str, config: PPOConfig, seed: int = 3):
    """One jitted plain-PPO run, kept for the module: tests asking for the same run share it."""
    return jax.jit(make_train(make_env(env_name), config))(jax.random.key(seed), {})


@pytest.fixture(scope="module")
def cartpole():
    return make_env("CartPole-v1")


# --------------------------------------------------------------------------------------------
# Learning
# --------------------------------------------------------------------------------------------


@pytest.mark.optimised  # it learns in the build users run (tests/conftest.py)
def test_default_ppo_solves_cartpole(cartpole):
    config = PPOConfig(total_timesteps=150_000, eval_episodes=0).replace(lr=2.5e-3)  # reads no evaluation
    result = jax.jit(make_train(cartpole, config))(jax.random.key(0), {})
    returns = np.asarray(result.returns)
    assert returns.shape == (config.num_updates,)
    assert not bool(result.diverged)
    assert returns[0] < 100, f"the first update should be near random play, got {returns[0]}"
    assert float(result.final_return) > 400, f"PPO did not solve CartPole: final return {result.final_return}"
    assert float(result.final_return) == pytest.approx(returns[-max(1, config.num_updates // 10):].mean())


# --------------------------------------------------------------------------------------------
# The drift form of the objective is PPO's clipped surrogate
# --------------------------------------------------------------------------------------------


def _uniform_policy(ppo: PPO, value: float):
    """Network parameters whose policy is uniform (zero actor head) and whose critic says `value`."""
    params = ppo.network.init(jax.random.key(0), jnp.zeros((1,) + ppo.env.obs_shape))
    inner = dict(params["params"])
    head = f"Dense_{len(ppo.config.hidden)}"
    for part, bias in (("actor", 0.0), ("critic", value)):
        layer = inner[part][head]
        fixed = {"kernel": jnp.zeros_like(layer["kernel"]), "bias": jnp.full_like(layer["bias"], bias)}
        inner[part] = {**inner[part], head: fixed}
    return {"params": inner}


def test_ppo_loss_hand_computed(cartpole):
    # Uniform policy over CartPole's 2 actions (log pi = log 1/2, entropy log 2) and V = 0.5, so the
    # ratios are set by old log-probs; advantages with mean 0 and std 1 stay as they are.
    ppo = PPO.create(cartpole, TINY.replace(record_samples=4))
    params = _uniform_policy(ppo, 0.5)
    ratio = np.array([0.5, 1.0, 1.5, 1.1], np.float32)
    adv = np.array([-1.0, 1.0, 1.0, -1.0], np.float32)
    batch = Batch(
        obs=jnp.zeros((4, 4)), action=jnp.array([0, 1, 0, 1]), log_prob=jnp.log(0.5 / ratio),
        value=jnp.array([0.5, 0.0, 1.0, 0.5]), advantage=jnp.asarray(adv), target=jnp.array([1.5, 0.5, 0.5, -0.5]),
    )
    hp = PPOHyperparams(vf_coef=0.5, ent_coef=0.1)
    total, aux = ppo_loss(ppo, params, batch, ppo.default_meta_params, 0.0, hp)
    # PPO-clip drift relu((r - clip(r, 0.8, 1.2)) A) = [0.3, 0, 0.3, 0]; r A = [-0.5, 1, 1.5, -1.1]
    # policy: -mean(r A - D) = -mean([-0.8, 1.0, 1.2, -1.1]) = -0.075
    np.testing.assert_allclose(aux.policy_loss, -0.075, rtol=1e-5)
    # clipped value loss, v = 0.5: 0.5 * max((v - t)^2, (v_old + clip(v - v_old, +-0.2) - t)^2)
    # = [0.5, 0.045, 0.045, 0.5] -> mean 0.2725
    np.testing.assert_allclose(aux.value_loss, 0.2725, rtol=1e-5)
    np.testing.assert_allclose(aux.entropy, np.log(2.0), rtol=1e-6)
    np.testing.assert_allclose(total, -0.075 + 0.5 * 0.2725 - 0.1 * np.log(2.0), rtol=1e-5)
    np.testing.assert_allclose(aux.samples, np.stack([ratio, adv, np.full(4, 0.5), [1.5, 0.5, 0.5, -0.5]], -1), rtol=1e-5)


def test_ppo_loss_with_ppo_clip_is_the_clipped_surrogate(cartpole):
    # ppo_loss in drift form against PPO's clipped surrogate written independently, in value and
    # in gradient (the clipped samples get none), with the value and entropy terms switched off.
    eps = 0.2
    n = 512
    ppo = PPO.create(cartpole, TINY.replace(record_samples=n))
    k_obs, k_act, k_old, k_adv, k_net = jax.random.split(jax.random.key(0), 5)
    params = ppo.network.init(k_net, jnp.zeros((1, 4)))
    batch = Batch(
        obs=jax.random.normal(k_obs, (n, 4)), action=jax.random.bernoulli(k_act, 0.5, (n,)).astype(jnp.int32),
        log_prob=jnp.log(0.5) + 0.3 * jax.random.normal(k_old, (n,)), value=jnp.zeros(n),
        advantage=2.0 * jax.random.normal(k_adv, (n,)) + 0.5, target=jnp.zeros(n),
    )
    hp = PPOHyperparams(vf_coef=0.0, ent_coef=0.0)

    def ours(params):
        return ppo_loss(ppo, params, batch, ppo.default_meta_params, 0.0, hp)[0]

    def surrogate(params):
        logits, _ = ppo.network.apply(params, batch.obs)
        r = jnp.exp(jax.nn.log_softmax(logits)[jnp.arange(n), batch.action] - batch.log_prob)
        a = (batch.advantage - batch.advantage.mean()) / (batch.advantage.std() + 1e-8)
        return -jnp.mean(jnp.minimum(r * a, jnp.clip(r, 1 - eps, 1 + eps) * a))

    ratio = np.asarray(ppo_loss(ppo, params, batch, ppo.default_meta_params, 0.0, hp)[1].samples[:, 0])
    assert (ratio < 1 - eps).any() and (ratio > 1 + eps).any(), "the sample should cover both clip edges"
    np.testing.assert_allclose(ours(params), surrogate(params), rtol=1e-5)
    g_ours, g_surr = jax.grad(ours)(params), jax.grad(surrogate)(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7), g_ours, g_surr)


# --------------------------------------------------------------------------------------------
# vmap over meta-parameters and keys; no recompilation
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lpo_runs(cartpole):
    """One jitted (traced-once) LPO train, called separately for two members, plus the vmap over
    members, keys and environment parameters: member 0 plays CartPole with a 10-step time limit,
    member 1 with the usual 500 (the environment-parameter test reads the same runs)."""
    objectives = Objectives(drift=LPO(hidden=16))
    train = make_train(cartpole, TINY_NO_EVAL, objectives)
    traces = []

    def counted(key, meta_params, hparams, env_params):
        traces.append(1)  # runs only while tracing
        return train(key, meta_params, hparams, env_params)

    jitted = jax.jit(counted)
    base = objectives.init(jax.random.key(1), plugs=("drift",))
    members = [
        {"drift": {**base["drift"], "w2": 0.1 * jax.random.normal(jax.random.key(10 + i), base["drift"]["w2"].shape)}}
        for i in range(2)
    ]
    limits = [cartpole.default_params.replace(max_steps_in_episode=m) for m in (10, 500)]
    keys = jax.random.split(jax.random.key(2), 2)
    separate = [jitted(keys[i], members[i], TINY.hparams, limits[i]) for i in range(2)]
    stacked = jax.tree.map(lambda *x: jnp.stack([jnp.asarray(v) for v in x]), *members)
    stacked_limits = jax.tree.map(lambda *x: jnp.stack([jnp.asarray(v) for v in x]), *limits)
    batched = jax.jit(jax.vmap(train, in_axes=(0, 0, None, 0)))(keys, stacked, TINY.hparams, stacked_limits)
    return dict(jitted=jitted, traces=traces, members=members, limits=limits, keys=keys, separate=separate,
                batched=batched)


@pytest.mark.slow
def test_vmap_over_population_and_keys_matches_separate_runs(lpo_runs):
    separate = np.stack([np.asarray(r.returns) for r in lpo_runs["separate"]])
    batched = np.asarray(lpo_runs["batched"].returns)
    assert batched.shape == (2, TINY.num_updates)
    assert np.isfinite(batched).all()
    # The two members really differ (different output layers, keys and time limits) ...
    assert not np.array_equal(separate[0], separate[1])
    # ... and the batched run reproduces each (bit-identical only for equal batch shapes).
    np.testing.assert_allclose(batched, separate, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(np.asarray(lpo_runs["batched"].diverged), [False, False])


def test_train_traces_once_for_new_keys_params_and_hparams(lpo_runs):
    jitted, traces = lpo_runs["jitted"], lpo_runs["traces"]
    assert len(traces) == 1  # two fixture calls with different members, keys and environment parameters
    other = jax.tree.map(lambda x: x * 0.5, lpo_runs["members"][1])
    limit = lpo_runs["limits"][1]
    out = jitted(jax.random.key(123), other, PPOHyperparams(lr=1e-3, ent_coef=0.0), limit)
    out2 = jitted(jax.random.key(124), other, PPOHyperparams(lr=5e-4, gamma=0.9), limit)
    jax.block_until_ready((out, out2))
    assert len(traces) == 1, f"train was traced {len(traces)} times; new values must not recompile"
    # The traced hyperparameters are really used (not constants baked in at the first trace).
    assert not np.array_equal(np.asarray(out.returns), np.asarray(out2.returns))


# --------------------------------------------------------------------------------------------
# Truncation versus termination
# --------------------------------------------------------------------------------------------


def test_gae_hand_computed_truncation_and_termination():
    # Column 0: t0 truncated (bootstrap from next_values, cut the trace), t1 terminated
    # (no bootstrap, cut the trace), t2 ordinary. Column 1: no episode end (full lambda trace).
    gamma, lam = 0.5, 0.8
    values = jnp.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    next_values = jnp.array([[4.0, 0.0], [5.0, 0.0], [6.0, 10.0]])
    rewards = jnp.ones((3, 2))
    terminated = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    truncated = jnp.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    done = jnp.maximum(terminated, truncated)
    adv, targets = gae(values, next_values, rewards, terminated, done, gamma, lam)
    # column 0: d0 = 1 + 0.5*4 - 1 = 2 (bootstrapped); d1 = 1 - 2 = -1 (not); d2 = 1 + 3 - 3 = 1
    # column 1: d = [1, 1, 1 + 5 = 6]; a2 = 6; a1 = 1 + 0.4*6 = 3.4; a0 = 1 + 0.4*3.4 = 2.36
    np.testing.assert_allclose(adv, [[2.0, 2.36], [-1.0, 3.4], [1.0, 6.0]], rtol=1e-6)
    np.testing.assert_allclose(targets, [[3.0, 2.36], [1.0, 3.4], [4.0, 6.0]], rtol=1e-6)


def test_gae_constant_reward_with_truncation_targets_true_value():
    # Reward 1 forever, truncated every 4 steps, critic already right (V = 1/(1-gamma) = 2):
    # every target is 2. Treating truncation as termination would give 1 at the truncation.
    gamma, T = 0.5, 12
    truncated = (jnp.arange(T) % 4 == 3).astype(jnp.float32)[:, None]
    values = jnp.full((T, 1), 2.0)
    _, targets = gae(values, values, jnp.ones((T, 1)), jnp.zeros((T, 1)), truncated, gamma, 0.95)
    np.testing.assert_allclose(targets, 2.0, rtol=1e-6)
    _, wrong = gae(values, values, jnp.ones((T, 1)), truncated, truncated, gamma, 0.95)
    assert float(wrong.min()) < 1.5  # what the bug would look like


@struct.dataclass
class _ProbeState(environment.EnvState):
    pass


class _ConstantObservation(environment.Environment):
    """What the probes share: the observation is always [1.0]; episodes of one step by default."""

    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=1)

    def reset_env(self, key, params):
        return jnp.ones((1,)), _ProbeState(time=jnp.int32(0))

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (1,))


@struct.dataclass
class _ProbeParams(environment.EnvParams):
    terminate: bool = False  # episodes end by termination (else by truncation, gymnax's time limit)


class _Probe(_ConstantObservation):
    """A gymnax-style probe: constant observation, reward 1 every step, one action; the episode
    ends every `max_steps_in_episode` steps, by truncation (gymnax's time limit) or, with
    `terminate`, by termination. Both are parameters (traced): one compiled program runs either."""

    def step_env(self, key, state, action, params):
        state = _ProbeState(time=state.time + 1)
        terminated = (state.time >= params.max_steps_in_episode) & params.terminate
        return jnp.ones((1,)), state, jnp.float32(1.0), terminated, {}

    def is_truncated(self, state, params):
        return (state.time >= params.max_steps_in_episode) & jnp.logical_not(params.terminate)

    def action_space(self, params):
        return spaces.Discrete(1)


def _probe_params(mode: str, period: int) -> _ProbeParams:
    """The episode ends every `period` steps by `mode` ("truncated" or "terminated")."""
    return _ProbeParams(max_steps_in_episode=period, terminate=mode == "terminated")


def _probe_env(mode: str, period: int) -> Env:
    """The probe through the public wrapper, with `_probe_params(mode, period)` as its default."""
    return from_gymnax(_Probe(), _probe_params(mode, period), f"probe-{mode}")


_RECORDED: list = []


@dataclass(frozen=True)
class _RecordingClippedL2(ClippedL2):
    """PPO's value loss, reporting (value predictions, value targets) of every minibatch."""

    def value_loss(self, params, value, target, old_value):
        jax.debug.callback(lambda v, t: _RECORDED.append((np.asarray(v), np.asarray(t))), value, target, ordered=True)
        return super().value_loss(params, value, target, old_value)


@functools.cache
def _probe_train():
    """One jitted train on the probe for both episode ends: the mode and period are the traced
    environment parameters (the last argument)."""
    config = PPOConfig(num_envs=4, num_steps=16, total_timesteps=2048, hidden=(8,), num_minibatches=2,
                       eval_episodes=0).replace(gamma=0.5, lr=1e-2)  # reads no evaluation
    env = _probe_env("truncated", 3)
    return config, jax.jit(make_train(env, config, Objectives(value_loss=_RecordingClippedL2())))


def _learned_values(mode: str, period: int):
    config, train = _probe_train()
    _RECORDED.clear()
    result = train(jax.random.key(0), {}, None, _probe_params(mode, period))
    jax.block_until_ready(result)
    jax.effects_barrier()
    assert len(_RECORDED) == config.num_updates * config.update_epochs * config.num_minibatches
    first_values = _RECORDED[0][0]
    values, targets = (np.concatenate(x) for x in zip(*_RECORDED[-8:]))  # the last update
    return result, first_values, values, targets


def test_ppo_critic_bootstraps_through_truncation():
    # Never terminated, truncated every 3 steps: the true value is 1/(1 - 0.5) = 2 everywhere.
    result, first_values, values, targets = _learned_values("truncated", 3)
    assert abs(float(first_values.mean()) - 2.0) > 0.5  # it had to learn
    np.testing.assert_allclose(values, 2.0, atol=0.05)
    # As termination, the targets at the truncation would be 1 and the fit about 1.6.
    np.testing.assert_allclose(targets, 2.0, atol=0.05)
    np.testing.assert_allclose(np.asarray(result.returns)[-1], 3.0)  # episode return = period


def test_ppo_critic_does_not_bootstrap_through_termination():
    # Every step terminates with reward 1: the value is 1 (it would be 2 if it bootstrapped).
    _, first_values, values, targets = _learned_values("terminated", 1)
    assert abs(float(first_values.mean()) - 1.0) > 0.5
    np.testing.assert_allclose(values, 1.0, atol=0.05)
    np.testing.assert_allclose(targets, 1.0, atol=0.05)


def test_a_truncated_step_bootstraps_from_its_final_observation():
    # With a time limit of 5 steps, a rollout of 16 truncates each environment three times: there
    # V(final_obs) is the value of where the episode got to, not of the next episode's first
    # observation; elsewhere it is the value of the next observation (the same state, no reset).
    import gymnax

    from metadisco.inner_loops import ppo as ppo_module

    config = PPOConfig(num_envs=8, num_steps=16, total_timesteps=4096, hidden=(16,), num_minibatches=2)
    core, params = gymnax.make("CartPole-v1")
    env = from_gymnax(core, params.replace(max_steps_in_episode=5), "CartPole-v1")
    ppo = ppo_module.PPO.create(env, config)
    inputs = ppo_module.TrainInputs(ppo.objectives.merge({}, ppo.default_meta_params), config.hparams,
                                    env.default_params)
    runner = ppo_module.init_runner(ppo, jax.random.key(0), inputs)
    traj = jax.jit(lambda r: ppo_module.collect(ppo, r, inputs)[1])(runner)  # [T, N]
    value, next_value = np.asarray(traj.value), np.asarray(traj.next_value)
    truncated, done = np.asarray(traj.truncated), np.asarray(traj.done)
    assert truncated[:-1].sum() >= 16, "the rollout must cross truncations for this test to mean anything"
    carries_on = ~done[:-1]
    np.testing.assert_allclose(next_value[:-1][carries_on], value[1:][carries_on], rtol=0, atol=1e-5)
    assert not np.allclose(next_value[:-1][truncated[:-1]], value[1:][truncated[:-1]], atol=1e-3)  # not V(reset obs)


def test_cartpole_time_limit_is_truncation(cartpole):
    def balance(obs):  # a simple controller that holds the pole up for the whole episode
        return (3 * obs[2] + obs[3] > 0).astype(jnp.int32)

    obs0, state = cartpole.reset(jax.random.key(0))

    def body(carry, key):
        obs, state = carry
        step = cartpole.step(key, state, balance(obs))
        return (step.obs, step.state), step

    _, steps = jax.jit(lambda c: jax.lax.scan(body, c, jax.random.split(jax.random.key(1), 500)))((obs0, state))
    terminated, truncated = np.asarray(steps.terminated), np.asarray(steps.truncated)
    assert not terminated.any(), "the controller should keep the pole up"
    assert not truncated[:499].any()
    assert truncated[499] and not terminated[499], "step 500 must be a truncation, not a termination"
    assert int(steps.episode_length[499]) == 500 and float(steps.episode_return[499]) == 500.0
    # final_obs is where the cart really got to; obs is the auto-reset start of the next episode.
    final_obs, next_obs = np.asarray(steps.final_obs[499]), np.asarray(steps.obs[499])
    assert not np.allclose(final_obs, next_obs)
    assert np.all(np.abs(next_obs) <= 0.05)  # CartPole resets uniformly in [-0.05, 0.05]
    # no reset before: the same state (to rounding: with XLA's optimisations off, as in the suite,
    # gymnax's two evaluations of the observation may differ in the last bit; a reset moves it by ~1e-2)
    np.testing.assert_allclose(steps.final_obs[:499], steps.obs[:499], rtol=0, atol=1e-6)
    assert int(steps.state.episode_length[499]) == 0  # the wrapper's counters restart


# --------------------------------------------------------------------------------------------
# Every preset: one table, one test (brax's run doubles as the continuous-action smoke test)
# --------------------------------------------------------------------------------------------

FAMILY_ENV = {"classic": "CartPole-v1", "minatar": "Breakout-MinAtar", "brax": "brax/inverted_pendulum"}


def test_every_environment_has_a_preset():
    assert {preset_name(name) for name in available_envs()} == set(PRESETS) == set(FAMILY_ENV)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(PRESETS))
def test_preset_validates_and_trains_shrunk(family):
    preset = PRESETS[family]
    assert preset.validate() is preset
    assert preset_for(FAMILY_ENV[family]) is preset
    # The preset's own numbers and switches (lr, annealing, observation normalisation), tiny shapes.
    # TEN's shapes and budget, so the classic preset's run is TEN's shared run; the others read no
    # evaluation, whose loop is most of a brax program's compile (~16 of 28 CPU-s).
    tiny = preset.replace(num_envs=4, num_steps=32, total_timesteps=1280, num_minibatches=2, hidden=(32,),
                          eval_episodes=4 if family == "classic" else 0)
    assert (tiny == TEN) == (family == "classic")
    result = _run(FAMILY_ENV[family], tiny)
    assert np.asarray(result.returns).shape == (tiny.num_updates,)
    assert np.isfinite(np.asarray(result.returns)).all() and not bool(result.diverged)


# --------------------------------------------------------------------------------------------
# Environment parameters are a traced pytree
# --------------------------------------------------------------------------------------------


def test_train_vmaps_over_environment_parameters(lpo_runs):
    # Two CartPole time limits in one program (`lpo_runs`' vmap, member 0 at 10 steps, member 1 at
    # 500): no episode of the 10-step one lasts longer; the separate runs (traced parameters) agree.
    separate = np.stack([np.asarray(r.returns) for r in lpo_runs["separate"]])
    for returns in (np.asarray(lpo_runs["batched"].returns), separate):
        assert returns.shape == (2, TINY.num_updates)
        assert returns[0].max() <= 10.0
        assert returns[1].max() > 10.0


# --------------------------------------------------------------------------------------------
# Continuous actions
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, config",
    [("Pendulum-v1", PPOConfig(num_envs=4, num_steps=32, total_timesteps=1024, hidden=(16,), num_minibatches=2))],
)
def test_continuous_smoke(name, config):
    env = make_env(name)
    assert not env.discrete and env.num_actions >= 1
    result = jax.jit(make_train(env, config))(jax.random.key(0), {})
    returns = np.asarray(result.returns)
    assert returns.shape == (config.num_updates,)
    assert np.isfinite(returns).all()
    assert not bool(result.diverged)


class _ContinuousBandit(_ConstantObservation):
    """A one-step continuous bandit (a probe in the manner of rejax's tests/environments.py): a
    constant observation, an action a in [-2, 2], reward -(a - target)^2, then the episode ends.
    The best policy is known: mean action `target`; a greedy episode's return is -(mean - target)^2."""

    def __init__(self, target: float):
        self.target = target

    def step_env(self, key, state, action, params):
        reward = -jnp.sum((action - self.target) ** 2)
        return jnp.ones((1,)), _ProbeState(time=state.time + 1), reward, jnp.bool_(True), {}

    def action_space(self, params):
        return spaces.Box(-2.0, 2.0, (1,))


def test_ppo_moves_a_gaussian_policy_to_the_best_continuous_action():
    # 30 updates of 128 steps. The initial Gaussian has mean ~0 and std 1: greedy return about
    # -target^2 = -2.25, sampled about -3.25; PPO must bring the mean within 0.1 of the target and
    # narrow the policy.
    target = 1.5
    env = from_gymnax(_ContinuousBandit(target), environment.EnvParams(max_steps_in_episode=1), "probe-bandit")
    assert not env.discrete and env.num_actions == 1
    config = PPOConfig(num_envs=8, num_steps=16, total_timesteps=128 * 30, hidden=(8,), num_minibatches=2,
                       eval_episodes=4).replace(lr=1e-2)
    result = jax.jit(make_train(env, config))(jax.random.key(0), {})
    assert float(result.init_eval_return_greedy) < -2.0, "the untrained mean should be near 0"
    distance = np.sqrt(-float(result.eval_return_greedy))  # |mean action - target|
    assert distance < 0.1, f"the mean action is {distance:.3f} from the target {target}"
    assert float(result.eval_return) > float(result.init_eval_return) + 1.5, "the policy did not narrow"


# --------------------------------------------------------------------------------------------
# Errors a user can cause
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(num_envs=3, num_steps=5, num_minibatches=4), r"15.*num_minibatches = 4"),
        (dict(num_envs=0), r"num_envs must be a positive integer"),
        (dict(num_steps=-1), r"num_steps must be a positive integer"),
        (dict(num_minibatches=0), r"num_minibatches must be a positive integer"),
        (dict(update_epochs=0), r"update_epochs must be a positive integer"),
        (dict(total_timesteps=100), r"total_timesteps = 100 is less than one rollout.*512"),
        (dict(hidden=()), r"hidden"),
        (dict(lr=-1.0), r"lr > 0"),
    ],
)
def test_invalid_config_raises_before_compiling(cartpole, changes, match):
    config = PPOConfig().replace(**changes)
    with pytest.raises(ValueError, match=match):
        config.validate()
    with pytest.raises(ValueError, match=match):  # make_train refuses it: nothing is ever traced
        make_train(cartpole, config)


@pytest.mark.parametrize(
    "name, suggestion",
    [("Cartpole-v1", "CartPole-v1"), ("brax/antt", "brax/ant"), ("acrobot-v1", "Acrobot-v1")],
)
def test_unknown_env_suggests_close_matches(name, suggestion):
    with pytest.raises(ValueError, match="unknown environment") as err:
        make_env(name)
    assert suggestion in str(err.value)


def test_env_whose_data_cannot_be_fetched_fails_with_advice(monkeypatch):
    import gymnax

    def offline(name):  # what MNISTBandit-bsuite does without internet access
        raise OSError("Name or service not known")

    monkeypatch.setattr(gymnax, "make", offline)
    with pytest.raises(ValueError, match="internet access") as err:
        make_env("MNISTBandit-bsuite")
    assert "MNISTBandit-bsuite" in str(err.value)


def test_unknown_brax_backend_lists_backends():
    with pytest.raises(ValueError, match="spring") as err:
        make_env("brax/ant:sprung")
    assert "sprung" in str(err.value)


# --------------------------------------------------------------------------------------------
# Observation normalisation
# --------------------------------------------------------------------------------------------


def test_obs_norm_matches_numpy_over_concatenated_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=[3.0, -1.0, 0.0], scale=[2.0, 0.5, 10.0], size=(n, 3)).astype(np.float32) for n in (64, 7, 200)]
    norm = ObsNorm.create((3,))
    for b in batches:
        norm = norm.update(jnp.asarray(b))
    allobs = np.concatenate(batches).astype(np.float64)
    np.testing.assert_allclose(norm.mean, allobs.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(norm.var, allobs.var(0), rtol=1e-4)
    assert float(norm.count) == pytest.approx(len(allobs), abs=1e-3)
    # Normalised observations then have mean 0 and variance 1.
    z = np.asarray(norm(jnp.asarray(allobs, jnp.float32)))
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-3)
    np.testing.assert_allclose(z.var(0), 1.0, rtol=1e-3)


# --------------------------------------------------------------------------------------------
# The yardstick: final-policy evaluation, and a learning curve that never looks ahead
# --------------------------------------------------------------------------------------------


class _LongEpisodes(environment.Environment):
    """Every episode lasts exactly `max_steps_in_episode` steps (a time limit); reward 1 for
    action 1, 0 for action 0; the observation is constant. A policy that picks action 1 with
    probability p has return p * L; no episode can end before step L."""

    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=50)

    def reset_env(self, key, params):
        return jnp.ones((1,)), _ProbeState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        state = _ProbeState(time=state.time + 1)
        return jnp.ones((1,)), state, (action == 1).astype(jnp.float32), jnp.bool_(False), {}

    def action_space(self, params):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (1,))


def _long_env(length: int) -> Env:
    return from_gymnax(_LongEpisodes(), environment.EnvParams(max_steps_in_episode=length), "probe-long")


def _policy_with(ppo: PPO, p_action_1: float):
    """Network parameters whose policy picks action 1 with probability `p_action_1`."""
    params = _uniform_policy(ppo, 0.0)
    head = f"Dense_{len(ppo.config.hidden)}"
    bias = jnp.array([0.0, np.log(p_action_1 / (1 - p_action_1))], jnp.float32)
    params["params"]["actor"][head]["bias"] = bias
    return params


def test_evaluation_scores_complete_episodes_of_the_policy():
    length, n = 50, 16
    ppo = PPO.create(_long_env(length), TINY.replace(eval_episodes=n))
    assert ppo.eval_cap == length  # the env's own time limit
    evaluation = jax.jit(lambda params: evaluate_policy(ppo, jax.random.key(0), params, ObsNorm.create((1,)),
                                                        ppo.env.default_params))
    sampled, greedy = evaluation(_policy_with(ppo, 0.75))
    assert float(greedy) == length  # argmax: action 1 at every step of a whole episode
    # sampled: Binomial(L, 0.75) per episode; mean of 16 episodes, standard error 0.77
    assert abs(float(sampled) - 0.75 * length) < 4.0
    sampled, greedy = evaluation(_policy_with(ppo, 0.25))
    assert float(greedy) == 0.0 and abs(float(sampled) - 0.25 * length) < 4.0
    # An episode still running at the cap counts with its partial return.
    capped = PPO.create(_long_env(length), TINY.replace(eval_episodes=n, eval_max_steps=20))
    _, greedy = evaluate_policy(capped, jax.random.key(0), _policy_with(capped, 0.75), ObsNorm.create((1,)),
                                capped.env.default_params)
    assert float(greedy) == 20.0


def test_an_environment_without_a_time_limit_needs_an_evaluation_cap_a_run_config_can_set():
    """The refusal names the run-config field that fixes it, and that field reaches PPO."""
    import dataclasses

    from metadisco import config

    unlimited = dataclasses.replace(_long_env(50), max_episode_steps=None)
    with pytest.raises(ValueError, match=r"inner\.eval_max_steps=N"):
        PPO.create(unlimited, TINY.replace(eval_episodes=2))
    cfg = config.resolve("lpo_cartpole_cpu", {"inner": {"eval_max_steps": 30}})
    capped = PPO.create(unlimited, TINY.replace(eval_episodes=2, eval_max_steps=cfg.inner.eval_max_steps))
    assert capped.eval_cap == 30 == config.ppo_config(cfg, "CartPole-v1").eval_max_steps


@pytest.mark.parametrize("env_name", ["Asterix-MinAtar", "Pendulum-v1"])  # random env steps; Gaussian draws
def test_without_the_greedy_episodes_the_sampled_score_is_the_same_bit_for_bit(env_name):
    """eval_greedy=False (a meta-training run whose fitness does not read them) plays only the
    sampled episodes, and they are the ones played beside the greedy ones: same starts, same
    actions, same environment draws."""
    ppo = PPO.create(make_env(env_name), TINY.replace(eval_episodes=8))
    params = ppo.network.init(jax.random.key(1), jnp.zeros((1,) + ppo.env.obs_shape))

    def scores(p):
        return jax.jit(lambda k: evaluate_policy(p, k, params, ObsNorm.create(p.env.obs_shape), p.env.default_params))

    both = scores(ppo)
    alone = scores(dataclasses.replace(ppo, config=ppo.config.replace(eval_greedy=False)))
    for key in jax.random.split(jax.random.key(2), 3):
        (sampled, greedy), (sampled_alone, nan) = both(key), alone(key)
        assert float(sampled_alone) == float(sampled) and np.isfinite(float(greedy)) and np.isnan(float(nan))


def test_a_run_plays_greedy_episodes_only_where_its_fitness_scores_them():
    from metadisco.config import RunConfig, ppo_config

    assert not ppo_config(RunConfig(fitness="final_eval"), "CartPole-v1").eval_greedy
    assert not ppo_config(RunConfig(fitness="auc_norm"), "CartPole-v1").eval_greedy
    assert ppo_config(RunConfig(fitness="greedy_eval_norm"), "CartPole-v1").eval_greedy
    assert PPOConfig().eval_greedy  # PPO alone and `evaluate` report both


def test_carry_forward_fills_from_the_past_only():
    nan = np.nan
    filled = carry_forward(jnp.array([nan, nan, 3.0, nan, 5.0, nan]), jnp.float32(1.0))
    np.testing.assert_array_equal(filled, [1.0, 1.0, 3.0, 3.0, 5.0, 5.0])


def test_learning_curve_never_looks_ahead_and_evaluation_is_the_policys():
    # Episodes of 100 steps; 2 envs x 16 steps per update, so the first 6 updates finish none. A
    # curve that filled them from a later update would make the short run's prefix differ from the
    # long run's: without annealing, the first 4 updates are the same computation in both.
    env = _long_env(100)
    config = PPOConfig(num_envs=2, num_steps=16, total_timesteps=32 * 4, hidden=(8,), num_minibatches=2,
                       anneal_lr=False, eval_episodes=8).replace(lr=3e-2, ent_coef=0.0)
    short = jax.jit(make_train(env, config))(jax.random.key(0), {})
    long = jax.jit(make_train(env, config.replace(total_timesteps=32 * 40)))(jax.random.key(0), {})
    np.testing.assert_array_equal(np.asarray(long.returns)[:4], np.asarray(short.returns))
    # No episode ended in the short run: its curve is the initial policy's evaluation throughout.
    np.testing.assert_array_equal(np.asarray(short.returns), float(short.init_eval_return))
    assert float(short.init_eval_return) == float(long.init_eval_return)  # same start, same key
    # The initial (uniform) policy earns about half of the 100 steps; training pushes action 1,
    # and the final evaluation scores that policy's whole episodes, not the ones that ended earlier.
    assert 35 < float(long.init_eval_return) < 65
    assert float(long.eval_return_greedy) == 100.0
    assert float(long.eval_return) > float(long.returns[long.returns.shape[0] // 2])


# --------------------------------------------------------------------------------------------
# PureJaxRL's presets: MinAtar relu + 8 minibatches; brax normalises observations and rewards
# --------------------------------------------------------------------------------------------


def test_presets_are_purejaxrl_s():
    minatar, brax = PRESETS["minatar"], PRESETS["brax"]
    assert (minatar.activation, minatar.num_minibatches, minatar.num_envs, minatar.num_steps) == ("relu", 8, 64, 128)
    assert (minatar.hparams.lr, minatar.anneal_lr, minatar.total_timesteps) == (5e-3, True, 10_000_000)
    assert brax.normalize_obs and brax.normalize_reward and not brax.anneal_lr
    assert (brax.num_envs, brax.num_steps, brax.num_minibatches, brax.hidden) == (2048, 10, 32, (256, 256))
    assert not PRESETS["classic"].normalize_reward and PRESETS["classic"].activation == "tanh"
    assert DEFAULT_BRAX_BACKEND == "positional"


def test_reward_normaliser_matches_numpy():
    # PureJaxRL's NormalizeVecReward: G <- gamma * G * (1 - done) + r per env; the running variance
    # of G over every (step, env) so far; reward / sqrt(var + 1e-8) with the variance after the step.
    rng = np.random.default_rng(0)
    gamma, steps, envs = 0.9, 6, 3
    rewards = rng.normal(2.0, 3.0, (steps, envs)).astype(np.float32)
    dones = rng.random((steps, envs)) < 0.3
    norm, got = RewardNorm.create(envs), []
    for r, d in zip(rewards, dones):
        norm, scaled = norm(jnp.asarray(r), jnp.asarray(d, jnp.float32), gamma)
        got.append(np.asarray(scaled))
    g, seen, want = np.zeros(envs), [], []
    for r, d in zip(rewards.astype(np.float64), dones):
        g = gamma * g * (1 - d) + r
        seen.append(g.copy())
        allg = np.concatenate(seen)
        # Welford from PureJaxRL's prior (mean 0, var 1, count 1e-4) equals this weighted variance
        count = 1e-4 + allg.size
        mean = allg.sum() / count
        var = (1e-4 * (1.0 + mean**2) + np.sum((allg - mean) ** 2)) / count
        want.append(r / np.sqrt(var + 1e-8))
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-4)


def test_a_brax_env_is_built_from_its_shapes_without_computing_a_reset():
    """from_brax reads the observation's size from the shapes of `reset` (brax's own `observation_size`
    runs a reset op by op: a few hundred small programs, 2.5 s for hopper on the CPU)."""
    concrete, State = [], collections.namedtuple("State", "obs")  # a pytree, as brax's State

    class Stub:  # a brax Env as brax defines `observation_size`: a reset, computed
        action_size = 2

        def reset(self, key):
            if not isinstance(key, jax.core.Tracer):
                concrete.append(key)
            return State(obs=jnp.zeros(7) + jax.random.uniform(key))

        @property
        def observation_size(self):
            return self.reset(jax.random.PRNGKey(0)).obs.shape[-1]

    env = from_brax(Stub(), "brax/stub")
    assert env.obs_shape == (7,) and env.num_actions == 2
    assert concrete == []


def test_brax_auto_reset_restarts_from_the_first_state():
    # brax's own AutoResetWrapper semantics: the first reset state is kept and selected on done,
    # no reset is computed per step; termination and truncation stay apart.
    env = from_brax(envs_module._import_brax().get_environment("inverted_pendulum", backend="positional"),
                    "brax/inverted_pendulum", episode_length=5)
    obs0, state = env.reset(jax.random.key(0))

    def body(state, key):
        step = env.step(key, state, jnp.ones(env.num_actions))  # push hard: the pole falls
        return step.state, step

    _, steps = jax.jit(lambda s: jax.lax.scan(body, s, jax.random.split(jax.random.key(1), 12)))(state)
    done = np.asarray(steps.done)
    assert done.any()
    first_end = int(np.argmax(done))
    assert first_end <= 4
    if not bool(steps.terminated[first_end]):
        assert first_end == 4 and bool(steps.truncated[first_end])  # the time limit, not a termination
    np.testing.assert_array_equal(steps.obs[first_end], obs0)  # restarted from the first state
    assert not np.allclose(steps.final_obs[first_end], obs0)  # final_obs is where it got to
    np.testing.assert_array_equal(steps.final_obs[:first_end], steps.obs[:first_end])
    ends = np.flatnonzero(done)
    assert np.all(np.diff(np.concatenate([[-1], ends])) <= 5)  # never past the 5-step limit
    for e in ends:
        np.testing.assert_array_equal(steps.obs[e], obs0)


@pytest.mark.slow
def test_reward_noise_corrupts_what_ppo_learns_from_and_not_the_scores(cartpole):
    """PPOConfig.reward_noise adds Student-t noise to the training rewards only: the learning
    curve and the final-policy evaluation count CartPole's clean +1 per step (whole numbers per
    episode), the noise changes what is learned, and without it a run is unchanged."""
    config = TEN  # the noiseless run is the shared one (key 3)

    def run(cfg):
        return jax.jit(make_train(cartpole, cfg))(jax.random.key(3), {})

    noiseless, noisy = _run("CartPole-v1", config), run(config.replace(reward_noise=5.0, reward_noise_df=1.5))
    assert not np.array_equal(np.asarray(noiseless.returns), np.asarray(noisy.returns))
    evaluation = np.asarray(noisy.eval_return) * config.eval_episodes  # 4 episodes of whole-number returns
    assert np.isfinite(evaluation) and evaluation == pytest.approx(np.round(evaluation), abs=1e-3)
    # no noise: the key stream is the one without the option (bit for bit)
    np.testing.assert_array_equal(run(config.replace(reward_noise_df=3.0)).returns, noiseless.returns)
    with pytest.raises(ValueError, match="reward_noise"):
        config.replace(reward_noise=-1.0).validate()


@pytest.mark.parametrize("env_name", ["CartPole-v1", "Breakout-MinAtar"])
def test_initial_networks_computed_apart_start_the_same_run_bit_for_bit(env_name):
    """`initial_network` in a program of its own gives the parameters `train` initialises itself
    (only the observations' shape reaches the initialisers), so a run that takes them is the same
    run, bit for bit: what lets evaluate's programs compile without the initialisers."""
    # the critic's values in `visited` read the networks at once (the near-uniform initial policy's
    # returns may not), in place of the evaluation loop (a second of compile per program)
    ppo = PPO.create(make_env(env_name), TINY.replace(total_timesteps=TINY.batch_size * 2, eval_episodes=0,
                                                      record_samples=1))
    keys = jax.random.split(jax.random.key(4), 2)
    networks = jax.jit(jax.vmap(lambda k: initial_network(ppo, k)))(keys)
    train = jax.jit(jax.vmap(lambda k, n: ppo_train(ppo, k, {}, network_params=n)))
    own = jax.jit(jax.vmap(lambda k: ppo_train(ppo, k, {})))
    jax.tree.map(np.testing.assert_array_equal, train(keys, networks), own(keys))
    swapped = jax.tree.map(lambda x: x[::-1], networks)  # the same program: the run takes the networks it is given
    assert any(not np.array_equal(a, b, equal_nan=True)
               for a, b in zip(jax.tree.leaves(train(keys, swapped)), jax.tree.leaves(own(keys))))
    assert any(not np.array_equal(x[0], x[1]) for x in jax.tree.leaves(networks))  # one network per seed

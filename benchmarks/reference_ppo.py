"""A plain single-file PPO in the structure of PureJaxRL's ppo.py: the reference for benchmarks.

One `make_train(config)` closure (rollout scan, GAE scan, update epochs with a minibatch scan),
adapted to gymnax 1.0's 6-tuple step, over PureJaxRL's config dict (`CONFIGS`). Like PureJaxRL
it treats done = terminated | truncated (no bootstrap on a time limit). Brax environments
("brax/NAME") go through PureJaxRL's ppo_continuous_action.py path: BraxGymnaxWrapper (brax's
EpisodeWrapper + AutoResetWrapper on the positional backend), ClipAction, VecEnv and, with
NORMALIZE_ENV, NormalizeVecObservation + NormalizeVecReward; a Gaussian policy with a
state-independent log std. Only jax, flax, optax, gymnax and brax: no metadisco code, so that
`inner_loop.py` and `learning_check.py` compare metadisco against an independent implementation.

    train = make_train({**CONFIGS["classic"], "ENV_NAME": "CartPole-v1", "TOTAL_TIMESTEPS": 100_000})
    out = jax.jit(train)(jax.random.key(0))     # {"runner_state", "metrics"}
    evaluate = make_evaluate(config)            # PureJaxRL-style: a separate run after training
    sampled, greedy = jax.jit(evaluate)(jax.random.key(1), out["runner_state"])
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax import struct
from flax.linen.initializers import constant, orthogonal
from flax.training.train_state import TrainState

# PureJaxRL's settings by preset family (classic: the config of purejaxrl/ppo.py, for CartPole-v1);
# inner_loop.py checks them against metadisco's presets at run time.
CONFIGS = {
    "classic": {
        "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4,
        "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ANNEAL_LR": True,
    },
}
# PureJaxRL's MinAtar settings (examples/brax_minatar.ipynb): relu and 8 minibatches.
CONFIGS["minatar"] = {**CONFIGS["classic"], "LR": 5e-3, "NUM_ENVS": 64, "NUM_MINIBATCHES": 8, "ACTIVATION": "relu"}
# PureJaxRL's ppo_continuous_action.py on brax.
CONFIGS["brax"] = {
    "LR": 3e-4, "NUM_ENVS": 2048, "NUM_STEPS": 10, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 32,
    "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.0, "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ANNEAL_LR": False, "NORMALIZE_ENV": True,
    "BACKEND": "positional", "HIDDEN": 256,
}
EVAL_EPISODES = 16


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (HIDDEN x HIDDEN), orthogonal init (PureJaxRL); logits, or
    a Gaussian's (mean, log_std) with a state-independent log std when `continuous`."""

    action_dim: int
    activation: str = "tanh"
    hidden: int = 64
    continuous: bool = False

    @nn.compact
    def __call__(self, x):
        act = nn.relu if self.activation == "relu" else nn.tanh
        width = self.hidden
        actor = act(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))
        actor = act(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(actor))
        pi = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01), bias_init=constant(0.0))(actor)
        if self.continuous:
            pi = (pi, self.param("log_std", nn.initializers.zeros, (self.action_dim,)))
        critic = act(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))
        critic = act(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(critic))
        critic = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(critic)
        return pi, jnp.squeeze(critic, axis=-1)


@struct.dataclass
class LogEnvState:
    env_state: Any
    episode_returns: jax.Array
    episode_lengths: jax.Array
    returned_episode_returns: jax.Array
    returned_episode_lengths: jax.Array
    timestep: jax.Array


class LogWrapper:
    """PureJaxRL's FlattenObservationWrapper + LogWrapper for gymnax 1.0 (6-tuple step).

    The info it returns holds LogWrapper's four keys only (gymnax 1.0's info also carries
    `final_observation`; PureJaxRL's metrics, stacked per step, would keep every observation
    twice)."""

    def __init__(self, env):
        self._env = env

    def reset(self, key, params):
        obs, env_state = self._env.reset(key, params)
        zero_f, zero_i = jnp.float32(0.0), jnp.int32(0)
        return obs.reshape(-1), LogEnvState(env_state, zero_f, zero_i, zero_f, zero_i, zero_i)

    def step(self, key, state, action, params):
        obs, env_state, reward, terminated, truncated, _ = self._env.step(key, state.env_state, action, params)
        done = jnp.logical_or(terminated, truncated)
        new_return = state.episode_returns + reward
        new_length = state.episode_lengths + 1
        state = LogEnvState(
            env_state=env_state,
            episode_returns=new_return * (1 - done),
            episode_lengths=new_length * (1 - done),
            returned_episode_returns=state.returned_episode_returns * (1 - done) + new_return * done,
            returned_episode_lengths=state.returned_episode_lengths * (1 - done) + new_length * done,
            timestep=state.timestep + 1,
        )
        info = {
            "returned_episode_returns": state.returned_episode_returns,
            "returned_episode_lengths": state.returned_episode_lengths,
            "timestep": state.timestep,
            "returned_episode": done,
        }
        return obs.reshape(-1), state, reward, done, info


class BraxGymnaxWrapper:
    """PureJaxRL's BraxGymnaxWrapper (brax's EpisodeWrapper + AutoResetWrapper), with gymnax
    1.0's 6-tuple step (done reported as terminated: PureJaxRL does not tell them apart)."""

    def __init__(self, env_name, backend="positional", episode_length=1000):
        from brax import envs
        from brax.envs.wrappers.training import AutoResetWrapper, EpisodeWrapper

        env = envs.get_environment(env_name=env_name, backend=backend)
        self._env = AutoResetWrapper(EpisodeWrapper(env, episode_length=episode_length, action_repeat=1))
        self.action_size = env.action_size
        self.observation_size = env.observation_size
        self.episode_length = episode_length

    def reset(self, key, params=None):
        state = self._env.reset(key)
        return state.obs, state

    def step(self, key, state, action, params=None):
        state = self._env.step(state, jnp.clip(action, -1.0, 1.0))  # ClipAction
        return state.obs, state, state.reward, state.done > 0.5, jnp.bool_(False), {}


@struct.dataclass
class NormalizeVecObsState:
    mean: jax.Array
    var: jax.Array
    count: jax.Array
    env_state: Any


def _welford(mean, var, count, batch):
    b_mean, b_var, b_count = jnp.mean(batch, axis=0), jnp.var(batch, axis=0), batch.shape[0]
    delta, tot = b_mean - mean, count + b_count
    m2 = var * count + b_var * b_count + jnp.square(delta) * count * b_count / tot
    return mean + delta * b_count / tot, m2 / tot, tot


class NormalizeVecObservation:
    """PureJaxRL's: running mean / var of the observations of all envs, updated every step."""

    def __init__(self, env):
        self._env = env

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        state = NormalizeVecObsState(jnp.zeros_like(obs[0]), jnp.ones_like(obs[0]), jnp.float32(1e-4), env_state)
        state = state.replace(**dict(zip(("mean", "var", "count"), _welford(state.mean, state.var, state.count, obs))))
        return (obs - state.mean) / jnp.sqrt(state.var + 1e-8), state

    def step(self, key, state, action, params=None):
        obs, env_state, reward, done, info = self._env.step(key, state.env_state, action, params)
        mean, var, count = _welford(state.mean, state.var, state.count, obs)
        state = NormalizeVecObsState(mean, var, count, env_state)
        return (obs - mean) / jnp.sqrt(var + 1e-8), state, reward, done, info


@struct.dataclass
class NormalizeVecRewState:
    mean: jax.Array
    var: jax.Array
    count: jax.Array
    return_val: jax.Array
    env_state: Any


class NormalizeVecReward:
    """PureJaxRL's: rewards divided by the running std of the discounted return."""

    def __init__(self, env, gamma):
        self._env, self.gamma = env, gamma

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        zero = jnp.float32(0.0)
        return obs, NormalizeVecRewState(zero, jnp.float32(1.0), jnp.float32(1e-4), jnp.zeros(obs.shape[0]), env_state)

    def step(self, key, state, action, params=None):
        obs, env_state, reward, done, info = self._env.step(key, state.env_state, action, params)
        return_val = state.return_val * self.gamma * (1 - done) + reward
        mean, var, count = _welford(state.mean, state.var, state.count, return_val)
        state = NormalizeVecRewState(mean, var, count, return_val, env_state)
        return obs, state, reward / jnp.sqrt(var + 1e-8), done, info


class VecEnv:
    def __init__(self, env):
        self._env = env
        self.reset = jax.vmap(env.reset, in_axes=(0, None))
        self.step = jax.vmap(env.step, in_axes=(0, 0, 0, None))


def _base_env(config):
    """(env with LogWrapper, env_params, obs_size, action_dim, continuous, max episode steps)."""
    name = config["ENV_NAME"]
    if name.startswith("brax/"):
        env = BraxGymnaxWrapper(name[len("brax/"):], backend=config.get("BACKEND", "positional"))
        return LogWrapper(env), None, env.observation_size, env.action_size, True, env.episode_length
    env, env_params = gymnax.make(name)
    obs_size = int(np.prod(env.observation_space(env_params).shape))
    action_dim = env.action_space(env_params).n
    return LogWrapper(env), env_params, obs_size, action_dim, False, int(env_params.max_steps_in_episode)


def _sample(continuous, pi, key):
    if continuous:
        mean, log_std = pi
        return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    return jax.random.categorical(key, pi)


def _log_prob(continuous, pi, action):
    if continuous:
        mean, log_std = pi
        z = (action - mean) / jnp.exp(log_std)
        return jnp.sum(-0.5 * z * z - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)
    return jnp.take_along_axis(jax.nn.log_softmax(pi), action[..., None], axis=-1)[..., 0]


def _entropy(continuous, pi):
    if continuous:
        _, log_std = pi
        return jnp.sum(log_std + 0.5 * jnp.log(2 * jnp.pi * jnp.e), axis=-1) * jnp.ones(pi[0].shape[:-1])
    logp = jax.nn.log_softmax(pi)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def _network(config, action_dim, continuous):
    return ActorCritic(action_dim, activation=config["ACTIVATION"], hidden=config.get("HIDDEN", 64),
                       continuous=continuous)


class Transition(NamedTuple):
    done: jax.Array
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array
    info: dict


def make_train(config):
    """PureJaxRL's make_train: config dict -> train(rng) -> {"runner_state", "metrics"}."""
    config = dict(config)
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    config["MINIBATCH_SIZE"] = config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
    env, env_params, obs_size, action_dim, continuous, _ = _base_env(config)
    env = VecEnv(env)
    if continuous and config.get("NORMALIZE_ENV"):
        env = NormalizeVecReward(NormalizeVecObservation(env), config["GAMMA"])

    def linear_schedule(count):
        frac = 1.0 - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"])) / config["NUM_UPDATES"]
        return config["LR"] * frac

    def train(rng):
        # INIT NETWORK
        network = _network(config, action_dim, continuous)
        rng, _rng = jax.random.split(rng)
        network_params = network.init(_rng, jnp.zeros(obs_size))
        lr = linear_schedule if config["ANNEAL_LR"] else config["LR"]
        tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]), optax.adam(lr, eps=1e-5))
        train_state = TrainState.create(apply_fn=network.apply, params=network_params, tx=tx)

        # INIT ENV
        rng, _rng = jax.random.split(rng)
        reset_rng = jax.random.split(_rng, config["NUM_ENVS"])
        obsv, env_state = env.reset(reset_rng, env_params)

        # TRAIN LOOP
        def _update_step(runner_state, unused):
            # COLLECT TRAJECTORIES
            def _env_step(runner_state, unused):
                train_state, env_state, last_obs, rng = runner_state
                rng, _rng = jax.random.split(rng)
                pi, value = network.apply(train_state.params, last_obs)
                action = _sample(continuous, pi, _rng)
                log_prob = _log_prob(continuous, pi, action)
                rng, _rng = jax.random.split(rng)
                rng_step = jax.random.split(_rng, config["NUM_ENVS"])
                obsv, env_state, reward, done, info = env.step(rng_step, env_state, action, env_params)
                transition = Transition(done, action, value, reward, log_prob, last_obs, info)
                return (train_state, env_state, obsv, rng), transition

            runner_state, traj_batch = jax.lax.scan(_env_step, runner_state, None, config["NUM_STEPS"])

            # CALCULATE ADVANTAGE
            train_state, env_state, last_obs, rng = runner_state
            _, last_val = network.apply(train_state.params, last_obs)

            def _calculate_gae(traj_batch, last_val):
                def _get_advantages(gae_and_next_value, transition):
                    gae, next_value = gae_and_next_value
                    done, value, reward = transition.done, transition.value, transition.reward
                    delta = reward + config["GAMMA"] * next_value * (1 - done) - value
                    gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - done) * gae
                    return (gae, value), gae

                _, advantages = jax.lax.scan(
                    _get_advantages, (jnp.zeros_like(last_val), last_val), traj_batch, reverse=True, unroll=16
                )
                return advantages, advantages + traj_batch.value

            advantages, targets = _calculate_gae(traj_batch, last_val)

            # UPDATE NETWORK
            def _update_epoch(update_state, unused):
                def _update_minbatch(train_state, batch_info):
                    traj_batch, advantages, targets = batch_info

                    def _loss_fn(params, traj_batch, gae, targets):
                        pi, value = network.apply(params, traj_batch.obs)
                        log_prob = _log_prob(continuous, pi, traj_batch.action)

                        # CALCULATE VALUE LOSS
                        value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(
                            -config["CLIP_EPS"], config["CLIP_EPS"]
                        )
                        value_losses = jnp.square(value - targets)
                        value_losses_clipped = jnp.square(value_pred_clipped - targets)
                        value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()

                        # CALCULATE ACTOR LOSS
                        ratio = jnp.exp(log_prob - traj_batch.log_prob)
                        gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                        loss_actor1 = ratio * gae
                        loss_actor2 = jnp.clip(ratio, 1.0 - config["CLIP_EPS"], 1.0 + config["CLIP_EPS"]) * gae
                        loss_actor = -jnp.minimum(loss_actor1, loss_actor2).mean()
                        entropy = _entropy(continuous, pi).mean()

                        total_loss = loss_actor + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
                        return total_loss, (value_loss, loss_actor, entropy)

                    grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
                    total_loss, grads = grad_fn(train_state.params, traj_batch, advantages, targets)
                    train_state = train_state.apply_gradients(grads=grads)
                    return train_state, total_loss

                train_state, traj_batch, advantages, targets, rng = update_state
                rng, _rng = jax.random.split(rng)
                batch_size = config["MINIBATCH_SIZE"] * config["NUM_MINIBATCHES"]
                permutation = jax.random.permutation(_rng, batch_size)
                batch = (traj_batch, advantages, targets)
                batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)
                shuffled_batch = jax.tree.map(lambda x: jnp.take(x, permutation, axis=0), batch)
                minibatches = jax.tree.map(
                    lambda x: jnp.reshape(x, [config["NUM_MINIBATCHES"], -1] + list(x.shape[1:])), shuffled_batch
                )
                train_state, total_loss = jax.lax.scan(_update_minbatch, train_state, minibatches)
                return (train_state, traj_batch, advantages, targets, rng), total_loss

            update_state = (train_state, traj_batch, advantages, targets, rng)
            update_state, loss_info = jax.lax.scan(_update_epoch, update_state, None, config["UPDATE_EPOCHS"])
            train_state = update_state[0]
            metric = traj_batch.info
            rng = update_state[-1]
            return (train_state, env_state, last_obs, rng), metric

        rng, _rng = jax.random.split(rng)
        runner_state = (train_state, env_state, obsv, _rng)
        runner_state, metric = jax.lax.scan(_update_step, runner_state, None, config["NUM_UPDATES"])
        return {"runner_state": runner_state, "metrics": metric}

    return train


def obs_stats(runner_state):
    """(mean, var) of the observation normaliser in a brax runner_state with NORMALIZE_ENV, else None."""
    state = runner_state[1]
    while state is not None and not isinstance(state, NormalizeVecObsState):
        state = getattr(state, "env_state", None)
    return None if state is None else (state.mean, state.var)


def make_evaluate(config, episodes: int = EVAL_EPISODES):
    """A separate evaluation after training (PureJaxRL-style): `episodes` fresh environments per
    mode play one episode each with the trained parameters, actions sampled and greedy (argmax /
    Gaussian mean), the observation normaliser frozen; an episode unfinished at the time limit
    counts its partial return. -> evaluate(rng, runner_state) -> (sampled [], greedy []), the mean
    undiscounted return in the environment's own reward."""
    env, env_params, _, action_dim, continuous, max_steps = _base_env(config)
    env = VecEnv(env)
    network = _network(config, action_dim, continuous)

    def evaluate(rng, runner_state):
        params = runner_state[0].params
        stats = obs_stats(runner_state)
        norm = (lambda o: o) if stats is None else (lambda o: (o - stats[0]) / jnp.sqrt(stats[1] + 1e-8))
        rng, _rng = jax.random.split(rng)
        obs, state = env.reset(jnp.concatenate([jax.random.split(_rng, episodes)] * 2), env_params)
        greedy = jnp.arange(2 * episodes) >= episodes

        def _step(carry, rng):
            obs, state, total, alive = carry
            rng_act, rng_step = jax.random.split(rng)
            pi, _ = network.apply(params, norm(obs))
            best = pi[0] if continuous else jnp.argmax(pi, axis=-1)
            sampled = _sample(continuous, pi, rng_act)
            action = jnp.where(greedy[:, None] if continuous else greedy, best, sampled)
            obs, state, reward, done, _ = env.step(jax.random.split(rng_step, 2 * episodes), state, action, env_params)
            return (obs, state, total + reward * alive, alive * (1 - done)), None

        carry = (obs, state, jnp.zeros(2 * episodes), jnp.ones(2 * episodes))
        (_, _, total, _), _ = jax.lax.scan(_step, carry, jax.random.split(rng, max_steps))
        return total[:episodes].mean(), total[episodes:].mean()

    return evaluate

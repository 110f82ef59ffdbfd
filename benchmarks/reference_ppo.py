"""A plain single-file PPO in the structure of PureJaxRL's ppo.py: the reference for benchmarks.

One `make_train(config)` closure (rollout scan, GAE scan, update epochs with a minibatch scan),
adapted to gymnax 1.0's 6-tuple step, over PureJaxRL's config dict (`CONFIGS`). Like PureJaxRL
it treats done = terminated | truncated (no bootstrap on a time limit). Only jax, flax, optax and
gymnax: no metadisco code, so that `inner_loop.py` compares metadisco against an independent
implementation.

    train = make_train({**CONFIGS["classic"], "ENV_NAME": "CartPole-v1", "TOTAL_TIMESTEPS": 100_000})
    out = jax.jit(train)(jax.random.key(0))     # {"runner_state", "metrics"}
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

# PureJaxRL's settings (../shared/REFERENCE.md) by preset family; inner_loop.py checks them
# against metadisco's presets at run time.
CONFIGS = {
    "classic": {
        "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4,
        "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ANNEAL_LR": True,
    },
}
CONFIGS["minatar"] = {**CONFIGS["classic"], "LR": 5e-3, "NUM_ENVS": 64}


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs, 64x64 tanh, orthogonal init (PureJaxRL)."""

    action_dim: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        act = nn.relu if self.activation == "relu" else nn.tanh
        actor = act(nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))
        actor = act(nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(actor))
        logits = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01), bias_init=constant(0.0))(actor)
        critic = act(nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))
        critic = act(nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(critic))
        critic = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(critic)
        return logits, jnp.squeeze(critic, axis=-1)


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


class Transition(NamedTuple):
    done: jax.Array
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array
    info: dict


def _categorical_log_prob(logits, action):
    return jnp.take_along_axis(jax.nn.log_softmax(logits), action[..., None], axis=-1)[..., 0]


def _categorical_entropy(logits):
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def make_train(config):
    """PureJaxRL's make_train: config dict -> train(rng) -> {"runner_state", "metrics"}."""
    config = dict(config)
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    config["MINIBATCH_SIZE"] = config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
    env, env_params = gymnax.make(config["ENV_NAME"])
    obs_size = int(np.prod(env.observation_space(env_params).shape))
    action_dim = env.action_space(env_params).n
    env = LogWrapper(env)

    def linear_schedule(count):
        frac = 1.0 - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"])) / config["NUM_UPDATES"]
        return config["LR"] * frac

    def train(rng):
        # INIT NETWORK
        network = ActorCritic(action_dim, activation=config["ACTIVATION"])
        rng, _rng = jax.random.split(rng)
        network_params = network.init(_rng, jnp.zeros(obs_size))
        lr = linear_schedule if config["ANNEAL_LR"] else config["LR"]
        tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]), optax.adam(lr, eps=1e-5))
        train_state = TrainState.create(apply_fn=network.apply, params=network_params, tx=tx)

        # INIT ENV
        rng, _rng = jax.random.split(rng)
        reset_rng = jax.random.split(_rng, config["NUM_ENVS"])
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_rng, env_params)

        # TRAIN LOOP
        def _update_step(runner_state, unused):
            # COLLECT TRAJECTORIES
            def _env_step(runner_state, unused):
                train_state, env_state, last_obs, rng = runner_state
                rng, _rng = jax.random.split(rng)
                logits, value = network.apply(train_state.params, last_obs)
                action = jax.random.categorical(_rng, logits)
                log_prob = _categorical_log_prob(logits, action)
                rng, _rng = jax.random.split(rng)
                rng_step = jax.random.split(_rng, config["NUM_ENVS"])
                obsv, env_state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                    rng_step, env_state, action, env_params
                )
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
                        logits, value = network.apply(params, traj_batch.obs)
                        log_prob = _categorical_log_prob(logits, traj_batch.action)

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
                        entropy = _categorical_entropy(logits).mean()

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

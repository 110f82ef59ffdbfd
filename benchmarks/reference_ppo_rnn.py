"""A plain single-file recurrent PPO in the structure of PureJaxRL's ppo_rnn.py: the reference for
the recurrent benchmarks (benchmarks/recurrent.py), as reference_ppo.py is for the MLP's.

One `make_train(config)` closure: ppo_rnn.py's ScannedRNN (a GRUCell scanned over time, its carry
reset where an observation begins an episode) between a Dense(GRU_HIDDEN_DIM) + relu embedding and
Dense + relu actor and critic heads; the rollout keeps the carry it began from, and each epoch
shuffles the environments and replays each minibatch's whole sequences from that carry. Two
departures from the file as published (purejaxrl/ppo_rnn.py at 146b485), both as DiscoGen's
recurrent OnPolicyRL template (discogen 1.3.0, templates/recurrent/base/train.py) has them: the
replay resets the carry on each observation's own `last_done`, as the rollout did (ppo_rnn.py stores
the step's `done` and resets one step late in the replay), and GAE reads the step's `done`. Like
PureJaxRL it treats done = terminated | truncated (no bootstrap on a time limit); discrete actions
only. gymnax 1.0's 6-tuple step through reference_ppo.py's wrappers; only jax, flax, optax and
gymnax, no metadisco code.

    train = make_train({**CONFIG, "ENV_NAME": "MemoryChain-bsuite", "TOTAL_TIMESTEPS": 100_000})
    out = jax.jit(train)(jax.random.key(0))     # {"runner_state", "metrics"}
    sampled, greedy = jax.jit(make_evaluate(config))(jax.random.key(1), out["runner_state"])
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax.linen.initializers import constant, orthogonal
from flax.training.train_state import TrainState
from reference_ppo import EVAL_EPISODES, VecEnv, _base_env, _entropy, _log_prob, _sample

# purejaxrl/ppo_rnn.py's __main__ config (CartPole-v1), its GRU and heads 128 wide.
CONFIG = {
    "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 500_000, "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5, "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True, "GRU_HIDDEN_DIM": 128,
}


class ScannedRNN(nn.Module):
    @functools.partial(nn.scan, variable_broadcast="params", in_axes=0, out_axes=0, split_rngs={"params": False})
    @nn.compact
    def __call__(self, carry, x):
        ins, resets = x
        carry = jnp.where(resets[:, np.newaxis], self.initialize_carry(ins.shape[0], ins.shape[1]), carry)
        return nn.GRUCell(features=ins.shape[1])(carry, ins)

    @staticmethod
    def initialize_carry(batch_size, hidden_size):
        return jnp.zeros((batch_size, hidden_size))  # GRUCell's initial carry (zeros), without a key


class ActorCriticRNN(nn.Module):
    action_dim: int
    hidden: int = 128

    @nn.compact
    def __call__(self, hidden, x):
        obs, dones = x
        embedding = nn.relu(nn.Dense(self.hidden, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(obs))
        hidden, embedding = ScannedRNN()(hidden, (embedding, dones))
        actor = nn.relu(nn.Dense(self.hidden, kernel_init=orthogonal(2), bias_init=constant(0.0))(embedding))
        logits = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01), bias_init=constant(0.0))(actor)
        critic = nn.relu(nn.Dense(self.hidden, kernel_init=orthogonal(2), bias_init=constant(0.0))(embedding))
        critic = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(critic)
        return hidden, logits, jnp.squeeze(critic, axis=-1)


class Transition(NamedTuple):
    last_done: jax.Array  # the observation begins an episode: the carry was reset before it
    done: jax.Array  # the step ended the episode
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array
    info: dict


def make_train(config):
    """config dict -> train(rng) -> {"runner_state", "metrics"} (PureJaxRL's ppo_rnn.py)."""
    config = dict(config)
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    env, env_params, obs_size, action_dim, continuous, _ = _base_env(config)
    if continuous:
        raise SystemExit("reference_ppo_rnn.py: discrete actions only (as ppo_rnn.py)")
    env = VecEnv(env)
    hidden_dim = config["GRU_HIDDEN_DIM"]

    def linear_schedule(count):
        frac = 1.0 - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"])) / config["NUM_UPDATES"]
        return config["LR"] * frac

    def train(rng):
        # INIT NETWORK
        network = ActorCriticRNN(action_dim, hidden_dim)
        rng, _rng = jax.random.split(rng)
        init_x = (jnp.zeros((1, config["NUM_ENVS"], obs_size)), jnp.zeros((1, config["NUM_ENVS"]), bool))
        init_hstate = ScannedRNN.initialize_carry(config["NUM_ENVS"], hidden_dim)
        network_params = network.init(_rng, init_hstate, init_x)
        lr = linear_schedule if config["ANNEAL_LR"] else config["LR"]
        tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]), optax.adam(lr, eps=1e-5))
        train_state = TrainState.create(apply_fn=network.apply, params=network_params, tx=tx)

        # INIT ENV
        rng, _rng = jax.random.split(rng)
        obsv, env_state = env.reset(jax.random.split(_rng, config["NUM_ENVS"]), env_params)

        # TRAIN LOOP
        def _update_step(runner_state, unused):
            # COLLECT TRAJECTORIES
            def _env_step(runner_state, unused):
                train_state, env_state, last_obs, last_done, hstate, rng = runner_state
                rng, _rng = jax.random.split(rng)
                ac_in = (last_obs[np.newaxis, :], last_done[np.newaxis, :])
                hstate, logits, value = network.apply(train_state.params, hstate, ac_in)
                logits, value = logits[0], value[0]
                action = _sample(False, logits, _rng)
                log_prob = _log_prob(False, logits, action)
                rng, _rng = jax.random.split(rng)
                rng_step = jax.random.split(_rng, config["NUM_ENVS"])
                obsv, env_state, reward, done, info = env.step(rng_step, env_state, action, env_params)
                transition = Transition(last_done, done, action, value, reward, log_prob, last_obs, info)
                return (train_state, env_state, obsv, done, hstate, rng), transition

            initial_hstate = runner_state[-2]
            runner_state, traj_batch = jax.lax.scan(_env_step, runner_state, None, config["NUM_STEPS"])

            # CALCULATE ADVANTAGE
            train_state, env_state, last_obs, last_done, hstate, rng = runner_state
            ac_in = (last_obs[np.newaxis, :], last_done[np.newaxis, :])
            _, _, last_val = network.apply(train_state.params, hstate, ac_in)
            last_val = last_val[0]

            def _get_advantages(gae_and_next_value, transition):
                gae, next_value = gae_and_next_value
                done, value, reward = transition.done, transition.value, transition.reward
                delta = reward + config["GAMMA"] * next_value * (1 - done) - value
                gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - done) * gae
                return (gae, value), gae

            _, advantages = jax.lax.scan(_get_advantages, (jnp.zeros_like(last_val), last_val), traj_batch,
                                         reverse=True, unroll=16)
            targets = advantages + traj_batch.value

            # UPDATE NETWORK
            def _update_epoch(update_state, unused):
                def _update_minbatch(train_state, batch_info):
                    init_hstate, traj_batch, advantages, targets = batch_info

                    def _loss_fn(params, init_hstate, traj_batch, gae, targets):
                        # RERUN NETWORK
                        _, logits, value = network.apply(params, init_hstate[0], (traj_batch.obs, traj_batch.last_done))
                        log_prob = _log_prob(False, logits, traj_batch.action)

                        # CALCULATE VALUE LOSS
                        value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(
                            -config["CLIP_EPS"], config["CLIP_EPS"])
                        value_losses = jnp.square(value - targets)
                        value_losses_clipped = jnp.square(value_pred_clipped - targets)
                        value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()

                        # CALCULATE ACTOR LOSS
                        ratio = jnp.exp(log_prob - traj_batch.log_prob)
                        gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                        loss_actor1 = ratio * gae
                        loss_actor2 = jnp.clip(ratio, 1.0 - config["CLIP_EPS"], 1.0 + config["CLIP_EPS"]) * gae
                        loss_actor = -jnp.minimum(loss_actor1, loss_actor2).mean()
                        entropy = _entropy(False, logits).mean()

                        total_loss = loss_actor + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
                        return total_loss, (value_loss, loss_actor, entropy)

                    grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
                    total_loss, grads = grad_fn(train_state.params, init_hstate, traj_batch, advantages, targets)
                    return train_state.apply_gradients(grads=grads), total_loss

                train_state, init_hstate, traj_batch, advantages, targets, rng = update_state
                rng, _rng = jax.random.split(rng)
                permutation = jax.random.permutation(_rng, config["NUM_ENVS"])
                batch = (init_hstate, traj_batch, advantages, targets)
                shuffled_batch = jax.tree.map(lambda x: jnp.take(x, permutation, axis=1), batch)
                minibatches = jax.tree.map(
                    lambda x: jnp.swapaxes(
                        jnp.reshape(x, [x.shape[0], config["NUM_MINIBATCHES"], -1] + list(x.shape[2:])), 1, 0),
                    shuffled_batch,
                )
                train_state, total_loss = jax.lax.scan(_update_minbatch, train_state, minibatches)
                return (train_state, init_hstate, traj_batch, advantages, targets, rng), total_loss

            update_state = (train_state, initial_hstate[None, :], traj_batch, advantages, targets, rng)
            update_state, loss_info = jax.lax.scan(_update_epoch, update_state, None, config["UPDATE_EPOCHS"])
            train_state, rng = update_state[0], update_state[-1]
            return (train_state, env_state, last_obs, last_done, hstate, rng), traj_batch.info

        rng, _rng = jax.random.split(rng)
        runner_state = (train_state, env_state, obsv, jnp.zeros(config["NUM_ENVS"], bool), init_hstate, _rng)
        runner_state, metric = jax.lax.scan(_update_step, runner_state, None, config["NUM_UPDATES"])
        return {"runner_state": runner_state, "metrics": metric}

    return train


def make_evaluate(config, episodes: int = EVAL_EPISODES):
    """As reference_ppo.make_evaluate: `episodes` fresh environments per mode (sampled, greedy) play
    one episode each with the trained parameters, the carry starting at zeros; an episode
    unfinished at the time limit counts its partial return. -> evaluate(rng, runner_state) ->
    (sampled [], greedy [])."""
    env, env_params, _, action_dim, _, max_steps = _base_env(config)
    env = VecEnv(env)
    network = ActorCriticRNN(action_dim, config["GRU_HIDDEN_DIM"])

    def evaluate(rng, runner_state):
        params = runner_state[0].params
        rng, _rng = jax.random.split(rng)
        obs, state = env.reset(jnp.concatenate([jax.random.split(_rng, episodes)] * 2), env_params)
        greedy = jnp.arange(2 * episodes) >= episodes
        hstate = ScannedRNN.initialize_carry(2 * episodes, config["GRU_HIDDEN_DIM"])

        def _step(carry, rng):
            obs, state, hstate, total, alive = carry
            rng_act, rng_step = jax.random.split(rng)
            hstate, logits, _ = network.apply(params, hstate, (obs[None], jnp.zeros((1, 2 * episodes), bool)))
            logits = logits[0]
            action = jnp.where(greedy, jnp.argmax(logits, axis=-1), _sample(False, logits, rng_act))
            obs, state, reward, done, _ = env.step(jax.random.split(rng_step, 2 * episodes), state, action, env_params)
            return (obs, state, hstate, total + reward * alive, alive * (1 - done)), None

        carry = (obs, state, hstate, jnp.zeros(2 * episodes), jnp.ones(2 * episodes))
        (_, _, _, total, _), _ = jax.lax.scan(_step, carry, jax.random.split(rng, max_steps))
        return total[:episodes].mean(), total[episodes:].mean()

    return evaluate

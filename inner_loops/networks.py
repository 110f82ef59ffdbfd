"""Actor-critic networks and the two action distributions PPO needs (no distrax dependency).

`ActorCritic`: separate actor and critic MLPs (PPOConfig.network = "mlp", the default).
`RecurrentActorCritic`: PureJaxRL's `ppo_rnn.py` ActorCriticRNN, a GRU or an LSTM between an
embedding and the two heads ("gru", "lstm"), whose carry is reset where an episode starts.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from metadisco.core import ppo_config

ACTIVATIONS = {name: getattr(nn, name) for name in ppo_config.ACTIVATIONS}


class MLP(nn.Module):
    """Dense layers with orthogonal init (sqrt 2) and a linear head scaled by `head_scale`."""

    hidden: Sequence[int]
    out: int
    head_scale: float
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            x = ACTIVATIONS[self.activation](nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        return nn.Dense(self.out, kernel_init=nn.initializers.orthogonal(self.head_scale))(x)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (PureJaxRL layout and orthogonal initialisation).

    __call__(obs [..., *obs_shape]) -> (policy output [..., num_actions], value [...]).
    Discrete: logits. Continuous: the Gaussian mean; log_std is a state-independent parameter.
    `value(obs)` runs the critic alone (bootstrap values of final observations), `policy(obs)`
    the actor alone (evaluation episodes).
    """

    num_actions: int
    discrete: bool
    hidden: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1

    def setup(self):
        self.actor = MLP(self.hidden, self.num_actions, 0.01, self.activation)
        self.critic = MLP(self.hidden, 1, 1.0, self.activation)
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.num_actions,))

    def _flat(self, obs):
        return obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,)).astype(jnp.float32)

    def __call__(self, obs):
        x = self._flat(obs)
        return self._pi(x), self.critic(x)[..., 0]

    def _pi(self, x):
        pi = self.actor(x)
        return pi if self.discrete else (pi, jnp.broadcast_to(self.log_std, pi.shape))

    def policy(self, obs):
        return self._pi(self._flat(obs))

    def value(self, obs):
        return self.critic(self._flat(obs))[..., 0]


CELLS = {"gru": nn.GRUCell, "lstm": nn.OptimizedLSTMCell}  # PPOConfig.network's recurrent choices


class RecurrentActorCritic(nn.Module):
    """PureJaxRL's `ppo_rnn.py` ActorCriticRNN: Dense(size) + relu embedding, a recurrent cell of
    `size` units (flax's GRUCell, or its OptimizedLSTMCell), then actor and critic heads of one
    Dense(size) + relu layer each; orthogonal initialisation with ppo_rnn.py's scales (sqrt 2 for the
    embedding, 2 for the heads' hidden layers, 0.01 and 1 for their outputs), zero biases.

    The carry ([N, size] for the GRU, a (c, h) pair of them for the LSTM) is reset to its initial
    state (zeros) before an observation that begins an episode (`first`), in the rollout and in
    the replay alike (ppo_rnn.py replays with the step's own `done`, one step late: its "hidden
    resets" issue; here both read the same flag).

    __call__(carry, obs [T, N, *obs_shape], first [T, N]) -> (carry, pi [T, N, ...], value [T, N]):
    a whole sequence from `carry` (the update's replay; the cell alone is scanned, the embedding
    and heads see all T steps at once). `step` is one time step of N environments (the rollout),
    `policy_step` the actor alone (evaluation episodes), `value_after` the critic's value of an
    observation that continues the carry's episode (a truncated step's bootstrap from its final
    observation: the carry that saw the episode up to it). Discrete: logits; continuous: the
    Gaussian mean with a state-independent log_std, as `ActorCritic`.
    """

    num_actions: int
    discrete: bool
    cell_type: str = "gru"
    size: int = 128
    obs_ndim: int = 1

    def setup(self):
        def dense(width, scale):
            return nn.Dense(width, kernel_init=nn.initializers.orthogonal(scale), bias_init=nn.initializers.zeros)

        self.embedding = dense(self.size, np.sqrt(2))
        self.cell = CELLS[self.cell_type](self.size)
        self.actor_hidden, self.actor_out = dense(self.size, 2.0), dense(self.num_actions, 0.01)
        self.critic_hidden, self.critic_out = dense(self.size, 2.0), dense(1, 1.0)
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.num_actions,))

    def initial_carry(self, n: int):
        """The carry an episode starts from, for n environments (zeros, as flax's cells start)."""
        zeros = jnp.zeros((n, self.size), jnp.float32)
        return (zeros, zeros) if self.cell_type == "lstm" else zeros

    def _embed(self, obs):
        x = obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,)).astype(jnp.float32)
        return nn.relu(self.embedding(x))

    def _reset(self, carry, first):
        """The carry with the environments where `first` [N] back at their initial state."""
        return jax.tree.map(lambda c: jnp.where(first[:, None], jnp.zeros_like(c), c), carry)

    def _pi(self, y):
        pi = self.actor_out(nn.relu(self.actor_hidden(y)))
        return pi if self.discrete else (pi, jnp.broadcast_to(self.log_std, pi.shape))

    def _value(self, y):
        return self.critic_out(nn.relu(self.critic_hidden(y)))[..., 0]

    def __call__(self, carry, obs, first):
        def body(cell, carry, xs):
            x, first = xs
            return cell(self._reset(carry, first), x)

        scan = nn.scan(body, variable_broadcast="params", split_rngs={"params": False})
        carry, y = scan(self.cell, carry, (self._embed(obs), first))
        return carry, self._pi(y), self._value(y)

    def step(self, carry, obs, first):
        carry, y = self.cell(self._reset(carry, first), self._embed(obs))
        return carry, self._pi(y), self._value(y)

    def policy_step(self, carry, obs):
        carry, y = self.cell(carry, self._embed(obs))
        return carry, self._pi(y)

    def value_after(self, carry, obs):
        _, y = self.cell(carry, self._embed(obs))
        return self._value(y)


def sample(discrete: bool, pi, key):
    """Sample an action and return (action, log_prob)."""
    if discrete:
        action = jax.random.categorical(key, pi)
    else:
        mean, log_std = pi
        action = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    return action, log_prob(discrete, pi, action)


def mode(discrete: bool, pi):
    """The greedy action: argmax of the logits, or the Gaussian's mean."""
    return jnp.argmax(pi, axis=-1) if discrete else pi[0]


def log_prob(discrete: bool, pi, action):
    if discrete:
        logp = jax.nn.log_softmax(pi)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]
    mean, log_std = pi
    z = (action - mean) / jnp.exp(log_std)
    return jnp.sum(-0.5 * z * z - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)


def entropy(discrete: bool, pi):
    if discrete:
        logp = jax.nn.log_softmax(pi)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    _, log_std = pi
    return jnp.sum(log_std + 0.5 * jnp.log(2 * jnp.pi * jnp.e), axis=-1)

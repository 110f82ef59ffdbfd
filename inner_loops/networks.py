"""Actor-critic networks and the two action distributions PPO needs (no distrax dependency)."""

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

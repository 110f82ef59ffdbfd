"""Reward shaping: r' = g(r) + gamma * Phi(s') - Phi(s) (Ng et al. 1999, potential-based).

`next_obs` is the observation the transition ended in *before* any auto-reset (gymnax's
`final_observation`), so no potential is ever taken across a reset. A terminated episode has no
future: Phi(s') is dropped. A truncated one keeps Phi(s') (the state still has a future; the
critic bootstraps from it too).
"""

from __future__ import annotations

import math
from dataclasses import field, replace

import jax.numpy as jnp

from metadisco.meta_objectives._nets import apply_mlp, init_mlp
from metadisco.meta_objectives.base import FROM_ENV, MetaObjective, register


@register
class NoShaping(MetaObjective):
    plug = "shaping"
    name = "none"
    title = "no shaping"

    def init(self, key):
        return {}

    def shape_reward(self, params, obs, reward, next_obs, terminated, gamma):
        return reward


def potential_based(potential, obs, reward, next_obs, terminated, gamma):
    """reward + gamma * Phi(s') - Phi(s) [...], Phi(s') dropped where the episode terminated;
    `potential` maps observations [..., *obs_shape] to Phi [...]."""
    future = jnp.where(terminated, 0.0, potential(next_obs))
    return reward + gamma * future - potential(obs)


def monotone_transform(params, reward):
    """g(r) = e^a (r - tanh r) + e^b tanh r: strictly increasing for all a, b; identity at 0, 0.

    Computed as r + (e^a - 1)(r - tanh r) + (e^b - 1) tanh r, which is exactly r (bit for bit)
    at a = b = 0; the direct form rounds (r - tanh r) + tanh r to within an ulp of r only.
    """
    t = jnp.tanh(reward)
    return reward + jnp.expm1(params["a"]) * (reward - t) + jnp.expm1(params["b"]) * t


@register
class PotentialShaping(MetaObjective):
    """Learned potential Phi(s) = MLP(obs) (zero output layer: no shaping at init).

    Potential-based shaping alone (the default) is policy-invariant: it changes how fast PPO
    learns, never which policy is optimal (Ng et al. 1999).

    obs_shape: one observation's shape (set from the environment through `for_env`).
    obs_scale: per-dimension scales the (flattened) observation is divided by before the network
      reads it, e.g. MountainCar's (1.0, 0.07): a raw velocity of at most 0.07 would hardly move a
      tanh layer, nor an ES perturbation of its weights. Empty: the raw observation.
    scale: Phi's unit (Phi = scale * MLP): the size of potential an ES step of sigma moves, so that
      sigma is set in units that change behaviour (a shaped reward of about the reward's size).
    transform: also learn the monotone reward transform g (identity at init). NOT policy-invariant:
      only positive affine maps of the reward keep the optimal policy, and a strictly increasing
      g is not one (it reweighs rewards of different sizes), so with it evolution may change the
      task being solved, not only how it is learned. The title says so when it is on.
    """

    obs_shape: tuple[int, ...] = field(default=(), metadata={FROM_ENV: True})
    hidden: int = 32
    transform: bool = False
    obs_scale: tuple[float, ...] = ()
    scale: float = 1.0
    plug = "shaping"
    name = "potential"
    title = "learned potential"
    learned = True
    reads_observations = True

    @property
    def valid_for_every_member(self) -> bool:
        """Potential-based at any parameters (policy-invariant); not with the reward transform."""
        return not self.transform

    def __post_init__(self):
        object.__setattr__(self, "obs_shape", tuple(int(d) for d in self.obs_shape))
        object.__setattr__(self, "obs_scale", tuple(float(d) for d in self.obs_scale))
        if not all(math.isfinite(d) and d > 0 for d in self.obs_scale) or not math.isfinite(self.scale):
            raise ValueError(f"potential shaping: obs_scale must be positive numbers and scale finite, "
                             f"got obs_scale={self.obs_scale}, scale={self.scale}")
        if self.transform:  # the instance's title, for figures and reports (not a field)
            object.__setattr__(self, "title", "learned potential + reward transform (not policy-invariant)")

    def for_env(self, obs_shape):
        return replace(self, obs_shape=tuple(obs_shape))

    def observation_shape(self):
        return self.obs_shape or ((len(self.obs_scale),) if self.obs_scale else None)

    def incompatibility(self, obs_shape, env_name="the environment"):
        built_for, env_shape = tuple(self.obs_shape), tuple(int(d) for d in obs_shape)
        # a potential sized for other observations first: for a learned one (a run's), the scale is not the
        # user's to change
        if self.obs_scale and len(self.obs_scale) != math.prod(env_shape) and built_for in ((), env_shape):
            return (f"its shaping potential divides the observation by obs_scale = {list(self.obs_scale)} "
                    f"({len(self.obs_scale)} numbers), but {env_name} has observations of shape {env_shape} "
                    f"({math.prod(env_shape)} numbers); give one scale per observation number, or none.")
        if built_for == env_shape:
            return None
        return (
            f"its learned shaping potential Phi(s) was built for observations of shape {built_for}, "
            f"but {env_name} has observations of shape {env_shape}; a potential reads the observation, "
            f"so it cannot be evaluated there. Choose environments with observation shape "
            f"{built_for} (e.g. the meta-training ones), or a target without learned shaping."
        )

    @property
    def obs_dim(self) -> int:
        return int(math.prod(self.obs_shape))

    def init(self, key):
        if not self.obs_shape:
            raise ValueError("PotentialShaping needs obs_shape (the environment's observation shape)")
        params = {"potential": init_mlp(key, self.obs_dim, self.hidden, bias=True)}
        if self.transform:
            params["transform"] = {"a": jnp.float32(0.0), "b": jnp.float32(0.0)}
        return params

    def potential(self, params, obs):
        """obs: [..., *obs_shape] -> Phi: [...]."""
        batch = obs.shape[: obs.ndim - len(self.obs_shape)]
        flat = obs.reshape(batch + (self.obs_dim,)).astype(jnp.float32)
        if self.obs_scale:
            flat = flat / jnp.asarray(self.obs_scale, jnp.float32)
        phi = apply_mlp(params["potential"], flat)[..., 0]
        return phi if self.scale == 1.0 else self.scale * phi

    def params_reproducing(self, other):
        """No shaping: the initial parameters, whose zero output layer makes Phi = 0 everywhere, so
        that r' = r + gamma * 0 - 0 = r (and the transform at a = b = 0 is r exactly)."""
        if isinstance(other, NoShaping):
            return self.default_params()
        return super().params_reproducing(other)

    def shape_reward(self, params, obs, reward, next_obs, terminated, gamma):
        if self.transform:
            reward = monotone_transform(params["transform"], reward)
        return potential_based(lambda o: self.potential(params, o), obs, reward, next_obs, terminated, gamma)

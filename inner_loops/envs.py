"""Environments behind one functional interface, whichever library they come from.

    env = make_env("CartPole-v1")            # any gymnax id
    env = make_env("brax/ant")               # brax, default backend "spring" (fastest on CPU)
    env = make_env("brax/hopper:positional") # brax with a chosen backend
    obs, state = env.reset(key)
    step = env.step(key, state, action)      # -> Step (auto-resets, tracks episode returns)

`Step.final_obs` is the observation the transition reached before any auto-reset: with
`terminated` it is terminal (no bootstrap), with `truncated` it is not (bootstrap from it).
Everything is a pure function of (key, state, action), so it vmaps over environments.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from inner_loops.catalog import BRAX_PREFIX, available_envs, check_env_name  # noqa: F401  (re-exported)

DEFAULT_BRAX_BACKEND = "spring"
BRAX_EPISODE_LENGTH = 1000


@struct.dataclass
class EnvState:
    """inner: the library's own state; episode_return/length: of the running episode, []."""

    inner: Any
    episode_return: jax.Array
    episode_length: jax.Array


@struct.dataclass
class Step:
    """One transition of one environment (leading axes added by vmap/scan)."""

    obs: jax.Array  # next observation (already reset if the episode ended)
    state: EnvState
    reward: jax.Array  # []
    terminated: jax.Array  # [] bool: the MDP ended; no bootstrap
    truncated: jax.Array  # [] bool: time limit; bootstrap from final_obs
    final_obs: jax.Array  # observation reached before any reset
    episode_return: jax.Array  # [] return of the episode that just ended (valid if done)
    episode_length: jax.Array

    @property
    def done(self):
        return jnp.logical_or(self.terminated, self.truncated)


@dataclass(frozen=True, eq=False)
class Env:
    """A vmappable environment: static description plus pure reset/step functions."""

    name: str
    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int  # discrete: number of actions; continuous: action dimension
    action_low: float | None
    action_high: float | None
    _reset: Callable  # key -> (obs, inner_state)
    _step: Callable  # key, inner_state, action -> (obs, inner, reward, terminated, truncated, final_obs)

    @property
    def library(self) -> str:
        return "brax" if self.name.startswith(BRAX_PREFIX) else "gymnax"

    def reset(self, key: jax.Array) -> tuple[jax.Array, EnvState]:
        obs, inner = self._reset(key)
        return obs, EnvState(inner, jnp.float32(0.0), jnp.int32(0))

    def step(self, key: jax.Array, state: EnvState, action: jax.Array) -> Step:
        if not self.discrete:
            action = jnp.clip(action, self.action_low, self.action_high)
        obs, inner, reward, terminated, truncated, final_obs = self._step(key, state.inner, action)
        reward = jnp.asarray(reward, jnp.float32)
        ep_return = state.episode_return + reward
        ep_length = state.episode_length + 1
        done = jnp.logical_or(terminated, truncated)
        return Step(
            obs=obs,
            state=EnvState(inner, jnp.where(done, 0.0, ep_return), jnp.where(done, 0, ep_length)),
            reward=reward,
            terminated=terminated,
            truncated=jnp.logical_and(truncated, jnp.logical_not(terminated)),
            final_obs=final_obs,
            episode_return=ep_return,
            episode_length=ep_length,
        )


def _import_brax():
    """Import brax.envs, silencing mujoco's print about its optional GPU backend (warp)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from brax import envs as brax_envs
    return brax_envs


def registered_brax_names() -> list[str]:
    """brax's own registry (it keeps no public list); `catalog.BRAX_ENVS` is checked against it."""
    return list(_import_brax()._envs)


def make_env(name: str) -> Env:
    """Build an environment by name (see module docstring)."""
    check_env_name(name)
    if name.startswith(BRAX_PREFIX):
        return _make_brax(name)
    return _make_gymnax(name)


def _make_gymnax(name: str) -> Env:
    import gymnax

    try:
        env, params = gymnax.make(name)
    except OSError as e:  # MNISTBandit-bsuite downloads MNIST when it is built
        raise ValueError(
            f"{name} could not be built: gymnax fetches its data on first use and that failed ({e}). "
            "Run once on a machine with internet access, or choose another environment (`metadisco envs`)."
        ) from e
    action_space = env.action_space(params)
    discrete = hasattr(action_space, "n") or type(action_space).__name__ == "Discrete"

    def reset(key):
        return env.reset(key, params)

    def step(key, inner, action):
        obs, inner, reward, terminated, truncated, info = env.step(key, inner, action, params)
        return obs, inner, reward, terminated, truncated, info["final_observation"]

    if discrete:
        num_actions, low, high = int(action_space.n), None, None
    else:
        num_actions = int(action_space.shape[0]) if action_space.shape else 1
        low, high = float(jnp.min(action_space.low)), float(jnp.max(action_space.high))
    return Env(
        name=name,
        obs_shape=tuple(env.observation_space(params).shape),
        discrete=discrete,
        num_actions=num_actions,
        action_low=low,
        action_high=high,
        _reset=reset,
        _step=step if discrete or action_space.shape else _scalar_action(step),
    )


def _scalar_action(step):
    def wrapped(key, inner, action):
        return step(key, inner, action[..., 0])

    return wrapped


@struct.dataclass
class _BraxState:
    inner: Any
    time: jax.Array


def _make_brax(name: str) -> Env:
    base, _, backend = name.partition(":")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "brax is not actively maintained" on every env
        env = _import_brax().get_environment(base[len(BRAX_PREFIX):], backend=backend or DEFAULT_BRAX_BACKEND)

    def reset(key):
        state = env.reset(key)
        return state.obs, _BraxState(state, jnp.int32(0))

    def step(key, inner, action):
        nxt = env.step(inner.inner, action)
        time = inner.time + 1
        terminated = nxt.done > 0.5
        truncated = time >= BRAX_EPISODE_LENGTH
        done = jnp.logical_or(terminated, truncated)
        obs_reset, state_reset = reset(key)
        new_state = jax.tree.map(lambda r, s: jnp.where(done, r, s), state_reset, _BraxState(nxt, time))
        obs = jnp.where(done, obs_reset, nxt.obs)
        return obs, new_state, nxt.reward, terminated, truncated, nxt.obs

    return Env(
        name=name,
        obs_shape=(int(env.observation_size),),
        discrete=False,
        num_actions=int(env.action_size),
        action_low=-1.0,
        action_high=1.0,
        _reset=reset,
        _step=step,
    )

"""Environments behind one functional interface, whichever library they come from.

    env = make_env("CartPole-v1")            # any gymnax id
    env = make_env("brax/ant")               # brax, default backend "positional" (PureJaxRL's)
    env = make_env("brax/hopper:positional") # brax with a chosen backend
    params = env.default_params              # the library's parameter pytree (brax: {})
    obs, state = env.reset(key, params)
    step = env.step(key, state, action, params)  # -> Step (auto-resets, tracks episode returns)

Bring your own environment: `from_gymnax(my_env)` wraps any object with gymnax 1.0's API (a
subclass of `gymnax.environments.environment.Environment`, say), `from_brax(brax_env, name)` a
brax `Env`. Both keep termination and truncation apart. By name, `make_env("my_envs:Corridor")`
(or an entry point of group `metadisco.envs`) builds the user's own through them (`load_env`).

`Step.final_obs` is the observation the transition reached before any auto-reset: with
`terminated` it is terminal (no bootstrap), with `truncated` it is not (bootstrap from it).
Everything is a pure function of (key, state, action, params): it vmaps over environments and
over environment parameters (`params=None` means `env.default_params`).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from metadisco.core.catalog import (  # noqa: F401  (re-exported)
    BRAX_PREFIX,
    DEFAULT_BRAX_BACKEND,
    available_envs,
    check_env_name,
    env_variant,
    is_builtin_env,
    plugin_env_object,
)
from metadisco.core.errors import ConfigError
from metadisco.core.plugins import PluginError

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
    """A vmappable environment: a static description around a gymnax-style core.

    `core` follows gymnax 1.0's functional API (build an Env with `from_gymnax` / `from_brax`):
        core.reset(key, params) -> (obs, state)
        core.step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)
    auto-resetting, with info["final_observation"] the observation reached before the reset.
    `default_params` is the core's parameter pytree; pass another (or a stacked batch under vmap)
    as `params` to vary the environment without recompiling.
    """

    name: str
    core: Any
    default_params: Any
    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int  # discrete: number of actions; continuous: action dimension
    action_low: float | None
    action_high: float | None
    scalar_action: bool = False  # the core takes a scalar continuous action (a Box of shape ())
    max_episode_steps: int | None = None  # the time limit of `default_params` (caps evaluation episodes)

    @property
    def library(self) -> str:
        return "brax" if self.name.startswith(BRAX_PREFIX) else "gymnax"

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, EnvState]:
        params = self.default_params if params is None else params
        obs, inner = self.core.reset(key, params)
        return obs, EnvState(inner, jnp.float32(0.0), jnp.int32(0))

    def step(self, key: jax.Array, state: EnvState, action: jax.Array, params: Any = None) -> Step:
        """action: [] int (discrete) or [num_actions] float (continuous; clipped to the bounds)."""
        params = self.default_params if params is None else params
        obs, inner, reward, terminated, truncated, info = self.core.step(key, state.inner, self._action(action), params)
        return self._record(state, obs, inner, reward, terminated, truncated, info["final_observation"])

    def step_batch(self, key: jax.Array, state: EnvState, action: jax.Array, params: Any = None) -> Step:
        """Step a batch of environments ([n] leading axis on `state` and `action`), auto-resetting:
        environment i steps with its own `step` and key i of split(key, n)."""
        params = self.default_params if params is None else params
        keys = jax.random.split(key, action.shape[0])
        return jax.vmap(lambda k, s, a: self.step(k, s, a, params))(keys, state, action)

    def _action(self, action: jax.Array) -> jax.Array:
        """The action as the core takes it: clipped to the bounds (continuous), scalar if it must be."""
        if not self.discrete:
            action = jnp.clip(action, self.action_low, self.action_high)
        return action[..., 0] if self.scalar_action else action

    @staticmethod
    def _record(state: EnvState, obs, inner, reward, terminated, truncated, final_obs) -> Step:
        """One environment's Step from its core's transition: episode statistics carried or closed."""
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


def make_env(name: str) -> Env:
    """Build an environment by name (see module docstring); a plug-in (`module:attr` or an entry
    point) through `load_env`."""
    check_env_name(name)
    if not is_builtin_env(name):
        return load_env(name)
    if name.startswith(BRAX_PREFIX):
        base, _, backend = name.partition(":")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "brax is not actively maintained" on every env
            env = _import_brax().get_environment(base[len(BRAX_PREFIX):], backend=backend or DEFAULT_BRAX_BACKEND)
        return from_brax(env, name)
    import gymnax

    name, variant = env_variant(full_name := name)
    try:
        env, params = gymnax.make(name)
    except OSError as e:  # MNISTBandit-bsuite downloads MNIST when it is built
        raise ValueError(
            f"{name} could not be built: gymnax fetches its data on first use and that failed ({e}). "
            "Run once on a machine with internet access, or choose another environment (`metadisco envs`)."
        ) from e
    if variant:
        params = _with_params(params, variant, full_name)
    return from_gymnax(env, params, full_name)


def _with_params(params, variant: dict, name: str):
    """gymnax EnvParams with `variant`'s fields replaced (ConfigError naming the valid fields)."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(params)}
    unknown = sorted(set(variant) - set(fields))
    if unknown:
        raise ConfigError(f"environment {name!r}: no parameter {', '.join(unknown)}; "
                          f"its parameters: {', '.join(fields)}")
    typed = {}
    for key, value in variant.items():
        default = getattr(params, key)
        kind = bool if isinstance(default, bool) else int if isinstance(default, int) else float
        if kind is float and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            article = "an" if kind is int else "a"
            raise ConfigError(f"environment {name!r}: {key} takes {article} {kind.__name__} "
                              f"(its default is {default!r}), got {value!r}")
        typed[key] = value
    return params.replace(**typed)


def from_gymnax(env, params: Any = None, name: str | None = None) -> Env:
    """Wrap an environment that follows gymnax 1.0's API (terminated and truncated apart, auto-reset,
    info["final_observation"]); `params`: its default parameters (None: `env.default_params`).

    The spaces are read from `env.action_space(params)` (a `Discrete` with `.n`, or a `Box` with
    `.shape`, `.low`, `.high`) and `env.observation_space(params).shape`.
    """
    params = env.default_params if params is None else params
    action_space = env.action_space(params)
    discrete = hasattr(action_space, "n") or type(action_space).__name__ == "Discrete"
    if discrete:
        num_actions, low, high = int(action_space.n), None, None
    else:
        num_actions = int(action_space.shape[0]) if action_space.shape else 1
        low, high = float(np.min(action_space.low)), float(np.max(action_space.high))  # no program to compile
    return Env(
        name=name or env.name,
        core=env,
        default_params=params,
        obs_shape=tuple(env.observation_space(params).shape),
        discrete=discrete,
        num_actions=num_actions,
        action_low=low,
        action_high=high,
        scalar_action=not discrete and not action_space.shape,
        max_episode_steps=_time_limit(params),
    )


def _time_limit(params) -> int | None:
    """gymnax's `max_steps_in_episode`, when the parameters are concrete and have one."""
    try:
        return int(params.max_steps_in_episode)
    except (AttributeError, TypeError, jax.errors.ConcretizationTypeError):
        return None


def from_brax(env, name: str, episode_length: int = BRAX_EPISODE_LENGTH) -> Env:
    """Wrap a brax `Env` (actions in [-1, 1]): `done` is termination, `episode_length` truncation."""
    return Env(
        name=name,
        core=BraxCore(env, episode_length),
        default_params={},
        obs_shape=_brax_obs_shape(env),
        discrete=False,
        num_actions=int(env.action_size),
        action_low=-1.0,
        action_high=1.0,
        max_episode_steps=episode_length,
    )


def _brax_obs_shape(env) -> tuple[int, ...]:
    """The observation's shape from the shapes of `env.reset` (jax.eval_shape), not its values: brax's
    own `observation_size` runs a reset op by op, a few hundred small programs to compile (2.5 s on
    the CPU for hopper), for one number."""
    try:
        return tuple(int(n) for n in jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs.shape[-1:])
    except Exception:  # an env whose reset cannot be traced abstractly: brax's own answer
        return (int(env.observation_size),)


@struct.dataclass
class BraxState:
    inner: Any  # brax.envs.State of the running episode
    time: jax.Array  # [] int32 steps into the episode
    first: Any  # brax.envs.State this environment was reset to; every later episode restarts from it


@dataclass(frozen=True, eq=False)
class BraxCore:
    """A brax `Env` behind gymnax's API: auto-reset, a time limit as truncation, no parameters.

    The auto-reset is brax's own (`AutoResetWrapper`, as PureJaxRL uses it): the state of the
    first reset is kept and selected with `where` when an episode ends, so a step never runs the
    physics pipeline's init (docs/benchmarks.md, "Brax auto-reset"). Each environment therefore
    restarts from its own first initial state; `num_envs` environments give `num_envs` distinct
    starts.
    """

    env: Any
    episode_length: int

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, BraxState]:
        state = self.env.reset(key)
        return state.obs, BraxState(state, jnp.int32(0), state)

    def step(self, key: jax.Array, state: BraxState, action: jax.Array, params: Any = None):
        nxt = self.env.step(state.inner, action)
        time = state.time + 1
        terminated = nxt.done > 0.5
        truncated = time >= self.episode_length
        done = jnp.logical_or(terminated, truncated)
        inner = jax.tree.map(lambda f, s: jnp.where(done, f, s), state.first, nxt)
        new_state = BraxState(inner, jnp.where(done, 0, time), state.first)
        return inner.obs, new_state, nxt.reward, terminated, truncated, {"final_observation": nxt.obs}


def _import_brax():
    """Import brax.envs, silencing mujoco's print about its optional GPU backend (warp)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from brax import envs as brax_envs
    return brax_envs


def registered_brax_names() -> list[str]:
    """brax's own registry (it keeps no public list); `catalog.BRAX_ENVS` is checked against it."""
    return list(_import_brax()._envs)


# Environments from the user's own code: `envs=my_envs:Corridor`, or an installed entry point.
#
# What a plug-in name (metadisco.core.plugins: `module:attr` or an entry point of group
# `metadisco.envs`) may resolve to, and how it becomes an `Env` through the public wrappers:
#
# - a gymnax-style environment class (gymnax 1.0's API: `reset_env`/`step_env` behind
#   `reset`/`step`, `default_params`, `action_space`, `observation_space`), instantiated with no
#   arguments, or an instance of one -> `from_gymnax`;
# - a brax `Env` class or instance (`reset(key)`, `step(state, action)`, `observation_size`,
#   `action_size`) -> `from_brax`;
# - an `Env` already built, or a function of no arguments returning any of the above.
#
# Termination and truncation stay apart, as for the built-ins. The environment's name is the
# plug-in name, so run directories and evaluation results record what re-imports it. A plug-in
# environment trains with the classic PPO preset (`inner.*` overrides change it).

GYMNAX_API = ("reset", "step", "default_params", "action_space", "observation_space")
BRAX_API = ("reset", "step", "observation_size", "action_size")


def load_env(name: str) -> Env:
    """The plug-in environment `name` as an `Env`, checked by tracing one reset and one step
    (PluginError saying what is wrong, before anything compiles for real)."""
    env = as_env(plugin_env_object(name), name)
    check_env(env)
    return env


def as_env(obj, name: str, call: bool = True) -> Env:
    """`obj` (a class, an instance, an `Env`, or a function returning one of them) -> Env."""
    if isinstance(obj, Env):
        return replace(obj, name=name)
    if isinstance(obj, type) or (call and callable(obj) and not _has(obj, GYMNAX_API) and not _has(obj, BRAX_API)):
        what = f"class {obj.__name__}" if isinstance(obj, type) else f"function {getattr(obj, '__name__', obj)}"
        try:
            made = obj()
        except Exception as e:
            raise PluginError(f"environment {name!r}: calling {what}() with no arguments raised "
                              f"{type(e).__name__}: {e}; give an instance, or a function that builds one") from None
        return as_env(made, name, call=False)
    try:
        if _has(obj, GYMNAX_API):
            return from_gymnax(obj, None, name)
        if _has(obj, BRAX_API):
            return from_brax(obj, name)
    except Exception as e:
        raise PluginError(f"environment {name!r}: its spaces could not be read ({type(e).__name__}: {e})") from None
    raise PluginError(
        f"environment {name!r} resolves to a {type(obj).__name__!r} object, not an environment: give a gymnax-style Environment "
        f"(class or instance with {', '.join(GYMNAX_API)}), a brax Env, an inner_loops.Env, or a function returning one"
    )


def check_env(env: Env) -> None:
    """Trace one reset and one step of `env` (shapes only, nothing runs): PluginError naming
    the environment when they fail or disagree with its declared observation shape."""
    key = jax.random.key(0)
    action = jnp.int32(0) if env.discrete else jnp.zeros((env.num_actions,), jnp.float32)
    try:
        obs, state = jax.eval_shape(env.reset, key)
        step = jax.eval_shape(env.step, key, state, action)
    except Exception as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise PluginError(f"environment {env.name!r}: reset or step failed when traced "
                          f"({type(e).__name__}: {message})") from None
    for what, shape in (("reset", obs.shape), ("step", step.obs.shape), ("final_observation", step.final_obs.shape)):
        if tuple(shape) != env.obs_shape:
            raise PluginError(f"environment {env.name!r}: {what} gives observations of shape {tuple(shape)}, "
                              f"but its observation_space says {env.obs_shape}")
    for what in ("terminated", "truncated"):
        if getattr(step, what).shape != ():
            raise PluginError(f"environment {env.name!r}: step's {what} must be a scalar bool per environment")


def _has(obj, names: tuple[str, ...]) -> bool:
    return all(hasattr(obj, n) for n in names)

"""Environments from the user's own code: `envs=my_envs:Corridor`, or an installed entry point.

What a plug-in name (meta_objectives.plugins: `module:attr` or an entry point of group
`metadisco.envs`) may resolve to, and how it becomes an `Env` through the public wrappers:

- a gymnax-style environment class (gymnax 1.0's API: `reset_env`/`step_env` behind
  `reset`/`step`, `default_params`, `action_space`, `observation_space`), instantiated with no
  arguments, or an instance of one -> `from_gymnax`;
- a brax `Env` class or instance (`reset(key)`, `step(state, action)`, `observation_size`,
  `action_size`) -> `from_brax`;
- an `Env` already built, or a function of no arguments returning any of the above.

Termination and truncation stay apart, as for the built-ins. The environment's name is the
plug-in name, so run directories and evaluation results record what re-imports it. A plug-in
environment trains with the classic PPO preset (`inner.*` overrides change it).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from inner_loops.catalog import plugin_env_object
from inner_loops.envs import Env, from_brax, from_gymnax
from meta_objectives.plugins import PluginError

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
        return dataclasses.replace(obj, name=name)
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

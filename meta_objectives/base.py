"""The meta-objective interface and the registry of everything that can evolve.

A meta-objective is a small frozen dataclass (its fields are static structure: sizes, feature
switches) with pure functions over a separate parameter pytree (which evolution perturbs and
vmap batches), as optax's `GradientTransformation` and gymnax's `(env, env_params)` split:

    objective.init(key) -> params        # reproduces the hand-designed baseline exactly
    objective.<plug>(params, ...)        # the function the PPO plug point calls

The three plug points of the inner PPO (see inner_loops.ppo) and their call signatures:

    drift(params, ratio, advantage, progress) -> D          # >= 0, == 0 and flat at ratio == 1
    value_loss(params, value, target, old_value) -> L       # per sample
    shape_reward(params, obs, reward, next_obs, terminated, gamma) -> shaped reward

Adding an objective = one file with one frozen dataclass that sets `plug` and `name`, implements
`init` and its plug function, and is decorated with `@register`.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, ClassVar

import jax

from meta_objectives import _compat  # noqa: F401  (refuses a deadlocking jaxlib)

PLUGS = ("drift", "value_loss", "shaping")
Params = Any  # a pytree of float32 arrays

_REGISTRY: dict[str, dict[str, type]] = {plug: {} for plug in PLUGS}


class MetaObjective:
    """Base of all objectives: `init` plus one plug function (named after the plug point)."""

    plug: ClassVar[str]
    name: ClassVar[str]
    learned: ClassVar[bool] = False  # True when params are a network (not a few constants)

    def init(self, key: jax.Array) -> Params:
        raise NotImplementedError

    def spec(self) -> dict:
        """JSON-able description from which `make_objective` rebuilds this object."""
        return {"plug": self.plug, "name": self.name, "config": dataclasses.asdict(self)}


def register(cls: type) -> type:
    """Class decorator: make `cls` constructible by name via `make_objective`."""
    if cls.plug not in PLUGS:
        raise ValueError(f"{cls.__name__}.plug must be one of {PLUGS}, got {cls.plug!r}")
    _REGISTRY[cls.plug][cls.name] = cls
    return cls


def _load_builtins() -> None:
    """Import the modules that register the built-in objectives (the package imports lazily)."""
    import importlib

    for module in ("drift", "value_loss", "shaping", "closed_form"):
        importlib.import_module(f"meta_objectives.{module}")


def names(plug: str, learned: bool | None = None) -> list[str]:
    """Registered objective names for a plug point (only the learned ones, or only the others)."""
    _load_builtins()
    registry = _REGISTRY[_check_plug(plug)]
    return sorted(n for n, cls in registry.items() if learned is None or cls.learned == learned)


def _check_plug(plug: str) -> str:
    if plug not in PLUGS:
        raise ValueError(f"unknown plug point {plug!r}; choose one of {', '.join(PLUGS)}")
    return plug


def make_objective(plug: str, name: str, **config) -> MetaObjective:
    """Build a registered objective by plug point and name, e.g. ('drift', 'lpo')."""
    _load_builtins()
    registry = _REGISTRY[_check_plug(plug)]
    if name not in registry:
        close = difflib.get_close_matches(name, list(registry), n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown {plug} objective {name!r}.{hint} Available: {', '.join(sorted(registry))}."
        )
    cls = registry[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(config) - fields
    if unknown:
        raise ValueError(
            f"{plug} objective {name!r} has no option(s) {sorted(unknown)}; it takes {sorted(fields)}"
        )
    return cls(**config)


def from_spec(spec: dict) -> MetaObjective:
    """Inverse of `MetaObjective.spec()`."""
    return make_objective(spec["plug"], spec["name"], **spec.get("config", {}))

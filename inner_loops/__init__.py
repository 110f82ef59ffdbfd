"""Inner loops: environments behind one interface, and PPO as one pure train function.

The package imports lazily (PEP 562): `metadisco.inner_loops.catalog` (environment names, preset families)
and `metadisco.inner_loops.ppo_config` (PPO's settings and presets) are jax-free, so the command line
validates a config before jax starts; `from metadisco.inner_loops import make_train` imports the module
that defines it on first use.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "available_envs": "catalog", "check_env_name": "catalog", "preset_name": "catalog",
    "Env": "envs", "Step": "envs", "from_brax": "envs", "from_gymnax": "envs", "make_env": "envs",
    "PRESETS": "ppo_config", "PPOConfig": "ppo_config", "PPOHyperparams": "ppo_config", "preset_for": "ppo_config",
    "TrainResult": "ppo", "gae": "ppo", "make_train": "ppo",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))

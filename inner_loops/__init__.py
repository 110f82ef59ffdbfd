"""Inner loops: environments behind one interface, and PPO as one pure train function.

The package imports lazily (PEP 562): `from metadisco.inner_loops import make_train` imports the
module that defines it on first use. Environment names, preset families and PPO's settings are
vocabulary, defined jax-free in metadisco.core.catalog and metadisco.core.ppo_config (the command
line validates a config before jax starts) and re-exported here.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "available_envs": "metadisco.core.catalog", "check_env_name": "metadisco.core.catalog",
    "preset_name": "metadisco.core.catalog",
    "Env": "envs", "Step": "envs", "from_brax": "envs", "from_gymnax": "envs", "make_env": "envs",
    "PRESETS": "metadisco.core.ppo_config", "PPOConfig": "metadisco.core.ppo_config",
    "PPOHyperparams": "metadisco.core.ppo_config", "preset_for": "metadisco.core.ppo_config",
    "TrainResult": "ppo", "gae": "ppo", "make_train": "ppo",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _EXPORTS[name] if "." in _EXPORTS[name] else f"{__name__}.{_EXPORTS[name]}"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))

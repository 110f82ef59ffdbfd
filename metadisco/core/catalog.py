"""The names of every environment metadisco can build, and their PPO preset family, without jax.

The command line validates a config before jax starts (a typo in an environment name is reported
in well under two seconds), so the names are kept here as tables; `tests/test_envs_catalog.py`
checks that they equal gymnax's and brax's own registries, so a library upgrade that adds or
drops an environment fails a test instead of drifting silently.
"""

from __future__ import annotations

import difflib

from metadisco.core.errors import ConfigError
from metadisco.core.options import split_options
from metadisco.core.plugins import ENVS_GROUP, entry_points, is_import_path, load, load_entry_point

BRAX_PREFIX = "brax/"
BRAX_BACKENDS = ("spring", "positional", "generalized", "mjx")
# PureJaxRL trains brax on the positional backend; brax/NAME:BACKEND picks another.
DEFAULT_BRAX_BACKEND = "positional"

# gymnax 1.0.1 `gymnax.registered_envs`, in its order.
GYMNAX_ENVS = (
    "CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
    "Catch-bsuite", "DeepSea-bsuite", "MemoryChain-bsuite", "UmbrellaChain-bsuite", "DiscountingChain-bsuite",
    "MNISTBandit-bsuite", "SimpleBandit-bsuite",
    "FourRooms-misc", "MetaMaze-misc", "PointRobot-misc", "BernoulliBandit-misc", "GaussianBandit-misc",
    "Reacher-misc", "Swimmer-misc", "Pong-misc", "FrozenLake-misc",
)
# brax 0.14.2 `brax.envs._envs` (brax keeps no public list), sorted.
BRAX_ENVS = (
    "ant", "fast", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_double_pendulum",
    "inverted_pendulum", "pusher", "reacher", "swimmer", "walker2d",
)


def available_envs() -> list[str]:
    """Every environment name `make_env` accepts: gymnax ids, then brax/<name>."""
    return list(GYMNAX_ENVS) + [BRAX_PREFIX + n for n in BRAX_ENVS]


def preset_name(env_name: str) -> str:
    """The PPO preset family of an environment: brax, minatar or classic."""
    if env_name.startswith(BRAX_PREFIX):
        return "brax"
    if "MinAtar" in env_name:
        return "minatar"
    return "classic"


def env_variant(name: str) -> tuple[str, dict[str, bool | int | float]]:
    """A gymnax environment with other parameters: "MountainCar-v0[gravity=0.003,force=0.0012]"
    -> ("MountainCar-v0", {"gravity": 0.003, "force": 0.0012}); a plain name -> (name, {}).
    Values are numbers or true/false; `make_env` checks the names against the environment's
    EnvParams (a held-out variant, or a distribution over a family)."""
    try:
        return split_options(name)
    except ValueError as e:
        raise ConfigError(f"environment {name!r}: {e}, e.g. MountainCar-v0[gravity=0.003]") from None


def is_builtin_env(name: str) -> bool:
    """Whether `name` is a gymnax id (with or without other parameters) or a brax name (not a plug-in)."""
    name = name.partition("[")[0]
    base, _, backend = name.partition(":")
    if base.startswith(BRAX_PREFIX):
        return base[len(BRAX_PREFIX):] in BRAX_ENVS and (not backend or backend in BRAX_BACKENDS)
    return not backend and base in GYMNAX_ENVS


def plugin_env_object(name: str):
    """What plug-in environment `name` (`module:attr`, or an entry point of group metadisco.envs)
    names, imported from the user's environment (PluginError naming the module otherwise);
    `metadisco.inner_loops.envs` turns it into an Env."""
    if is_import_path(name):
        return load(name, "environment")
    return load_entry_point(ENVS_GROUP, name, "environment")


def check_env_name(name: str) -> None:
    """Raise ConfigError naming close matches if `name` is not a known environment.

    Brax names may carry a backend: brax/ant:positional. A plug-in (`module:attr` or an installed
    entry point) is imported here, so a missing module or attribute is reported before jax starts.
    """
    if is_import_path(name) or (not is_builtin_env(name) and name in entry_points(ENVS_GROUP)):
        plugin_env_object(name)
        return
    name, variant = env_variant(name)
    if variant and (name.startswith(BRAX_PREFIX) or ":" in name):
        raise ConfigError(f"other parameters in brackets are for gymnax environments (e.g. "
                          f"MountainCar-v0[gravity=0.003]); {name!r} is not one")
    base, _, backend = name.partition(":")
    if base.startswith(BRAX_PREFIX):
        if backend and backend not in BRAX_BACKENDS:
            raise ConfigError(f"unknown brax backend {backend!r} in {name!r}; choose one of {', '.join(BRAX_BACKENDS)}")
        if base[len(BRAX_PREFIX):] in BRAX_ENVS:
            return
    elif not backend and base in GYMNAX_ENVS:
        return
    known = available_envs()
    close = difflib.get_close_matches(base, known, n=4, cutoff=0.5)
    close += [k for k in known if base.lower() in k.lower() and k not in close][:4]
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ConfigError(
        f"unknown environment {name!r}.{hint} Run `metadisco envs` for the full list "
        f"(gymnax ids such as CartPole-v1, Breakout-MinAtar; brax as brax/ant[:backend]; your own as module:attr)."
    )

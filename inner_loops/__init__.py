"""Inner loops: environments behind one interface, and PPO as one pure train function."""

from inner_loops.envs import Env, Step, available_envs, check_env_name, make_env
from inner_loops.ppo import PRESETS, PPOConfig, PPOHyperparams, TrainResult, gae, make_train, preset_for, preset_name
from meta_objectives import _compat  # noqa: F401  (refuses a deadlocking jaxlib)

__all__ = [
    "Env", "Step", "available_envs", "check_env_name", "make_env", "PRESETS", "PPOConfig",
    "PPOHyperparams", "TrainResult", "gae", "make_train", "preset_for", "preset_name",
]

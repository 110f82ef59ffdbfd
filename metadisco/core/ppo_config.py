"""PPO's settings (jax-free): the static `PPOConfig`, the traced `PPOHyperparams` it holds, and
the published presets. `metadisco.inner_loops.ppo` runs them; `metadisco.core.run_config` makes their fields a
run's `inner` section, so a setting added here is a run-config field (inner.NAME=VALUE).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from metadisco.core.catalog import preset_name


class PPOHyperparams(NamedTuple):
    """Traced numbers (leaves): vmappable, and evolution could propose them. A NamedTuple, so that
    it is a pytree without importing jax (as optax's states are)."""

    lr: float = 2.5e-4  # Adam's learning rate (annealed linearly to 0 where anneal_lr)
    gamma: float = 0.99  # the discount
    gae_lambda: float = 0.95  # GAE's lambda
    ent_coef: float = 0.01  # the entropy bonus's coefficient
    vf_coef: float = 0.5  # the value loss's coefficient
    max_grad_norm: float = 0.5  # gradients are clipped to this global norm

    def replace(self, **changes) -> PPOHyperparams:
        return self._replace(**changes)


ACTIVATIONS = ("tanh", "relu")  # the hidden layers' activations, flax.linen's functions of these names
# The actor-critic: separate MLPs (hidden, activation), or PureJaxRL ppo_rnn.py's recurrent one with a
# GRU or an LSTM of rnn_size units (metadisco.inner_loops.networks.RecurrentActorCritic).
NETWORKS = ("mlp", "gru", "lstm")
RECURRENT = ("gru", "lstm")


@dataclass(frozen=True)
class PPOConfig:
    """Static structure of a PPO run (changing any of these recompiles)."""

    num_envs: int = 4  # parallel environments per agent
    num_steps: int = 128  # steps per environment in one rollout
    total_timesteps: int = 500_000  # environment steps per training run (rounded down to whole rollouts)
    update_epochs: int = 4  # passes over each rollout
    num_minibatches: int = 4  # minibatches per pass (must divide num_envs * num_steps)
    hidden: tuple[int, ...] = (64, 64)  # hidden layer widths of the actor and of the critic
    activation: str = "tanh"  # the hidden layers' activation, one of ACTIVATIONS
    # The actor-critic, one of NETWORKS: "mlp" (hidden, activation), or a recurrent one, "gru" or "lstm"
    # (an embedding, the cell and the two heads, each rnn_size wide; minibatches of whole sequences).
    network: str = "mlp"
    rnn_size: int = 128  # width of the recurrent network's embedding, cell and heads (ppo_rnn.py's 128)
    anneal_lr: bool = True  # anneal the learning rate linearly to 0 over training
    normalize_obs: bool = False  # normalise observations by their running mean and std
    normalize_reward: bool = False  # divide rewards by the running std of the discounted return
    record_samples: int = 0  # (ratio, advantage, value, target) rows kept per minibatch step, for distillation
    eval_episodes: int = 16  # final-policy evaluation episodes per mode (sampled, greedy); 0: none
    # Also play the greedy episodes (False: their scores are NaN, the sampled ones unchanged bit for
    # bit). A meta-training run plays them only when its fitness scores them (metadisco.config.ppo_config).
    eval_greedy: bool = True
    eval_max_steps: int | None = None  # step cap of an evaluation episode (None: the env's time limit)
    # Heavy-tailed reward corruption of the training signal (a rediscovery problem): every reward
    # PPO learns from gets scale * t(df) noise added; episode returns and evaluations stay clean.
    reward_noise: float = 0.0  # scale of the Student-t noise (0: none)
    reward_noise_df: float = 1.5  # its degrees of freedom (<= 2: infinite variance)
    hparams: PPOHyperparams = field(default_factory=PPOHyperparams)

    @property
    def recurrent(self) -> bool:
        """A recurrent actor-critic (network gru or lstm): its minibatches are whole sequences."""
        return self.network in RECURRENT

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    @property
    def steps_per_run(self) -> int:
        """Environment steps actually taken (total_timesteps rounded down to whole updates)."""
        return self.num_updates * self.batch_size

    def replace(self, **changes) -> PPOConfig:
        hp = {k: changes.pop(k) for k in list(changes) if k in PPOHyperparams._fields}
        cfg = dataclasses.replace(self, **changes)
        return dataclasses.replace(cfg, hparams=cfg.hparams.replace(**hp)) if hp else cfg

    def validate(self) -> PPOConfig:
        """Raise ValueError (before anything compiles) for a config that cannot run."""
        for name in ("num_envs", "num_steps", "total_timesteps", "update_epochs", "num_minibatches"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"PPO config: {name} must be a positive integer, got {getattr(self, name)}")
        if int(self.eval_episodes) < 0:
            raise ValueError(f"PPO config: eval_episodes must be >= 0, got {self.eval_episodes}")
        if self.reward_noise < 0 or self.reward_noise_df <= 0:
            raise ValueError(f"PPO config: reward_noise must be >= 0 and reward_noise_df > 0, got "
                             f"{self.reward_noise} and {self.reward_noise_df}")
        if self.eval_max_steps is not None and self.eval_max_steps <= 0:
            raise ValueError(f"PPO config: eval_max_steps must be positive (or None), got {self.eval_max_steps}")
        if self.batch_size % self.num_minibatches:
            raise ValueError(
                f"PPO config: the batch (num_envs * num_steps = {self.num_envs} * {self.num_steps} = "
                f"{self.batch_size}) does not split into num_minibatches = {self.num_minibatches}; "
                "choose num_minibatches dividing it."
            )
        if self.num_updates < 1:
            raise ValueError(
                f"PPO config: total_timesteps = {self.total_timesteps} is less than one rollout "
                f"(num_envs * num_steps = {self.batch_size}); raise total_timesteps."
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"PPO config: activation must be one of {sorted(ACTIVATIONS)}")
        if self.network not in NETWORKS:
            raise ValueError(f"PPO config: network must be one of {', '.join(NETWORKS)}, got {self.network!r}")
        if self.recurrent and self.num_envs % self.num_minibatches:
            raise ValueError(
                f"PPO config: a recurrent network ({self.network}) replays whole sequences, so its minibatches "
                f"split the environments: num_envs = {self.num_envs} does not split into num_minibatches = "
                f"{self.num_minibatches}; choose num_minibatches dividing num_envs."
            )
        if self.rnn_size <= 0:
            raise ValueError(f"PPO config: rnn_size must be positive, got {self.rnn_size}")
        if not self.hidden or min(self.hidden) <= 0:
            raise ValueError("PPO config: hidden must be a non-empty tuple of positive widths")
        hp = self.hparams
        if not (hp.lr > 0 and 0 < hp.gamma <= 1 and 0 <= hp.gae_lambda <= 1 and hp.max_grad_norm > 0):
            raise ValueError(f"PPO config: need lr > 0, 0 < gamma <= 1, 0 <= gae_lambda <= 1, max_grad_norm > 0; got {hp}")
        return self


# Published settings (PureJaxRL: purejaxrl/ppo.py for classic control, examples/brax_minatar.ipynb for
# MinAtar, purejaxrl/ppo_continuous_action.py for brax). CPU experiments shrink total_timesteps.
PRESETS: dict[str, PPOConfig] = {
    "classic": PPOConfig(),
    "minatar": PPOConfig(
        num_envs=64, num_steps=128, total_timesteps=10_000_000, num_minibatches=8, activation="relu",
        hparams=PPOHyperparams(lr=5e-3),
    ),
    # NORMALIZE_ENV: observations and rewards (on brax's positional backend, the catalog's default).
    "brax": PPOConfig(
        num_envs=2048, num_steps=10, total_timesteps=50_000_000, num_minibatches=32, hidden=(256, 256),
        anneal_lr=False, normalize_obs=True, normalize_reward=True, hparams=PPOHyperparams(lr=3e-4, ent_coef=0.0),
    ),
}


def preset_for(env_name: str) -> PPOConfig:
    """The published PPO settings for an environment's family."""
    return PRESETS[preset_name(env_name)]

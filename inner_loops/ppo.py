"""PPO as pure top-level functions, open at three plug points (drift, value loss, reward shaping).

    train = make_train(env, config, objectives)      # static: shapes, env, objectives
    result = train(key, meta_params)                 # jit-able; vmap over key, meta_params,
                                                     # hparams= and env_params=
    result.returns                                   # [num_updates] learning curve

`make_train` binds `train` to a `PPO` record (env, config, objectives, network: the static half
of a run); `train` puts the traced half in one `TrainInputs` pytree (objective parameters,
hyperparameters, environment parameters). The file reads top to bottom as the run does:
`init_runner`; then per update (`update`, PureJaxRL's `_update_step`), `collect` a rollout with
its values (its `env_step` is PureJaxRL's `_env_step`), `gae`, and `update_epoch` x epochs of
minibatch steps on `ppo_loss`; `train` scans the updates. With the default `Objectives()` this is
PPO-clip with PPO's clipped value loss (PureJaxRL), to the number, except that a truncated
episode bootstraps from the value of its final observation.

A recurrent actor-critic (config.network "gru" or "lstm": PureJaxRL's `ppo_rnn.py`) runs on the same
functions: the runner carries the cell's state and whether each observation begins an episode
(where the carry is reset), `update` keeps the carry the rollout started from so that `ppo_loss`
replays whole sequences, and `update_epoch` splits the environments, not the steps, into
minibatches. The few places that differ read `ppo.recurrent` (`act`, `bootstrap_value`, `replay`,
`minibatches`); with the MLP they compute what they did before, to the bit.

`meta_params` is a dict keyed by plug point ("drift", "value_loss", "shaping") holding the
parameters of the plugs being evolved; the others use their objective's initial parameters.
The numbers in `PPOHyperparams` and the environment's parameters are traced (vmap over learning
rates or episode lengths works); everything in `PPOConfig` outside `hparams` fixes shapes and
is static. Both, and the presets, are `metadisco.core.ppo_config`'s (jax-free), re-exported here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from metadisco.core.ppo_config import PRESETS, PPOConfig, PPOHyperparams, preset_for  # noqa: F401  (re-exported)
from metadisco.inner_loops import networks
from metadisco.inner_loops.envs import Env, EnvState, Step
from metadisco.meta_objectives import Objectives


class Transition(NamedTuple):
    """One environment step of all environments; leaves [num_steps, num_envs, ...] after `collect`."""

    obs: jax.Array  # [..., *obs_shape] the observation acted on, as the environment gave it
    action: jax.Array  # [...] int, or [..., num_actions] float
    log_prob: jax.Array  # [...] log pi_old(action | normalised obs)
    value: jax.Array  # [...] V(obs) of the acting critic
    next_value: jax.Array  # [...] V(final_obs), the state the step reached before any auto-reset
    #                        (bootstrapped from where truncated; GAE multiplies it by 0 where terminated)
    reward: jax.Array  # [...] the training reward (`training_reward`); episode returns stay raw
    terminated: jax.Array  # [...] bool: the episode ended; no bootstrap
    truncated: jax.Array  # [...] bool: the time limit ended it; bootstrap from the final observation
    episode_return: jax.Array  # [...] return of the episode that just ended (valid where done)
    first: jax.Array | None = None  # [...] bool: `obs` begins an episode (recurrent: the carry reset before it)

    @property
    def done(self) -> jax.Array:
        """[...] bool: an episode ended (terminated or truncated)."""
        return self.terminated | self.truncated


class Batch(NamedTuple):
    """What a gradient step sees: leaves [B, ...] over B samples (step, env) of the rollout."""

    obs: jax.Array  # [B, *obs_shape]
    action: jax.Array  # [B] or [B, num_actions]
    log_prob: jax.Array  # [B] of the acting (old) policy
    value: jax.Array  # [B] of the acting critic (for value clipping)
    advantage: jax.Array  # [B] GAE, not yet normalised
    target: jax.Array  # [B] value targets (advantage + value)
    # Recurrent networks only (None for the MLP): the leaves above are [T, E, ...] sequences of E
    # environments, replayed from the carry the rollout started from.
    first: jax.Array | None = None  # [T, E] bool: obs begins an episode (the carry resets before it)
    hstate: Any = None  # the carry at the rollout's start, leaves [E, rnn_size]


class LossAux(NamedTuple):
    """The terms of `ppo_loss` (each a mean over the minibatch) and the visited samples."""

    policy_loss: jax.Array  # [] -mean(r * A_norm - D(r, A_norm))
    value_loss: jax.Array  # [] mean value loss (before vf_coef)
    entropy: jax.Array  # [] mean policy entropy (before ent_coef)
    samples: jax.Array  # [record_samples, 4] (ratio, normalised advantage, value, target)


@struct.dataclass
class ObsNorm:
    """Running mean and variance of observations (parallel Welford update per rollout)."""

    mean: jax.Array  # [*obs_shape]
    var: jax.Array  # [*obs_shape]
    count: jax.Array  # []

    @classmethod
    def create(cls, shape):
        return cls(jnp.zeros(shape), jnp.ones(shape), jnp.float32(1e-4))

    def __call__(self, obs):
        return jnp.clip((obs - self.mean) / jnp.sqrt(self.var + 1e-8), -10.0, 10.0)

    def update(self, batch):
        """Fold in a batch [n, *obs_shape]."""
        b_mean, b_var, b_count = jnp.mean(batch, 0), jnp.var(batch, 0), batch.shape[0]
        delta, total = b_mean - self.mean, self.count + b_count
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        return ObsNorm(self.mean + delta * b_count / total, m2 / total, total)


@struct.dataclass
class RewardNorm:
    """PureJaxRL's NormalizeVecReward: rewards divided by the running std of the discounted return.

    The statistics are updated at every step with the `num_envs` running discounted returns (the
    mean is tracked but not subtracted); the policy is trained on the scaled reward, while episode
    returns and evaluations stay in the environment's own reward.
    """

    stats: ObsNorm  # running mean / var of the discounted return, shape []
    discounted: jax.Array  # [num_envs] running discounted return of each environment

    @classmethod
    def create(cls, num_envs: int):
        return cls(ObsNorm.create(()), jnp.zeros(num_envs))

    def __call__(self, reward, done, gamma):
        """Fold in one step (reward, done [num_envs]) -> (new state, scaled reward [num_envs])."""
        discounted = self.discounted * gamma * (1.0 - done) + reward
        stats = self.stats.update(discounted)
        return RewardNorm(stats, discounted), reward / jnp.sqrt(stats.var + 1e-8)


class Runner(NamedTuple):
    """The carry of the update scan (PureJaxRL's runner_state)."""

    params: dict  # network parameters
    opt_state: optax.OptState
    env_state: EnvState  # leaves [num_envs, ...]
    obs: jax.Array  # [num_envs, *obs_shape] raw observations
    obs_norm: ObsNorm
    reward_norm: RewardNorm  # used only with config.normalize_reward
    key: jax.Array
    hstate: Any = None  # recurrent: the carry, leaves [num_envs, rnn_size]; None for the MLP
    first: jax.Array | None = None  # recurrent: [num_envs] bool, `obs` begins an episode; None for the MLP


class UpdateInfo(NamedTuple):
    """Per-update outputs of `update` (stacked to [num_updates, ...] by the scan in `train`)."""

    mean_return: jax.Array  # [] mean return of episodes that ended in this rollout (NaN if none)
    finite: jax.Array  # [] bool: every loss and parameter finite
    samples: jax.Array  # [update_epochs * num_minibatches * record_samples, 4] from every minibatch step


@struct.dataclass
class TrainResult:
    """What a run reports; nothing grows with the number of environment steps per update.

    The score of a trained agent is the evaluation of its final policy (`eval_return`,
    `eval_return_greedy`: see `evaluate`), and `init_eval_return*` the same for the initial
    policy: the zero of a normalised score. `returns` is the learning curve of the episodes that
    ended during training (for an area under the curve); it never looks ahead.
    """

    returns: jax.Array  # [num_updates] mean return of episodes completed in each update (see carry_forward)
    final_return: jax.Array  # [] mean of the last 10% of `returns`
    diverged: jax.Array  # [] bool: a loss or parameter went NaN/inf
    visited: jax.Array  # [num_updates, update_epochs * num_minibatches * record_samples, 4] (ratio, advantage, value, target)
    eval_return: jax.Array  # [] final policy, actions sampled: mean return of eval_episodes episodes
    eval_return_greedy: jax.Array  # [] final policy, greedy actions (argmax / Gaussian mean)
    init_eval_return: jax.Array  # [] the initial policy, sampled
    init_eval_return_greedy: jax.Array  # [] the initial policy, greedy


@dataclass(frozen=True, eq=False)
class PPO:
    """The static half of a run: what fixes the compiled program (hashed by identity).

    Build it with `PPO.create`; every function below takes it first.
    """

    env: Env
    config: PPOConfig
    objectives: Objectives
    network: networks.ActorCritic | networks.RecurrentActorCritic
    default_meta_params: dict  # `objectives.init(key(0))`: the parameters of plugs not evolved

    @classmethod
    def create(cls, env: Env, config: PPOConfig, objectives: Objectives = Objectives()) -> PPO:
        """Validate `config` (ValueError before anything compiles) and build the network."""
        config.validate()
        if config.eval_episodes and (config.eval_max_steps or env.max_episode_steps) is None:
            raise ValueError(
                f"{env.name} declares no time limit (max_steps_in_episode), so evaluation episodes have no "
                "step cap: set one (inner.eval_max_steps=N in a run config, eval_max_steps in a PPOConfig), or "
                "skip evaluation (eval_episodes=0)"
            )
        if config.recurrent:
            network = networks.RecurrentActorCritic(
                num_actions=env.num_actions, discrete=env.discrete, cell_type=config.network,
                size=config.rnn_size, obs_ndim=len(env.obs_shape),
            )
        else:
            network = networks.ActorCritic(
                num_actions=env.num_actions, discrete=env.discrete, hidden=config.hidden,
                activation=config.activation, obs_ndim=len(env.obs_shape),
            )
        return cls(env, config, objectives, network, objectives.default_params())

    @property
    def recurrent(self) -> bool:
        """The actor-critic is recurrent (config.network gru or lstm)."""
        return self.config.recurrent

    @property
    def eval_cap(self) -> int:
        """The step cap of an evaluation episode."""
        return self.config.eval_max_steps or self.env.max_episode_steps


@struct.dataclass
class TrainInputs:
    """The traced half of a run, one pytree (`PPO` is the static half): vmap over any of its leaves
    (a population's objective parameters, learning rates, episode lengths) without recompiling."""

    obj_params: dict  # {plug: params} for all three plug points (`Objectives.merge`)
    hp: PPOHyperparams
    env_params: Any  # the environment's parameter pytree


def make_optimizer(config: PPOConfig, hp: PPOHyperparams) -> optax.GradientTransformation:
    """Global-norm clipping, then Adam (eps 1e-5) at hp.lr, annealed linearly to 0 over the updates
    if `config.anneal_lr`."""
    steps_per_update = config.update_epochs * config.num_minibatches

    def lr_schedule(count):
        frac = 1.0 - (count // steps_per_update) / config.num_updates
        return hp.lr * frac if config.anneal_lr else hp.lr

    return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(lr_schedule, eps=1e-5))


def init_runner(ppo: PPO, key: jax.Array, inputs: TrainInputs, network_params=None) -> Runner:
    """Initial network and optimiser state, and `num_envs` freshly reset environments.
    network_params: `initial_network(ppo, key)` computed elsewhere (None: here)."""
    env, num_envs = ppo.env, ppo.config.num_envs
    key, k_net, k_env = jax.random.split(key, 3)
    obs, env_state = jax.vmap(lambda k: env.reset(k, inputs.env_params))(jax.random.split(k_env, num_envs))
    params = init_network(ppo, k_net, obs) if network_params is None else network_params
    opt_state = make_optimizer(ppo.config, inputs.hp).init(params)
    hstate, first = ((ppo.network.initial_carry(num_envs), jnp.ones(num_envs, bool)) if ppo.recurrent
                     else (None, None))
    return Runner(params, opt_state, env_state, obs, ObsNorm.create(env.obs_shape), RewardNorm.create(num_envs), key,
                  hstate, first)


def init_network(ppo: PPO, key: jax.Array, obs) -> dict:
    """The network's initial parameters for observations `obs` [num_envs, *obs_shape] (only their
    shape reaches the initialisers); a recurrent network is initialised on a one-step sequence."""
    if not ppo.recurrent:
        return ppo.network.init(key, obs)
    n = obs.shape[0]
    return ppo.network.init(key, ppo.network.initial_carry(n), obs[None], jnp.zeros((1, n), bool))


def initial_network(ppo: PPO, key: jax.Array) -> dict:
    """The network parameters `train(ppo, key, ...)` starts from, computed on their own: a small
    program of their own, shared by every objective and learning rate with this network, so that
    the training programs that take them (`train(..., network_params=)`) compile without the
    initialisers (orthogonal init is about a fifth of a small PPO program's kernels). Bit for bit
    what `init_runner` computes: only the observations' shape reaches the initialisers."""
    _, k_net, _ = jax.random.split(key, 3)
    obs = jnp.zeros((ppo.config.num_envs, *ppo.env.obs_shape), jnp.float32)
    return init_network(ppo, k_net, obs)


def normaliser(ppo: PPO, obs_norm: ObsNorm):
    """What the networks see of an observation: `obs_norm` applied with config.normalize_obs, else the
    observation itself."""
    return obs_norm if ppo.config.normalize_obs else (lambda obs: obs)


REWARD_NOISE_STREAM = 0x6E6F6973  # folded into a step's env key for PPOConfig.reward_noise


def training_reward(ppo: PPO, inputs: TrainInputs, reward_norm: RewardNorm, obs, step: Step,
                    k_env: jax.Array) -> tuple[RewardNorm, jax.Array]:
    """The reward PPO learns from, [num_envs], for the step `step` taken from raw observations `obs`:
    the environment's reward, plus Student-t noise (config.reward_noise, drawn from `k_env`, the
    step's key), divided by the running std of the return (config.normalize_reward), then given to
    the shaping plug. Returns (reward_norm, reward); episode returns keep the environment's reward."""
    config, hp = ppo.config, inputs.hp
    reward = step.reward
    if config.reward_noise:  # its own key stream, so that runs without it are unchanged bit for bit
        k_noise = jax.random.fold_in(k_env, REWARD_NOISE_STREAM)
        reward = reward + config.reward_noise * jax.random.t(k_noise, config.reward_noise_df, reward.shape)
    if config.normalize_reward:
        reward_norm, reward = reward_norm(reward, step.done, hp.gamma)
    reward = ppo.objectives.shaping.shape_reward(
        inputs.obj_params["shaping"], obs, reward, step.final_obs, step.terminated, hp.gamma
    )
    return reward_norm, reward


def act(ppo: PPO, params, hstate, obs, first):
    """The acting network on normalised observations `obs` [N, *obs_shape] -> (hstate, pi, value [N]).
    Recurrent: one step of the carry `hstate`, reset first where `first` [N]; the MLP ignores both."""
    if not ppo.recurrent:
        pi, value = ppo.network.apply(params, obs)
        return hstate, pi, value
    return ppo.network.apply(params, hstate, obs, first, method=ppo.network.step)


def bootstrap_value(ppo: PPO, params, hstate, obs):
    """V(obs) [N] of the observations a step reached before any auto-reset (`Step.final_obs`).
    Recurrent: `hstate` is the carry that acted on the step's observation, so the value is that of
    the episode continued by `obs` (the carry that saw it)."""
    if not ppo.recurrent:
        return ppo.network.apply(params, obs, method=ppo.network.value)
    return ppo.network.apply(params, hstate, obs, method=ppo.network.value_after)


def collect(ppo: PPO, runner: Runner, inputs: TrainInputs) -> tuple[Runner, Transition]:
    """Roll the policy num_steps steps in num_envs environments (PureJaxRL's `_env_step`, scanned).

    Each step acts on the normalised observation with the actor and values it with the critic,
    steps every environment, values the observation the step reached before any auto-reset
    (`Step.final_obs`: what a truncated step bootstraps from), and records the transition. A
    recurrent network steps its carry (reset where the observation begins an episode) and marks
    the next observation as a first where the step ended an episode.
    Returns (runner, Transition [num_steps, num_envs, ...]).
    """
    env = ppo.env
    norm = normaliser(ppo, runner.obs_norm)  # fixed during a rollout

    def env_step(runner, _):
        key, k_act, k_env = jax.random.split(runner.key, 3)
        hstate, pi, value = act(ppo, runner.params, runner.hstate, norm(runner.obs), runner.first)
        action, log_prob = networks.sample(env.discrete, pi, k_act)
        step = env.step_batch(k_env, runner.env_state, action, inputs.env_params)
        # Recurrent: the bootstraps wait for the end of the rollout (below), one batched cell step
        # for all T steps instead of a second cell step in each (the rollout's serial chain).
        next_value = None if ppo.recurrent else bootstrap_value(ppo, runner.params, hstate, norm(step.final_obs))
        reward_norm, reward = training_reward(ppo, inputs, runner.reward_norm, runner.obs, step, k_env)
        transition = Transition(runner.obs, action, log_prob, value, next_value, reward, step.terminated,
                                step.truncated, step.episode_return, runner.first)
        runner = runner._replace(env_state=step.state, obs=step.obs, reward_norm=reward_norm, key=key,
                                 hstate=hstate, first=step.done if ppo.recurrent else None)
        return runner, (transition, (hstate, step.final_obs) if ppo.recurrent else None)

    runner, (traj, reached) = jax.lax.scan(env_step, runner, None, ppo.config.num_steps)
    if ppo.recurrent:  # reached: the carries after acting [T, N, size] and final observations [T, N, ...]
        hstates, final_obs = reached
        traj = traj._replace(next_value=bootstrap_value(ppo, runner.params, hstates, norm(final_obs)))
    return runner, traj


def gae(values, next_values, rewards, terminated, done, gamma, gae_lambda):
    """Generalised advantage estimation over [T, N] arrays, terminated and truncated apart.

    next_values[t] = V(final_obs[t]), the state the transition reached before any reset, so a
    truncated step bootstraps from its real successor while `terminated` zeroes the bootstrap.
    `done` (terminated or truncated) stops the trace at every episode boundary.
    Returns (advantages, value targets), both [T, N].
    """
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values

    def backward(carry, xs):
        delta, d = xs
        carry = delta + gamma * gae_lambda * (1.0 - d) * carry
        return carry, carry

    _, adv = jax.lax.scan(backward, jnp.zeros_like(values[0]), (deltas, done), reverse=True, unroll=16)
    return adv, adv + values


def replay(ppo: PPO, params, batch: Batch) -> tuple[Any, jax.Array, Batch]:
    """The current network on a minibatch -> (pi, value [B], batch with leaves [B, ...]).
    Recurrent: the sequences [T, E] are replayed from the carry the rollout started from (reset
    where an episode begins), then flattened time-major to B = T * E samples."""
    if not ppo.recurrent:
        pi, value = ppo.network.apply(params, batch.obs)
        return pi, value, batch
    _, pi, value = ppo.network.apply(params, batch.hstate, batch.obs, batch.first)
    flat = functools.partial(jax.tree.map, lambda x: x.reshape((-1, *x.shape[2:])))
    return flat(pi), flat(value), flat(batch._replace(first=None, hstate=None))


def ppo_loss(ppo: PPO, params, batch: Batch, obj_params: dict, progress, hp: PPOHyperparams) -> tuple[jax.Array, LossAux]:
    """PPO's loss on a minibatch, the policy term in drift form (LPO, Lu et al. 2022, eq. 4):

        policy_loss = -mean(r A - D(r, A)),   r = pi(a|s) / pi_old(a|s),  A normalised per minibatch
        total = policy_loss + vf_coef * mean(value_loss) - ent_coef * mean(entropy)

    PPO-clip is the drift D = relu((r - clip(r, 1 - eps, 1 + eps)) A). Returns (total [], LossAux).
    The plugs see [B] samples whatever the network (`replay`).
    """
    pi, value, batch = replay(ppo, params, batch)
    ratio = jnp.exp(networks.log_prob(ppo.env.discrete, pi, batch.action) - batch.log_prob)
    adv = (batch.advantage - batch.advantage.mean()) / (batch.advantage.std() + 1e-8)
    drift = ppo.objectives.drift.drift(obj_params["drift"], ratio, adv, progress)
    policy_loss = -jnp.mean(ratio * adv - drift)
    value_loss = jnp.mean(
        ppo.objectives.value_loss.value_loss(obj_params["value_loss"], value, batch.target, batch.value)
    )
    entropy = jnp.mean(networks.entropy(ppo.env.discrete, pi))
    total = policy_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy
    samples = jnp.stack([ratio, adv, value, batch.target], -1)
    if ppo.recurrent:  # rows in time order: record samples spread over the sequences, not their first steps
        n = min(ppo.config.record_samples, samples.shape[0])
        samples = samples[np.linspace(0, samples.shape[0] - 1, n).round().astype(int)]
    samples = samples[: ppo.config.record_samples]
    return total, LossAux(policy_loss, value_loss, entropy, samples)


def minibatches(ppo: PPO, key: jax.Array, batch: Batch):
    """One epoch's minibatches: (index [M, ...], take: index row -> minibatch `Batch`), M = num_minibatches.

    MLP: the minibatches are those of shuffling the flattened batch and splitting it in M
    (PureJaxRL), but each step gathers only its own rows straight from the rollout: the batch is
    neither flattened nor shuffled as a whole (on MinAtar, copies of the observations were a fifth
    of the time of an update). Recurrent: the environments are shuffled and split in M, each
    minibatch their whole sequences [T, num_envs / M, ...] and carries (ppo_rnn.py).
    """
    config = ppo.config
    if ppo.recurrent:
        envs = jax.random.permutation(key, config.num_envs).reshape(config.num_minibatches, -1)

        def take(idx):
            sequences = jax.tree.map(lambda x: x[:, idx], batch._replace(hstate=None))
            return sequences._replace(hstate=jax.tree.map(lambda h: h[idx], batch.hstate))

        return envs, take
    perm = jax.random.permutation(key, config.batch_size)
    steps, envs = jnp.divmod(perm.reshape(config.num_minibatches, config.minibatch_size), config.num_envs)
    return (steps, envs), lambda idx: jax.tree.map(lambda x: x[idx[0], idx[1]], batch)


def update_epoch(ppo: PPO, key: jax.Array, train_state, batch: Batch, progress, inputs: TrainInputs):
    """One epoch: shuffle the batch, one gradient step on `ppo_loss` per minibatch.

    train_state: (params, opt_state); batch: a `Batch` in the rollout's layout, leaves
    [num_steps, num_envs, ...], sample t * num_envs + n at [t, n]; progress: update / num_updates.
    Returns (train_state, (losses [M], samples [M, record_samples, 4])) with M = num_minibatches
    (`minibatches`: of samples for the MLP, of environments' whole sequences for a recurrent network).
    """
    optimizer = make_optimizer(ppo.config, inputs.hp)
    index, take = minibatches(ppo, key, batch)

    def minibatch_step(train_state, idx):
        minibatch = take(idx)
        params, opt_state = train_state
        (loss, aux), grads = jax.value_and_grad(ppo_loss, argnums=1, has_aux=True)(
            ppo, params, minibatch, inputs.obj_params, progress, inputs.hp
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (loss, aux.samples)

    return jax.lax.scan(minibatch_step, train_state, index)


def update(ppo: PPO, runner: Runner, update_idx, inputs: TrainInputs) -> tuple[Runner, UpdateInfo]:
    """One PPO update (PureJaxRL's `_update_step`): collect a rollout and its values, GAE,
    `update_epochs` epochs, then the observation normaliser."""
    config, hp = ppo.config, inputs.hp
    progress = update_idx / config.num_updates
    norm = normaliser(ppo, runner.obs_norm)
    hstate = runner.hstate  # recurrent: the carry the rollout starts from, which the update replays from
    runner, traj = collect(ppo, runner, inputs)
    terminated = traj.terminated.astype(jnp.float32)
    done = traj.done.astype(jnp.float32)
    adv, targets = gae(traj.value, traj.next_value, traj.reward, terminated, done, hp.gamma, hp.gae_lambda)

    batch = Batch(norm(traj.obs), traj.action, traj.log_prob, traj.value, adv, targets, traj.first, hstate)  # [T, N, ...]
    key, k_epochs = jax.random.split(runner.key)
    (params, opt_state), (losses, samples) = jax.lax.scan(
        lambda train_state, k: update_epoch(ppo, k, train_state, batch, progress, inputs),
        (runner.params, runner.opt_state), jax.random.split(k_epochs, config.update_epochs),
    )
    obs_norm = (runner.obs_norm.update(traj.obs.reshape((config.batch_size,) + traj.obs.shape[2:]))
                if config.normalize_obs else runner.obs_norm)
    n_done = done.sum()
    mean_return = jnp.where(n_done > 0, (traj.episode_return * done).sum() / jnp.maximum(n_done, 1), jnp.nan)
    finite = jnp.all(jnp.isfinite(losses)) & jnp.all(
        jnp.array([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(params)])
    )
    runner = runner._replace(params=params, opt_state=opt_state, obs_norm=obs_norm, key=key)
    return runner, UpdateInfo(mean_return, finite, samples.reshape(-1, samples.shape[-1]))


def evaluate_policy(ppo: PPO, key: jax.Array, params, obs_norm: ObsNorm, env_params) -> tuple[jax.Array, jax.Array]:
    """The policy's mean undiscounted return over `eval_episodes` complete episodes, per mode.

    Separate evaluation environments, reset from `key`, play one episode each: `eval_episodes`
    with sampled actions and as many (from the same start states) with greedy ones (argmax of the
    logits, or the Gaussian's mean; only with config.eval_greedy, else the greedy score is NaN and
    the batch is half as wide), the observation normaliser frozen. The return is the
    environment's own reward (never normalised or shaped). An episode still running at the step cap
    (`ppo.eval_cap`: the env's time limit unless eval_max_steps says otherwise; reached only when
    env_params lengthen the episodes) counts with its partial return. The loop stops once every
    episode has ended, so it costs the longest episode played, at most the cap. Returns
    (sampled [], greedy []); (NaN, NaN) when eval_episodes = 0.
    """
    env, network, config = ppo.env, ppo.network, ppo.config
    n = config.eval_episodes
    if not n:
        return jnp.float32(jnp.nan), jnp.float32(jnp.nan)
    norm = normaliser(ppo, obs_norm)
    k_reset, key = jax.random.split(key)
    obs, state = jax.vmap(lambda k: env.reset(k, env_params))(jax.random.split(k_reset, n))
    modes = 2 if config.eval_greedy else 1
    obs, state = jax.tree.map(lambda x: jnp.concatenate([x] * modes), (obs, state))
    # [modes * n]: the first n sample, the last n (if any) act greedily. Without them the sampled
    # half draws what it did with them: jax's threefry keys and bits (partitionable, jax's default)
    # are prefix-consistent, so the first n rows of a draw for 2n are the draw for n.
    greedy = jnp.arange(modes * n) >= n

    def running(carry):
        t, _, _, _, _, alive, _ = carry
        return (t < ppo.eval_cap) & alive.any()

    def one_step(carry):
        t, key, obs, state, total, alive, hstate = carry
        key, k_act, k_env = jax.random.split(key, 3)
        if ppo.recurrent:  # one episode per environment: the carry starts at its initial state, never reset
            hstate, pi = network.apply(params, hstate, norm(obs), method=network.policy_step)
        else:
            pi = network.apply(params, norm(obs), method=network.policy)
        sampled, _ = networks.sample(env.discrete, pi, k_act)
        best = networks.mode(env.discrete, pi)
        action = jnp.where(greedy if env.discrete else greedy[:, None], best, sampled)
        step = env.step_batch(k_env, state, action, env_params)
        total = total + jnp.where(alive, step.reward, 0.0)
        return t + 1, key, step.obs, step.state, total, alive & ~step.done, hstate

    hstate = network.initial_carry(modes * n) if ppo.recurrent else None
    init = (jnp.int32(0), key, obs, state, jnp.zeros(modes * n), jnp.ones(modes * n, bool), hstate)
    total = jax.lax.while_loop(running, one_step, init)[4]
    return total[:n].mean(), (total[n:].mean() if config.eval_greedy else jnp.float32(jnp.nan))


# Evaluation keys are folded out of the run's key, so training draws exactly the keys it did
# before evaluation existed; every evaluation of a run (initial, final) uses the same key:
# the same start states, so differences between them are the policy's.
EVAL_STREAM = 0x6576616C


def train(ppo: PPO, key: jax.Array, meta_params: dict, hparams: PPOHyperparams | None = None,
          env_params=None, network_params=None) -> TrainResult:
    """Train PPO from scratch: `num_updates` updates, scanned; pure, jit-able, vmap-able.

    meta_params: {plug: params} of the evolved plugs (the others take their initial parameters).
    hparams: traced numbers (None: `ppo.config.hparams`). env_params: the environment's parameter
    pytree (None: `ppo.env.default_params`). network_params: `initial_network(ppo, key)`, computed
    by the caller in a program of its own (None: initialised here).

    The initial and the final policy are evaluated (`evaluate_policy`; its cost: docs/benchmarks.md).
    """
    config = ppo.config
    inputs = TrainInputs(
        obj_params=ppo.objectives.merge(meta_params, ppo.default_meta_params),
        hp=config.hparams if hparams is None else hparams,
        env_params=ppo.env.default_params if env_params is None else env_params,
    )
    k_eval = jax.random.fold_in(key, EVAL_STREAM)
    runner = init_runner(ppo, key, inputs, network_params)

    def evaluation(runner):
        return jnp.stack(evaluate_policy(ppo, k_eval, runner.params, runner.obs_norm, inputs.env_params))

    init_eval = evaluation(runner)
    runner, info = jax.lax.scan(lambda runner, i: update(ppo, runner, i, inputs), runner, jnp.arange(config.num_updates))
    final_eval = evaluation(runner)
    returns = carry_forward(info.mean_return, init_eval[0])
    tail = max(1, config.num_updates // 10)
    return TrainResult(
        returns=returns,
        final_return=returns[-tail:].mean(),
        diverged=~jnp.all(info.finite),
        visited=info.samples,
        eval_return=final_eval[0],
        eval_return_greedy=final_eval[1],
        init_eval_return=init_eval[0],
        init_eval_return_greedy=init_eval[1],
    )


def make_train(env: Env, config: PPOConfig, objectives: Objectives = Objectives()):
    """`train` bound to one (env, config, objectives): -> train(key, meta_params, hparams=None, env_params=None)."""
    return functools.partial(train, PPO.create(env, config, objectives))


def carry_forward(returns, initial):
    """Fill the updates in which no episode ended (NaN) with the latest earlier value; those before
    the first finished episode take `initial` (the initial policy's evaluation). No value is ever
    filled from a later update, so a prefix of the curve depends on nothing that came after it.

    returns: [num_updates] with NaN gaps; initial: []. Returns [num_updates].
    """
    values = jnp.concatenate([jnp.reshape(initial, (1,)).astype(returns.dtype), returns])
    valid = ~jnp.isnan(values)
    last = jax.lax.cummax(jnp.where(valid, jnp.arange(values.shape[0]), 0))
    return values[last][1:]

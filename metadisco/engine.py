"""The outer loop: one jitted generation = ask -> vmap(pop) x vmap(seeds) PPO -> fitness -> tell.

The population axis is split over devices with `jax.shard_map` (one host device per core on a
CPU, every GPU on a GPU machine, every device of every process in a `jax.distributed` job).
Everything else in a generation is replicated. Between generations the host only reads the
metrics (one transfer) and, every few generations, writes a checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from metadisco import strategy as strategies
from metadisco.config import ObjectivesConfig, RunConfig, objectives_of, ppo_config, validation_ppo_config
from metadisco.core import scores, streams
from metadisco.core.errors import ConfigError, MetadiscoError
from metadisco.core.records import Comparison, GenerationRecord, Health, Interval, ProblemScores
from metadisco.core.scores import GUARD_SE, at_worst
from metadisco.core.strategies import ANTITHETIC_STRATEGIES, MIRRORED_STRATEGIES
from metadisco.inner_loops import Env, PPOConfig, make_env, make_train
from metadisco.measure import health
from metadisco.measure.stats import gap_closed_ci, mean_ci
from metadisco.meta_objectives import Objectives
from metadisco.meta_objectives import names as objective_names
from metadisco.meta_objectives.base import same_params


def build_objectives(cfg: ObjectivesConfig, obs_shape) -> Objectives:
    """The Objectives a run trains with: each plug's objective built with the options its config
    section gives, then sized for an environment with observations of `obs_shape`."""
    return objectives_of(cfg).for_env(obs_shape)


@dataclasses.dataclass(frozen=True)
class TrainingEnv:
    """One meta-training environment (an entry of cfg.envs), whatever horizons it is trained at."""

    name: str  # as cfg.envs names it
    env: Env
    ppo_config: PPOConfig  # its preset with the run's inner overrides, at its whole budget


@dataclasses.dataclass(frozen=True)
class TrainingProblem:
    """One meta-training problem: an environment at one horizon, a compiled program of its own.

    MetaTrainer.problems lists them env-major: problem `env_index * len(horizons) + h` is env
    `env_index` at horizon `h`; that index is the problem's row in a Baseline.
    """

    name: str  # the env's name, or "env@fraction" with distribution.horizons (metrics, baseline.json)
    env_index: int  # into MetaTrainer.envs and cfg.envs
    env: TrainingEnv
    horizon: float  # fraction of the env's total_timesteps (1.0 without distribution.horizons)
    ppo_config: PPOConfig  # env.ppo_config at that horizon
    train: Callable  # train(key, meta_params[, hparams]) -> TrainResult, with the run's objectives
    ppo_train: Callable  # train(key, {}) -> TrainResult, PPO's own objectives: the reference


@dataclasses.dataclass(frozen=True)
class ValidationProblem:
    """One meta-validation problem (RunConfig.validation): scored with each comparison on fresh seeds,
    never trained on. Its row in a Baseline is len(MetaTrainer.problems) + its index."""

    name: str  # the env's name, as cfg.validation.envs names it
    ppo_config: PPOConfig  # its preset with the run's inner overrides and the section's lr and timesteps
    train: Callable  # train(key, meta_params) -> TrainResult, with the run's objectives
    ppo_train: Callable  # train(key, {}) -> TrainResult, PPO's own objectives: the reference and normaliser


@struct.dataclass
class RunState:
    """Everything a generation reads and writes (replicated over devices)."""

    es_state: Any
    best_fitness: jax.Array  # [] best member fitness so far (metadisco sign: higher is better)
    best_params: Any  # meta-params of that member (pytree like the ES solution)
    generation: jax.Array  # [] int32, completed generations


@struct.dataclass
class Draw:
    """One generation's draw from the training distribution (config.DistributionConfig).

    A function of the generation's key alone, i.e. of (seed, generation). P = population size.
    """

    envs: jax.Array  # [k] int32 indices into cfg.envs: a subset drawn without replacement, or all in order
    horizon: jax.Array  # [] int32 index into MetaTrainer.horizons (0 when the run has one)
    lr_factor: jax.Array  # [P] factor on each env's preset lr; equal within an antithetic pair (i, i + P/2)


@struct.dataclass
class GenerationMetrics:
    """What one generation reports, on device ([] each); `MetaTrainer.record` makes its metrics row."""

    fitness_mean: jax.Array  # over the members that did not diverge (NaN where every member did)
    fitness_max: jax.Array
    fitness_min: jax.Array
    fitness_std: jax.Array
    best_fitness: jax.Array  # the highest member fitness so far
    sigma: jax.Array  # the strategy's step size after the update
    num_diverged: jax.Array  # int
    draw: dict  # what was drawn (GenerationRecord.draw), only the levers the run uses
    health: Health | None  # measure.health.split_half's; None with one seed per member


def mirrored(es_cfg) -> bool:
    """Whether the strategy's population is antithetic pairs (+z, -z) at members i and i + P/2."""
    return es_cfg.strategy in MIRRORED_STRATEGIES or (
        es_cfg.antithetic and es_cfg.strategy in ANTITHETIC_STRATEGIES)


def centered_ranks(fitness, diverged):
    """Per column, the centred rank of each row in [-0.5, 0.5] (ties share their mean rank).

    fitness: [P, k] (one column per environment); diverged: [P] bool, rows tied with the column's
    worst finite score (scores.at_worst, as the mean over environments ranks them). Returns [P, k].
    """
    worst = at_worst(fitness, diverged[:, None], axis=0)
    return jax.vmap(health.centred_rank_weights, in_axes=1, out_axes=1)(worst)


class NormaliserError(MetadiscoError):
    """A normalised fitness on an environment where PPO does not beat its initial policy."""


@struct.dataclass
class Baseline:
    """PPO (default objectives) on each meta-training problem (env, or env and horizon), the
    normaliser of *_norm fitness.

    Each field is [num_problems], a mean over the baseline seeds ([num_problems, seeds] before `mean`).
    """

    init_eval: jax.Array  # the initial policy's evaluation, sampled actions
    init_eval_greedy: jax.Array  # the same, greedy
    final_eval: jax.Array  # the final policy's evaluation, sampled
    greedy_eval: jax.Array  # the final policy's evaluation, greedy
    auc: jax.Array  # mean return over training (the learning curve)
    final: jax.Array  # mean of the last 10% of the learning curve

    @classmethod
    def of(cls, result) -> Baseline:
        """The fields of a TrainResult (any leading axes): every score of the registry (core.scores)."""
        values = {kind: scores.value(result, kind) for kind in scores.SCORES}
        return cls(init_eval=result.init_eval_return, init_eval_greedy=result.init_eval_return_greedy, **values)

    def normaliser(self, kind: str):
        """(PPO's score, the initial policy's) for fitness `kind`: the 1 and the 0 of its `_norm` twin."""
        init = self.init_eval_greedy if scores.score_of(kind).greedy else self.init_eval
        return getattr(self, scores.score_of(kind).name), init

    def mean(self) -> Baseline:
        return jax.tree.map(lambda x: x.mean(-1), self)

    def as_dict(self, envs) -> dict:
        """{name: {field: value}} (baseline.json), one name per training problem (TrainingProblem.name)."""
        return {env: {k: float(v[i]) for k, v in vars(self).items()} for i, env in enumerate(envs)}


def fitness_from(result, kind: str, baseline: Baseline | None, index):
    """TrainResult (any leading axes) -> fitness of the same leading shape: the score of `kind`
    (core.scores), normalised for `*_norm` kinds so that the initial policy scores 0 and PPO 1 on the
    training problem `index` (its position in MetaTrainer.problems; may be traced)."""
    raw = scores.value(result, kind)
    if scores.fitness_of(kind).normalised:
        ppo, init = baseline.normaliser(kind)
        raw = scores.normalise(raw, ppo[index], init[index])
    return raw


def check_normaliser(per_seed: Baseline, kind: str, envs) -> None:
    """Refuse a normalised fitness where PPO's gain over its initial policy is within noise.

    per_seed: fields [num_problems, seeds]; envs: their names. On each env PPO's gain over its initial
    policy must be significant (scores.normaliser_gain, the guard evaluation applies too). Raises
    NormaliserError naming every env where it is not, with advice.
    """
    ppo, init = (np.asarray(x) for x in per_seed.normaliser(kind))
    mean, se, usable = scores.normaliser_gain(ppo, init)
    bad = [
        f"{env}: PPO {float(np.mean(ppo[i])):.4g} vs its initial policy "
        f"{float(np.mean(init[i])):.4g}, gain {mean[i]:+.4g} +- {se[i]:.3g} (standard error)"
        for i, env in enumerate(envs)
        if not usable[i]
    ]
    if bad:
        raise NormaliserError(
            f"fitness={kind} divides by PPO's gain over its initial policy, but PPO does not improve beyond "
            f"noise ({GUARD_SE:g} standard errors over {ppo.shape[-1]} baseline seeds) on:\n  " + "\n  ".join(bad)
            + "\nGive PPO a budget it learns in (inner.total_timesteps, inner.lr), raise baseline_seeds if the "
            "gain is real but noisy, or drop that environment from envs (env@fraction: that horizon from "
            "distribution.horizons)."
        )


class MetaTrainer:
    """Builds every static piece of a run from its config; computes nothing until called."""

    def __init__(self, cfg: RunConfig, devices=None, trains=None, ppo_trains=None, validation_trains=None,
                 validation_ppo_trains=None):
        """trains / ppo_trains: optional replacement inner loops (the evolved one and the PPO
        reference), one `train(key, meta_params) -> TrainResult` per training problem (`problems`:
        per env, or per (env, horizon) with distribution.horizons), for meta-problems with a known
        answer in tests or custom inner loops. With distribution.lr_range the evolved one is called
        as `train(key, meta_params, hparams)`, hparams.lr the drawn rate. validation_trains /
        validation_ppo_trains: the same for the validation problems (cfg.validation.envs, in order)."""
        self.cfg = cfg
        dist = cfg.distribution
        self.envs = tuple(TrainingEnv(name, make_env(name), ppo_config(cfg, name)) for name in cfg.envs)
        self.horizons = tuple(dist.horizons) or (1.0,)
        self.env_slots = dist.envs_per_generation or len(cfg.envs)  # envs each generation trains on
        self.paired = mirrored(cfg.es)
        self.objectives = build_objectives(cfg.objectives, self.envs[0].env.obs_shape)
        self.evolve = tuple(cfg.objectives.evolve)
        # where this run starts, every plug point (the one definition: MetaObjective.start_params)
        self.default_params = self.objectives.start_params(cfg.seed)
        self.initial_solution = {plug: self.default_params[plug] for plug in self.evolve}
        if not jax.tree.leaves(self.initial_solution):
            learned = " or ".join(
                f"objectives.{plug}={name}"
                for plug in self.evolve
                for name in objective_names(plug, learned=True)
            )
            raise ConfigError(
                f"nothing to evolve: the objectives {[getattr(cfg.objectives, p).name for p in self.evolve]} chosen for "
                f"{list(self.evolve)} have no parameters; pick a learned one ({learned})"
            )
        # the start point is PPO exactly (drift_mix, learned_clipped at their starts): the comparisons on
        # fresh seeds train it once, as PPO, instead of twice (one training program fewer to compile)
        as_ppo = self.objectives.params_reproducing(Objectives())
        self.start_is_ppo = (trains is None and ppo_trains is None and validation_trains is None
                             and as_ppo is not None and same_params(self.default_params, as_ppo))
        self.problems = self._training_problems(trains, ppo_trains)
        self.validation = self._validation_problems(validation_trains, validation_ppo_trains)
        self.es, self.es_params = strategies.make_strategy(cfg.es, self.initial_solution)
        devices = list(devices if devices is not None else jax.devices())
        if cfg.devices:
            devices = devices[: cfg.devices]
        n = devices_for(cfg.es.population_size, cfg.members_per_batch, len(devices))
        self.mesh = Mesh(np.array(devices[:n]), ("pop",))
        self.num_params = int(sum(x.size for x in jax.tree.leaves(self.initial_solution)))
        # expected over the draw: k of the envs, each at the mean of its horizons
        self.steps_per_generation = round(cfg.es.population_size * cfg.seeds_per_member * self.env_slots / len(cfg.envs)
                                          * sum(p.ppo_config.steps_per_run for p in self.problems) / len(self.horizons))
        # Pinning shardings keeps one compiled program for every generation: outputs come back in
        # exactly the layout that the next call takes (otherwise generation 2 would recompile).
        replicated = NamedSharding(self.mesh, P())
        self._generation = jax.jit(self._generation_impl, in_shardings=replicated, out_shardings=replicated)
        self._compare = jax.jit(self._compare_impl, in_shardings=replicated, out_shardings=replicated)
        self._baseline = jax.jit(self._baseline_impl, in_shardings=replicated, out_shardings=replicated)

    def _training_problems(self, trains, ppo_trains) -> tuple[TrainingProblem, ...]:
        """Every (env, horizon) pair, env-major, with its programs: `trains` / `ppo_trains` where
        given (one per problem, in that order), else PPO built with the run's objectives / PPO's."""
        cfg = self.cfg
        pairs = [(e, h) for e in range(len(self.envs)) for h in self.horizons]
        configs = [ppo_config(cfg, self.envs[e].name, h) for e, h in pairs]
        trains = trains or [make_train(self.envs[e].env, pc, self.objectives) for (e, _), pc in zip(pairs, configs)]
        ppo_trains = ppo_trains or [make_train(self.envs[e].env, pc, Objectives()) for (e, _), pc in zip(pairs, configs)]
        names = [self.envs[e].name if len(self.horizons) == 1 else f"{self.envs[e].name}@{h:g}" for e, h in pairs]
        if len(trains) != len(pairs) or len(ppo_trains) != len(pairs):
            raise ValueError(f"need one train per training problem {names}")
        return tuple(TrainingProblem(name, e, self.envs[e], h, pc, train, ppo_train)
                     for name, (e, h), pc, train, ppo_train in zip(names, pairs, configs, trains, ppo_trains))

    def _validation_problems(self, trains, ppo_trains) -> tuple[ValidationProblem, ...]:
        """Each validation env (cfg.validation.envs) with its programs: `trains` / `ppo_trains` where given."""
        cfg = self.cfg
        names = cfg.validation.envs
        configs = [validation_ppo_config(cfg, i) for i in range(len(names))]
        envs = [make_env(name) for name in names] if names and not (trains and ppo_trains) else [None] * len(names)
        trains = trains or [make_train(env, pc, self.objectives) for env, pc in zip(envs, configs)]
        ppo_trains = ppo_trains or [make_train(env, pc, Objectives()) for env, pc in zip(envs, configs)]
        if len(trains) != len(names) or len(ppo_trains) != len(names):
            raise ValueError(f"need one train per validation problem {list(names)}")
        return tuple(ValidationProblem(*args) for args in zip(names, configs, trains, ppo_trains))

    # ---------------------------------------------------------------- state
    def init(self) -> RunState:
        key = streams.key(self.cfg.seed, streams.Stream.ES_INIT)
        if strategies.is_population_based(self.es):
            noise = streams.key(self.cfg.seed, streams.Stream.POPULATION)
            z = jax.random.normal(noise, (self.cfg.es.population_size, self.num_params))
            flat, unravel = jax.flatten_util.ravel_pytree(self.initial_solution)
            pop = jax.vmap(unravel)(flat + self.cfg.es.sigma_init * z)
            es_state = self.es.init(key, pop, jnp.full((self.cfg.es.population_size,), jnp.inf), self.es_params)
        else:
            es_state = self.es.init(key, self.initial_solution, self.es_params)
        return _without_weak_types(RunState(es_state, jnp.float32(-jnp.inf), self.initial_solution, jnp.int32(0)))

    def replicate(self, tree):
        """Host values -> arrays replicated over the mesh (global arrays in a multi-host job)."""
        sharding = NamedSharding(self.mesh, P())
        if jax.process_count() == 1:
            return jax.device_put(tree, sharding)
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)

    def mean_params(self, state: RunState):
        """What the run follows (objectives/mean.json, the comparisons on fresh seeds): the ES mean, or
        for a population-based strategy, which has none, the best member seen
        (metadisco.core.strategies.searched_point names it)."""
        if hasattr(self.es, "get_mean"):
            return self.es.get_mean(state.es_state)
        return state.best_params

    def full_params(self, solution) -> dict:
        """An ES solution (evolved plugs only) -> the full meta-params dict of every plug."""
        return self.objectives.merge(solution, self.default_params)

    # ---------------------------------------------------------------- jitted pieces
    def draw(self, key) -> Draw:
        """The generation's draw (Draw) from the run's training distribution, from its `key`."""
        dist, n, pop_size = self.cfg.distribution, len(self.envs), self.cfg.es.population_size
        k_env, k_horizon, k_lr = jax.random.split(key, 3)
        envs = jnp.arange(n)
        if self.env_slots < n:
            envs = jax.random.choice(k_env, n, (self.env_slots,), replace=False)
        horizon = jax.random.randint(k_horizon, (), 0, len(self.horizons))
        lr_factor = jnp.ones(pop_size)
        if dist.lr_range:
            # evosax's mirrored sampling puts the pair (+z, -z) at members i and i + P/2: one factor
            # per pair, tiled, so that a pair's two members differ only in their sign of z
            draws = 1 if dist.lr_draw == "generation" else pop_size // 2 if self.paired else pop_size
            low, high = np.log(dist.lr_range)
            lr_factor = jnp.tile(jnp.exp(jax.random.uniform(k_lr, (draws,), minval=low, maxval=high)), pop_size // draws)
        return Draw(envs.astype(jnp.int32), horizon, lr_factor)

    def _problem(self, p: int, pop, lr_factor, seeds, baseline: Baseline):
        """Fitness on training problem `p` (static): pop leaves [P_local, ...], lr_factor [P_local],
        seeds [S] -> (fitness [P_local, S] per seed, NaN where it diverged; diverged [P_local])."""
        problem = self.problems[p]
        train = problem.train
        if self.cfg.distribution.lr_range:
            train = functools.partial(_at_lr, train, problem.env.ppo_config.hparams)
        else:
            train = functools.partial(_ignoring_lr, train)
        # every plug's parameters from the one source (start_params(seed), as the comparisons and the saved
        # objectives): a plug that does not evolve must not fall back to a train's own defaults
        result = jax.vmap(lambda m, f: jax.vmap(lambda k: train(k, self.full_params(m), f))(seeds))(pop, lr_factor)
        f = fitness_from(result, self.cfg.fitness, baseline, p)
        bad = result.diverged | ~jnp.isfinite(f)
        return jnp.where(bad, jnp.nan, f), bad.any(1)

    def _members(self, pop, lr_factor, seeds, baseline: Baseline, envs, horizon):
        """Fitness of a (local shard of the) population on the drawn problems: pop leaves
        [P_local, ...], lr_factor [P_local], seeds [S]; envs [k] and horizon [] (Draw, replicated).
        Returns (fitness [P_local, k, S] per drawn env and seed, diverged [P_local])."""
        nh = len(self.horizons)
        args = (pop, lr_factor, seeds, baseline)
        if self.env_slots < len(self.envs):
            # one program per problem, compiled once; `switch` on an unbatched index runs only the
            # drawn one, and `map` runs the k slots one after another through the same program
            branches = [functools.partial(self._problem, p) for p in range(len(self.problems))]
            fitness, bad = jax.lax.map(lambda e: jax.lax.switch(e * nh + horizon, branches, *args), envs)
        else:  # every env, in order (envs = arange): a static loop, no switch over envs
            fitness, bad = zip(*(
                jax.lax.switch(horizon, [functools.partial(self._problem, e * nh + h) for h in range(nh)], *args)
                for e in range(len(self.envs))
            ))
            fitness, bad = jnp.stack(fitness), jnp.stack(bad)
        return jnp.moveaxis(fitness, 0, 1), bad.any(0)

    def _members_in_batches(self, pop, lr_factor, seeds, baseline: Baseline, envs, horizon):
        """`_members` over a device's shard, `cfg.members_per_batch` members at a time (a lax.map):
        every batch is the same program whatever the shard's size, so that a member's bits do not
        depend on how many devices split the population (a vmap of one member is compiled otherwise
        than one of several, and XLA may vectorise each width its own way)."""
        size = self.cfg.members_per_batch
        local = lr_factor.shape[0]
        if not size:
            return self._members(pop, lr_factor, seeds, baseline, envs, horizon)

        def batched(x):
            return x.reshape(local // size, size, *x.shape[1:])

        fitness, bad = jax.lax.map(lambda b: self._members(*b, seeds, baseline, envs, horizon),
                                   jax.tree.map(batched, (pop, lr_factor)))
        return fitness.reshape(local, *fitness.shape[2:]), bad.reshape(local)

    def members_fitness(self, pop, draw: Draw, seeds, baseline: Baseline):
        """Fitness of a population on a draw: pop leaves [P, ...] (split over the mesh), seeds [S]
        (every member's). Returns (fitness [P, k, S] per drawn env and seed, NaN where a seed
        diverged; diverged [P])."""
        members = jax.shard_map(
            self._members_in_batches, mesh=self.mesh, in_specs=(P("pop"), P("pop"), P(), P(), P(), P()),
            out_specs=(P("pop"), P("pop")), check_vma=False,
        )
        # Replicated on both sides: otherwise the partitioner carries the split into what computes
        # the population and reads its fitness (the ES's sums over members), whose order of summation
        # then depends on the device count
        replicated = NamedSharding(self.mesh, P())
        pop = jax.lax.with_sharding_constraint(pop, replicated)
        out = members(pop, draw.lr_factor, seeds, baseline, draw.envs, draw.horizon)
        return jax.lax.with_sharding_constraint(out, replicated)

    def _generation_impl(self, state: RunState, key_data, baseline: Baseline):
        # keys cross the jit boundary as raw uint32 data: typed keys cannot become global arrays
        key = jax.random.wrap_key_data(key_data)
        k_ask, k_seeds, k_tell = jax.random.split(key, 3)
        pop, es_state = self.es.ask(k_ask, state.es_state, self.es_params)
        # common random numbers: every member trains on the same seeds (and envs, horizon) this
        # generation, and the two members of an antithetic pair on the same learning rate
        seeds = jax.random.split(k_seeds, self.cfg.seeds_per_member)
        draw = self.draw(jax.random.fold_in(key, streams.DRAW))
        per_seed, diverged = self.members_fitness(pop, draw, seeds, baseline)  # [P, k, S], [P]
        per_env = per_seed.mean(-1)
        fitness = per_env.mean(1)
        diverged = diverged | ~jnp.isfinite(fitness)
        fitness_or_worst = at_worst(fitness, diverged)
        es_fitness = self._es_fitness(fitness_or_worst, per_env, diverged)
        asked = es_state  # what tell is given, and so what its fitness shaping reads (search health)
        es_state, _ = self.es.tell(k_tell, pop, strategies.to_es_loss(es_fitness), es_state, self.es_params)
        best_idx = jnp.argmax(fitness_or_worst)
        improved = fitness_or_worst[best_idx] > state.best_fitness
        best_params = jax.tree.map(lambda b, p: jnp.where(improved, p[best_idx], b), state.best_params, pop)
        new_state = _without_weak_types(RunState(
            es_state, jnp.maximum(state.best_fitness, fitness_or_worst[best_idx]), best_params, state.generation + 1
        ))
        finite = jnp.where(diverged, jnp.nan, fitness)
        metrics = GenerationMetrics(
            fitness_mean=jnp.nanmean(finite),
            fitness_max=jnp.nanmax(finite),
            fitness_min=jnp.nanmin(finite),
            fitness_std=jnp.nanstd(finite),
            best_fitness=new_state.best_fitness,
            sigma=strategies.sigma_of(es_state),
            num_diverged=diverged.sum(),
            draw=self._draw_metrics(draw),
            health=self._health_metrics(pop, asked, per_seed, diverged, fitness_or_worst if self._by_mean else es_fitness),
        )
        return new_state, metrics

    def _es_fitness(self, fitness, per_env, diverged):
        """The fitness the ES is told for each member [P] (higher is better), from fitness [P]
        (diverged members at the worst), per_env [P, k] and diverged [P]."""
        # the mean over envs, or (env_fitness=rank) the mean of each env's ranks, so that no env
        # dominates by the spread of its fitness
        es_fitness = fitness if self.cfg.distribution.env_fitness == "mean" else centered_ranks(per_env, diverged).mean(1)
        if self.cfg.distribution.lr_range and self.cfg.distribution.lr_draw == "pair" and self.paired:
            # Each pair trained at its own rate, which moves both members' fitness alike. The pair's
            # mean is a control variate: the mirrored gradient sum_i f_i z_i is unchanged by it, but
            # the ES's ranks then compare what z did, not which rate a pair drew.
            half = es_fitness.shape[0] // 2
            es_fitness = es_fitness - jnp.tile((es_fitness[:half] + es_fitness[half:]) / 2, 2)
        return es_fitness

    @property
    def _by_mean(self) -> bool:
        return self.cfg.distribution.env_fitness == "mean"

    def _health_metrics(self, pop, es_state, per_seed, diverged, scores) -> Health | None:
        """Search health (metadisco.measure.health): the agreement of the ES gradients and rankings from
        two disjoint halves of the generation's seeds, each gradient weighted as the strategy's own
        update weights its members (its fitness shaping, given es_state: what tell is given; no
        gradient for a population-based strategy); None with a single seed per member. scores [P]:
        the generation's scores (before the pair control variate), to tell a collapsed population."""
        seeds = per_seed.shape[-1]
        if seeds < 2:
            return None

        def scored(part):  # a half's fitness, and what the ES would be told of it (diverged as it treats them)
            per_env = part.mean(-1)
            fitness_or_worst = at_worst(per_env.mean(1), diverged)
            return fitness_or_worst, self._es_fitness(fitness_or_worst, per_env, diverged)

        (fitness_a, es_fitness_a), (fitness_b, es_fitness_b) = (scored(per_seed[..., : seeds // 2]),
                                                                scored(per_seed[..., seeds // 2:]))
        # The pair control variate leaves residuals near 0: their ties are judged against the
        # scores' own magnitude. Ranks (env_fitness=rank) are judged as they are.
        scale = jnp.maximum(jnp.abs(fitness_a).max(), jnp.abs(fitness_b).max()) if self._by_mean else None
        flat = health.flat_members(pop)
        weights = strategies.update_weights(self.es, self.es_params, flat, es_state)
        return health.split_half(flat - flat.mean(0), es_fitness_a, es_fitness_b, weights=weights, scores=scores,
                                 scale=scale)

    def _draw_metrics(self, draw: Draw) -> dict:
        """What was drawn, for the metrics row (GenerationRecord.draw: only the levers the run uses)."""
        out = {}
        if self.env_slots < len(self.envs):
            out |= {name: jnp.isin(e, draw.envs).astype(jnp.float32) for e, name in enumerate(self.cfg.envs)}
        if len(self.horizons) > 1:
            out["horizon"] = jnp.asarray(self.horizons)[draw.horizon]
        if self.cfg.distribution.lr_range:
            out["lr_factor"] = jnp.exp(jnp.log(draw.lr_factor).mean())  # geometric mean over members
        return out

    def _compare_impl(self, solution, key_data, validation_key_data, baseline: Baseline):
        """Fitness of one solution, of the run's start point (the initial solution) and of PPO on
        the same `eval_seeds` seeds, per training problem (every env and horizon), at the
        preset's learning rate; and the same on each validation problem, on `validation.seeds`
        seeds of their own (one program for both, so each problem compiles once):
        ([(ours, start, ppo), ...] per training problem, each [eval_seeds], [...] per validation problem)."""
        params, start = self.full_params(solution), self.full_params(self.initial_solution)

        def scored(problems, key, n, offset):
            seeds = jax.random.split(jax.random.wrap_key_data(key), n)
            out = []
            for i, problem in enumerate(problems):
                def score(run, p, row=offset + i):  # NaN where a seed diverged: a failure, never a score
                    result = jax.vmap(lambda k: run(k, p))(seeds)
                    f = fitness_from(result, self.cfg.fitness, baseline, row)
                    return jnp.where(result.diverged | ~jnp.isfinite(f), jnp.nan, f)

                ppo = score(problem.ppo_train, {})
                out.append((score(problem.train, params), ppo if self.start_is_ppo else score(problem.train, start), ppo))
            return out

        return (scored(self.problems, key_data, self.cfg.eval_seeds, 0),
                scored(self.validation, validation_key_data, self.cfg.validation.seeds, len(self.problems)))

    def _baseline_impl(self, key_data, validation_key_data):
        """Baseline with fields [num_problems + num_validation, baseline_seeds] (PPO at each problem's lr):
        the training problems on seeds of the BASELINE stream, the validation problems on the VALIDATION
        stream's."""
        def of(problems, key):
            seeds = jax.random.split(jax.random.wrap_key_data(key), self.cfg.baseline_seeds)
            return [Baseline.of(jax.vmap(lambda k: p.ppo_train(k, {}))(seeds)) for p in problems]

        results = of(self.problems, key_data) + of(self.validation, validation_key_data)
        return jax.tree.map(lambda *x: jnp.stack(x), *results)

    def baseline_template(self) -> Baseline:
        """A Baseline of the right structure (0 for the initial policy, 1 for PPO)."""
        n = len(self.problems) + len(self.validation)
        return Baseline(*(jnp.zeros(n) if f.startswith("init") else jnp.ones(n) for f in Baseline.__dataclass_fields__))

    # ---------------------------------------------------------------- public calls
    def baseline(self) -> Baseline:
        """PPO on the meta-training problems (every env and horizon, the preset's lr; seeds disjoint
        from the generations' seeds), mean over seeds: fields [num_problems]. Raises NormaliserError
        (check_normaliser) where PPO does not beat its initial policy."""
        if not scores.fitness_of(self.cfg.fitness).normalised:
            return self.baseline_template()
        key = streams.key(self.cfg.seed, streams.Stream.BASELINE)
        validation_key = streams.key(self.cfg.seed, streams.Stream.VALIDATION)
        per_seed = fetch(self._baseline(*self.replicate((jax.random.key_data(key), jax.random.key_data(validation_key)))))
        check_normaliser(per_seed, self.cfg.fitness, self.problem_names)
        return per_seed.mean()

    @property
    def problem_names(self) -> list[str]:
        """The names of a Baseline's rows: the training problems, then the validation problems."""
        return [p.name for p in self.problems] + [p.name for p in self.validation]

    def generation(self, state: RunState, baseline: Baseline, index: int) -> tuple[RunState, GenerationMetrics]:
        """Run generation `index` (= state.generation, known to the host loop, so no device read)
        -> (new state, metrics on device). `state` and `baseline` are replicated (`replicate`)."""
        return self._generation(state, self.replicate(jax.random.key_data(self.generation_key(index))), baseline)

    def record(self, index: int, metrics: GenerationMetrics, wall_time_s: float) -> GenerationRecord:
        """The metrics row of generation `index`: its `metrics` (as `generation` returned them, or
        fetched) and its wall time, with the environment steps per second that makes."""
        m = jax.tree.map(lambda x: np.asarray(x).item(), fetch(metrics))
        return GenerationRecord(
            generation=index, fitness_mean=m.fitness_mean, fitness_max=m.fitness_max, fitness_min=m.fitness_min,
            fitness_std=m.fitness_std, best_fitness=m.best_fitness, sigma=m.sigma, num_diverged=m.num_diverged,
            draw=m.draw, health=m.health, wall_time_s=wall_time_s,
            env_steps_per_s=self.steps_per_generation / wall_time_s)

    def generation_key(self, index: int):
        """The key of generation `index`: everything random in it (ask, seeds, draw, tell) comes from it."""
        return streams.generation(self.cfg.seed, index)

    def draw_of(self, index: int) -> Draw:
        """What generation `index` trained on (its Draw): a function of (seed, generation) only."""
        return self.draw(jax.random.fold_in(self.generation_key(index), streams.DRAW))

    def compare(self, state: RunState, baseline: Baseline, completed: int) -> Comparison:
        """The ES mean against PPO and against the run's start point (its initial solution), all on
        the same fresh seeds, mean over seeds, per training problem and overall; paired
        differences with 95% t-intervals, and the share of the gap from the start to PPO that the
        ES mean closed (paired bootstrap over seeds).
        `completed`: generations done (= state.generation); it picks the seeds."""
        return self.check(state, baseline, completed)[0]

    def check(self, state: RunState, baseline: Baseline, completed: int) -> tuple[Comparison, Comparison | None]:
        """(`compare`'s Comparison on the training problems, the same on the validation problems on
        fresh seeds of their own, or None for a run without [validation]), from one program."""
        keys = (streams.key(self.cfg.seed, streams.Stream.COMPARISON, completed),
                streams.key(self.cfg.seed, streams.Stream.VALIDATION, completed))
        mean = self.replicate(fetch(self.mean_params(fetch(state))))  # host-side: same in every process
        training, validation = fetch(self._compare(mean, *self.replicate(tuple(jax.random.key_data(k) for k in keys)),
                                                   baseline))
        return (self._comparison(self.problems, training),
                self._comparison(self.validation, validation) if self.validation else None)

    def rescore(self, solution, baseline: Baseline, completed: int) -> tuple[Comparison, np.ndarray]:
        """A finalist of selection (metadisco.measure.selection), an ES solution (evolved plugs only),
        scored on the common fresh seeds of the run's end after `completed` generations (Stream.SELECTION),
        by the comparisons' own program: (its Comparison with PPO and the start on the training problems,
        its per-seed validation scores [validation problems, validation.seeds], NaN where a seed diverged)."""
        keys = (streams.key(self.cfg.seed, streams.Stream.SELECTION, completed, 0),
                streams.key(self.cfg.seed, streams.Stream.SELECTION, completed, 1))
        training, validation = fetch(self._compare(self.replicate(fetch(solution)),
                                                   *self.replicate(tuple(jax.random.key_data(k) for k in keys)),
                                                   baseline))
        per_seed = np.stack([np.asarray(ours, np.float64) for ours, _, _ in validation])
        return self._comparison(self.problems, training), per_seed

    @staticmethod
    def _comparison(problems, scored) -> Comparison:
        """A Comparison from `_compare_impl`'s [(ours, start, ppo), ...] on `problems`."""
        out = [tuple(np.asarray(x, np.float64) for x in scores) for scores in scored]
        problems = tuple(ProblemScores(problem.name, *(float(np.mean(x)) for x in scores))
                         for problem, scores in zip(problems, out))
        mean_scores, start, ppo = (np.mean([scores[j] for scores in out], axis=0) for j in range(3))  # [eval_seeds]

        def paired(other) -> Interval:  # paired by seed (all trained on the same seeds); a diverged seed has no score
            diff = (mean_scores - other)[np.isfinite(mean_scores - other)]
            return Interval(*(mean_ci(diff) if diff.size else (np.nan,) * 3))

        ok = np.isfinite(mean_scores) & np.isfinite(start) & np.isfinite(ppo)
        closed = gap_closed_ci(mean_scores[ok], start[ok], ppo[ok]) if ok.sum() >= 2 else (np.nan,) * 3
        return Comparison(problems, mean=float(np.mean(mean_scores)), start=float(np.mean(start)),
                          ppo=float(np.mean(ppo)), diff=paired(ppo), vs_start=paired(start), gap_closed=Interval(*closed))


def devices_for(population_size: int, members_per_batch: int, available: int) -> int:
    """How many of `available` devices split the population: the most that give each device a whole
    number of batches of `members_per_batch` members (any number with 0)."""
    return max(d for d in range(1, available + 1)
               if population_size % d == 0 and (population_size // d) % (members_per_batch or 1) == 0)


def _at_lr(train, hparams, key, meta_params, lr_factor):
    """`train` at `lr_factor` times the rate of `hparams` (a traced leaf: no recompilation)."""
    return train(key, meta_params, hparams.replace(lr=hparams.lr * lr_factor))


def _ignoring_lr(train, key, meta_params, lr_factor):
    return train(key, meta_params)


def _without_weak_types(tree):
    """Drop weak types (evosax returns some), so the next generation's input types equal this
    one's and the jitted generation never recompiles."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.asarray(x).dtype), tree)


def _local(tree):
    """Fully replicated global arrays -> this process's copy (works single- and multi-host)."""

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x.addressable_data(0)
        return x

    return jax.tree.map(one, tree)


def fetch(tree) -> Any:
    """Device (possibly global) arrays -> numpy on this host."""
    return jax.device_get(_local(tree))

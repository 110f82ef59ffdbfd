"""The ES step: ask, then tell (as evosax's), around the scoring program (metadisco.scoring).

A generation is three programs: `ask` (the population, its draw from the training distribution,
the seeds every member shares), the scoring program once per drawn environment, and `tell`
(fitness, its shaping, the strategy's update, the best member, the metrics, and what search health
reads: metadisco.measure.health computes it on the host, so tell holds no copy of it per drawn env).
Ask and tell are small; the training is the scoring program every check of the run shares.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
from flax import struct

from metadisco import strategy as strategies
from metadisco.core import streams
from metadisco.core.scores import at_worst
from metadisco.core.strategies import ANTITHETIC_STRATEGIES, MIRRORED_STRATEGIES
from metadisco.measure import health
from metadisco.scoring import Baseline, RunScores, fitness_from


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
    horizon: jax.Array  # [] int32 index into the run's horizons (0 when the run has one)
    lr_factor: jax.Array  # [P] factor on each env's preset lr; equal within an antithetic pair (i, i + P/2)


@struct.dataclass
class Asked:
    """What `ask` hands the scoring program and `tell`."""

    pop: Any  # the population, leaves [P, ...] (evolved plugs only)
    es_state: Any  # the strategy's state after ask: what tell is given
    seeds: jax.Array  # [P, S, key data]: every member the same S seeds (common random numbers)
    draw: Draw


@struct.dataclass
class GenerationMetrics:
    """What one generation reports, on device ([] each but `halves`); `MetaTrainer.record` makes its
    metrics row, and its search health from `halves` (EsStep.health, on the host)."""

    fitness_mean: jax.Array  # over the members that did not diverge (NaN where every member did)
    fitness_max: jax.Array
    fitness_min: jax.Array
    fitness_std: jax.Array
    best_fitness: jax.Array  # the highest member fitness so far
    sigma: jax.Array  # the strategy's step size after the update
    num_diverged: jax.Array  # int
    draw: dict  # what was drawn (GenerationRecord.draw), only the levers the run uses
    halves: health.Halves | None  # what search health reads (EsStep.health, on the host); None with one seed per member


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


class EsStep:
    """A run's ask and tell: cfg (RunConfig), the strategy `es` with `es_params`, the solution it
    starts from, the run's `horizons` and how many envs a generation draws (`env_slots`)."""

    def __init__(self, cfg, es, es_params, initial_solution, horizons, env_slots: int, replicated):
        self.cfg, self.es, self.es_params = cfg, es, es_params
        self.initial_solution = initial_solution
        self.horizons, self.env_slots, self.paired = horizons, env_slots, mirrored(cfg.es)
        self.num_params = int(sum(x.size for x in jax.tree.leaves(initial_solution)))
        self.weights = strategies.update_weights(es, es_params)  # numpy: search health weights members on the host
        self.ask = jax.jit(self._ask, in_shardings=replicated, out_shardings=replicated)
        self.tell = jax.jit(self._tell, in_shardings=replicated, out_shardings=replicated)

    def init(self) -> RunState:
        cfg = self.cfg
        key = streams.key(cfg.seed, streams.Stream.ES_INIT)
        if strategies.is_population_based(self.es):
            noise = streams.key(cfg.seed, streams.Stream.POPULATION)
            z = jax.random.normal(noise, (cfg.es.population_size, self.num_params))
            flat, unravel = jax.flatten_util.ravel_pytree(self.initial_solution)
            pop = jax.vmap(unravel)(flat + cfg.es.sigma_init * z)
            es_state = self.es.init(key, pop, jnp.full((cfg.es.population_size,), jnp.inf), self.es_params)
        else:
            es_state = self.es.init(key, self.initial_solution, self.es_params)
        return without_weak_types(RunState(es_state, jnp.float32(-jnp.inf), self.initial_solution, jnp.int32(0)))

    def mean_params(self, state: RunState):
        """What the run follows (objectives/mean.json, the comparisons on fresh seeds): the ES mean, or
        for a population-based strategy, which has none, the best member seen
        (metadisco.core.strategies.searched_point names it)."""
        if hasattr(self.es, "get_mean"):
            return self.es.get_mean(state.es_state)
        return state.best_params

    # ---------------------------------------------------------------- the draw
    def draw(self, key) -> Draw:
        """The generation's draw (Draw) from the run's training distribution, from its `key`."""
        dist, n, pop_size = self.cfg.distribution, len(self.cfg.envs), self.cfg.es.population_size
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

    # ---------------------------------------------------------------- ask
    def _ask(self, state: RunState, key_data) -> Asked:
        # keys cross the jit boundary as raw uint32 data: typed keys cannot become global arrays
        key = jax.random.wrap_key_data(key_data)
        k_ask, k_seeds, _ = jax.random.split(key, 3)
        pop, es_state = self.es.ask(k_ask, state.es_state, self.es_params)
        # common random numbers: every member trains on the same seeds (and envs, horizon) this
        # generation, and the two members of an antithetic pair on the same learning rate
        seeds = jax.random.key_data(jax.random.split(k_seeds, self.cfg.seeds_per_member))
        size = self.cfg.es.population_size
        return Asked(pop, es_state, jnp.broadcast_to(seeds, (size, *seeds.shape)),
                     self.draw(jax.random.fold_in(key, streams.DRAW)))

    # ---------------------------------------------------------------- tell
    def _tell(self, state: RunState, asked: Asked, runs: tuple[RunScores, ...], baseline: Baseline, key_data):
        """runs: RunScores [P, S] per drawn env (Draw.envs, in order) -> (new state, GenerationMetrics)."""
        key = jax.random.wrap_key_data(key_data)
        _, _, k_tell = jax.random.split(key, 3)
        nh = len(self.horizons)
        draw, pop = asked.draw, asked.pop
        per_seed = jnp.stack([fitness_from(run, self.cfg.fitness, baseline, draw.envs[i] * nh + draw.horizon)
                              for i, run in enumerate(runs)], axis=1)  # [P, k, S], NaN where a seed diverged
        diverged = jnp.isnan(per_seed).any((1, 2))
        per_env = per_seed.mean(-1)
        fitness = per_env.mean(1)
        diverged = diverged | ~jnp.isfinite(fitness)
        fitness_or_worst = at_worst(fitness, diverged)
        es_fitness = self.es_fitness(fitness_or_worst, per_env, diverged)
        es_state, _ = self.es.tell(k_tell, pop, strategies.to_es_loss(es_fitness), asked.es_state, self.es_params)
        best_idx = jnp.argmax(fitness_or_worst)
        improved = fitness_or_worst[best_idx] > state.best_fitness
        best_params = jax.tree.map(lambda b, p: jnp.where(improved, p[best_idx], b), state.best_params, pop)
        new_state = without_weak_types(RunState(
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
            halves=self._halves(pop, per_seed, diverged, fitness_or_worst if self._by_mean else es_fitness, draw.envs),
        )
        return new_state, metrics

    def es_fitness(self, fitness, per_env, diverged):
        """The fitness the ES is told for each member [P] (higher is better), from fitness [P]
        (diverged members at the worst), per_env [P, k] and diverged [P]."""
        # the mean over envs, or (env_fitness=rank) the mean of each env's ranks, so that no env
        # dominates by the spread of its fitness, or (worst) the worst env's, so that no env is traded
        how = self.cfg.distribution.env_fitness
        if how == "rank":
            es_fitness = centered_ranks(per_env, diverged).mean(1)
        elif how == "worst":
            es_fitness = at_worst(jnp.min(per_env, axis=1), diverged)
        else:
            es_fitness = fitness
        if self.cfg.es.fitness_shaping == "pairwise":
            # TA-LPG's: each antithetic pair (+z at i, -z at i + P/2) against each other, whatever the scale
            half = es_fitness.shape[0] // 2
            better = jnp.sign(es_fitness[:half] - es_fitness[half:]) / 2
            return jnp.concatenate([better, -better])
        if self.cfg.distribution.lr_range and self.cfg.distribution.lr_draw == "pair" and self.paired:
            # Each pair trained at its own rate, which moves both members' fitness alike. The pair's
            # mean is a control variate: the mirrored gradient sum_i f_i z_i is unchanged by it, but
            # the ES's ranks then compare what z did, not which rate a pair drew.
            half = es_fitness.shape[0] // 2
            es_fitness = es_fitness - jnp.tile((es_fitness[:half] + es_fitness[half:]) / 2, 2)
        return es_fitness

    @property
    def _by_mean(self) -> bool:
        """Whether the ES is told scores in fitness units (not ranks, not pairs: their ties are judged as they are)."""
        return self.cfg.distribution.env_fitness != "rank" and self.cfg.es.fitness_shaping != "pairwise"

    def _halves(self, pop, per_seed, diverged, scores, envs) -> health.Halves | None:
        """What search health (`health`, on the host) reads of the generation: for two disjoint halves
        of its seeds, each member's score on the half as the ES would be told it (`es_fitness`, the
        diverged as it treats them), for the whole draw and, in a run of several envs, for each drawn
        env alone (the ES told of that env only: which game moves the gradient and which is seed
        noise), vmapped over the envs: one trace however many are drawn. These stay in the ES's own
        program: scores equal in exact arithmetic (env_fitness=rank's means of ranks) are told apart
        by float32 rounding, and health ranks them as the ES's arithmetic does. None with a single
        seed per member. scores [P]: the generation's scores (before the pair control
        variate), to tell a collapsed population; envs: Draw.envs."""
        seeds = per_seed.shape[-1]
        if seeds < 2:
            return None

        def halves(part):  # [P, k, S] -> each half's fitness and what the ES would be told of it: [2, P] each
            fitness = []
            for half in (part[..., : seeds // 2], part[..., seeds // 2:]):
                per_env = half.mean(-1)
                fitness_or_worst = at_worst(per_env.mean(1), diverged)
                fitness.append((fitness_or_worst, self.es_fitness(fitness_or_worst, per_env, diverged)))
            return tuple(jnp.stack(x) for x in zip(*fitness))

        fitness, told = (x[:, None] for x in halves(per_seed))  # [2, V, P]: view 0, the whole draw
        scores = scores[None]
        if len(self.cfg.envs) > 1:  # views 1..k: each drawn env alone
            by_env = jax.vmap(lambda p: halves(p[:, None]), in_axes=1, out_axes=1)(per_seed)
            fitness, told = (jnp.concatenate([x, y], 1) for x, y in zip((fitness, told), by_env))
            scores = jnp.concatenate([scores, jax.vmap(lambda p: at_worst(jnp.nanmean(p, -1), diverged),
                                                       in_axes=1)(per_seed)])
        # The pair control variate leaves residuals near 0: their ties are judged against the
        # scores' own magnitude. Ranks (env_fitness=rank) are judged as they are.
        scale = jnp.abs(fitness).max((0, 2)) if self._by_mean else None
        flat = health.flat_members(pop)
        return health.Halves(flat - flat.mean(0), told, scale, scores, envs)

    def health(self, halves: health.Halves | None):
        """A generation's search health on the host, from what its tell returned (`halves`, fetched):
        (its Health, each env's own Health as arrays [n] over cfg.envs, NaN and NOT_DRAWN where not
        drawn, or None with one env), each half's gradient weighted as the strategy's update weights
        its members (strategy.update_weights, numpy; measure.health.of_generation)."""
        return health.of_generation(halves, len(self.cfg.envs), self.weights)

    def _draw_metrics(self, draw: Draw) -> dict:
        """What was drawn, for the metrics row (GenerationRecord.draw: only the levers the run uses)."""
        out = {}
        if self.env_slots < len(self.cfg.envs):
            out |= {name: jnp.isin(e, draw.envs).astype(jnp.float32) for e, name in enumerate(self.cfg.envs)}
        if len(self.horizons) > 1:
            out["horizon"] = jnp.asarray(self.horizons)[draw.horizon]
        if self.cfg.distribution.lr_range:
            out["lr_factor"] = jnp.exp(jnp.log(draw.lr_factor).mean())  # geometric mean over members
        return out


def without_weak_types(tree):
    """Drop weak types (evosax returns some), so the next generation's input types equal this
    one's and the jitted programs never recompile."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.asarray(x).dtype), tree)

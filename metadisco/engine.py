"""The outer loop: one jitted generation = ask -> vmap(pop) x vmap(seeds) PPO -> fitness -> tell.

The population axis is split over devices with `jax.shard_map` (one host device per core on a
CPU, every GPU on a GPU machine, every device of every process in a `jax.distributed` job).
Everything else in a generation is replicated. Between generations the host only reads the
metrics (one transfer) and, every few generations, writes a checkpoint.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from analysis.stats import normalize_score
from inner_loops import make_env, make_train
from meta_objectives import Objectives
from meta_objectives import names as objective_names
from meta_objectives.errors import ConfigError
from metadisco import strategy as strategies
from metadisco.config import ObjectivesConfig, RunConfig, ppo_config


def build_objectives(cfg: ObjectivesConfig, obs_shape) -> Objectives:
    """The Objectives a run trains with: each plug's objective built with the options its config
    section gives, then sized for an environment with observations of `obs_shape`."""
    return cfg.build().for_env(obs_shape)


@struct.dataclass
class RunState:
    """Everything a generation reads and writes (replicated over devices)."""

    es_state: Any
    best_fitness: jax.Array  # [] best member fitness so far (metadisco sign: higher is better)
    best_params: Any  # meta-params of that member (pytree like the ES solution)
    generation: jax.Array  # [] int32, completed generations


@struct.dataclass
class Baseline:
    """PPO (default objectives) on each meta-training env: the normaliser of *_norm fitness."""

    init_return: jax.Array  # [num_envs] return of the initial policy (first update)
    auc: jax.Array  # [num_envs] mean return over training
    final: jax.Array  # [num_envs] final return


def fitness_from(result, kind: str, baseline: Baseline | None, env_index: int):
    """TrainResult (any leading axes) -> fitness of the same leading shape."""
    raw = result.returns.mean(-1) if kind.startswith("auc") else result.final_return
    if kind.endswith("_norm"):
        ref = baseline.auc if kind.startswith("auc") else baseline.final
        raw = normalize_score(raw, ref[env_index], baseline.init_return[env_index])
    return raw


class MetaTrainer:
    """Builds every static piece of a run from its config; computes nothing until called."""

    def __init__(self, cfg: RunConfig, devices=None, trains=None, ppo_trains=None):
        """trains / ppo_trains: optional replacement inner loops (the evolved one and the PPO
        reference), one `train(key, meta_params) -> TrainResult` per env, for meta-problems with a
        known answer in tests or custom inner loops."""
        self.cfg = cfg
        self.envs = [make_env(name) for name in cfg.envs]
        self.ppo_configs = [ppo_config(cfg, name) for name in cfg.envs]
        self.objectives = build_objectives(cfg.objectives, self.envs[0].obs_shape)
        self.evolve = tuple(cfg.objectives.evolve)
        init_params = self.objectives.init(jax.random.key(cfg.seed))
        self.initial_solution = {plug: init_params[plug] for plug in self.evolve}
        self.default_params = init_params
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
        self.trains = trains or [make_train(env, pc, self.objectives) for env, pc in zip(self.envs, self.ppo_configs)]
        self.ppo_trains = ppo_trains or [make_train(env, pc, Objectives()) for env, pc in zip(self.envs, self.ppo_configs)]
        self.es, self.es_params = strategies.make_strategy(cfg.es, self.initial_solution)
        devices = list(devices if devices is not None else jax.devices())
        if cfg.devices:
            devices = devices[: cfg.devices]
        n = max(d for d in range(1, len(devices) + 1) if cfg.es.population_size % d == 0)
        self.mesh = Mesh(np.array(devices[:n]), ("pop",))
        self.num_params = int(sum(x.size for x in jax.tree.leaves(self.initial_solution)))
        self.steps_per_generation = cfg.es.population_size * cfg.seeds_per_member * sum(
            pc.steps_per_run for pc in self.ppo_configs
        )
        # Pinning shardings keeps one compiled program for every generation: outputs come back in
        # exactly the layout that the next call takes (otherwise generation 2 would recompile).
        replicated = NamedSharding(self.mesh, P())
        self._generation = jax.jit(self._generation_impl, in_shardings=replicated, out_shardings=replicated)
        self._evaluate = jax.jit(self._evaluate_impl, in_shardings=replicated, out_shardings=replicated)
        self._baseline = jax.jit(self._baseline_impl, in_shardings=replicated, out_shardings=replicated)

    # ---------------------------------------------------------------- state
    def init(self) -> RunState:
        key = jax.random.key(self.cfg.seed)
        if strategies.is_population_based(self.es):
            z = jax.random.normal(key, (self.cfg.es.population_size, self.num_params))
            flat = jax.flatten_util.ravel_pytree(self.initial_solution)[0]
            pop = jax.vmap(self.es._unravel_solution)(flat + self.cfg.es.sigma_init * z)
            es_state = self.es.init(key, pop, jnp.full((self.cfg.es.population_size,), jnp.inf), self.es_params)
        else:
            es_state = self.es.init(key, self.initial_solution, self.es_params)
        return _strong(RunState(es_state, jnp.float32(-jnp.inf), self.initial_solution, jnp.int32(0)))

    def replicate(self, tree):
        """Host values -> arrays replicated over the mesh (global arrays in a multi-host job)."""
        sharding = NamedSharding(self.mesh, P())
        if jax.process_count() == 1:
            return jax.device_put(tree, sharding)
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)

    def mean_params(self, state: RunState):
        if hasattr(self.es, "get_mean"):
            return self.es.get_mean(state.es_state)
        return state.best_params  # population-based strategies have no mean

    def full_params(self, solution) -> dict:
        """An ES solution (evolved plugs only) -> the full meta-params dict of every plug."""
        return self.objectives.merge(solution, self.default_params)

    # ---------------------------------------------------------------- jitted pieces
    def _members(self, pop, seeds, baseline: Baseline):
        """Fitness of a (local shard of the) population: pop leaves [P_local, ...], seeds [S]."""
        fitness, diverged = [], []
        for i, train in enumerate(self.trains):
            result = jax.vmap(lambda p: jax.vmap(lambda k: train(k, p))(seeds))(pop)  # leaves [P, S, ...]
            f = fitness_from(result, self.cfg.fitness, baseline, i)
            bad = result.diverged | ~jnp.isfinite(f)
            fitness.append(jnp.where(bad, jnp.nan, f).mean(1))
            diverged.append(bad.any(1))
        return jnp.stack(fitness).mean(0), jnp.stack(diverged).any(0)

    def _generation_impl(self, state: RunState, key_data, baseline: Baseline):
        # keys cross the jit boundary as raw uint32 data: typed keys cannot become global arrays
        k_ask, k_seeds, k_tell = jax.random.split(jax.random.wrap_key_data(key_data), 3)
        pop, es_state = self.es.ask(k_ask, state.es_state, self.es_params)
        # common random numbers: every member trains on the same seeds this generation
        seeds = jax.random.split(k_seeds, self.cfg.seeds_per_member)
        members = jax.shard_map(
            self._members, mesh=self.mesh, in_specs=(P("pop"), P(), P()), out_specs=(P("pop"), P("pop")),
            check_vma=False,
        )
        fitness, diverged = members(pop, seeds, baseline)
        diverged = diverged | ~jnp.isfinite(fitness)
        # A diverged member gets the worst fitness of the generation (ties the worst finite one).
        worst = jnp.min(jnp.where(diverged, jnp.inf, fitness))
        worst = jnp.where(jnp.isfinite(worst), worst, -1e6)
        clean = jnp.where(diverged, worst, fitness)
        es_state, _ = self.es.tell(k_tell, pop, strategies.to_es_loss(clean), es_state, self.es_params)
        best_idx = jnp.argmax(clean)
        improved = clean[best_idx] > state.best_fitness
        best_params = jax.tree.map(lambda b, p: jnp.where(improved, p[best_idx], b), state.best_params, pop)
        new_state = _strong(RunState(
            es_state, jnp.maximum(state.best_fitness, clean[best_idx]), best_params, state.generation + 1
        ))
        finite = jnp.where(diverged, jnp.nan, fitness)
        metrics = {
            "fitness_mean": jnp.nanmean(finite),
            "fitness_max": jnp.nanmax(finite),
            "fitness_min": jnp.nanmin(finite),
            "fitness_std": jnp.nanstd(finite),
            "best_fitness": new_state.best_fitness,
            "sigma": strategies.sigma_of(es_state),
            "num_diverged": diverged.sum(),
        }
        return new_state, metrics

    def _evaluate_impl(self, solution, key_data, baseline: Baseline):
        """Fitness of one solution and of PPO on the same `eval_seeds` seeds, per env."""
        seeds = jax.random.split(jax.random.wrap_key_data(key_data), self.cfg.eval_seeds)
        params = self.full_params(solution)
        out = []
        for i, (train, ppo) in enumerate(zip(self.trains, self.ppo_trains)):
            ours = fitness_from(jax.vmap(lambda k: train(k, params))(seeds), self.cfg.fitness, baseline, i)
            theirs = fitness_from(jax.vmap(lambda k: ppo(k, {}))(seeds), self.cfg.fitness, baseline, i)
            out.append((ours, theirs))
        return out

    def _baseline_impl(self, key_data):
        seeds = jax.random.split(jax.random.wrap_key_data(key_data), self.cfg.baseline_seeds)
        results = [jax.vmap(lambda k: ppo(k, {}))(seeds) for ppo in self.ppo_trains]
        return Baseline(
            init_return=jnp.stack([r.returns[:, 0].mean() for r in results]),
            auc=jnp.stack([r.returns.mean() for r in results]),
            final=jnp.stack([r.final_return.mean() for r in results]),
        )

    def baseline_template(self) -> Baseline:
        n = len(self.envs)
        return Baseline(jnp.zeros(n), jnp.ones(n), jnp.ones(n))

    # ---------------------------------------------------------------- public calls
    def baseline(self) -> Baseline:
        """PPO on the meta-training envs (seeds disjoint from the generations' seeds)."""
        if not self.cfg.fitness.endswith("_norm"):
            return self.baseline_template()
        key = jax.random.fold_in(jax.random.key(self.cfg.seed), 2**30)
        return self._baseline(self.replicate(jax.random.key_data(key)))

    def generation(self, state: RunState, baseline: Baseline, index: int):
        """Run generation `index` (= state.generation, known to the host loop, so no device read)
        -> (new state, metrics on device). `state` and `baseline` are replicated (`replicate`)."""
        key = jax.random.fold_in(jax.random.key(self.cfg.seed), index)
        return self._generation(state, self.replicate(jax.random.key_data(key)), baseline)

    def evaluate(self, state: RunState, baseline: Baseline, completed: int) -> dict:
        """ES mean vs PPO on fresh seeds (the same for both), mean over seeds, per env and overall.
        `completed`: generations done (= state.generation); it picks the seeds."""
        key = jax.random.fold_in(jax.random.key(self.cfg.seed + 1), completed)
        mean = self.replicate(fetch(self.mean_params(fetch(state))))  # host-side: same in every process
        out = fetch(self._evaluate(mean, self.replicate(jax.random.key_data(key)), baseline))
        row = {}
        for name, (ours, theirs) in zip(self.cfg.envs, out):
            row[f"eval/{name}/mean"] = float(np.mean(ours))
            row[f"eval/{name}/ppo"] = float(np.mean(theirs))
        row["eval_mean_fitness"] = float(np.mean([np.mean(o) for o, _ in out]))
        row["eval_ppo_fitness"] = float(np.mean([np.mean(t) for _, t in out]))
        return row


def _strong(tree):
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

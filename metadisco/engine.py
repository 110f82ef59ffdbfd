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

from analysis.stats import mean_ci, normalize_score
from inner_loops import make_env, make_train
from meta_objectives import Objectives
from meta_objectives import names as objective_names
from meta_objectives.errors import ConfigError, MetadiscoError
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


# What a fitness kind scores (its `_norm` variant divides by PPO's gain on the same score):
# kind -> (the score of a TrainResult, the Baseline field of PPO's score, the Baseline field of
# the initial policy's). The default, final_eval, is the field's (LPO scores the final policy over
# complete evaluation episodes): sampled actions, because that stochastic policy is the one PPO
# optimises and the one whose episodes make the learning curve, so the initial policy's sampled
# evaluation is a consistent zero; a greedy policy can loop until the time limit in deterministic
# games, a different agent from the one trained. greedy_eval scores it for those who want it.
SCORES = {
    "final_eval": (lambda r: r.eval_return, "final_eval", "init_eval"),
    "greedy_eval": (lambda r: r.eval_return_greedy, "greedy_eval", "init_eval_greedy"),
    "auc": (lambda r: r.returns.mean(-1), "auc", "init_eval"),
    "final": (lambda r: r.final_return, "final", "init_eval"),
}
GUARD_SE = 2.0  # PPO's gain over its initial policy must exceed this many standard errors


class NormaliserError(MetadiscoError):
    """A normalised fitness on an environment where PPO does not beat its initial policy."""


@struct.dataclass
class Baseline:
    """PPO (default objectives) on each meta-training env, the normaliser of *_norm fitness.

    Each field is [num_envs], a mean over the baseline seeds ([num_envs, seeds] before `mean`).
    """

    init_eval: jax.Array  # the initial policy's evaluation, sampled actions
    init_eval_greedy: jax.Array  # the same, greedy
    final_eval: jax.Array  # the final policy's evaluation, sampled
    greedy_eval: jax.Array  # the final policy's evaluation, greedy
    auc: jax.Array  # mean return over training (the learning curve)
    final: jax.Array  # mean of the last 10% of the learning curve

    @classmethod
    def of(cls, result) -> Baseline:
        """The fields of a TrainResult (any leading axes)."""
        scores = {field: score(result) for score, field, _ in SCORES.values()}
        return cls(init_eval=result.init_eval_return, init_eval_greedy=result.init_eval_return_greedy, **scores)

    def mean(self) -> Baseline:
        return jax.tree.map(lambda x: x.mean(-1), self)

    def as_dict(self, envs) -> dict:
        """{env: {field: value}} (baseline.json)."""
        return {env: {k: float(v[i]) for k, v in vars(self).items()} for i, env in enumerate(envs)}


def fitness_from(result, kind: str, baseline: Baseline | None, env_index: int):
    """TrainResult (any leading axes) -> fitness of the same leading shape: the score of `kind`
    (SCORES), normalised for `*_norm` kinds so that the initial policy scores 0 and PPO 1."""
    name = kind.removesuffix("_norm")
    score, ppo_field, init_field = SCORES[name]
    raw = score(result)
    if kind != name:
        ppo, init = getattr(baseline, ppo_field), getattr(baseline, init_field)
        raw = normalize_score(raw, ppo[env_index], init[env_index])
    return raw


def check_normaliser(per_seed: Baseline, kind: str, envs) -> None:
    """Refuse a normalised fitness where PPO's gain over its initial policy is within noise.

    per_seed: fields [num_envs, seeds]. On each env the gain (PPO's score minus the initial
    policy's, paired by seed) must exceed GUARD_SE standard errors of its mean; otherwise the
    normaliser's denominator is mostly noise and that env's fitness with it (one such env
    dominates the mean over envs). Raises NormaliserError naming every such env, with advice.
    """
    _, ppo_field, init_field = SCORES[kind.removesuffix("_norm")]
    gain = np.asarray(getattr(per_seed, ppo_field), np.float64) - np.asarray(getattr(per_seed, init_field), np.float64)
    mean, se = gain.mean(-1), gain.std(-1, ddof=1) / np.sqrt(gain.shape[-1])
    bad = [
        f"{env}: PPO {float(np.mean(getattr(per_seed, ppo_field)[i])):.4g} vs its initial policy "
        f"{float(np.mean(getattr(per_seed, init_field)[i])):.4g}, gain {mean[i]:+.4g} +- {se[i]:.3g} (standard error)"
        for i, env in enumerate(envs)
        if not mean[i] > GUARD_SE * se[i]  # NaN fails too
    ]
    if bad:
        raise NormaliserError(
            f"fitness={kind} divides by PPO's gain over its initial policy, but PPO does not improve beyond "
            f"noise ({GUARD_SE:g} standard errors over {gain.shape[-1]} baseline seeds) on:\n  " + "\n  ".join(bad)
            + "\nGive PPO a budget it learns in (inner.total_timesteps, inner.lr), raise baseline_seeds if the "
            "gain is real but noisy, or drop that environment from envs."
        )


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
        """Baseline with fields [num_envs, baseline_seeds]."""
        seeds = jax.random.split(jax.random.wrap_key_data(key_data), self.cfg.baseline_seeds)
        results = [Baseline.of(jax.vmap(lambda k: ppo(k, {}))(seeds)) for ppo in self.ppo_trains]
        return jax.tree.map(lambda *x: jnp.stack(x), *results)

    def baseline_template(self) -> Baseline:
        """A Baseline of the right structure (0 for the initial policy, 1 for PPO)."""
        n = len(self.envs)
        return Baseline(*(jnp.zeros(n) if f.startswith("init") else jnp.ones(n) for f in Baseline.__dataclass_fields__))

    # ---------------------------------------------------------------- public calls
    def baseline(self) -> Baseline:
        """PPO on the meta-training envs (seeds disjoint from the generations' seeds), mean over
        seeds. Raises NormaliserError (check_normaliser) where PPO does not beat its initial policy."""
        if not self.cfg.fitness.endswith("_norm"):
            return self.baseline_template()
        key = jax.random.fold_in(jax.random.key(self.cfg.seed), 2**30)
        per_seed = fetch(self._baseline(self.replicate(jax.random.key_data(key))))
        check_normaliser(per_seed, self.cfg.fitness, self.cfg.envs)
        return per_seed.mean()

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
        # paired by seed (both trained on the same seeds): the difference's 95% t-interval
        diff = np.mean([np.asarray(o) - np.asarray(t) for o, t in out], axis=0)
        diff = diff[np.isfinite(diff)]  # a diverged seed has no score
        row["eval_diff"], row["eval_diff_low"], row["eval_diff_high"] = mean_ci(diff) if diff.size else (np.nan,) * 3
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

"""A run's plan and its trainer: what a config builds, and the calls the host loop makes.

`MetaTrainer` builds every static piece of a run from its plan (metadisco.config.run_plan: what the
config decides, built once), once: the environments and problems, the objectives sized for them and
where they start, PPO's parameters in the run's own family, the strategy, the device mesh. It hands
them to the three parts that compute:

    metadisco.scoring   the one training program (every PPO training the run does, at one shape)
    metadisco.es_step   ask and tell: a generation = ask -> the program per drawn env -> tell
    metadisco.checks    PPO's baseline, the comparisons on fresh seeds, validation, re-scoring

The rows of the program are split over devices with `jax.shard_map` (one host device per core on
a CPU, every GPU on a GPU machine, every device of every process in a `jax.distributed` job);
everything else is replicated. The host loop (metadisco.train) reads the metrics once a generation.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from metadisco import strategy as strategies
from metadisco.checks import CheckedProblem, Checks, check_normaliser
from metadisco.core import scores, streams
from metadisco.core.errors import ConfigError
from metadisco.core.records import Comparison, GenerationRecord, Health
from metadisco.core.run_config import RunConfig
from metadisco.es_step import Asked, Draw, EsStep, GenerationMetrics, RunState
from metadisco.inner_loops import Env, PPOConfig, make_env, make_train
from metadisco.measure.health import NOT_DRAWN
from metadisco.meta_objectives import Objectives
from metadisco.meta_objectives import names as objective_names
from metadisco.meta_objectives.base import same_params
from metadisco.scoring import Baseline, Branch, RunScores, ScoringProgram, fetch

if TYPE_CHECKING:
    from metadisco.config import RunPlan


@dataclasses.dataclass(frozen=True)
class TrainingEnv:
    """One meta-training environment (an entry of cfg.envs), whatever horizons it is trained at."""

    name: str  # as cfg.envs names it
    env: Env
    ppo_config: PPOConfig  # its preset with the run's inner overrides, at its whole budget


@dataclasses.dataclass(frozen=True)
class TrainingProblem:
    """One meta-training problem: an environment at one horizon, a branch of the scoring program.

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


class MetaTrainer:
    """Builds every static piece of a run from its plan; computes nothing until called."""

    def __init__(self, plan: RunPlan, devices=None, trains=None, ppo_trains=None, validation_trains=None,
                 validation_ppo_trains=None):
        """trains / ppo_trains: optional replacement inner loops (the evolved one and the PPO
        reference), one `train(key, meta_params) -> TrainResult` per training problem (`problems`:
        per env, or per (env, horizon) with distribution.horizons), for meta-problems with a known
        answer in tests or custom inner loops. With distribution.lr_range the evolved one is called
        as `train(key, meta_params, hparams)`, hparams.lr the drawn rate. validation_trains /
        validation_ppo_trains: the same for the validation problems (cfg.validation.envs, in order)."""
        if isinstance(plan, RunConfig):
            raise TypeError("MetaTrainer takes a run's plan: MetaTrainer(metadisco.config.run_plan(cfg))")
        self.plan, self.cfg = plan, plan.cfg
        cfg = plan.cfg
        self.envs = tuple(TrainingEnv(e.env, make_env(e.env), e.ppo_config) for e in plan.envs)
        self.horizons = plan.horizons
        self.env_slots = cfg.distribution.envs_per_generation or len(cfg.envs)  # envs each generation trains on
        self.objectives = plan.objectives.for_env(self.envs[0].env.obs_shape)
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
        # PPO as a member of the run's own family (LPO, drift_mix and learned_clipped contain PPO-clip, a
        # learned potential at its zero output layer is no shaping): PPO then trains through the run's
        # one program. Where the family cannot (or the inner loops are custom), PPO is a branch of its own.
        custom = any(t is not None for t in (trains, ppo_trains, validation_trains, validation_ppo_trains))
        as_ppo = None if custom else self.objectives.params_reproducing(Objectives())
        # PPO through the run's own branches needs its fixed plugs to be the start's (the program's constants)
        fixed = [plug for plug in self.default_params if plug not in self.evolve]
        if as_ppo is not None and not same_params({p: as_ppo[p] for p in fixed}, {p: self.default_params[p] for p in fixed}):
            as_ppo = None
        self.ppo_params = as_ppo
        # the start point is PPO exactly: the checks train it once, as both
        self.start_is_ppo = as_ppo is not None and same_params(self.default_params, as_ppo)
        self.problems = self._training_problems(trains, ppo_trains)
        self.validation = self._validation_problems(validation_trains, validation_ppo_trains)
        self.es, self.es_params = strategies.make_strategy(cfg.es, self.initial_solution)
        devices = list(devices if devices is not None else jax.devices())
        if cfg.devices:
            devices = devices[: cfg.devices]
        n = devices_for(cfg.es.population_size, cfg.members_per_batch, len(devices))
        self.mesh = Mesh(np.array(devices[:n]), ("pop",))
        # expected over the draw: k of the envs, each at the mean of its horizons
        self.steps_per_generation = round(cfg.es.population_size * cfg.seeds_per_member * self.env_slots / len(cfg.envs)
                                          * sum(p.ppo_config.steps_per_run for p in self.problems) / len(self.horizons))
        self.program, checked = self._program()
        self.step = EsStep(cfg, self.es, self.es_params, self.initial_solution, self.horizons, self.env_slots,
                           NamedSharding(self.mesh, P()))
        self.num_params = self.step.num_params
        self.checks = Checks(self.program, checked[: len(self.problems)], checked[len(self.problems):], cfg,
                             self.evolve, self.default_params, self.ppo_params, self.start_is_ppo)

    def _training_problems(self, trains, ppo_trains) -> tuple[TrainingProblem, ...]:
        """Every (env, horizon) pair, env-major, with its trains: `trains` / `ppo_trains` where
        given (one per problem, in that order), else PPO built with the run's objectives / PPO's."""
        planned = self.plan.problems
        trains = trains or [make_train(self.envs[p.env_index].env, p.ppo_config, self.objectives) for p in planned]
        ppo_trains = ppo_trains or [functools.partial(_ppo_of, self.envs[p.env_index].env, p.ppo_config) for p in planned]
        if len(trains) != len(planned) or len(ppo_trains) != len(planned):
            raise ValueError(f"need one train per training problem {[p.name for p in planned]}")
        return tuple(TrainingProblem(p.name, p.env_index, self.envs[p.env_index], p.horizon, p.ppo_config, train, ppo_train)
                     for p, train, ppo_train in zip(planned, trains, ppo_trains))

    def _validation_problems(self, trains, ppo_trains) -> tuple[ValidationProblem, ...]:
        """Each validation env (cfg.validation.envs) with its trains: `trains` / `ppo_trains` where given."""
        planned = self.plan.validation
        envs = [make_env(p.env) for p in planned] if planned and not (trains and ppo_trains) else [None] * len(planned)
        trains = trains or [make_train(env, p.ppo_config, self.objectives) for env, p in zip(envs, planned)]
        ppo_trains = ppo_trains or [functools.partial(_ppo_of, env, p.ppo_config) for env, p in zip(envs, planned)]
        if len(trains) != len(planned) or len(ppo_trains) != len(planned):
            raise ValueError(f"need one train per validation problem {[p.name for p in planned]}")
        return tuple(ValidationProblem(p.name, p.ppo_config, train, ppo_train)
                     for p, train, ppo_train in zip(planned, trains, ppo_trains))

    def _program(self) -> tuple[ScoringProgram, list[CheckedProblem]]:
        """The run's one training program: a branch per training problem (at each member's learning
        rate with distribution.lr_range), one per validation problem, and where PPO is not in the
        run's family and the run needs it, one per problem for PPO; and each problem as the checks see it."""
        cfg = self.cfg
        at_lr = bool(cfg.distribution.lr_range)
        branches = [Branch(p.name, functools.partial(_at_lr, p.train, p.ppo_config.hparams) if at_lr
                           else functools.partial(_ignoring_lr, p.train)) for p in self.problems]
        branches += [Branch(p.name, functools.partial(_ignoring_lr, p.train)) for p in self.validation]
        both = self.problems + self.validation
        own = self.ppo_params is None and self.needs_ppo
        if own:
            branches += [Branch(f"{p.name} (PPO)", functools.partial(_ppo_reference, p.ppo_train)) for p in both]
        checked = [CheckedProblem(p.name, i, len(both) + i if own else None, i) for i, p in enumerate(both)]
        program = ScoringProgram(branches, self.full_params, self.mesh, cfg.es.population_size,
                                 cfg.seeds_per_member, cfg.members_per_batch)
        return program, checked

    @property
    def needs_ppo(self) -> bool:
        """Whether the run trains PPO at all: a normalised fitness, comparisons or validation."""
        cfg = self.cfg
        return scores.fitness_of(cfg.fitness).normalised or cfg.eval_every > 0 or bool(self.validation)

    # ---------------------------------------------------------------- state
    def init(self) -> RunState:
        return self.step.init()

    def replicate(self, tree):
        """Host values -> arrays replicated over the mesh (global arrays in a multi-host job)."""
        return self.program.replicate(tree)

    def mean_params(self, state: RunState):
        """What the run follows (EsStep.mean_params): the ES mean, or a population-based strategy's best member."""
        return self.step.mean_params(state)

    def full_params(self, solution) -> dict:
        """An ES solution (evolved plugs only) -> the full meta-params dict of every plug."""
        return self.objectives.merge(solution, self.default_params)

    def draw(self, key) -> Draw:
        """The generation's draw (Draw) from the run's training distribution, from its `key`."""
        return self.step.draw(key)

    # ---------------------------------------------------------------- public calls
    def baseline(self) -> Baseline:
        """PPO on the meta-training problems (every env and horizon, the preset's lr; seeds disjoint
        from the generations' seeds), mean over seeds: fields [num_problems]. Raises NormaliserError
        (check_normaliser) where PPO does not beat its initial policy."""
        if not scores.fitness_of(self.cfg.fitness).normalised:
            return self.baseline_template()
        per_seed = self.checks.baseline()
        check_normaliser(per_seed, self.cfg.fitness, self.problem_names)
        return per_seed.mean()

    def baseline_template(self) -> Baseline:
        """A Baseline of the right structure (0 for the initial policy, 1 for PPO)."""
        return Baseline.template(len(self.problems) + len(self.validation))

    @property
    def problem_names(self) -> list[str]:
        """The names of a Baseline's rows: the training problems, then the validation problems."""
        return [p.name for p in self.problems] + [p.name for p in self.validation]

    def generation(self, state: RunState, baseline: Baseline, index: int) -> tuple[RunState, GenerationMetrics]:
        """Run generation `index` (= state.generation, known to the host loop) -> (new state, metrics
        on device): ask, the program on each drawn env, tell. `state` and `baseline` are replicated
        (`replicate`)."""
        key_data = self.replicate(jax.random.key_data(self.generation_key(index)))
        asked = self.step.ask(state, key_data)
        return self.step.tell(state, asked, self.train_members(asked), baseline, key_data)

    def train_members(self, asked: Asked) -> tuple[RunScores, ...]:
        """The population `asked` on each env it drew (in Draw.envs' order), at its horizon: RunScores
        [P, S] each (on device)."""
        envs, horizon = fetch((asked.draw.envs, asked.draw.horizon))  # which branches: the host picks
        nh = len(self.horizons)
        return tuple(self.program.score(self.replicate(np.int32(e * nh + horizon)), asked.pop,
                                        asked.draw.lr_factor, asked.seeds) for e in np.asarray(envs).tolist())

    def record(self, index: int, metrics: GenerationMetrics, wall_time_s: float) -> GenerationRecord:
        """The metrics row of generation `index`: its `metrics` (as `generation` returned them, or
        fetched) and its wall time, with the environment steps per second that makes."""
        metrics = fetch(metrics)
        health, game_health = self.step.health(metrics.halves)  # search health, on the host
        games = {}
        if game_health is not None:  # the drawn envs' own health
            games = {env: Health(*(np.asarray(x)[e].item() for x in game_health))
                     for e, env in enumerate(self.cfg.envs) if int(game_health.undefined[e]) != NOT_DRAWN}
        m, health = jax.tree.map(lambda x: np.asarray(x).item(), (metrics.replace(halves=None), health))
        return GenerationRecord(
            generation=index, fitness_mean=m.fitness_mean, fitness_max=m.fitness_max, fitness_min=m.fitness_min,
            fitness_std=m.fitness_std, best_fitness=m.best_fitness, sigma=m.sigma, num_diverged=m.num_diverged,
            draw=m.draw, health=health, game_health=games, wall_time_s=wall_time_s,
            env_steps_per_s=self.steps_per_generation / wall_time_s)

    def generation_key(self, index: int):
        """The key of generation `index`: everything random in it (ask, seeds, draw, tell) comes from it."""
        return streams.generation(self.cfg.seed, index)

    def draw_of(self, index: int) -> Draw:
        """What generation `index` trained on (its Draw): a function of (seed, generation) only."""
        return self.draw(jax.random.fold_in(self.generation_key(index), streams.DRAW))

    def check(self, state: RunState, baseline: Baseline, completed: int) -> tuple[Comparison, Comparison | None]:
        """The ES mean against PPO and against the run's start point (its initial solution), all on the same
        fresh seeds, mean over seeds, per training problem and overall; paired differences with 95%
        t-intervals, and the share of the gap from the start to PPO that the ES mean closed (paired
        bootstrap over seeds); `completed`: generations done (= state.generation), which picks the seeds.
        Returns (that Comparison on the training problems, the same on the validation problems on fresh
        seeds of their own, or None for a run without [validation])."""
        keys = (streams.key(self.cfg.seed, streams.Stream.COMPARISON, completed),
                streams.key(self.cfg.seed, streams.Stream.VALIDATION, completed))
        mean = fetch(self.mean_params(fetch(state)))  # host-side: same in every process
        return self.checks.compare(mean, fetch(baseline), keys)

    def rescore(self, solutions, baseline: Baseline, completed: int, use: int = 1) -> np.ndarray:
        """Selection's finalists (metadisco.measure.selection), ES solutions (evolved plugs only), scored
        together on the validation problems on the common fresh seeds of the run's end after `completed`
        generations (Stream.SELECTION, index `use`: 1 ranks the finalists, 2 scores the winner and the start
        for the report): per-seed validation scores [solutions, validation problems, validation.seeds], NaN
        where a seed diverged."""
        key = streams.key(self.cfg.seed, streams.Stream.SELECTION, completed, use)
        return self.checks.validation_scores([fetch(s) for s in solutions], fetch(baseline), key)

    def compare_selected(self, solution, baseline: Baseline, completed: int) -> Comparison:
        """The selected finalist against PPO and the start on the training problems, on the run end's
        fresh seeds (Stream.SELECTION): what its verdict reads."""
        key = streams.key(self.cfg.seed, streams.Stream.SELECTION, completed, 0)
        return self.checks.training_comparison(fetch(solution), fetch(baseline), key)


def devices_for(population_size: int, members_per_batch: int, available: int) -> int:
    """How many of `available` devices split the population: the most that give each device a whole
    number of batches of `members_per_batch` members (any number with 0)."""
    return max(d for d in range(1, available + 1)
               if population_size % d == 0 and (population_size // d) % (members_per_batch or 1) == 0)


def _ppo_of(env: Env, config: PPOConfig, key, meta_params):
    """PPO's own objectives on (env, config): the reference where the run's family does not contain PPO."""
    return make_train(env, config, Objectives())(key, meta_params)


def _at_lr(train, hparams, key, meta_params, lr_factor):
    """`train` at `lr_factor` times the rate of `hparams` (a traced leaf: no recompilation)."""
    return train(key, meta_params, hparams.replace(lr=hparams.lr * lr_factor))


def _ignoring_lr(train, key, meta_params, lr_factor):
    return train(key, meta_params)


def _ppo_reference(ppo_train, key, meta_params, lr_factor):
    """PPO on its own branch: its own objectives and preset rate, whatever the row's parameters."""
    return ppo_train(key, {})

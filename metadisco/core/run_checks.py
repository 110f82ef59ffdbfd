"""The checks of a run's config that need no compute (jax-free), and the values of its small enumerations.

`check_run_config` is the one check of what a `RunConfig` (metadisco.core.run_config) says: names from
the tables (here, metadisco.core.strategies and metadisco.core.scores), ranges and sizes, and how
fields combine. It runs wherever a config is read: `metadisco train` (metadisco.config.validate,
before jax starts) and every reader of a run directory (`RunConfig.from_stored`, so
`metadisco.analysis.runs.Run.config()`), so a hand-edited config.json fails with the message an
override of the same value gets. What depends on the installation (environment names and plug-ins:
metadisco.core.catalog) or needs jax (objectives, shapes) is metadisco.config's.
"""

from __future__ import annotations

import difflib

from metadisco.core.errors import ConfigError
from metadisco.core.scores import FITNESS_KINDS, fitness_of
from metadisco.core.strategies import (
    ANTITHETIC_STRATEGIES,
    ES_OPTIMIZERS,
    FITNESS_SHAPING,
    STRATEGIES,
    UNSUPPORTED_STRATEGIES,
    WEIGHTED_STRATEGIES,
)

# How DistributionConfig's draws are shared and how per-environment fitness is combined.
LR_DRAWS = ("pair", "generation")
ENV_FITNESS = ("mean", "rank", "worst")

# Which comparison on fresh seeds a run's pass criterion reads (ExpectConfig.beats).
EXPECT_BEATS = ("", "start", "ppo")


def check_run_config(cfg) -> None:
    """Raise ConfigError, saying what to do, for a value no run can have in `cfg`, a RunConfig
    (metadisco.core.run_config, read by attribute): names, ranges, sizes and how fields combine.
    Environment names are not checked here (metadisco.config.check_static)."""
    if not cfg.envs:
        raise ConfigError("envs is empty: name at least one environment, e.g. envs=CartPole-v1")
    trained_on = [e for e in cfg.heldout.envs if e in cfg.envs]
    if trained_on:
        raise ConfigError(
            f"heldout.envs lists {', '.join(trained_on)}, which the run meta-trains on: a held-out "
            "environment must be one the run never sees; drop it from heldout.envs or from envs"
        )
    if cfg.heldout.seeds < 1 or (cfg.heldout.timesteps is not None and cfg.heldout.timesteps < 1):
        raise ConfigError("heldout.seeds and heldout.timesteps must be >= 1")
    _check_validation(cfg)
    _check_es(cfg.es)
    _check_fitness(cfg)
    _check_distribution(cfg)
    _check_expect(cfg)
    for name in ("seeds_per_member", "generations", "checkpoint_every", "eval_seeds", "baseline_seeds"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.eval_every < 0 or cfg.devices < 0 or cfg.member_batch < 0:
        raise ConfigError("eval_every, devices and member_batch must be >= 0")


def _check_validation(cfg) -> None:
    v = cfg.validation
    if not v.envs:
        if v.lr or v.timesteps:
            raise ConfigError("validation.lr and validation.timesteps set without validation.envs: name the "
                              "validation environments, e.g. validation.envs=Seaquest-MinAtar")
        return
    for where, others in (("envs, which the run meta-trains on", cfg.envs),
                          ("heldout.envs, the run's held-out set", cfg.heldout.envs)):
        overlap = [e for e in v.envs if e in others]
        if overlap:
            raise ConfigError(
                f"validation.envs lists {', '.join(overlap)}, also in {where}: validation chooses what the run "
                "returns, so it must be scored on problems that neither train it nor judge it afterwards; drop "
                f"{'it' if len(overlap) == 1 else 'them'} from one of the two")
    if len(set(v.envs)) != len(v.envs):
        raise ConfigError(f"validation.envs lists an environment twice: {list(v.envs)}")
    for name in ("lr", "timesteps"):
        given = getattr(v, name)
        if given and len(given) != len(v.envs):
            raise ConfigError(f"validation.{name} gives {len(given)} value(s) for {len(v.envs)} validation env(s): "
                              "give one per env, in the order of validation.envs (or none)")
        if any(x <= 0 for x in given):
            raise ConfigError(f"validation.{name} must be > 0, got {list(given)}")
    if v.seeds < 2:
        raise ConfigError(f"validation.seeds must be >= 2 (a mean over fresh seeds), got {v.seeds}")
    if not cfg.eval_every:
        raise ConfigError("validation scores the ES mean every eval_every generations, which eval_every=0 turns "
                          "off: set eval_every >= 1, or drop [validation]")
    if len(v.envs) > 1 and not fitness_of(cfg.fitness).normalised:
        raise ConfigError(f"{len(v.envs)} validation environments need a normalised fitness so that their scores "
                          f"can be averaged: use fitness={cfg.fitness}_norm")


def _check_es(es) -> None:
    if es.strategy not in STRATEGIES:
        close = difflib.get_close_matches(es.strategy, STRATEGIES, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown ES strategy {es.strategy!r}.{hint} Available: {', '.join(sorted(STRATEGIES))}")
    if es.strategy in UNSUPPORTED_STRATEGIES:
        raise ConfigError(f"es.strategy={es.strategy} cannot be used here: "
                          f"{UNSUPPORTED_STRATEGIES[es.strategy]}; choose another (e.g. Open_ES, SNES, CMA_ES)")
    if es.population_size < 2:
        raise ConfigError(f"es.population_size must be >= 2, got {es.population_size}")
    if es.antithetic and es.population_size % 2 and es.strategy in ANTITHETIC_STRATEGIES:
        raise ConfigError(
            f"es.population_size = {es.population_size} is odd but antithetic sampling pairs members (+z, -z): "
            "use an even population, or es.antithetic=false"
        )
    if es.sigma_init <= 0 or es.lr <= 0:
        raise ConfigError("es.sigma_init and es.lr must be > 0")
    if not (0 < es.sigma_decay <= 1 and 0 < es.lr_decay <= 1):
        raise ConfigError("es.sigma_decay and es.lr_decay must be in (0, 1]")
    if es.optimizer not in ES_OPTIMIZERS:
        raise ConfigError(f"es.optimizer must be adam or sgd, got {es.optimizer!r}")
    if es.fitness_shaping not in FITNESS_SHAPING:
        raise ConfigError(f"es.fitness_shaping must be one of {', '.join(FITNESS_SHAPING)}")
    if es.fitness_shaping == "pairwise" and not (es.antithetic and es.strategy in ANTITHETIC_STRATEGIES):
        raise ConfigError(
            f"es.fitness_shaping=pairwise scores each antithetic pair (+z, -z) against each other, but {es.strategy}"
            f"{' with es.antithetic=false' if not es.antithetic else ''} samples no pairs; use an antithetic "
            f"strategy ({', '.join(sorted(ANTITHETIC_STRATEGIES))}) with es.antithetic=true")
    if es.fitness_shaping not in ("auto", "default") and es.strategy in WEIGHTED_STRATEGIES:
        raise ConfigError(
            f"es.fitness_shaping={es.fitness_shaping} does not apply to {es.strategy}: its update takes "
            "recombination weights, which it computes from the ranks itself; leave es.fitness_shaping=auto"
        )


def _check_fitness(cfg) -> None:
    if cfg.fitness not in FITNESS_KINDS:
        raise ConfigError(f"fitness must be one of {', '.join(FITNESS_KINDS)}, got {cfg.fitness!r}")
    fitness = fitness_of(cfg.fitness)
    if len(cfg.envs) > 1 and not fitness.normalised:
        raise ConfigError(
            f"{len(cfg.envs)} meta-training environments need a normalised fitness so that their returns "
            f"can be averaged: use fitness={cfg.fitness}_norm"
        )
    if cfg.inner.eval_episodes == 0 and fitness.score.needs == "evaluation":
        raise ConfigError(f"fitness={cfg.fitness} scores evaluation episodes: inner.eval_episodes must be >= 1")
    if fitness.normalised and cfg.baseline_seeds < 2:
        raise ConfigError(
            f"fitness={cfg.fitness} checks that PPO beats its initial policy beyond noise, which takes "
            f"baseline_seeds >= 2 (got {cfg.baseline_seeds})"
        )


def _check_distribution(cfg) -> None:
    d = cfg.distribution
    if not 0 <= d.envs_per_generation <= len(cfg.envs):
        raise ConfigError(
            f"distribution.envs_per_generation = {d.envs_per_generation} must be between 1 and the {len(cfg.envs)} "
            "environment(s) in envs (0: all of them every generation)"
        )
    if d.lr_range and not (len(d.lr_range) == 2 and 0 < d.lr_range[0] <= d.lr_range[1]):
        raise ConfigError(
            f"distribution.lr_range = {list(d.lr_range)} must be [low, high] with 0 < low <= high: factors on "
            "each environment's preset lr, e.g. distribution.lr_range=0.5,2 (empty: the preset's lr)"
        )
    if d.lr_draw not in LR_DRAWS:
        raise ConfigError(f"distribution.lr_draw must be one of {', '.join(LR_DRAWS)}, got {d.lr_draw!r}")
    if any(not 0 < h <= 1 for h in d.horizons) or len(set(d.horizons)) != len(d.horizons):
        raise ConfigError(
            f"distribution.horizons = {list(d.horizons)} must be distinct fractions in (0, 1] of "
            "inner.total_timesteps, e.g. distribution.horizons=0.5,1"
        )
    if d.env_fitness not in ENV_FITNESS:
        raise ConfigError(f"distribution.env_fitness must be one of {', '.join(ENV_FITNESS)}, got {d.env_fitness!r}")


def _check_expect(cfg) -> None:
    e = cfg.expect
    if e.beats not in EXPECT_BEATS:
        raise ConfigError(f"expect.beats must be start or ppo (or empty: no verdict), got {e.beats!r}")
    if not 0 <= e.gap_closed <= 1:
        raise ConfigError(f"expect.gap_closed = {e.gap_closed} must be a share in [0, 1] of the gap from the start to PPO")
    if (e.beats or e.gap_closed) and not cfg.eval_every:
        raise ConfigError("expect needs the checks on fresh seeds that eval_every runs: set eval_every >= 1")
    if e.gap_closed and not e.beats:
        raise ConfigError("expect.gap_closed needs expect.beats (start or ppo): the comparison that must exclude 0")

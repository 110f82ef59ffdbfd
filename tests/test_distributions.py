"""Meta-training over distributions: environments, learning rates and horizons drawn per
generation; antithetic pairs share their draw; only the distribution-aware fitness finds the
optimum of a meta-problem whose answer depends on the draw."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metadisco.config import DistributionConfig, ESConfig, InnerConfig, RunConfig, resolve, run_plan, validate
from metadisco.core.errors import ConfigError
from metadisco.core.strategies import STRATEGIES, UNSUPPORTED_STRATEGIES
from metadisco.engine import MetaTrainer
from metadisco.es_step import centered_ranks, mirrored
from metadisco.inner_loops import preset_for
from metadisco.rundir import RunDir
from metadisco.scoring import fetch, fitness_from
from metadisco.strategy import is_population_based, make_strategy
from metadisco.train import run
from tests.helpers import constant_train, metric_rows, stand_in_result, tiny_config

BASE_LR = preset_for("CartPole-v1").hparams.lr
TWO_ENVS = ("CartPole-v1", "Acrobot-v1")


def quadratic(target, scale=100.0, noise=0.01):
    """A stand-in inner loop: return = -scale |w2 - target(lr factor)|^2 + seed noise, where
    target is a number or a function of the drawn lr factor (hparams.lr / the preset's)."""

    def train(key, meta_params, hparams=None):
        factor = 1.0 if hparams is None else hparams.lr / BASE_LR
        t = target(factor) if callable(target) else target
        ret = -scale * jnp.mean(jnp.square(meta_params["drift"]["w2"] - t)) + noise * jax.random.normal(key)
        return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(-1.0))

    return train


def reporting(problem):
    """A stand-in whose fitness reports what it trained on: problem index * 10 + lr factor."""

    def train(key, meta_params, hparams=None):
        factor = 1.0 if hparams is None else hparams.lr / BASE_LR
        ret = jnp.float32(problem * 10.0) + factor
        return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(-1.0))

    return train


def dist_config(**dist) -> RunConfig:
    return tiny_config(envs=TWO_ENVS, fitness="final_eval_norm", eval_every=0, generations=4,
                       es=ESConfig(population_size=8), distribution=DistributionConfig(**dist))


def stand_in_trainer(cfg, make=reporting, **kwargs) -> MetaTrainer:
    """A trainer whose inner loops are `make(problem index)` and whose PPO learns from 0 to 1."""
    n = len(cfg.envs) * max(1, len(cfg.distribution.horizons))
    return MetaTrainer(run_plan(cfg), trains=[make(p) for p in range(n)], ppo_trains=[constant_train(0.0, 1.0)] * n, **kwargs)


def population_fitness(trainer, index):
    """Generation `index`'s population and its draw, scored as the generation scores them: fitness [P, k]."""
    state = trainer.replicate(fetch(trainer.init()))
    asked = trainer.step.ask(state, trainer.replicate(jax.random.key_data(trainer.generation_key(index))))
    baseline = trainer.baseline_template()
    fitness = np.stack([np.asarray(fitness_from(fetch(run), trainer.cfg.fitness, baseline, 0))
                        for run in trainer.train_members(asked)], axis=1)  # [P, k, S]
    return fetch(asked.pop), fetch(asked.draw), fitness.mean(-1)


@pytest.mark.parametrize("lr_draw", ["pair", "generation"])
def test_antithetic_pairs_share_their_draw(lr_draw):
    """Members i and i + P/2 are evosax's mirrored pair (+z, -z); they train on the same env,
    horizon and learning rate (and seeds), which each member's fitness reports back."""
    cfg = dist_config(envs_per_generation=1, lr_range=(0.5, 2.0), lr_draw=lr_draw, horizons=(0.5, 1.0))
    trainer = stand_in_trainer(cfg)
    half = cfg.es.population_size // 2
    nh = len(cfg.distribution.horizons)
    seen = set()
    for index in range(6):
        pop, draw, fitness = population_fitness(trainer, index)
        z = pop["drift"]["w2"] - trainer.mean_params(trainer.init())["drift"]["w2"]
        np.testing.assert_allclose(z[:half], -z[half:], atol=1e-7)  # the layout the draw pairs by
        np.testing.assert_array_equal(fitness[:half], fitness[half:])  # what each pair trained on
        problem, factor = np.divmod(fitness[:, 0], 10.0)
        assert (problem == draw.envs[0] * nh + draw.horizon).all()  # the env and horizon drawn, for all
        np.testing.assert_allclose(factor, draw.lr_factor, rtol=1e-5)
        assert ((0.5 <= factor) & (factor <= 2.0)).all()
        distinct = len(np.unique(factor[:half]))
        assert distinct == (half if lr_draw == "pair" else 1)  # pairs differ, or the generation shares one
        seen.add((int(draw.envs[0]), int(draw.horizon)))
    assert len(seen) > 1  # generations differ
    # a function of (seed, generation) only: another trainer draws the same, another seed not
    again = stand_in_trainer(cfg)
    np.testing.assert_array_equal(fetch(again.draw_of(3)).lr_factor, fetch(trainer.draw_of(3)).lr_factor)
    other = stand_in_trainer(tiny_config(**{**vars(cfg), "seed": 1}))
    assert not np.array_equal(fetch(other.draw_of(3)).lr_factor, fetch(trainer.draw_of(3)).lr_factor)


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s not in UNSUPPORTED_STRATEGIES])
def test_the_mirrored_layout_matches_evosax(strategy):
    """`mirrored` says which strategies pair members i and i + P/2 as (+z, -z): the pairs that
    lr_draw=pair gives one rate each (and whose mean is subtracted); the others draw per member."""
    es, params = make_strategy(ESConfig(strategy=strategy, population_size=8), {"w": jnp.zeros(6)})
    if is_population_based(es):
        assert not mirrored(ESConfig(strategy=strategy))
        return
    state = es.init(jax.random.key(0), {"w": jnp.full(6, 0.3)}, params)
    pop, _ = es.ask(jax.random.key(1), state, params)
    z = pop["w"] - 0.3
    assert mirrored(ESConfig(strategy=strategy)) == bool(jnp.allclose(z[:4], -z[4:], atol=1e-6)), strategy


def test_without_pairs_each_member_draws_its_own_rate():
    for es in (ESConfig(population_size=8, antithetic=False), ESConfig(strategy="CMA_ES", population_size=8)):
        cfg = tiny_config(es=es, distribution=DistributionConfig(lr_range=(0.5, 2.0)))
        factor = fetch(MetaTrainer(run_plan(cfg), trains=[reporting(0)]).draw_of(0)).lr_factor
        assert len(np.unique(factor)) == 8, es


def test_a_subset_of_environments_is_drawn_without_replacement():
    cfg = tiny_config(envs=(*TWO_ENVS, "MountainCar-v0"), fitness="final_eval_norm",
                      distribution=DistributionConfig(envs_per_generation=2))
    trainer = stand_in_trainer(cfg)
    draws = [fetch(trainer.draw_of(i)).envs for i in range(12)]
    assert all(len(set(d.tolist())) == 2 and set(d.tolist()) <= {0, 1, 2} for d in draws)
    assert len({tuple(sorted(d.tolist())) for d in draws}) == 3  # every pair of the three comes up
    _, draw, fitness = population_fitness(trainer, 0)
    np.testing.assert_array_equal(fitness, np.broadcast_to(draw.envs * 10.0 + 1.0, fitness.shape))


def test_draws_are_logged_and_resume_bit_for_bit(tmp_path):
    """Every lever on (a subset of envs, lr factors per pair, two horizons): a stopped and resumed
    run draws and logs what the uninterrupted one did; each problem's program is traced once."""
    traces = []

    def counting(p):
        def train(key, meta_params, hparams=None):
            traces.append(p)  # Python runs only while jax traces
            return quadratic(0.01 * p)(key, meta_params, hparams)
        return train

    cfg = dist_config(envs_per_generation=1, lr_range=(0.5, 2.0), horizons=(0.5, 1.0))
    trainer = stand_in_trainer(cfg, counting)
    run(cfg, tmp_path / "full", progress=False, trainer=trainer, log=lambda *a: None)
    assert sorted(traces) == [0, 1, 2, 3]  # 2 envs x 2 horizons, compiled once for the whole run
    rows = metric_rows(tmp_path / "full")
    for record in RunDir(tmp_path / "full").metrics():
        draw = fetch(trainer.draw_of(record.generation))
        assert record.draw[TWO_ENVS[int(draw.envs[0])]] == 1.0 and sum(record.draw[e] for e in TWO_ENVS) == 1
        assert record.draw["horizon"] == (0.5, 1.0)[int(draw.horizon)]
        assert record.draw["lr_factor"] == pytest.approx(np.exp(np.log(draw.lr_factor).mean()), rel=1e-5)
    run(cfg, tmp_path / "resumed", progress=False, stop_after=2, trainer=trainer, log=lambda *a: None)
    run(None, tmp_path / "resumed", resume=True, progress=False, trainer=trainer, log=lambda *a: None)
    assert metric_rows(tmp_path / "resumed") == rows
    baseline = RunDir(tmp_path / "full").read_json("baseline.json")
    assert list(baseline) == ["CartPole-v1@0.5", "CartPole-v1@1", "Acrobot-v1@0.5", "Acrobot-v1@1"]


def test_two_devices_equal_one_with_draws(tmp_path):
    cfg = dist_config(envs_per_generation=1, lr_range=(0.5, 2.0), horizons=(0.5, 1.0))
    rows = []
    for devices in (1, 2):
        c = tiny_config(**{**vars(cfg), "devices": devices})
        trainer = stand_in_trainer(c, lambda p: quadratic(0.01 * p))
        assert trainer.mesh.devices.size == devices
        run(c, tmp_path / str(devices), progress=False, trainer=trainer, log=lambda *a: None)
        rows.append(RunDir(tmp_path / str(devices)).metrics())

    def values(r):
        return {"fitness_mean": r.fitness_mean, "fitness_max": r.fitness_max, "best_fitness": r.best_fitness,
                "horizon": r.draw["horizon"], "lr_factor": r.draw["lr_factor"]}

    for a, b in zip(*rows):
        for k, v in values(a).items():
            np.testing.assert_allclose(v, values(b)[k], rtol=1e-5, atol=1e-6, err_msg=k)


def mean_w2(cfg, trains, ppo_trains=None, generations=60):
    """The ES mean's output weight (mean over its entries) after `generations` generations."""
    trainer = MetaTrainer(run_plan(cfg), trains=trains, ppo_trains=ppo_trains)
    state, baseline = trainer.replicate(fetch(trainer.init())), trainer.replicate(fetch(trainer.baseline()))
    for g in range(generations):
        state, _ = trainer.generation(state, baseline, g)
    return float(np.mean(fetch(trainer.mean_params(fetch(state)))["drift"]["w2"]))


KNOWN = tiny_config(eval_every=0, es=ESConfig(population_size=16, sigma_init=0.02, lr=0.01))


@functools.cache
def point_w2() -> float:
    """mean_w2 of the run that does not draw, whose optimum is 0 (both levers' point run: at the
    preset's lr and full length their targets are both 0), run once for both."""
    return mean_w2(KNOWN, [quadratic(0.0)])


@pytest.mark.parametrize("lever", ["lr", "horizon"])
def test_only_the_distribution_aware_fitness_finds_the_distributions_optimum(lever):
    """The best output weight depends on the draw: at the preset lr and full length it is 0, but
    0.05 log2(lr factor)^2 at other rates (mean 0.067 over log-uniform [1/4, 4]), and 0.1 at half
    the length (mean 0.05 over both horizons). The point run stays at its optimum, 0; only the run
    that draws finds the distribution's. (Rates per pair: the pair-mean control variate keeps the
    ES's ranks on z; without it the run had reached 0.02 after 40 generations, 0.025 after 80.)"""
    if lever == "lr":
        train = quadratic(lambda f: 0.05 * jnp.log2(f) ** 2)
        point = point_w2()  # quadratic(0.05 log2(1)^2): the same target, 0, as the point run below
        spread = mean_w2(tiny_config(**{**vars(KNOWN), "distribution": DistributionConfig(lr_range=(0.25, 4.0))}), [train])
    else:
        point = point_w2()
        cfg = tiny_config(**{**vars(KNOWN), "distribution": DistributionConfig(horizons=(0.5, 1.0))})
        spread = mean_w2(cfg, [quadratic(0.1), quadratic(0.0)])
    assert abs(point) < 0.015, point
    assert 0.035 < spread < 0.09, spread


def test_rank_fitness_keeps_one_environment_from_dominating():
    """Two envs whose (normalised) fitness differs 100-fold in spread, with optima 0.1 and 0: the
    mean over envs follows the wide one to 0; per-env ranks weigh both, and land between."""
    envs = dict(envs=TWO_ENVS, fitness="final_eval_norm", eval_every=0)
    trains = [quadratic(0.1, scale=1.0, noise=0.0), quadratic(0.0, scale=100.0, noise=0.0)]
    ppo = [constant_train(0.0, 1.0)] * 2
    mean = mean_w2(tiny_config(**{**vars(KNOWN), **envs}), trains, ppo)
    rank = mean_w2(tiny_config(**{**vars(KNOWN), **envs, "distribution": DistributionConfig(env_fitness="rank")}),
                   trains, ppo)
    assert abs(mean) < 0.01, mean
    assert 0.02 < rank < 0.08, rank


def test_the_worst_game_and_pairwise_scoring_tell_the_es_what_they_say():
    """env_fitness=worst tells the ES each member's lowest game (diverged members at the worst);
    fitness_shaping=pairwise tells each antithetic pair (i, i + P/2) +1/2 for the better, -1/2 for
    the other, whatever the scale of the gap."""
    envs = dict(envs=TWO_ENVS, fitness="final_eval_norm", eval_every=0, es=ESConfig(population_size=4))
    ppo = [constant_train(0.0, 1.0)] * 2
    worst = MetaTrainer(run_plan(tiny_config(**envs, distribution=DistributionConfig(env_fitness="worst"))),
                        trains=[quadratic(0.0)] * 2, ppo_trains=ppo).step
    per_env = jnp.array([[1.0, 3.0], [2.0, -1.0], [5.0, 4.0], [jnp.nan, jnp.nan]])
    diverged = jnp.array([False, False, False, True])
    np.testing.assert_allclose(worst.es_fitness(per_env.mean(1), per_env, diverged), [1.0, -1.0, 4.0, -1.0])
    pairwise = MetaTrainer(run_plan(tiny_config(**{**envs, "es": ESConfig(population_size=4, fitness_shaping="pairwise")})),
                           trains=[quadratic(0.0)] * 2, ppo_trains=ppo).step
    fitness = jnp.array([1.0, 1e6, 0.5, 1e6 + 1.0])
    np.testing.assert_allclose(pairwise.es_fitness(fitness, fitness[:, None], diverged), [0.5, -0.5, -0.5, 0.5])
    with pytest.raises(ConfigError, match="pairwise scores each antithetic pair"):
        tiny_config(es=ESConfig(strategy="CMA_ES", population_size=4, fitness_shaping="pairwise"))


def test_centered_ranks_per_environment():
    fitness = jnp.array([[1.0, 5.0], [3.0, 5.0], [2.0, -1.0], [jnp.nan, 0.0]])
    ranks = centered_ranks(fitness, jnp.array([False, False, False, True]))
    # the diverged member ties each column's worst finite member (core.scores.at_worst), as the mean over envs ranks it
    np.testing.assert_allclose(ranks[:, 0], [0.5 / 3 - 0.5, 0.5, 2 / 3 - 0.5, 0.5 / 3 - 0.5], rtol=1e-6)
    np.testing.assert_allclose(ranks[:, 1], [2.5 / 3 - 0.5, 2.5 / 3 - 0.5, 0.5 / 3 - 0.5, 0.5 / 3 - 0.5], rtol=1e-6)


def test_horizons_are_separate_programs_with_their_own_progress():
    """A horizon is the run's config at that fraction of total_timesteps: its progress (update /
    num_updates) and lr annealing run over its own length."""
    cfg = tiny_config(distribution=DistributionConfig(horizons=(0.5, 1.0)))
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic(0.0)] * 2)
    half, full = (p.ppo_config for p in trainer.problems)
    assert (half.total_timesteps, full.total_timesteps) == (1024, 2048)
    assert (half.num_updates, full.num_updates) == (4, 8)
    assert [(p.name, p.env_index, p.horizon) for p in trainer.problems] == [("CartPole-v1@0.5", 0, 0.5),
                                                                           ("CartPole-v1@1", 0, 1.0)]
    assert all(p.env is trainer.envs[0] and p.env.ppo_config == full for p in trainer.problems)
    assert trainer.steps_per_generation == 4 * 2 * (1024 + 2048) // 2  # pop 4, 2 seeds, the mean horizon


@pytest.mark.slow
def test_real_ppo_generation_over_rates_and_horizons(tmp_path):
    """The real inner loop under every lever that changes what it compiles: the drawn lr is a traced
    leaf, each horizon a program; two generations run and log finite fitness."""
    # fitness from the training curve, no evaluation episodes: the horizons' programs without the
    # evaluation loop (what they compile otherwise is the same)
    cfg = tiny_config(generations=2, eval_every=0, es=ESConfig(population_size=4), seeds_per_member=1,
                      fitness="final", inner=InnerConfig(total_timesteps=2048, num_envs=4, num_steps=64,
                                                         hidden=(16, 16), eval_episodes=0),
                      distribution=DistributionConfig(lr_range=(0.5, 2.0), horizons=(0.5, 1.0)))
    run(cfg, tmp_path / "run", progress=False, log=lambda *a: None)
    rows = RunDir(tmp_path / "run").metrics()
    assert len(rows) == 2 and all(np.isfinite(r.fitness_mean) for r in rows)


def test_an_experiment_file_declares_the_distribution():
    cfg = resolve("distribution_cpu")
    d = cfg.distribution
    assert d.lr_range and len(d.horizons) > 1 and 0 < d.envs_per_generation < len(cfg.envs)
    assert cfg.heldout.envs  # declared before it runs
    over = resolve("distribution_cpu", ["distribution.lr_range=0.25,4", "distribution.horizons=1"])
    assert over.distribution.lr_range == (0.25, 4.0) and over.distribution.horizons == (1.0,)


@pytest.mark.parametrize("dist, message", [
    (dict(envs_per_generation=3), r"envs_per_generation = 3 must be between 1 and the 2"),
    (dict(envs_per_generation=-1), "envs_per_generation"),
    (dict(lr_range=(2.0, 0.5)), r"lr_range = \[2.0, 0.5\] must be \[low, high\]"),
    (dict(lr_range=(0.0, 2.0)), "0 < low <= high"),
    (dict(lr_range=(0.5, 1.0, 2.0)), "lr_range"),
    (dict(lr_draw="member"), "lr_draw must be one of pair, generation"),
    (dict(horizons=(0.0, 1.0)), r"horizons = \[0.0, 1.0\] must be distinct fractions in \(0, 1\]"),
    (dict(horizons=(0.5, 1.5)), "distinct fractions"),
    (dict(horizons=(0.5, 0.5)), "distinct fractions"),
    (dict(env_fitness="median"), "env_fitness must be one of mean, rank, worst"),
    (dict(horizons=(0.01, 1.0)), r"horizons: 0.01 of the run's length on CartPole-v1.*less than one rollout"),
])
def test_bad_distributions_fail_before_any_compute(dist, message):
    with pytest.raises(ValueError, match=message):
        validate(RunConfig(envs=TWO_ENVS, fitness="final_eval_norm", inner=InnerConfig(total_timesteps=4096),
                           distribution=DistributionConfig(**dist)))

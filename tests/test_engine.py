"""The meta-training engine: the outer loop, its sign convention, faults, devices, resume."""

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metadisco.checks import NormaliserError
from metadisco.config import ESConfig, InnerConfig, ObjectivesConfig, RunConfig, run_plan, validate
from metadisco.core.errors import EXIT_TIME_LIMIT, RunInterrupted
from metadisco.core.records import Interval
from metadisco.core.run_config import config_digest
from metadisco.core.scores import FITNESS_KINDS
from metadisco.core.strategies import ANTITHETIC_STRATEGIES, STRATEGIES, UNSUPPORTED_STRATEGIES, WEIGHTED_STRATEGIES
from metadisco.engine import MetaTrainer, devices_for
from metadisco.rundir import RunDir, RunDirError
from metadisco.scoring import Baseline, RunScores, fetch, fitness_from
from metadisco.strategy import make_strategy
from metadisco.time_limit import TimeLimit
from metadisco.train import run
from tests.helpers import (
    constant_train,
    metadisco_in_process,
    metric_rows,
    quadratic_train,
    stand_in_result,
    tiny_config,
    untimed,
)


def diverging_train(key, meta_params):
    result = quadratic_train(key, meta_params)
    bad = meta_params["drift"]["w2"][0, 0] > 0.0
    return result.replace(returns=jnp.where(bad, jnp.nan, result.returns),
                          final_return=jnp.where(bad, jnp.nan, result.final_return),
                          eval_return=jnp.where(bad, jnp.nan, result.eval_return))





def test_fitness_improves_on_a_meta_problem_with_a_known_answer(tmp_path):
    cfg = tiny_config(generations=40, eval_every=0, es=ESConfig(population_size=16, sigma_init=0.02, lr=0.01))
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic_train])
    run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lambda *a: None)
    rows = RunDir(tmp_path / "run").metrics()
    first = np.mean([r.fitness_mean for r in rows[:5]])
    last = np.mean([r.fitness_mean for r in rows[-5:]])
    assert last > first + 0.05, (first, last)  # fitness is maximised: the sign reaches evosax right
    assert rows[-1].best_fitness >= max(r.fitness_max for r in rows) - 1e-6


def test_the_members_of_a_generation_train_on_the_same_seeds(tmp_path):
    """Common random numbers: a stand-in whose score is its seed's noise alone (what the member is does not
    enter it) scores every member of a generation alike; the next generation draws other seeds."""
    cfg = tiny_config(generations=3, eval_every=0, seeds_per_member=2)
    trainer = MetaTrainer(run_plan(cfg), trains=[constant_train(0.0, 1.0, noise=1.0)])
    run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lambda *a: None)
    rows = RunDir(tmp_path / "run").metrics()
    assert [(r.fitness_min, r.fitness_std) for r in rows] == [(r.fitness_max, 0.0) for r in rows]
    assert len({r.fitness_mean for r in rows}) == 3  # each generation its own seeds


def test_a_diverging_member_does_not_stop_the_run(tmp_path):
    cfg = tiny_config(generations=3, eval_every=0)
    trainer = MetaTrainer(run_plan(cfg), trains=[diverging_train])
    run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lambda *a: None)
    rows = RunDir(tmp_path / "run").metrics()
    assert len(rows) == 3
    assert sum(r.num_diverged for r in rows) > 0  # counted ...
    assert all(np.isfinite(r.fitness_mean) for r in rows if r.num_diverged < 4)  # ... and excluded
    assert np.isfinite(rows[-1].best_fitness)


@pytest.fixture(scope="module")
def trainer():
    """One compiled trainer for tiny_config(), shared (compiling costs more than running here)."""
    return MetaTrainer(run_plan(tiny_config()))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, trainer):
    path = tmp_path_factory.mktemp("full") / "run"
    run(tiny_config(), path, progress=False, log=lambda *a: None, trainer=trainer)
    return path


@pytest.fixture(scope="module")
def standin():
    """tiny_config()'s trainer with stand-in inner loops (the run's and PPO's): the host loop's logic (resume,
    crash, corrupt checkpoint, extension) at a generation in milliseconds. Real PPO: `trainer`."""
    return MetaTrainer(run_plan(tiny_config()), trains=[quadratic_train], ppo_trains=[constant_train(-1.0, 0.0, noise=0.1)])


@pytest.fixture(scope="module")
def standin_run(tmp_path_factory, standin):
    path = tmp_path_factory.mktemp("standin") / "run"
    run(tiny_config(), path, progress=False, log=lambda *a: None, trainer=standin)
    return path


@pytest.mark.slow
@pytest.mark.optimised  # bit for bit in the build users run (tests/conftest.py)
def test_stop_and_resume_equals_uninterrupted_bit_for_bit(tmp_path):
    # a trainer of its own, and the uninterrupted run too: the module's were compiled in the suite's build
    trainer = MetaTrainer(run_plan(tiny_config()))
    uninterrupted = tmp_path / "uninterrupted"
    run(tiny_config(), uninterrupted, progress=False, log=lambda *a: None, trainer=trainer)
    path = tmp_path / "run"
    run(tiny_config(), path, progress=False, stop_after=2, log=lambda *a: None, trainer=trainer)
    assert len(RunDir(path).metrics()) == 2
    run(None, path, resume=True, progress=False, log=lambda *a: None, trainer=trainer)
    assert metric_rows(path) == metric_rows(uninterrupted)
    best_a = json.loads((path / "objectives" / "mean.json").read_text())["params"]
    best_b = json.loads((uninterrupted / "objectives" / "mean.json").read_text())["params"]
    assert best_a == best_b


def test_resume_after_a_crash_drops_metrics_beyond_the_checkpoint(tmp_path, standin_run, standin):
    path = tmp_path / "run"
    run(tiny_config(), path, progress=False, stop_after=3, log=lambda *a: None, trainer=standin)
    # a 'crash' after generation 3's metrics line but before its checkpoint ...
    rd = RunDir(path)
    rd.checkpoints()[-1].unlink()
    with open(rd.metrics_path, "a") as f:
        f.write('{"generation": 3, "fitness_mea')  # ... while the next line was being written
    run(None, path, resume=True, progress=False, log=lambda *a: None, trainer=standin)
    assert metric_rows(path) == metric_rows(standin_run)


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, standin_run, standin):
    path = tmp_path / "run"
    run(tiny_config(), path, progress=False, stop_after=2, log=lambda *a: None, trainer=standin)
    RunDir(path).checkpoints()[-1].write_bytes(b"\x00garbage")
    messages = []
    run(None, path, resume=True, progress=False, log=messages.append, trainer=standin)
    assert any("unreadable" in m for m in messages)
    assert metric_rows(path) == metric_rows(standin_run)


def test_a_resume_counts_the_generations_done_from_the_checkpoint_it_starts_from(tmp_path, standin):
    """With the newest checkpoint corrupt, the resume starts from the one before: an extension is judged
    against what that one completed, not against the newest file's name."""
    from metadisco.train import resume_config

    path = tmp_path / "run"
    run(tiny_config(generations=4), path, progress=False, stop_after=3, log=lambda *a: None, trainer=standin)
    RunDir(path).checkpoints()[-1].write_bytes(b"\x00garbage")
    assert RunDir(path).checkpoint_generation(RunDir(path).newest_readable_checkpoint()) == 2
    assert resume_config(RunDir(path), tiny_config(generations=2)).generations == 2
    with pytest.raises(RunDirError, match="completed 2 generations"):
        resume_config(RunDir(path), tiny_config(generations=1))


def test_a_time_limit_stops_at_a_generation_boundary_and_the_resumed_run_equals_the_uninterrupted_one(tmp_path):
    cfg = tiny_config(generations=7, eval_every=3, checkpoint_every=5)
    # host logic: stand-in inner loops
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic_train], ppo_trains=[constant_train(-1.0, 0.0, noise=0.1)])
    run(cfg, tmp_path / "full", progress=False, trainer=trainer, log=lambda *a: None)
    now = [0.0]  # a clock that each logged generation moves 10 s on

    def log(line):
        if re.match(r"gen \d+/", line):
            now[0] += 10.0

    limit = TimeLimit(35.0, clock=lambda: now[0])
    path = tmp_path / "limited"
    with pytest.raises(RunInterrupted, match=r"time limit 35 s: stopped at generation 4/7") as stopped:
        run(cfg, path, progress=False, trainer=trainer, log=log, time_limit=limit)
    assert stopped.value.exit_code == EXIT_TIME_LIMIT and f"metadisco train --resume {path}" in str(stopped.value)
    rd = RunDir(path)
    assert len(rd.metrics()) == 4  # generations 1-4 logged, one evaluation (after 3) among them
    assert rd.checkpoint_generation(rd.checkpoints()[-1]) == 4  # written at the stop (checkpoint_every=5)
    run(None, path, resume=True, progress=False, trainer=trainer, log=lambda *a: None)
    assert metric_rows(path) == metric_rows(tmp_path / "full")
    mean = [json.loads((p / "objectives" / "mean.json").read_text())["params"] for p in (path, tmp_path / "full")]
    assert mean[0] == mean[1]


def test_resume_with_a_changed_config_is_refused(standin_run):
    before = (standin_run / "metrics.jsonl").read_text()
    with pytest.raises(RunDirError, match=r"es.population_size: 4 -> 6"):
        run(tiny_config(es=ESConfig(population_size=6)), standin_run, resume=True, progress=False)
    assert (standin_run / "metrics.jsonl").read_text() == before


def test_a_finished_run_extended_to_more_generations_equals_one_started_with_them(tmp_path, standin_run, standin):
    path = tmp_path / "run"
    run(tiny_config(generations=2), path, progress=False, log=lambda *a: None, trainer=standin)  # finished at 2
    run(tiny_config(), path, resume=True, progress=False, log=lambda *a: None, trainer=standin)  # generations=4
    assert RunDir(path).config().generations == 4
    assert metric_rows(path) == metric_rows(standin_run)  # eval_every=2 divides 2: no extra comparison row
    mean = [json.loads((p / "objectives" / "mean.json").read_text())["params"] for p in (path, standin_run)]
    assert mean[0] == mean[1]
    newest = [RunDir(p).checkpoints()[-1] for p in (path, standin_run)]
    assert newest[0].name == newest[1].name == "gen_000004.msgpack"
    assert newest[0].read_bytes() == newest[1].read_bytes()


def test_an_extended_run_keeps_the_comparison_of_its_old_last_generation_and_refuses_fewer_generations(tmp_path):
    cfg = tiny_config(generations=4, eval_every=2)
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic_train])
    run(cfg, tmp_path / "full", progress=False, trainer=trainer, log=lambda *a: None)
    path = tmp_path / "extended"
    run(tiny_config(generations=3, eval_every=2), path, progress=False, trainer=trainer, log=lambda *a: None)
    with pytest.raises(RunDirError, match=r"generations=2: it has completed 3 generations"):
        run(tiny_config(generations=2, eval_every=2), path, resume=True, progress=False, trainer=trainer)
    with pytest.raises(RunDirError, match=r"different config:\n  es.lr: 0.01 -> 0.2\nResume"):  # generations aside
        run(tiny_config(generations=4, eval_every=2, es=ESConfig(population_size=4, lr=0.2)), path, resume=True,
            progress=False, trainer=trainer)
    run(cfg, path, resume=True, progress=False, trainer=trainer, log=lambda *a: None)
    extended, full = untimed(path), untimed(tmp_path / "full")
    # generation 3 was the old run's last: its comparison on fresh seeds stays; nothing else differs
    assert extended[2].comparison is not None and full[2].comparison is None
    assert dataclasses.replace(extended[2], comparison=None, violations=None).to_row() == full[2].to_row()
    assert [r.to_row() for r in extended[:2] + extended[3:]] == [r.to_row() for r in full[:2] + full[3:]]
    mean = [json.loads((p / "objectives" / "mean.json").read_text())["params"] for p in (path, tmp_path / "full")]
    assert mean[0] == mean[1]


def test_an_existing_run_directory_is_never_overwritten_silently(standin_run):
    before = (standin_run / "metrics.jsonl").read_text()
    with pytest.raises(RunDirError, match="--resume"):
        run(tiny_config(), standin_run, progress=False)
    assert (standin_run / "metrics.jsonl").read_text() == before


# The demo (population 16 in batches of 4) at a tiny inner size: one batch a device on 4 devices, two on 2
INVARIANT = ["rediscover_shaping", "generations=2", "eval_every=2", "eval_seeds=2", "inner.total_timesteps=1024",
             "inner.num_steps=64", "--no-progress"]


@pytest.mark.slow
@pytest.mark.optimised  # the build users run (tests/conftest.py)
def test_the_device_count_does_not_change_a_single_bit(tmp_path, capsys):
    # Real PPO, so that a different program would show in the last bits (it did before member
    # batches: 52.42 vs 52.29 in the demo's first generation on 1 and 2 devices).
    code, out, err = metadisco_in_process(["train", *INVARIANT, "--run-dir", str(tmp_path / "two")], capsys)
    assert code == 0, err
    assert "split over 2 cpu device(s) in 1 process(es), each training 4 members at a time" in out
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    four = subprocess.run([sys.executable, "-m", "metadisco.cli", "train", *INVARIANT, "--run-dir", str(tmp_path / "four")],
                          env=env, capture_output=True, text=True, timeout=280)
    assert four.returncode == 0, four.stderr[-3000:]
    assert "split over 4 cpu device(s)" in four.stdout
    assert metric_rows(tmp_path / "two") == metric_rows(tmp_path / "four")  # comparisons and checks included
    assert untimed(tmp_path / "two")[-1].comparison is not None


def test_a_machine_with_one_core_still_gets_two_devices(monkeypatch):
    # one device compiles the population without shard_map's manual region: other last bits
    from metadisco.cli import _setup_jax

    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setattr("metadisco.compile_cache.configure", lambda: None)
    _setup_jax(argparse.Namespace(host_devices=None))
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"


@pytest.mark.parametrize("population, batch, available, devices", [
    (16, 4, 2, 2), (16, 4, 8, 4), (16, 4, 3, 2), (8, 4, 1, 1), (6, 4, 4, 3), (16, 0, 8, 8), (5, 4, 4, 1)])
def test_devices_are_chosen_so_that_each_holds_whole_batches(population, batch, available, devices):
    cfg = validate(RunConfig(es=ESConfig(population_size=population, antithetic=False), member_batch=batch))
    assert devices_for(population, cfg.members_per_batch, available) == devices
    if cfg.members_per_batch:
        assert (population // devices) % cfg.members_per_batch == 0


def test_a_comparison_reads_each_difference_against_its_own_reference_paired_by_seed():
    """checks.comparison from per-seed fitness (ours, start, PPO) on two problems: per problem and overall
    (mean over problems, then seeds), the difference from PPO and from the start, each paired by seed."""
    from metadisco.checks import CheckedProblem, comparison
    from metadisco.measure.stats import gap_closed_ci, mean_ci

    ours, start, ppo = np.array([3.0, 4, 5, 6]), np.array([1.0, 1, 2, 2]), np.array([2.0, 5, 4, 7])
    scored = [(ours, start, ppo), (ours + 1, start, ppo + np.array([2.0, 0, 1, 3]))]
    c = comparison([CheckedProblem("A", 0, None, 0), CheckedProblem("B", 1, None, 1)], scored)
    for row, (o, s, p) in zip(c.problems, scored):
        assert (row.mean, row.start, row.ppo) == (np.mean(o), np.mean(s), np.mean(p))
        assert row.diff == Interval(*mean_ci(o - p)) and row.vs_start == Interval(*mean_ci(o - s))
    o, s, p = (np.mean([x[j] for x in scored], axis=0) for j in range(3))
    assert (c.mean, c.start, c.ppo) == (np.mean(o), np.mean(s), np.mean(p))
    assert c.diff == Interval(*mean_ci(o - p)) and c.vs_start == Interval(*mean_ci(o - s))
    assert c.gap_closed == Interval(*gap_closed_ci(o, s, p))


def test_eval_rows_put_the_es_mean_beside_ppo(uninterrupted, trainer):
    rows = RunDir(uninterrupted).metrics()
    evals = [r.comparison for r in rows if r.comparison is not None]
    assert [r.generation for r in rows if r.comparison is not None] == [1, 3]
    (problem,) = evals[0].problems
    assert problem.name == "CartPole-v1" and problem.mean is not None and problem.ppo is not None
    # Before any generation the ES mean is the initial LPO, which is PPO exactly: on the same
    # fresh seeds the two columns must then be equal (different seeds or a drifted start would not be).
    state, baseline = trainer.replicate(fetch(trainer.init())), trainer.replicate(fetch(trainer.baseline()))
    c, _ = trainer.check(state, baseline, 0)
    assert c.mean == c.ppo
    assert c.problems[0].name == "CartPole-v1" and c.problems[0].mean == c.problems[0].ppo
    assert c.diff == Interval(0.0, 0.0, 0.0)  # paired by seed
    # ... and the run's start point is the ES mean itself
    assert c.start == c.mean and c.vs_start.value == 0.0
    for e in evals:  # later: the paired difference and its interval, which the run summary prints
        assert e.diff.low <= e.diff.value <= e.diff.high
        assert e.diff.value == pytest.approx(e.mean - e.ppo, abs=1e-4)
        assert e.vs_start.value == pytest.approx(e.mean - e.start, abs=1e-4)


def test_a_generation_compiles_once(tmp_path):
    """The jitted generation is traced once for a whole run: its outputs come back in exactly the
    layout and types its next call takes (sharding pins, no weak types), so nothing recompiles."""
    traces = []

    def counting_train(key, meta_params):
        traces.append(1)  # Python runs only while jax traces
        return quadratic_train(key, meta_params)

    cfg = tiny_config(generations=5, eval_every=0)
    run(cfg, tmp_path / "run", progress=False, trainer=MetaTrainer(run_plan(cfg), trains=[counting_train]), log=lambda *a: None)
    assert len(RunDir(tmp_path / "run").metrics()) == 5
    assert len(traces) == 1


def test_the_jax_free_strategy_tables_match_evosax():
    import inspect

    from evosax.algorithms import algorithms
    from evosax.core.fitness_shaping import weights_fitness_shaping_fn

    def parameters(name):
        return inspect.signature(algorithms[name].__init__).parameters

    assert sorted(STRATEGIES) == sorted(algorithms)
    assert set(ANTITHETIC_STRATEGIES) == {n for n in algorithms if "use_antithetic_sampling" in parameters(n)}
    assert set(WEIGHTED_STRATEGIES) == {
        n for n in algorithms if parameters(n)["fitness_shaping_fn"].default is weights_fitness_shaping_fn}


@pytest.mark.parametrize("strategy", sorted(UNSUPPORTED_STRATEGIES))
def test_strategies_that_cannot_run_are_refused_by_name(strategy):
    with pytest.raises(ValueError, match=f"es.strategy={strategy} cannot be used"):
        validate(RunConfig(es=ESConfig(strategy=strategy)))


def test_weighted_strategies_keep_their_own_fitness_shaping():
    """CMA-ES's mean update needs recombination weights (>= 0, summing to 1); centered ranks sum to 0."""
    with pytest.raises(ValueError, match="recombination weights"):
        validate(RunConfig(es=ESConfig(strategy="CMA_ES", fitness_shaping="centered_rank")))
    es, _ = make_strategy(ESConfig(strategy="CMA_ES", population_size=4), {"w": jnp.zeros(3)})
    from evosax.core.fitness_shaping import weights_fitness_shaping_fn

    assert es.fitness_shaping_fn is weights_fitness_shaping_fn



@pytest.mark.parametrize("kind", FITNESS_KINDS)
def test_every_fitness_kind_the_config_accepts_is_scored(kind):
    """Raw kinds score the result; a *_norm kind scores the initial policy 0 and PPO 1."""
    ppo = stand_in_result(jnp.linspace(10.0, 50.0, 8), jnp.float32(45.0), jnp.float32(10.0))
    baseline = Baseline.of(RunScores.of(jax.tree.map(lambda x: x[None], ppo)))  # one training problem
    score = float(fitness_from(RunScores.of(ppo), kind, baseline, 0))
    want = {"final_eval": 45.0, "greedy_eval": 45.0, "auc": 30.0, "final": 50.0}
    assert score == pytest.approx(1.0 if kind.endswith("_norm") else want[kind])
    assert RunConfig().fitness == "final_eval"  # the field's: the final policy's evaluation


@pytest.mark.parametrize("fitness", ["final_norm", "final_eval_norm", "auc_norm"])
def test_normalised_fitness_over_two_environments(tmp_path, fitness):
    """fitness = mean over envs of (f - PPO's initial eval) / (PPO's score - initial eval)."""
    cfg = tiny_config(generations=1, envs=("CartPole-v1", "Acrobot-v1"), fitness=fitness, eval_every=0)
    # the evolved inner loops return 30 on env 0 and -300 on env 1 whatever the member
    trains = [constant_train(0.0, 30.0), constant_train(-500.0, -300.0)]
    ppo = [constant_train(10.0, 50.0), constant_train(-500.0, -100.0)]  # PPO: 10 -> 50, -500 -> -100
    trainer = MetaTrainer(run_plan(cfg), trains=trains, ppo_trains=ppo)
    run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lambda *a: None)
    baseline = json.loads((tmp_path / "run" / "baseline.json").read_text())
    want = {"CartPole-v1": {"init_eval": 10.0, "auc": 30.0, "final": 50.0, "final_eval": 50.0},
            "Acrobot-v1": {"init_eval": -500.0, "auc": -300.0, "final": -100.0, "final_eval": -100.0}}
    for env, values in want.items():
        for k, v in values.items():
            np.testing.assert_allclose(baseline[env][k], v, rtol=1e-6, err_msg=f"{env} {k}")
    row = RunDir(tmp_path / "run").metrics()[0]
    if fitness == "auc_norm":  # ours: mean(linspace(init, end)); PPO's auc is the normaliser
        expected = np.mean([(15 - 10) / (30 - 10), (-400 + 500) / (-300 + 500)])
    else:
        expected = np.mean([(30 - 10) / (50 - 10), (-300 + 500) / (-100 + 500)])  # 0.5
    np.testing.assert_allclose(row.fitness_mean, expected, rtol=1e-5)


@pytest.mark.parametrize("ppo_gain, noise, refused", [(0.0, 0.0, True), (0.5, 10.0, True), (40.0, 1.0, False)])
def test_a_normaliser_within_noise_is_refused_before_the_generations(tmp_path, ppo_gain, noise, refused):
    """On Acrobot PPO's final evaluation beats its initial policy by `ppo_gain` with seed noise
    `noise` (8 baseline seeds); a normalised fitness needs a gain beyond 2 standard errors."""
    cfg = tiny_config(envs=("CartPole-v1", "Acrobot-v1"), fitness="final_eval_norm", baseline_seeds=8,
                      eval_every=0)  # no evaluation program: the run only has to go through
    ppo = [constant_train(10.0, 50.0), constant_train(-500.0, -500.0 + ppo_gain, noise)]
    trainer = MetaTrainer(run_plan(cfg), trains=[constant_train(0.0, 1.0)] * 2, ppo_trains=ppo)
    if not refused:
        run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lambda *a: None)
        assert len(RunDir(tmp_path / "run").metrics()) == cfg.generations
        return
    with pytest.raises(NormaliserError, match=r"(?s)does not improve beyond noise.*Acrobot-v1.*inner.total_timesteps") as err:
        run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lambda *a: None)
    assert "CartPole-v1:" not in str(err.value)  # the env where PPO does learn is not named
    assert RunDir(tmp_path / "run").metrics() == [] and not RunDir(tmp_path / "run").checkpoints()


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s not in UNSUPPORTED_STRATEGIES])
def test_every_strategy_runs_by_name(strategy, tmp_path):
    """Every name the config accepts builds, runs two generations and writes finite metrics."""
    # One device and one seed per member: the smallest generation program (a third less to compile
    # per strategy). Splitting the population over devices and the search-health halves do not
    # depend on the strategy (a population's leaves are [P, ...] for all); tested above with Open_ES.
    cfg = tiny_config(generations=2, eval_every=0, es=ESConfig(strategy=strategy, population_size=4), devices=1,
                      seeds_per_member=1)
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic_train])
    run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lambda *a: None)
    rows = RunDir(tmp_path / "run").metrics()
    assert [r.generation for r in rows] == [0, 1]
    assert all(np.isfinite(r.fitness_mean) and np.isfinite(r.best_fitness) for r in rows)


def test_the_engine_takes_a_plan_and_says_how_to_make_one_from_a_config():
    with pytest.raises(TypeError, match=r"MetaTrainer\(metadisco\.config\.run_plan\(cfg\)\)"):
        MetaTrainer(tiny_config())


@pytest.mark.parametrize("override, message", [
    ({"es": ESConfig(population_size=5)}, "odd"),
    ({"es": ESConfig(strategy="OpenES")}, "Did you mean Open_ES"),
    ({"envs": ("Cartpole-v1",)}, "Did you mean: CartPole-v1"),
    ({"objectives": ObjectivesConfig(drift="lpoo")}, "Did you mean lpo"),
    ({"envs": ("CartPole-v1", "Acrobot-v1")}, "normalised fitness"),
    ({"fitness": "final_eval_norm", "baseline_seeds": 1}, "baseline_seeds >= 2"),
    ({"inner": InnerConfig(eval_episodes=0)}, "eval_episodes must be >= 1"),
    ({"inner": InnerConfig(num_minibatches=3)}, "does not split"),
])
def test_bad_configs_fail_before_any_compute(override, message):
    with pytest.raises(ValueError, match=message):
        validate(RunConfig(**override))


@pytest.mark.slow
def test_a_start_point_that_is_ppo_exactly_is_trained_once_in_the_comparisons_on_fresh_seeds():
    """drift_mix starts at PPO-clip bit for bit (Objectives.params_reproducing), so the comparison trains the
    start once, as PPO: the same row as training it separately."""
    cfg = tiny_config(generations=1, objectives=ObjectivesConfig(drift="drift_mix"))
    shared, separate = MetaTrainer(run_plan(cfg)), MetaTrainer(run_plan(cfg))
    separate.checks.start_is_ppo = False
    assert shared.start_is_ppo and MetaTrainer(run_plan(tiny_config())).start_is_ppo  # LPO's seed-0 start is its default_params
    assert not MetaTrainer(run_plan(tiny_config(seed=1))).start_is_ppo  # another seed's hidden layer: not the params compared
    state, baseline = shared.replicate(fetch(shared.init())), shared.replicate(shared.baseline_template())
    comparisons = [t.check(state, baseline, 1)[0] for t in (shared, separate)]
    assert comparisons[0].to_row() == comparisons[1].to_row()  # NaN (null) where both are NaN: no gap from the start to PPO
    assert comparisons[0].start == comparisons[0].ppo


def test_a_selection_that_kept_the_start_trains_it_once_in_its_comparison(monkeypatch):
    """compare_selected of the start itself: one candidate trained on each seed, not the start twice."""
    cfg = tiny_config(generations=1, eval_every=1)
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic_train], ppo_trains=[constant_train(-1.0, 0.0)])
    trained, score = [], trainer.program.score_candidates
    monkeypatch.setattr(trainer.program, "score_candidates",
                        lambda branch, candidates, seeds: trained.append(len(candidates)) or score(branch, candidates, seeds))
    baseline = trainer.replicate(trainer.baseline_template())
    c = trainer.compare_selected(trainer.initial_solution, baseline, 1)
    assert trained == [1, 1]  # the start (its own row), then PPO's own branch
    assert c.mean == c.start and c.vs_start.value == 0


def test_resume_refuses_a_config_json_edited_since_the_run_began(tmp_path):
    cfg = tiny_config(generations=4, eval_every=0)
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic_train])
    path = tmp_path / "run"
    run(cfg, path, progress=False, stop_after=2, trainer=trainer, log=lambda *a: None)
    stored = json.loads((path / "config.json").read_text())
    edited = {**stored, "seed": 7, "es": {**stored["es"], "population_size": 8}}
    (path / "config.json").write_text(json.dumps(edited))
    before = (path / "metrics.jsonl").read_text()
    for given in (None, tiny_config(generations=6, eval_every=0, seed=7, es=ESConfig(population_size=8))):
        with pytest.raises(RunDirError, match="config.json was changed since the run began"):
            run(given, path, resume=True, progress=False, log=lambda *a: None)
    assert (path / "metrics.jsonl").read_text() == before
    (path / "config.json").write_text(json.dumps(stored))  # restored: it resumes
    run(None, path, resume=True, progress=False, trainer=trainer, log=lambda *a: None)
    assert len(RunDir(path).metrics()) == 4


def test_a_field_the_schema_gained_since_a_run_began_neither_blocks_its_resume_nor_enters_its_file(tmp_path):
    """config.digest is config.json's own, not the schema's: a run written before a field existed
    (its file and digest lack it; it reads at its default) resumes and extends, and its file keeps
    what it held but for generations."""
    cfg = tiny_config(generations=2, eval_every=0)
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic_train])
    path = tmp_path / "run"
    run(cfg, path, progress=False, trainer=trainer, log=lambda *a: None)
    stored = json.loads((path / "config.json").read_text())
    older = {k: v for k, v in stored.items() if k != "mlflow_uri"}  # as an older metadisco wrote it
    older["inner"] = {k: v for k, v in stored["inner"].items() if k != "reward_noise_df"}
    (path / "config.json").write_text(json.dumps(older))
    (path / "config.digest").write_text(config_digest(older) + "\n")
    run(tiny_config(generations=3, eval_every=0), path, resume=True, progress=False, trainer=trainer, log=lambda *a: None)
    assert json.loads((path / "config.json").read_text()) == {**older, "generations": 3}
    assert len(RunDir(path).metrics()) == 3


def test_resume_on_a_layout_that_changes_the_bits_is_refused_unless_asked(tmp_path):
    """A run records every device layout it ran under; a resume says what differs, refuses before any compute
    where a member's bits would change (member_batch = 0 on another device count; one device against several;
    another platform), and continues with a warning when asked, recording the leg. With member batches,
    another count of several devices is only a note."""
    def started_on(path, **changes):  # the run's layout.json, as if it had run on one leg elsewhere
        leg = json.loads((path / "layout.json").read_text())["legs"][0]
        (path / "layout.json").write_text(json.dumps({"legs": [{**leg, **changes}]}))
        return leg

    whole = tiny_config(member_batch=0)
    trainer = MetaTrainer(run_plan(whole), trains=[quadratic_train], ppo_trains=[constant_train(-1.0, 0.0)])
    path = tmp_path / "whole"
    run(whole, path, progress=False, stop_after=1, log=lambda *a: None, trainer=trainer)
    n = trainer.mesh.devices.size
    leg = started_on(path, devices=n + 2)  # started elsewhere
    assert leg == {"from_generation": 0, "devices": n, "platform": "cpu", "processes": 1, "members_per_batch": 0}
    rows = (path / "metrics.jsonl").read_text()
    with pytest.raises(RunDirError, match=rf"another device layout \(devices {n + 2} -> {n}\).*--host-devices {n + 2}"):
        run(None, path, resume=True, progress=False, log=lambda *a: None, trainer=trainer, stop_after=2)
    assert (path / "metrics.jsonl").read_text() == rows  # nothing ran, nothing was lost
    lines = []
    run(None, path, resume=True, progress=False, log=lines.append, trainer=trainer, allow_layout_change=True,
        stop_after=2)
    assert any(line.startswith("warning: resuming on another device layout") for line in lines)
    assert [(leg["from_generation"], leg["devices"]) for leg in RunDir(path).layouts()] == [(0, n + 2), (1, n)]
    # fixed member batches: another count of several devices does not change the bits, and the resume says so
    batched = tiny_config()
    trainer = MetaTrainer(run_plan(batched), trains=[quadratic_train], ppo_trains=[constant_train(-1.0, 0.0)])
    path = tmp_path / "batched"
    run(batched, path, progress=False, stop_after=1, log=lambda *a: None, trainer=trainer)
    started_on(path, devices=n + 2)
    lines = []
    run(None, path, resume=True, progress=False, log=lines.append, trainer=trainer, stop_after=2)
    assert any(line.startswith(f"note: resuming on another layout (devices {n + 2} -> {n})")
               and "fixes each member's bits" in line for line in lines)
    # ... but one device against several does (no shard_map region on one): refused, as docs/guide.md says
    started_on(path, devices=1)
    with pytest.raises(RunDirError, match=rf"another device layout \(devices 1 -> {n}\).*one device against several"):
        run(None, path, resume=True, progress=False, log=lambda *a: None, trainer=trainer)


def test_a_stored_run_from_before_member_batch_resumes_as_it_ran(tmp_path):
    """config.json without member_batch: the run trained each device's whole shard at once, and resumes so
    (the field's default today, 4, would be another program)."""
    stored = tiny_config().to_dict()
    del stored["member_batch"]
    (tmp_path / "config.json").write_text(json.dumps(stored))
    assert RunDir(tmp_path).config().member_batch == 0

"""Search health: the split-half estimate of how much of the ES gradient is signal, checked on
synthetic fitness whose signal and noise are known, and as the engine reports it."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metadisco.config import (
    DistributionConfig,
    ESConfig,
    ExpectConfig,
    InnerConfig,
    ObjectivesConfig,
    RunConfig,
    run_plan,
    validate,
)
from metadisco.console import health_line
from metadisco.core.records import Comparison, GenerationRecord, Health, Interval, Violations
from metadisco.engine import MetaTrainer
from metadisco.measure import health as search_health
from metadisco.measure.verdicts import verdict
from metadisco.meta_objectives import MetaObjective
from metadisco.rundir import RunDir
from metadisco.train import run
from tests.helpers import REDISCOVERY_CHEAPER, REDISCOVERY_SIZE, stand_in_result

CENTRED = search_health.centred_rank_weights  # OpenES's shaping, as published


def test_rank_correlation_matches_the_known_reliability():
    """Scores = a member's true value (variance 1) + independent seed noise (variance v) on each
    half: the halves' Spearman correlation is (6/pi) asin(rho/2), rho = 1/(1+v)."""
    rng = np.random.default_rng(0)
    for v in (0.1, 1.0, 4.0):
        rho = 1.0 / (1.0 + v)
        expected = 6 / np.pi * np.arcsin(rho / 2)
        got = []
        for _ in range(200):
            true = rng.normal(size=64)
            a, b = (true + np.sqrt(v) * rng.normal(size=64) for _ in range(2))
            got.append(float(search_health.split_half(jnp.eye(64), a, b, weights=CENTRED).rank_corr))
        assert np.mean(got) == pytest.approx(expected, abs=0.03), v


def test_gradient_cosine_matches_the_known_signal_share():
    """Linear fitness f = Z w + noise with raw (mean-centred) weights: each half's gradient is
    s + n_h with s = Z^T Z w and E|n_h|^2 = sigma^2 sum_i |z_i|^2, so the halves' cosine must
    average |s|^2 / (|s|^2 + E|n_h|^2)."""
    rng = np.random.default_rng(1)
    P, D = 32, 50

    def centred(x):
        return x - x.mean()

    for noise in (0.0, 1.0, 3.0, 10.0):
        got, want = [], []
        for _ in range(200):
            z = rng.normal(size=(P, D))
            z -= z.mean(0)
            w = rng.normal(size=D) / np.sqrt(D)
            mu = z @ w
            a, b = (mu + noise * rng.normal(size=P) for _ in range(2))
            got.append(float(search_health.split_half(jnp.asarray(z), a, b, weights=centred).grad_cos))
            s = z.T @ centred(mu)
            # noise after centring: covariance sigma^2 (I - 11^T/P); z is centred, so z^T 1 = 0
            want.append(s @ s / (s @ s + noise**2 * np.sum(z * z)))
        assert np.mean(got) == pytest.approx(np.mean(want), abs=0.05), noise
    assert float(search_health.split_half(jnp.asarray(z), mu, mu, weights=centred).grad_cos) == pytest.approx(1.0, abs=1e-6)


def test_pure_noise_reads_as_noise_and_a_warning_says_what_to_do():
    rng = np.random.default_rng(2)
    z = jnp.asarray(rng.normal(size=(16, 100)))
    cos = [float(search_health.split_half(z, rng.normal(size=16), rng.normal(size=16), weights=CENTRED).grad_cos)
           for _ in range(300)]
    assert abs(np.mean(cos)) < 0.05
    assert float(search_health.signal_share(0.0)) == 0.0 and float(search_health.signal_share(1.0)) == 1.0
    assert float(search_health.signal_share(1 / 3)) == pytest.approx(0.5)
    message = search_health.advice(float(np.mean(cos)), 10)
    assert "seed noise" in message and "seeds_per_member" in message and "sigma" in message
    assert "heuristic 2c/(1+c)" in message
    assert search_health.advice(0.6, 10) is None


def test_tied_scores_give_nan_with_the_reason():
    """A collapsed population (every member the same score, bit for bit or within float32
    rounding, whose member order both halves share) has no gradient: NaN and why, not cosine 1.
    A spread that float32 resolves is a ranking."""
    rng = np.random.default_rng(3)
    z = jnp.asarray(rng.normal(size=(16, 8)))
    order = jnp.arange(16.0)
    ulps = 100.0 + 2 * 7.6e-6 * order  # 100 plus 0, 2, 4, ... float32 steps of 100: a few ulps apart
    for tie in (jnp.full(16, 5.0), jnp.float32(ulps)):
        out = search_health.split_half(z, tie, tie, weights=CENTRED, scores=tie)
        assert np.isnan(out.grad_cos) and np.isnan(out.rank_corr)
        assert int(out.undefined) == search_health.COLLAPSED
        assert search_health.why_undefined(Health(undefined=int(out.undefined))) == (
            "every member scored the same (collapsed population)")
    resolved = jnp.float32(100.0 + 1e-3 * order)
    out = search_health.split_half(z, resolved, resolved, weights=CENTRED, scores=resolved)
    assert float(out.grad_cos) == pytest.approx(1.0, abs=1e-6) and int(out.undefined) == search_health.DEFINED


def test_a_half_with_a_zero_gradient_gives_nan():
    rng = np.random.default_rng(4)
    z = jnp.asarray(rng.normal(size=(16, 8)))
    a = jnp.asarray(rng.normal(size=16))
    out = search_health.split_half(z, a, jnp.full(16, 2.0), weights=CENTRED, scores=a)
    assert np.isnan(out.grad_cos) and int(out.undefined) == search_health.FLAT_HALF
    # a gradient that is zero with varied scores: every perturbation 0
    out = search_health.split_half(jnp.zeros((16, 8)), a, a[::-1], weights=CENTRED, scores=a)
    assert np.isnan(out.grad_cos) and int(out.undefined) == search_health.FLAT_HALF


def test_one_meta_parameter_keeps_the_rank_correlation_only():
    """D = 1: the cosine of two numbers is +-1 by construction, so it is NaN with that reason; the
    halves' rank correlation does not depend on D and is kept."""
    rng = np.random.default_rng(5)
    z = jnp.asarray(rng.normal(size=(16, 1)))
    a, b = (jnp.asarray(rng.normal(size=16)) for _ in range(2))
    one = search_health.split_half(z, a, b, weights=CENTRED, scores=a + b)
    assert np.isnan(one.grad_cos) and int(one.undefined) == search_health.ONE_PARAMETER
    assert "±1 by construction" in search_health.why_undefined(Health(undefined=int(one.undefined)))
    two = search_health.split_half(jnp.asarray(rng.normal(size=(16, 2))), a, b, weights=CENTRED, scores=a + b)
    assert np.isfinite(two.grad_cos) and float(one.rank_corr) == pytest.approx(float(two.rank_corr))


def test_split_half_gives_the_hand_computed_cosine_and_rank_correlation():
    """Four members at +-e1, +-e2; the halves rank them 4 3 2 1 and 3 4 2 1. Centred ranks (1/2,
    1/6, -1/6, -1/2) and (1/6, 1/2, -1/6, -1/2) give g_a = (2/3, 2/3) and g_b = (1/3, 1): cosine
    2/sqrt(5); the ranks' correlation is Spearman's 1 - 6 * 2 / (4 * 15) = 0.8. The same through
    `of_generation` (from what tell returns), overall and as the drawn env's own health in a run of
    three envs, the others NaN and not drawn."""
    z = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    a, b = np.array([4.0, 3.0, 2.0, 1.0]), np.array([3.0, 4.0, 2.0, 1.0])
    out = search_health.split_half(z, a, b, weights=CENTRED, scores=a + b)
    assert float(out.grad_cos) == pytest.approx(2 / np.sqrt(5), abs=1e-6)
    assert float(out.rank_corr) == pytest.approx(0.8, abs=1e-6) and int(out.undefined) == search_health.DEFINED
    told = np.stack([np.stack([b, a]), np.stack([a, b])])  # [2 halves, 2 views, P]: the draw, then env 2 alone
    halves = search_health.Halves(z, told, None, np.stack([a + b, a + b]), np.array([2]))
    overall, games = search_health.of_generation(halves, 3, CENTRED)
    assert float(overall.grad_cos) == pytest.approx(2 / np.sqrt(5), abs=1e-6)  # the halves swapped: the same
    assert games.grad_cos[2] == pytest.approx(2 / np.sqrt(5), abs=1e-6) and games.rank_corr[2] == pytest.approx(0.8)
    assert np.isnan(games.grad_cos[:2]).all() and np.isnan(games.rank_corr[:2]).all()
    assert games.undefined.tolist() == [search_health.NOT_DRAWN] * 2 + [search_health.DEFINED]
    assert search_health.of_generation(halves._replace(told=told[:, :1]), 1, CENTRED)[1] is None  # one env: one view
    assert search_health.of_generation(None, 3, CENTRED) == (None, None)  # one seed per member


def health_rows(codes, cos=0.9):
    """Synthetic generations, read from stored rows: code 0 a defined cosine `cos`, else undefined
    (null) for that reason."""
    return [GenerationRecord.from_row({"generation": g, "health/grad_cos": cos if c == 0 else None,
                                       "health/rank_corr": 0.5 if c != 1 else None, "health/undefined": c,
                                       "fitness_min": 1.0, "fitness_max": 1.0 if c == 1 else 2.0})
            for g, c in enumerate(codes)]


def test_a_collapse_is_warned_of_once_at_its_first_generation():
    C = search_health.COLLAPSED
    rows = health_rows([0, 0, C, C, C, 0, C])
    warned = [g for g in range(len(rows)) if search_health.collapse_warning(rows[: g + 1])]
    assert warned == [2, 6]
    message = search_health.collapse_warning(rows[:3])
    assert message.startswith("generation 3: every member scored the same") and "es.sigma_init" in message
    # a run that does not measure health: the generation's tied min and max say it
    bare = [replace(r, health=None) for r in rows]
    assert [g for g in range(len(bare)) if search_health.collapse_warning(bare[: g + 1])] == [2, 6]


def test_the_health_line_counts_undefined_generations_and_calls_the_share_a_heuristic():
    C = search_health.COLLAPSED
    line = health_line(health_rows([0] * 5 + [C] * 5))
    assert "+0.90 over the last 5 generation(s)" in line and "heuristic 2c/(1+c)" in line
    assert "n/a in 5: every member scored the same (collapsed population)" in line
    # a collapse over the whole window: no share of a gradient from before it
    line = health_line(health_rows([0] * 10 + [C] * 10))
    assert "signal" not in line and "n/a in 10: every member scored the same" in line
    line = health_line(health_rows([search_health.ONE_PARAMETER] * 4))
    assert "±1 by construction" in line and "rank correlation +0.50" in line


def test_the_progress_bar_shows_why_health_is_undefined_and_prints_the_warning():
    from metadisco.console import update_bar

    class Bar:
        def __init__(self):
            self.postfix, self.written = {}, []

        def set_postfix(self, **kw):
            self.postfix = kw

        def update(self, n):
            pass

        def write(self, line):
            self.written.append(line)

    row = replace(health_rows([search_health.COLLAPSED])[0], fitness_mean=1.0, best_fitness=1.0, num_diverged=0,
                  wall_time_s=1.0, env_steps_per_s=1e3)
    bar = Bar()
    update_bar(bar, row, print, 10, ["warning: collapsed"])
    assert bar.postfix["health"] == "n/a (collapsed)" and bar.written == ["warning: collapsed"]
    logged = []
    update_bar(None, row, logged.append, 10, [])
    assert "health n/a: every member scored the same (collapsed population)" in logged[0]


def test_the_report_labels_the_share_a_heuristic_and_says_why_health_is_undefined():
    from metadisco.analysis.report import _health_section

    text = "".join(_health_section(health_rows([0] * 3 + [search_health.COLLAPSED] * 2)))
    assert "2c/(1+c) (a heuristic)" in text and "n/a in 2: every member scored the same" in text


def linear_train(noise):
    """A stand-in inner loop: return = 100 * sum(w2) (the signal, the same on every seed) plus
    `noise` * u_seed . w2 with u_seed ~ N(0, I) drawn per seed: the seed moves members apart
    differently on each seed, as PPO's chaotic training does (noise that moved every member
    alike would cancel in the ranking: the seeds are shared)."""

    def train(key, meta_params):
        w2 = meta_params["drift"]["w2"]
        ret = 100.0 * jnp.sum(w2) + noise * jnp.sum(jax.random.normal(key, w2.shape) * w2)
        return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(0.0))

    return train


def constant_ppo(key, meta_params):
    """A stand-in PPO reference: returns 0 throughout, evaluates at 0.1."""
    return stand_in_result(jnp.zeros(8), jnp.float32(0.1), jnp.float32(0.0))


def tiny(**changes) -> RunConfig:
    base = dict(generations=6, inner=InnerConfig(total_timesteps=2048, num_envs=4, num_steps=64, hidden=(16, 16)),
                objectives=ObjectivesConfig(drift={"name": "lpo", "hidden": 8}), es=ESConfig(population_size=16),
                seeds_per_member=4, eval_every=3, eval_seeds=4, checkpoint_every=3)
    return validate(RunConfig(**{**base, **changes}))


def test_the_engine_reports_signal_and_noise_every_generation(tmp_path):
    """Noise-free fitness: the two halves rank alike (cosine 1); fitness drowned in seed noise:
    the cosine averages near 0 and the run says so, with advice."""
    cfg = tiny(generations=20, es=ESConfig(population_size=32), eval_every=10)
    means = {}
    for noise in (0.0, 1e5):
        logged = []
        path = tmp_path / f"noise{noise:g}"
        # PPO's part (the eval rows' reference) a stand-in too: this test reads only the health columns
        trainer = MetaTrainer(run_plan(cfg), trains=[linear_train(noise)], ppo_trains=[constant_ppo])
        run(cfg, path, progress=False, trainer=trainer, log=logged.append)
        rows = RunDir(path).metrics()
        assert all(r.health.grad_cos is not None and r.health.rank_corr is not None for r in rows)
        means[noise] = np.mean([r.health.grad_cos for r in rows])
        if noise == 0.0:
            assert all(r.health.grad_cos == pytest.approx(1.0, abs=1e-5) for r in rows)
            assert not any("warning" in line for line in logged)
        else:
            assert any(line.startswith("warning: search health") for line in logged)
    assert abs(means[1e5]) < 0.2 and means[0.0] == pytest.approx(1.0, abs=1e-5)


def test_each_game_records_its_own_health_so_a_game_of_seed_noise_shows_while_the_run_runs(tmp_path):
    """Two games, one drawn per generation (the H200 run's layout): one carries the signal, the other is
    seed noise. Each generation records the drawn game's own split-half cosine, and the health line
    names each game, so which game moves the gradient is visible at every check, not only at the end."""
    cfg = tiny(generations=12, es=ESConfig(population_size=32), eval_every=4, envs=("CartPole-v1", "Acrobot-v1"),
               fitness="final_eval_norm",
               distribution=DistributionConfig(envs_per_generation=1))
    logged = []
    trainer = MetaTrainer(run_plan(cfg), trains=[linear_train(0.0), linear_train(1e5)], ppo_trains=[constant_ppo] * 2)
    run(cfg, tmp_path / "r", progress=False, trainer=trainer, log=logged.append)
    rows = RunDir(tmp_path / "r").metrics()
    for r in rows:  # the drawn game only
        assert list(r.game_health) == [env for env, drawn in r.draw.items() if drawn == 1.0]
    clean = [r.game_health["CartPole-v1"].grad_cos for r in rows if "CartPole-v1" in r.game_health]
    noisy = [r.game_health["Acrobot-v1"].grad_cos for r in rows if "Acrobot-v1" in r.game_health]
    assert clean and noisy and np.allclose(clean, 1.0, atol=1e-5) and abs(np.mean(noisy)) < 0.3
    line = next(line for line in logged if "each game alone:" in line)
    assert "CartPole-v1 +1.00 over" in line
    assert "Acrobot-v1" in line


def test_a_population_tied_beside_diverged_members_reads_as_collapsed_and_warns(tmp_path):
    """Every finite member scores the same and the others diverge: the ES ties the diverged with
    the worst, so its gradient is zero; health says n/a (collapsed), never cosine 1 (the two halves
    once agreed that the diverged were lowest), and the run warns at the first generation, once."""
    cfg = tiny(generations=3, eval_every=0)

    def dead_zone(key, meta_params):
        w2 = meta_params["drift"]["w2"]
        ret = jnp.where(w2.ravel()[0] > 0.0, jnp.nan, 5.0)
        return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(0.0))

    logged = []
    run(cfg, tmp_path / "r", progress=False, trainer=MetaTrainer(run_plan(cfg), trains=[dead_zone]), log=logged.append)
    rows = RunDir(tmp_path / "r").metrics()
    assert all(np.isnan(r.health.grad_cos) and r.health.undefined == search_health.COLLAPSED for r in rows)
    assert all(r.num_diverged > 0 for r in rows)
    warnings = [line for line in logged if line.startswith("warning: generation")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: generation 1: every member scored the same")
    assert logged.index(warnings[0]) == next(i for i, line in enumerate(logged) if line.startswith("gen 1/")) + 1
    summary = next(line for line in logged if line.startswith("search health"))
    assert "n/a" in summary and "signal" not in summary


def test_one_seed_per_member_is_not_measured_and_says_so(tmp_path):
    cfg = tiny(seeds_per_member=1, generations=2, eval_every=0)
    logged = []
    run(cfg, tmp_path / "r", progress=False, trainer=MetaTrainer(run_plan(cfg), trains=[linear_train(1.0)]), log=logged.append)
    assert all(r.health is None for r in RunDir(tmp_path / "r").metrics())
    assert any("search health is not measured" in line for line in logged)
    assert health_line(RunDir(tmp_path / "r").metrics()) is None


def test_a_run_whose_every_score_is_nan_ends_with_its_summary(tmp_path):
    """Fitness NaN for every member (a training run in which no episode ended, scored by
    fitness=final) is logged as null; the run still ends with its summary, saying why."""
    cfg = tiny(generations=2, eval_every=0)

    def no_episode_ended(key, meta_params):
        nan = jnp.float32(jnp.nan) + 0.0 * jnp.sum(meta_params["drift"]["w2"])
        return stand_in_result(jnp.full((8,), nan), nan, jnp.float32(0.0))

    logged = []
    run(cfg, tmp_path / "r", progress=False, trainer=MetaTrainer(run_plan(cfg), trains=[no_episode_ended]), log=logged.append)
    assert all(np.isnan(r.fitness_mean) for r in RunDir(tmp_path / "r").metrics())
    summary = next(line for line in logged if line.startswith("population mean fitness"))
    assert "nan" in summary and "no member had a finite score" in summary


def test_a_run_that_finds_its_expected_answer_says_found(tmp_path):
    """An expectation stated in the config ends the run with a verdict line: the ES mean beats
    its start on fresh seeds (the signal moves it; PPO, a constant 0, is the other end of the gap)."""
    cfg = tiny(generations=6, expect=ExpectConfig(answer="more w2", beats="start", gap_closed=0.5),
               es=ESConfig(population_size=16, sigma_init=0.05, lr=0.05))
    ppo = [constant_ppo]
    logged = []
    run(cfg, tmp_path / "r", progress=False, trainer=MetaTrainer(run_plan(cfg), trains=[linear_train(0.01)], ppo_trains=ppo),
        log=logged.append)
    assert any("expected answer (stated before the run): more w2" in line for line in logged)
    assert logged[-1].startswith("verdict: FOUND"), logged[-1]
    row = RunDir(tmp_path / "r").metrics()[-1]
    c = row.comparison
    assert c.vs_start.low > 0 and c.gap_closed.value > 0.5
    # the same row with an interval that reaches 0, or short of the share of the gap asked for
    reaching = replace(row, comparison=replace(c, vs_start=replace(c.vs_start, low=-1.0)))
    assert verdict(reaching, ExpectConfig(beats="start")).startswith("verdict: NOT FOUND")
    short = replace(row, comparison=replace(c, gap_closed=replace(c.gap_closed, value=0.7)))
    assert verdict(short, ExpectConfig(beats="start", gap_closed=0.8)).startswith("verdict: NOT FOUND")
    assert verdict(short, ExpectConfig(beats="start", gap_closed=0.6)).startswith("verdict: FOUND")
    assert verdict(row, ExpectConfig()) is None


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["rediscover_trust_region", "rediscover_value_loss", "rediscover_shaping"])
def test_a_rediscovery_problem_at_test_size_states_its_answer_and_ends_with_a_verdict(experiment, tmp_path):
    """The named rediscovery problems at test size: the expected answer and pass criterion are
    printed before the first generation, health is measured every generation, and the last line
    is the verdict on the comparison that is the point of the run. (Whether the answer is found
    at full size is in docs/results/rediscovery.md.)"""
    from metadisco.config import resolve

    # the run's flow and lines are the same at REDISCOVERY_CHEAPER's settings. One device: the flow does not
    # depend on it (two devices equal one: tests/test_engine.py), and one-device programs compile faster.
    cheaper = REDISCOVERY_CHEAPER if experiment != "rediscover_shaping" else []
    cfg = resolve(experiment, [*REDISCOVERY_SIZE, *cheaper])
    assert cfg.expect.answer and cfg.expect.beats in ("start", "ppo") and cfg.heldout.envs
    logged = []
    run(cfg, tmp_path / "r", progress=False, log=logged.append)
    assert any(line.startswith("  expected answer (stated before the run)") for line in logged)
    assert logged[-1].startswith(("verdict: FOUND", "verdict: NOT FOUND")) and "the point of this run" in logged[-1]
    rows = RunDir(tmp_path / "r").metrics()
    assert all(r.health is not None and r.health.grad_cos is not None for r in rows)
    assert rows[-1].comparison.vs_start.low is not None and rows[-1].comparison.diff.low is not None


def test_metadisco_train_with_nothing_named_runs_the_demo(monkeypatch):
    """`metadisco train` alone is the demo experiment; overrides alone apply to the demo too, so
    `metadisco train inner.reward_noise=0` is the demo's control, not another problem."""
    import metadisco.train
    from metadisco.cli import main
    from metadisco.config import DEMO_EXPERIMENT, RunConfig, resolve

    started = []
    monkeypatch.setattr(metadisco.train, "run", lambda cfg, *a, **k: started.append(cfg))
    main(["train"])
    main(["train", "generations=3"])
    assert started[0] == resolve(DEMO_EXPERIMENT) and started[0].expect.beats
    assert started[1] == resolve(DEMO_EXPERIMENT, ["generations=3"]) and started[1].objectives != RunConfig().objectives


def weights_down_train(key, meta_params):
    """A stand-in inner loop that rewards value_loss_mix v1's weights for going below 0: the
    return is -100 * sum(weights), so the ES walks the mean into relu's dead zone, a value loss
    that is 0 everywhere, and it keeps scoring better than its start on every seed."""
    ret = -100.0 * jnp.sum(meta_params["value_loss"]["weights"])
    return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(0.0))


def test_a_degenerate_es_mean_gets_a_degenerate_verdict_never_found(tmp_path):
    """A family forced into its dead zone (value_loss_mix version 1, whose all-negative weights
    delete the critic): the run beats its start and PPO by any interval, and the verdict is still
    DEGENERATE, naming the constraint, at the comparison on fresh seeds and at the end."""
    cfg = tiny(generations=6, objectives=ObjectivesConfig(value_loss={"name": "value_loss_mix", "version": 1},
                                                           evolve=("value_loss",)),
               es=ESConfig(population_size=16, sigma_init=0.3, lr=0.5),
               expect=ExpectConfig(answer="anything", beats="start"))
    logged = []
    run(cfg, tmp_path / "r", progress=False, trainer=MetaTrainer(run_plan(cfg), trains=[weights_down_train],
                                                                 ppo_trains=[constant_ppo]), log=logged.append)
    rows = RunDir(tmp_path / "r").metrics()
    final = rows[-1]
    assert final.comparison.vs_start.low > 0  # what the score alone would have called FOUND
    assert [(v.plug, v.constraint) for v in final.violations.mean] == [("value_loss", "trains_the_critic")]
    assert logged[-1].startswith("verdict: DEGENERATE after generation 6"), logged[-1]
    assert "value loss fails trains_the_critic: the value loss is 0 everywhere" in logged[-1]
    assert not any(line.startswith("verdict: FOUND") for line in logged)
    # the same row without the violations is FOUND: the checks, not the score, decide
    assert verdict(replace(final, violations=Violations(mean=(), best=final.violations.best)),
                   cfg.expect).startswith("verdict: FOUND")


def test_an_expectation_does_not_outlive_the_objectives_it_was_written_for():
    from metadisco.config import resolve

    kept = resolve("rediscover_value_loss", ["generations=2"])
    assert kept.expect.beats == "ppo" and not kept.expect.not_applied
    swapped = resolve("rediscover_value_loss", ["objectives.value_loss=learned_clipped"])
    assert swapped.expect.beats == "" and swapped.expect.answer == ""
    assert "was written for drift=ppo_clip, value_loss=value_loss_mix" in swapped.expect.not_applied
    assert "value_loss=learned_clipped" in swapped.expect.not_applied
    row = GenerationRecord(9, comparison=Comparison(mean=1.0, ppo=0.0, diff=Interval(1.0, 0.5, 1.5)))
    assert verdict(row, swapped.expect) is None  # the plain comparison only
    unchecked = resolve("rediscover_value_loss", ["eval_every=0"])  # the demo without its checks on fresh seeds
    assert unchecked.expect.beats == "" and "eval_every=0 turns off" in unchecked.expect.not_applied
    own = resolve("rediscover_value_loss", ["objectives.value_loss=learned_clipped", "expect.beats=start"])
    assert own.expect.beats == "start" and not own.expect.not_applied  # a user's own expectation stands


def test_the_gap_closed_is_reported_only_where_the_start_is_below_ppo():
    from metadisco.measure.stats import gap_closed_ci

    start, ppo = np.zeros(8), np.ones(8)
    assert gap_closed_ci(np.full(8, 0.5), start, ppo)[0] == pytest.approx(0.5)
    assert all(np.isnan(gap_closed_ci(np.full(8, 0.5), ppo, start)))  # the start is above PPO: no gap
    row = GenerationRecord(4, comparison=Comparison(mean=2.0, ppo=1.0, start=1.5, vs_start=Interval(0.5, 0.1, 0.9),
                                                    gap_closed=Interval(np.nan)))
    line = verdict(row, ExpectConfig(beats="start", gap_closed=0.5))
    assert line.startswith("verdict: NOT FOUND") and "no gap to close" in line and "closing" not in line


class RandomScale(MetaObjective):
    """A plug-in value loss c * L2 whose init draws c at random: a function-changing value, as the
    contract allows (named tests.test_search_health:RandomScale)."""

    plug = "value_loss"
    name = "random_scale"

    def init(self, key):
        return {"c": jax.random.uniform(key, (), minval=0.5, maxval=1.5)}

    def value_loss(self, params, value, target, old_value):
        return params["c"] * 0.5 * jnp.square(value - target)


def scale_reporting_train(key, meta_params):
    """A stand-in inner loop whose return is 100 c, c the (not evolved) value loss's parameter it was given."""
    ret = 100.0 * meta_params["value_loss"]["c"] + 0.0 * jnp.sum(meta_params["drift"]["w2"])
    return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(0.0))


def test_a_plug_that_does_not_evolve_has_one_set_of_parameters_everywhere(tmp_path):
    """A plug-in whose init draws a function-changing value: the generations, the comparisons on
    fresh seeds and the saved objectives all use the run's start (start_params(seed)), not each their own."""
    from metadisco.meta_objectives import load_objectives

    cfg = tiny(generations=2, eval_every=2, seed=3,
               objectives=ObjectivesConfig(drift={"name": "lpo", "hidden": 8},
                                           value_loss="tests.test_search_health:RandomScale"))
    trainer = MetaTrainer(run_plan(cfg), trains=[scale_reporting_train], ppo_trains=[constant_ppo])
    c = float(trainer.objectives.start_params(cfg.seed)["value_loss"]["c"])  # the run's start
    assert abs(c - float(trainer.objectives.default_params()["value_loss"]["c"])) > 1e-3  # seed 0's would differ
    run(cfg, tmp_path / "r", progress=False, trainer=trainer, log=lambda _: None)
    rows = RunDir(tmp_path / "r").metrics()
    assert rows[0].fitness_mean == pytest.approx(100 * c, rel=1e-5)  # what every member trained with
    assert rows[-1].comparison.mean == pytest.approx(100 * c, rel=1e-5)  # what the comparison trained
    _, params, _ = load_objectives(tmp_path / "r" / "objectives" / "mean.json")
    assert float(params["value_loss"]["c"]) == pytest.approx(c)  # what was saved


@pytest.mark.parametrize("shaping", ["centered_rank", "z_score"])
def test_health_measures_the_gradient_the_strategy_takes(shaping):
    """The gradient health estimates is the step the ES takes: Open_ES (SGD, so its step is its
    gradient) with centred ranks or with z-scores moves its mean along sum_i w_i z_i, w the
    strategy's own shaping (metadisco.strategy.update_weights); centred ranks are not what a
    z-scored ES follows."""
    from metadisco.strategy import make_strategy, to_es_loss, update_weights

    es, params = make_strategy(ESConfig(population_size=16, fitness_shaping=shaping, optimizer="sgd"), {"w": jnp.zeros(6)})
    state = es.init(jax.random.key(0), {"w": jnp.zeros(6)}, params)
    pop, state = es.ask(jax.random.key(1), state, params)
    flat = search_health.flat_members(pop)
    fitness = jnp.asarray(np.random.default_rng(0).normal(size=16) ** 3, jnp.float32)  # skewed: ranks and z-scores differ
    told, _ = es.tell(jax.random.key(2), pop, to_es_loss(fitness), state, params)
    step = es.get_mean(told)["w"] - es.get_mean(state)["w"]
    z = flat - flat.mean(0)

    def cosine(a, b):
        return abs(float(jnp.dot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b))))

    assert cosine(step, z.T @ update_weights(es, params)(fitness)) == pytest.approx(1.0, abs=1e-5)
    centred = cosine(step, z.T @ CENTRED(fitness))
    assert centred == pytest.approx(1.0, abs=1e-5) if shaping == "centered_rank" else centred < 0.999


def test_the_host_weights_are_the_strategys_own_for_every_strategy_and_shaping():
    """Search health weights members on the host (numpy) as the strategy's update does on device: for
    every strategy a config can name, with its own shaping and each a config can ask for, the weights
    equal evosax's fitness_shaping_fn to float32 precision (scores with ties, as a collapse has)."""
    from metadisco.core.strategies import FITNESS_SHAPING, POPULATION_STRATEGIES, STRATEGIES, UNSUPPORTED_STRATEGIES
    from metadisco.strategy import make_strategy, to_es_loss, update_weights

    fitness = np.float32(np.random.default_rng(0).integers(0, 5, 8) ** 3 * 0.37)  # ties, and skewed
    for name in sorted(set(STRATEGIES) - set(POPULATION_STRATEGIES) - set(UNSUPPORTED_STRATEGIES)):
        for shaping in FITNESS_SHAPING:
            es, params = make_strategy(ESConfig(strategy=name, population_size=8, fitness_shaping=shaping),
                                       {"w": jnp.zeros(3)})
            host = update_weights(es, params)(fitness)
            device = es.fitness_shaping_fn(None, to_es_loss(jnp.asarray(fitness)), None, params)
            assert host.dtype == np.float32
            np.testing.assert_allclose(host, np.asarray(device), rtol=1e-6, atol=1e-6, err_msg=f"{name} {shaping}")


def test_a_population_based_strategy_has_no_gradient_to_measure_and_its_mean_is_its_best_member(tmp_path):
    """A genetic algorithm takes no gradient step: health's cosine is n/a with that reason (its
    halves' rank correlation stays), and what the run saves and compares as its mean is the best
    member seen, which its output calls so."""
    from metadisco.core.strategies import POPULATION_STRATEGIES, searched_point
    from metadisco.strategy import is_population_based, make_strategy

    for name in POPULATION_STRATEGIES:  # the jax-free table is evosax's
        assert is_population_based(make_strategy(ESConfig(strategy=name, population_size=8), {"w": jnp.zeros(3)})[0])
    assert not is_population_based(make_strategy(ESConfig(population_size=8), {"w": jnp.zeros(3)})[0])
    assert searched_point("SimpleGA") == "best member" and searched_point("Open_ES") == "ES mean"
    out = search_health.split_half(jnp.eye(8), jnp.arange(8.0), jnp.arange(8.0), weights=None, scores=jnp.arange(8.0))
    assert np.isnan(out.grad_cos) and float(out.rank_corr) == pytest.approx(1.0)
    assert int(out.undefined) == search_health.NO_GRADIENT

    cfg = tiny(generations=3, eval_every=3, es=ESConfig(strategy="SimpleGA", population_size=16))
    logged = []
    trainer = MetaTrainer(run_plan(cfg), trains=[linear_train(1.0)], ppo_trains=[constant_ppo])
    run(cfg, tmp_path / "ga", progress=False, trainer=trainer, log=logged.append)
    rows = RunDir(tmp_path / "ga").metrics()
    assert all(r.health.undefined == search_health.NO_GRADIENT and np.isnan(r.health.grad_cos) for r in rows)
    assert all(np.isfinite(r.health.rank_corr) for r in rows)
    assert any("best member" in line and "vs PPO" in line for line in logged), logged
    assert not any("ES mean" in line for line in logged), logged


def test_a_strategy_whose_shaping_has_no_host_form_is_a_config_error_before_compute():
    from types import SimpleNamespace

    from metadisco.core.errors import ConfigError
    from metadisco.strategy import update_weights

    def unknown_shaping(loss):
        return loss

    es = SimpleNamespace(fitness_shaping_fn=unknown_shaping, init=lambda key, mean, params: None)
    with pytest.raises(ConfigError, match="unknown_shaping has no host form"):
        update_weights(es, None)


def test_a_found_from_a_noisy_search_says_both_on_the_verdicts_line():
    """The end of a run reads once: where search health warns, the FOUND verdict (still the run's last line)
    says the search was noisy and why the verdict stands; a healthy search's verdict says nothing of it."""
    import dataclasses
    from types import SimpleNamespace

    from metadisco import console
    from metadisco.config import demo
    from metadisco.core.records import Health, Violations
    from tests.helpers import full_record

    cfg = demo()

    def last_lines(cosine):
        records = [dataclasses.replace(full_record(generation=g, health=Health(cosine, 0.1, 0), game_health={},
                                                   violations=None), comparison=None) for g in range(9)]
        found = full_record(generation=9, health=Health(cosine, 0.1, 0), game_health={},
                            violations=Violations(mean=(), best=()))
        found = dataclasses.replace(found, comparison=dataclasses.replace(
            found.comparison, diff=dataclasses.replace(found.comparison.diff, value=5.0, low=1.0, high=9.0)))
        run = SimpleNamespace(metrics=lambda: [*records, found], path="runs/R", objectives_dir="runs/R/objectives",
                              next_steps=lambda: "next: metadisco plot runs/R", selection_final=lambda: None)
        said = []
        console.summary(run, cfg, said.append, Violations(mean=(), best=()))
        return said

    noisy = last_lines(0.02)
    assert noisy[-1].startswith("verdict: FOUND") and "the search that found it was noisy" in noisy[-1], noisy
    assert any(line.startswith("warning: search health") for line in noisy)
    healthy = last_lines(0.9)
    assert healthy[-1].startswith("verdict: FOUND") and "noisy" not in healthy[-1], healthy

"""`metadisco evaluate`: held-out evaluation against PPO and DPO (metadisco.analysis.evaluation).

Every evaluation here uses the same tiny settings (2 seeds, 4096 steps); the tests that call
`evaluate` directly share one compiled-program cache (`programs`). The statistics themselves
are tested in tests/test_stats.py.
"""

import contextlib
import csv
import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metadisco.analysis import suites
from metadisco.analysis.evaluation import render
from metadisco.analysis.evaluation import run as evaluation
from metadisco.analysis.evaluation.programs import Programs, mesh
from metadisco.analysis.evaluation.protocol import LR_FACTORS
from metadisco.analysis.evaluation.results import Estimate, Evaluation, read_results
from metadisco.analysis.targets import resolve_target
from metadisco.cli import main
from metadisco.config import ESConfig, InnerConfig, RunConfig, run_plan
from metadisco.inner_loops import preset_for, preset_name
from metadisco.meta_objectives import LPO, ClosedFormDrift, Objectives, PotentialShaping, save_objectives
from tests.helpers import metadisco_in_process as cli

ENVS = "CartPole-v1,Acrobot-v1"
# what a stand-in for `evaluation.evaluate` returns: saved as an Evaluation is (`api.evaluate`), holding nothing
UNSAVED = SimpleNamespace(saved=lambda out_dir: SimpleNamespace(out_dir=out_dir))
TINY = ["--seeds", "2", "--timesteps", "4096", "--no-progress"]
OUTPUTS = {"results.json", "results.csv", "results.md", "curves.png", "curves.pdf"}


@pytest.fixture(scope="module")
def programs():
    """One compiled-program cache for the direct `evaluate` calls of this file."""
    return Programs()


# --------------------------------------------------------------------------------------------
# A baseline against itself
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_baseline_against_itself_on_the_same_seeds_has_probability_of_improvement_one_half(tmp_path, programs):
    copy = tmp_path / "ppo_copy.json"  # PPO's objectives as a file target: a second label, same program
    save_objectives(copy, Objectives(), Objectives().init(jax.random.key(0)))
    lines = []
    results = evaluation.evaluate([str(copy)], envs=["CartPole-v1"], seeds=4, budget=4096, progress=False, programs=programs,
                          bootstrap_reps=200, log=lines.append)
    assert [line.split(" at lr ")[0] for line in lines] == ["CartPole-v1: ppo_copy", "CartPole-v1: ppo", "CartPole-v1: dpo"]

    assert results.labels == ("ppo_copy", "ppo", "dpo")
    env = results.envs["CartPole-v1"]
    mine, ppo = env.methods["ppo_copy"], env.methods["ppo"]
    assert np.array_equal(mine.curve.seeds, ppo.curve.seeds, equal_nan=True)  # common random numbers, bit for bit
    assert np.mean(ppo.normalized) == pytest.approx(1.0)  # PPO normalised by itself
    # the score is the final policy's evaluation (sampled), its zero the initial policy's
    assert env.score == "eval" and results.settings.protocol.name == "default"
    for e in (mine, ppo):
        assert set(e.columns) == {"eval", "eval_greedy", "train_final", "auc"}
        assert e.mean == pytest.approx(e.columns["eval"])
        assert e.lr == results.settings.presets["CartPole-v1"]["config"]["lr"]
    assert env.ppo_return == pytest.approx(np.mean(env.normaliser_ppo))
    assert env.init_return == pytest.approx(np.mean(env.normaliser_zero))
    agg = results.aggregate["held_out"]
    assert agg.envs == ("CartPole-v1",) and results.aggregate["meta_train"].envs == ()
    assert agg.methods["ppo_copy"].poi_vs["ppo"].point == 0.5
    assert agg.methods["ppo"].poi_vs["ppo"].point == 0.5
    assert agg.methods["dpo"].poi_vs["dpo"].point == 0.5
    pairwise = agg.pairwise  # every ordered pair, for comparisons against any control
    assert pairwise["ppo_copy"]["ppo"].point == pairwise["ppo"]["ppo_copy"].point == 0.5
    assert pairwise["dpo"]["ppo_copy"].point == pytest.approx(1 - pairwise["ppo_copy"]["dpo"].point)
    settings = results.settings
    assert settings.seeds == 4 and settings.budgets == {"CartPole-v1": 4096}
    assert settings.presets["CartPole-v1"]["family"] == "classic"
    stored = json.loads(json.dumps(results.to_json(), allow_nan=False))  # plain JSON throughout
    assert Evaluation.from_json(stored).to_json() == stored  # and read back as it was written


@pytest.mark.slow
def test_ppo_trains_through_a_target_family_that_contains_it_bit_for_bit(tmp_path):
    """LPO at its initial parameters is PPO-clip exactly (Objectives.params_reproducing), so the reference
    PPO trains through an LPO target's program: one program fewer, the same runs bit for bit as
    PPO's own program gives them (here a PPO objectives file, a target with its own program)."""
    lpo = Objectives(drift=LPO(hidden=8))
    moved = jax.tree.map(lambda x: x + 0.05, lpo.init(jax.random.key(1)))  # a member away from PPO
    save_objectives(tmp_path / "lpo_member.json", lpo, moved)
    save_objectives(tmp_path / "ppo_copy.json", Objectives(), Objectives().init(jax.random.key(0)))
    programs = Programs()
    results = evaluation.evaluate([str(tmp_path / "lpo_member.json"), str(tmp_path / "ppo_copy.json")],
                                  envs=["CartPole-v1"], seeds=2, budget=4096, progress=False, programs=programs,
                                  bootstrap_reps=200)
    assert {m.label: m.trained_through for m in results.methods} == {
        "lpo_member": None, "ppo_copy": None, "ppo": "lpo_member", "dpo": None}
    assert len(programs) == 3  # LPO (the member and PPO), PPO's own (the copy), DPO
    methods = results.envs["CartPole-v1"].methods
    assert np.array_equal(methods["ppo"].curve.seeds, methods["ppo_copy"].curve.seeds, equal_nan=True)
    assert methods["ppo"].columns == methods["ppo_copy"].columns
    assert not np.array_equal(methods["lpo_member"].curve.seeds, methods["ppo"].curve.seeds)  # the member is not PPO


@pytest.mark.slow
def test_a_grid_that_cannot_tell_the_rates_apart_tunes_to_the_base_rate():
    """Where no training episode ends, a training score is the initial policy's at every rate: the
    tuned rate is then the preset's (x1), not the grid's first (x0.25); ties go to the nearest x1."""
    factors = LR_FACTORS  # 0.25, 0.5, 1, 2, 4
    assert evaluation.best_rate([5.0] * 5, factors) == factors.index(1.0)
    assert evaluation.best_rate([-np.inf] * 5, factors) == factors.index(1.0)  # every rate diverged
    assert evaluation.best_rate([1, 3, 2, 3, 0], factors) == factors.index(0.5)  # x0.5 and x2 tie: the lower
    assert evaluation.best_rate([1, 2, 3, 2, 5], factors) == factors.index(4.0)  # no tie: the best


def test_tune_lr_scores_every_method_at_its_own_best_rate_of_the_grid(programs):
    results = evaluation.evaluate(["dpo"], envs=["CartPole-v1"], seeds=2, budget=4096, tune_lr=True, progress=False,
                          programs=programs, bootstrap_reps=200)
    assert results.labels == ("dpo", "ppo")  # no extra row: every method is tuned
    env = results.envs["CartPole-v1"]
    preset_lr = results.settings.presets["CartPole-v1"]["config"]["lr"]
    assert results.settings.lr_grid["CartPole-v1"] == pytest.approx([f * preset_lr for f in LR_FACTORS])
    for label in ("dpo", "ppo"):
        tuning = env.tuning[label]
        assert tuning.lrs == pytest.approx(results.settings.lr_grid["CartPole-v1"])
        best = int(np.argmax([-np.inf if x is None else x for x in tuning.mean_scores]))  # chosen on tuning seeds
        assert tuning.best_lr == pytest.approx(tuning.lrs[best])
        assert env.methods[label].lr == pytest.approx(tuning.best_lr)  # ... scored at it
    assert env.ppo_return == pytest.approx(env.methods["ppo"].mean)  # the normaliser is the tuned PPO
    # the learning rate is a traced argument: every rate of a method shares one compiled program
    config = preset_for("CartPole-v1").replace(total_timesteps=4096)
    assert programs.get(programs.env("CartPole-v1"), config, Objectives(), 2).train._cache_size() == 1


# --------------------------------------------------------------------------------------------
# Learning-rate tuning, with a stand-in trainer whose best rate is known for each method
# --------------------------------------------------------------------------------------------


class StandInResult(NamedTuple):
    returns: jax.Array  # [U]
    diverged: jax.Array  # []
    eval_return: jax.Array  # []
    eval_return_greedy: jax.Array
    init_eval_return: jax.Array
    init_eval_return_greedy: jax.Array


class StandInPrograms(Programs):
    """Programs whose "training" is a known function of the learning rate: each method's return
    peaks at its own rate (PPO at x2 the preset's, DPO at x0.5), plus seed noise in [0, 1). No
    PPO compiles, so the tuning logic is tested exactly and in a second."""

    BEST = {"ppo_clip": 2.0, "dpo": 0.5}

    def __init__(self):
        super().__init__()
        self.calls = []

    def get(self, env, config, objectives, num_seeds, grid=0):
        self.calls.append((objectives.drift.name, num_seeds, grid))
        best = self.BEST[objectives.drift.name] * float(config.hparams.lr)

        def train(key, params, hp):
            peak = 100.0 - 10.0 * jnp.log(hp.lr / best) ** 2 + jax.random.uniform(key)
            zero = jnp.float32(0.0)
            return StandInResult(jnp.linspace(0.0, 1.0, config.num_updates) * peak, jnp.array(False),
                                 peak, peak + 1.0, zero, zero)

        fn = jax.vmap(train, in_axes=(0, None, None))
        return jax.jit(jax.vmap(fn, in_axes=(None, None, 0)) if grid else fn)


class ConfigPrograms(StandInPrograms):
    """StandInPrograms that also keep the PPO config each program was asked for."""

    def __init__(self):
        super().__init__()
        self.configs = []

    def get(self, env, config, objectives, num_seeds, grid=0):
        self.configs.append((objectives.drift.name, config))
        return super().get(env, config, objectives, num_seeds, grid)


def test_tuning_picks_each_method_its_own_learning_rate():
    results = evaluation.evaluate(["dpo"], envs=["CartPole-v1"], seeds=3, budget=4096, tune_lr=True, progress=False,
                          programs=StandInPrograms(), bootstrap_reps=200)
    env = results.envs["CartPole-v1"]
    preset_lr = results.settings.presets["CartPole-v1"]["config"]["lr"]
    assert env.tuning["ppo"].best_factor == 2.0 and env.tuning["dpo"].best_factor == 0.5
    assert env.methods["ppo"].lr == pytest.approx(2 * preset_lr)
    assert env.methods["dpo"].lr == pytest.approx(0.5 * preset_lr)
    # scored on the evaluation seeds, not the tuning seeds (their noise differs)
    for label in ("ppo", "dpo"):
        tuned = env.tuning[label]
        assert env.methods[label].mean != pytest.approx(max(x for x in tuned.mean_scores if x is not None), abs=1e-6)
    # each method at its best rate peaks at ~100: normalised against the tuned PPO, DPO is ~1
    assert env.methods["dpo"].norm_mean == pytest.approx(1.0, abs=0.05)
    md, rows = render.to_markdown(results), list(csv.DictReader(io.StringIO(render.to_csv(results))))
    assert {r["method"]: float(r["lr"]) for r in rows} == pytest.approx({"ppo": 2 * preset_lr, "dpo": 0.5 * preset_lr})
    assert "each method is scored at its best: dpo 0.000125, ppo 0.0005" in md


class DivergingPrograms(StandInPrograms):
    """StandInPrograms whose runs diverge above 1.5x the preset's rate, their (finite) scores kept."""

    def get(self, env, config, objectives, num_seeds, grid=0):
        program, limit = super().get(env, config, objectives, num_seeds, grid), 1.5 * float(config.hparams.lr)

        def diverging(keys, params, hp):
            result = program(keys, params, hp)
            return result._replace(diverged=jnp.broadcast_to((hp.lr > limit)[..., None] if grid else hp.lr > limit,
                                                             result.eval_return.shape))

        return diverging


def test_tuning_never_picks_a_rate_whose_runs_diverged_however_they_scored():
    """A diverged seed ties the worst finite seed of the grid (scores.at_worst), whatever its score:
    PPO's best rate (x2) and x4 diverge here, so PPO is tuned to x1, the best that did not."""
    results = evaluation.evaluate(["dpo"], envs=["CartPole-v1"], seeds=3, budget=4096, tune_lr=True, progress=False,
                                  programs=DivergingPrograms(), bootstrap_reps=200)
    assert results.envs["CartPole-v1"].tuning["ppo"].best_factor == 1.0
    assert results.envs["CartPole-v1"].tuning["dpo"].best_factor == 0.5  # its best did not diverge


class HighScoringDivergedSeeds(StandInPrograms):
    """StandInPrograms whose DPO runs diverge on about half the seeds, and score 1000 more there."""

    def get(self, env, config, objectives, num_seeds, grid=0):
        program = super().get(env, config, objectives, num_seeds, grid)
        if objectives.drift.name != "dpo":
            return program

        def diverging(keys, params, hp):
            result = program(keys, params, hp)
            diverged = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, 1)) < 0.5)(keys)
            return result._replace(diverged=diverged, eval_return=result.eval_return + 1000.0 * diverged)

        return diverging


def test_a_seed_that_diverged_is_scored_as_the_worst_finite_seed_however_it_scored():
    results = evaluation.evaluate(["dpo"], envs=["CartPole-v1"], seeds=6, budget=4096, progress=False,
                                  programs=HighScoringDivergedSeeds(), bootstrap_reps=200)
    env = results.envs["CartPole-v1"]
    dpo, ppo = env.methods["dpo"], env.methods["ppo"]
    assert 0 < dpo.diverged < 6 and dpo.nonfinite == dpo.diverged and ppo.diverged == 0
    worst = min(np.min(ppo.scores), np.min(dpo.scores))
    assert np.all(dpo.scores < 200) and np.sum(dpo.scores == worst) >= dpo.diverged


def test_the_discogen_protocol_tunes_over_ten_rates_up_to_ten_times_the_base_on_eight_seeds():
    programs = StandInPrograms()
    results = evaluation.evaluate(["ppo"], envs=["CartPole-v1"], seeds=2, budget=4096, protocol="discogen", progress=False,
                          programs=programs, bootstrap_reps=200)
    protocol = results.settings.protocol
    assert protocol.name == "discogen" and protocol.tail == 0.05 and results.settings.tuning_seeds == 8
    factors = results.settings.lr_factors
    assert len(factors) == 10 and factors[0] == pytest.approx(1.0) and factors[-1] == pytest.approx(10.0)
    assert ("ppo_clip", 8, 10) in programs.calls and ("ppo_clip", 2, 0) in programs.calls
    nearest_two = min(factors, key=lambda f: abs(np.log(f / 2.0)))  # the stand-in PPO's best is x2
    assert results.envs["CartPole-v1"].tuning["ppo"].best_factor == pytest.approx(nearest_two)
    assert protocol.score == "eval_greedy" and protocol.select == "train_final"
    assert results.settings.presets["CartPole-v1"]["config"]["eval_episodes"] == 16
    env = results.envs["CartPole-v1"]
    ppo = env.methods["ppo"]
    assert env.score == "eval_greedy" and ppo.mean == pytest.approx(ppo.columns["eval_greedy"])
    assert ppo.columns["eval_greedy"] == pytest.approx(ppo.columns["eval"] + 1)  # the stand-in's greedy = sampled + 1
    assert "Protocol discogen" in render.to_markdown(results)


def test_a_probability_of_improvement_interval_that_includes_one_half_is_never_called_above_it():
    results = evaluation.evaluate(["dpo"], envs=["CartPole-v1"], seeds=3, budget=4096, progress=False,
                          programs=StandInPrograms(), bootstrap_reps=200)
    def reading(poi: Estimate) -> str:  # the markdown's reading of dpo against ppo, with P(dpo > ppo) = poi
        held_out = results.aggregate["held_out"]
        dpo = dataclasses.replace(held_out.methods["dpo"], poi_vs={**held_out.methods["dpo"].poi_vs, "ppo": poi})
        held_out = dataclasses.replace(held_out, methods={**held_out.methods, "dpo": dpo})
        changed = dataclasses.replace(results, aggregate={**results.aggregate, "held_out": held_out})
        return next(x for x in render.to_markdown(changed).splitlines() if x.startswith("- dpo against ppo"))

    line = reading(Estimate(0.6, 0.4974, 0.716))
    assert "above 0.5" not in line and "includes 0.5" in line
    line = reading(Estimate(0.7, 0.5026, 0.816))
    assert "better" in line and "above 0.5" in line


class NoEpisodePrograms(StandInPrograms):
    """StandInPrograms in which no training episode ends for DPO in any seed and for PPO in its first
    seed: their learning curves are the initial evaluation (0.36) at every update, as the inner loop
    reports them (carry_forward), while the final policies still score."""

    def get(self, env, config, objectives, num_seeds, grid=0):
        none_ended = {"dpo": np.ones(num_seeds, bool), "ppo_clip": np.arange(num_seeds) == 0}[objectives.drift.name]

        def train(key, none, params, hp):
            init = jnp.float32(0.36)
            learned = jnp.linspace(1.0, 2.0, config.num_updates) + jax.random.uniform(key)
            returns = jnp.where(none, jnp.full(config.num_updates, init), learned)
            return StandInResult(returns, jnp.array(False), 5.0 + jax.random.uniform(key), jnp.float32(6.0), init, init)

        fn = jax.vmap(train, in_axes=(0, 0, None, None))
        return jax.jit(lambda keys, params, hp: fn(keys, none_ended, params, hp))


def test_no_episode_ended_reads_the_inner_loops_carried_curve():
    from metadisco.analysis.evaluation.protocol import no_episode_ended
    from metadisco.inner_loops.ppo import carry_forward

    nan = np.nan
    for init in (0.36, nan):  # nan: a run without evaluation episodes
        none = carry_forward(jnp.full(6, nan), jnp.float32(init))
        late = carry_forward(jnp.array([nan, nan, nan, nan, nan, 2.0]), jnp.float32(init))  # one ended, at the end
        run = {"returns": np.asarray([none, late], np.float64),  # as metadisco.analysis.evaluation.run keeps a TrainResult
               "init_eval_return": np.asarray(jnp.float32([init, init]), np.float64)}
        assert no_episode_ended(run).tolist() == [True, False]


def test_the_table_says_where_no_training_episode_ended():
    # A synthetic evaluation (no training): Freeway-MinAtar at a short budget, where an episode
    # (2,500 steps) outlasts a run, carries the initial evaluation in its training columns.
    results = evaluation.evaluate(["dpo"], envs=["CartPole-v1"], seeds=3, budget=4096, progress=False,
                                  programs=NoEpisodePrograms(), bootstrap_reps=200)
    methods = results.envs["CartPole-v1"].methods
    assert methods["dpo"].no_episode_ended == 3 and methods["ppo"].no_episode_ended == 1
    assert methods["dpo"].columns["auc"] == pytest.approx(0.36)  # the number is the initial evaluation ...
    table = render.to_markdown(results).split("## CartPole-v1")[1].split("##")[0]  # the environment's table
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in table.splitlines() if line.startswith("| ")}
    # ... and the table says so: "training, last 10%" and "auc" are the 7th and 8th columns
    assert rows["dpo"][6:8] == ["no episode ended", "no episode ended"]
    assert rows["ppo"][6].endswith("(1 of 3 seeds: no episode ended)") and rows["ppo"][7].endswith("no episode ended)")
    assert rows["ppo"][2].startswith("5.") and rows["dpo"][2].startswith("5.")  # the final policy's score is unaffected
    (note,) = [n for n in results.notes if "no training episode ended" in n]
    assert note.startswith("CartPole-v1: no training episode ended in 3 of 3 seeds of dpo, 1 of 3 seeds of ppo within "
                           "the budget of 4,096 steps")
    assert '"training, last 10%" and "auc" are the initial policy\'s evaluation' in note
    assert note in render.to_markdown(results)
    flags = {r["method"]: r["flags"] for r in csv.DictReader(io.StringIO(render.to_csv(results)))}
    assert flags == {"ppo": "no_episode_ended:1", "dpo": "no_episode_ended:3"}
    # Where every seed of every method ended episodes, nothing is said.
    plain = evaluation.evaluate(["dpo"], envs=["CartPole-v1"], seeds=3, budget=4096, progress=False,
                                programs=StandInPrograms(), bootstrap_reps=200)
    assert {e.no_episode_ended for e in plain.envs["CartPole-v1"].methods.values()} == {0}
    assert "no episode ended" not in render.to_markdown(plain) and not any("episode ended" in n for n in plain.notes)


class BarelyLearningPrograms(StandInPrograms):
    """StandInPrograms in which PPO barely learns on Acrobot-v1: its final policy scores 0.3 above the
    initial policy's 0 on average, +-1 over seeds (a gain within noise), while DPO scores about 100."""

    def get(self, env, config, objectives, num_seeds, grid=0):
        program = super().get(env, config, objectives, num_seeds, grid)
        if env.name != "Acrobot-v1" or objectives.drift.name != "ppo_clip":
            return program

        def barely(keys, params, hp):
            result = program(keys, params, hp)
            noisy = 0.3 + jnp.tile(jnp.float32([1.0, -1.0]), len(keys) // 2)
            return result._replace(eval_return=noisy, eval_return_greedy=noisy)

        return barely


def test_a_barely_learning_ppo_does_not_inflate_the_aggregate():
    """Normalised by a PPO gain within noise, DPO would score hundreds of PPOs on Acrobot-v1 and
    dominate the aggregate; the guard meta-training applies (2 standard errors of the paired gain)
    leaves that environment out, and says why."""
    results = evaluation.evaluate(["dpo"], envs=["CartPole-v1", "Acrobot-v1"], seeds=4, budget=4096, progress=False,
                                  programs=BarelyLearningPrograms(), bootstrap_reps=200)
    acrobot = results.envs["Acrobot-v1"]
    gain = acrobot.normaliser_ppo - acrobot.normaliser_zero
    assert 0 < gain.mean() < 2 * gain.std(ddof=1) / 2  # a positive gain, as the old rule accepted, within noise
    assert "ppo-flat" in acrobot.flags and "standard errors" in acrobot.excluded_from_aggregate
    assert acrobot.methods["dpo"].norm_mean is None and acrobot.group == "excluded"
    held_out = results.aggregate["held_out"]
    assert held_out.envs == ("CartPole-v1",)
    assert held_out.methods["dpo"].mean.point == pytest.approx(results.envs["CartPole-v1"].methods["dpo"].norm_mean)
    assert any(n.startswith("Acrobot-v1: PPO's gain over its initial policy") for n in results.notes)


def test_without_a_usable_normaliser_the_evaluation_still_compares_with_ppo_on_raw_scores():
    """Where PPO barely learns (the demo's MountainCar), no environment normalises, so there is no
    aggregate; each method still gets its paired difference from PPO and P(> PPO), with intervals,
    on raw scores, in the record and in the table, beside why it is not normalised."""
    results = evaluation.evaluate(["dpo"], envs=["Acrobot-v1"], seeds=4, budget=4096, progress=False,
                                  programs=BarelyLearningPrograms(), bootstrap_reps=200)
    acrobot = results.envs["Acrobot-v1"]
    assert results.aggregate["held_out"].methods is None
    versus = acrobot.vs_ppo["dpo"]
    dpo, ppo = acrobot.methods["dpo"].scores, acrobot.normaliser_ppo
    assert versus.diff.point == pytest.approx(float(np.mean(dpo - ppo)))
    assert versus.diff.low < versus.diff.point < versus.diff.high
    assert versus.poi.point == pytest.approx(float(np.mean(dpo[:, None] > ppo[None, :]) + 0.5 * np.mean(
        dpo[:, None] == ppo[None, :])))
    assert set(acrobot.vs_ppo) == {"dpo"}  # PPO against itself is no comparison
    table = render.to_markdown(results)
    assert "no normalised aggregate" in table and "| Acrobot-v1 | dpo |" in table
    assert "P(> PPO) [95% CI]" in table and "PPO's gain over its initial policy" in table
    assert read_results_from(results).envs["Acrobot-v1"].vs_ppo == acrobot.vs_ppo  # results.json keeps it


def read_results_from(results):
    """`results` written to results.json and read back."""
    return Evaluation.from_json(json.loads(json.dumps(results.to_json(), allow_nan=False)))


# --------------------------------------------------------------------------------------------
# results.json: the records it is written from and read back as
# --------------------------------------------------------------------------------------------

COMMITTED = sorted((Path(__file__).resolve().parent.parent / "docs" / "results").rglob("results.json"))


def test_every_committed_evaluation_reads_as_a_record_and_renders_as_it_was_written():
    """Each committed results.json reads through the records and writes back byte for byte, and
    the tables made from the record are the results.md and results.csv committed beside it."""
    assert len(COMMITTED) >= 10, COMMITTED
    for path in COMMITTED:
        results = read_results(path)
        assert json.dumps(results.to_json(), indent=1, allow_nan=False) == path.read_text(), path
        assert render.to_markdown(results) == (path.parent / "results.md").read_text(), path
        if (path.parent / "results.csv").is_file():
            assert render.to_csv(results) == (path.parent / "results.csv").read_text(), path
    some = read_results(COMMITTED[0])
    dpo = some.envs[some.settings.envs[0]].methods["dpo"]
    assert dpo.scores.dtype == np.float64 and dpo.curve.seeds.shape == (some.settings.seeds, dpo.curve.mean.size)


def test_a_file_that_is_not_an_evaluations_results_is_refused_with_its_name(tmp_path):
    path = tmp_path / "results.json"
    for text, message in [("{", "is corrupt"), ('{"format": "metadisco.objectives", "version": 1}', "not the results"),
                          (json.dumps({"format": "metadisco.evaluation", "version": 2}), "missing or malformed")]:
        path.write_text(text)
        with pytest.raises(suites.EvaluationError, match=message) as refused:
            read_results(path)
        assert str(path) in str(refused.value)
    with pytest.raises(suites.EvaluationError, match="is missing"):
        read_results(tmp_path / "nothing.json")


# --------------------------------------------------------------------------------------------
# The command, end to end
# --------------------------------------------------------------------------------------------


def _read_outputs(out):
    assert {p.name for p in out.iterdir()} == OUTPUTS
    results = read_results(out / "results.json")
    rows = list(csv.DictReader((out / "results.csv").open()))
    return results, rows, (out / "results.md").read_text()


class SpiedPrograms(Programs):
    """Programs that remember each instance made, so that a test can look at the compiled programs
    an evaluation run through the command line kept when it finished."""

    made: list = []

    def __init__(self):
        super().__init__()
        SpiedPrograms.made.append(self)


@pytest.fixture(scope="module")
def baseline_cli(tmp_path_factory):
    """`metadisco evaluate dpo --envs CartPole-v1,Acrobot-v1` at TINY, once for this file (in this
    process: its jit caches shared) -> (exit code, stdout, stderr, output folder, the Programs it
    compiled into and kept)."""
    out = tmp_path_factory.mktemp("baseline") / "out"
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as m, contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        m.setattr(SpiedPrograms, "made", [])
        m.setattr(evaluation, "Programs", SpiedPrograms)
        try:
            main(["evaluate", "dpo", "--envs", ENVS, *TINY, "--out", str(out)])
            code = 0
        except SystemExit as e:
            code = e.code
        made = SpiedPrograms.made
    (programs,) = made  # one evaluation, one cache
    return code, stdout.getvalue(), stderr.getvalue(), out, programs


@pytest.mark.slow
def test_evaluate_a_baseline_end_to_end(baseline_cli):
    code, stdout, err, out, _ = baseline_cli
    assert code == 0, err
    results, rows, md = _read_outputs(out)
    assert results.labels == ("dpo", "ppo")  # a baseline target is its own reference
    assert list(results.envs) == ["CartPole-v1", "Acrobot-v1"]
    assert len(rows) == 4 and {r["method"] for r in rows} == {"dpo", "ppo"}
    assert all(r["score"] == "eval" and float(r["mean"]) == pytest.approx(float(r["eval"])) for r in rows)
    assert all(r["eval_greedy"] and r["auc"] and float(r["lr"]) > 0 for r in rows)
    assert not any("meta-train" in r["flags"] for r in rows)
    for name in ("CartPole-v1", "Acrobot-v1"):
        assert f"## {name}" in md and f"## {name}" in stdout
        assert len(results.envs[name].methods["dpo"].scores) == 2
    assert "Aggregate over held-out environments" in md
    assert str(out) in stdout
    assert len(jax.local_devices()) == 2 and results.settings.devices == 1  # the CPU trains on one


def test_an_evaluation_on_the_cpu_trains_on_one_device_unless_given_its_devices():
    """Host devices share the cores and run at once, and then XLA:CPU holds a loop's memory until its
    program ends (gigabytes over a long run: benchmarks/evaluation_layout.py); one device does not."""
    two = jax.local_devices()
    assert len(two) == 2
    assert mesh(8).devices.size == 1
    assert mesh(8, two).devices.size == 2 and mesh(3, two).devices.size == 1  # as many as divide the seeds


def test_a_baseline_with_other_options_is_that_baseline_with_its_drift_changed():
    """ppo[clip_eps=0.3]: PPO with a wider clip range, a control beside every method's tuned rate."""
    wide, plain = resolve_target("ppo[clip_eps=0.3]"), resolve_target("ppo")
    assert wide.label == "ppo[clip_eps=0.3]" and wide.source == "builtin"
    assert wide.objectives.value_loss == plain.objectives.value_loss and wide.objectives.drift.clip_eps == 0.3
    r, a = jnp.array([0.75, 1.25]), jnp.array([-1.0, 1.0])
    drift = wide.objectives.drift.drift(wide.params["drift"], r, a, 0.0)
    assert np.allclose(drift, [0.0, 0.0])  # inside 1 +- 0.3: no drift, where PPO's 1 +- 0.2 has one
    assert np.allclose(plain.objectives.drift.drift(plain.params["drift"], r, a, 0.0), [0.05, 0.05])
    assert resolve_target("dpo[alpha=1.5]").params["drift"]["alpha"] == 1.5
    for bad, message in [("ppo[clip=0.3]", "Did you mean clip_eps"), ("ppo[clip_eps=wide]", "not a number")]:
        with pytest.raises(suites.EvaluationError, match=message):
            resolve_target(bad)


def test_run_init_target_is_where_the_run_started_from_its_own_seed(tmp_path):
    """RUN_DIR:init is start_params(the run's seed), the engine's starting point, not seed 0's."""
    from metadisco.config import ObjectivesConfig, validate
    from metadisco.engine import MetaTrainer
    from metadisco.rundir import RunDir

    cfg = validate(RunConfig(seed=7, generations=1, inner=InnerConfig(total_timesteps=2048, hidden=(16, 16)),
                             objectives=ObjectivesConfig(drift={"name": "lpo", "hidden": 8}),
                             es=ESConfig(population_size=4)))
    trainer = MetaTrainer(run_plan(cfg))
    run = RunDir(tmp_path / "run").create(cfg)
    moved = jax.tree.map(lambda x: x + 1.0, trainer.default_params)  # the ES mean, somewhere else
    run.write_file(run.objectives_path("mean"), save_objectives, trainer.objectives, moved, {"envs": list(cfg.envs)})

    init = resolve_target(f"{run.path}:init")
    assert init.label == "run:init"
    for plug, started in trainer.default_params.items():
        assert jax.tree.all(jax.tree.map(np.array_equal, init.params[plug], started)), plug
    seed0 = trainer.objectives.default_params()["drift"]
    assert not jax.tree.all(jax.tree.map(np.array_equal, init.params["drift"], seed0))

    config = json.loads(run.config_path.read_text())
    config["seed"] = "seven"  # read as metadisco.analysis.runs reads every config: typed, or refused
    run.config_path.write_text(json.dumps(config))
    with pytest.raises(suites.EvaluationError, match="seed: cannot read 'seven' as int"):
        resolve_target(f"{run.path}:init")


@pytest.mark.slow
def test_evaluate_a_run_directory_flags_its_meta_training_env(tiny_run, capsys):
    target = resolve_target(f"{tiny_run}:best")
    assert target.label == "run:best" and target.meta_train_envs == ("CartPole-v1",)
    assert resolve_target(str(tiny_run / "objectives" / "best.json")).label == "run:best"
    init, mean = resolve_target(f"{tiny_run}:init"), resolve_target(str(tiny_run))
    assert init.label == "run:init" and init.objectives == mean.objectives  # same structure...
    fresh = mean.objectives.default_params()  # ...at the parameters evolution started from (seed 0)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), init.params["drift"], fresh["drift"]))
    # (not compared with the mean: one generation at this size can tie every member, leaving the mean at the start)

    code, stdout, err = cli(["evaluate", str(tiny_run), "--envs", ENVS, *TINY], capsys)
    assert code == 0, err
    (out,) = (tiny_run / "evaluation").iterdir()  # default: RUN_DIR/evaluation/<timestamp>
    results, rows, md = _read_outputs(out)
    assert results.labels == ("run", "ppo", "dpo")
    assert results.targets[0].meta_train_envs == ("CartPole-v1",)
    assert results.targets[0].objectives["drift"]["name"] == "lpo"
    cartpole, acrobot = results.envs["CartPole-v1"], results.envs["Acrobot-v1"]
    assert "meta-train" in cartpole.flags and cartpole.meta_train_for == ("run",)
    assert "meta-train" not in acrobot.flags
    agg = results.aggregate
    assert "CartPole-v1" not in agg["held_out"].envs  # never mixed into the held-out aggregate
    assert agg["held_out"].envs == (() if acrobot.excluded_from_aggregate else ("Acrobot-v1",))
    assert agg["meta_train"].envs == (() if cartpole.excluded_from_aggregate else ("CartPole-v1",))
    groups = {(r["method"], r["env"]): r for r in rows}
    assert "meta-train" in groups["run", "CartPole-v1"]["flags"]
    assert groups["run", "CartPole-v1"]["group"] in ("meta_train", "excluded")
    assert "## CartPole-v1 (meta-train" in md


# --------------------------------------------------------------------------------------------
# Bad input: a clear message, a non-zero exit, nothing written, nothing compiled
# --------------------------------------------------------------------------------------------


def _half_written_run(root):
    run = root / "half"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(RunConfig().to_dict()))
    return run


def _corrupt_file(root):
    path = root / "corrupt.json"
    path.write_text('{"format": "metadisco.objectives", "version": 1, "spec": ')
    return path


def _shaping_file(root):
    path = root / "shaping.json"
    objectives = Objectives(shaping=PotentialShaping(obs_shape=(4,)))  # sized for CartPole
    save_objectives(path, objectives, objectives.init(jax.random.key(0)))
    return path


def _invalid_closed_form(root):
    """An objectives file whose drift A (r - 1) is negative at half the grid and not flat at r = 1."""
    path = root / "linear_drift.json"
    objectives = Objectives(drift=ClosedFormDrift("A*(r - 1)"))
    save_objectives(path, objectives, objectives.default_params())
    return path


def _run_with_an_invalid_mean(root):
    run = _half_written_run(root)
    objectives = Objectives(drift=ClosedFormDrift("A*(r - 1)"))
    save_objectives(run / "objectives" / "mean.json", objectives, objectives.default_params())
    return run


BAD_INPUTS = {
    "invalid closed form": (lambda root: [str(_invalid_closed_form(root))],
                            ["nonnegative", "flat_at_one", "A*(r - 1)", "--allow-invalid"]),
    "run whose ES mean is invalid": (lambda root: [str(_run_with_an_invalid_mean(root))],
                                     ["nonnegative", str(Path("half") / "objectives" / "mean.json")]),
    "unknown env": (lambda root: ["dpo", "--envs", "CartPol-v1"], ["unknown environment", "CartPole-v1"]),
    "missing run dir": (lambda root: [str(root / "no-such-run")], ["no run directory or objectives file"]),
    "half-written run dir": (lambda root: [str(_half_written_run(root))], ["has not written its objectives yet", "--resume"]),
    "not a run dir": (lambda root: [str(root)], ["not a metadisco run directory"]),
    "corrupt objectives file": (lambda root: [str(_corrupt_file(root))], ["not valid JSON"]),
    "shaping for another observation shape": (
        lambda root: [str(_shaping_file(root)), "--envs", "Acrobot-v1"], ["shape (4,)", "shape (6,)"]),
    "budget below one rollout": (lambda root: ["dpo", "--envs", "CartPole-v1", "--timesteps", "100"], ["--timesteps"]),
    "envs and suite": (lambda root: ["dpo", "--envs", "CartPole-v1", "--suite", "quick"], ["not both"]),
    "no bootstrap replicates": (lambda root: ["dpo", "--envs", "CartPole-v1", "--bootstrap", "0"], ["--bootstrap"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_fails_before_compute_and_writes_nothing(case, tmp_path, capsys, monkeypatch):
    targets_of, expected = BAD_INPUTS[case]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # the default output folder would be ./evaluations here
    argv = targets_of(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, stdout, err = cli(["evaluate", *argv, "--seeds", "2", "--no-progress"], capsys)
    assert code not in (0, None), stdout
    for text in expected:
        assert text in err, err
    assert "Traceback" not in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no output folder


def test_an_invalid_closed_form_is_refused_as_export_refuses_it(tmp_path):
    """From the command line: exit 2 and the constraint named, before the compute (the next test
    shows the refusal comes before evaluation starts)."""
    from tests.helpers import metadisco

    path = _invalid_closed_form(tmp_path)
    proc = metadisco("evaluate", str(path), "--quick", timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "refusing to evaluate" in proc.stderr and "is not a valid drift" in proc.stderr, proc.stderr
    assert "nonnegative" in proc.stderr and "Traceback" not in proc.stderr


def test_allow_invalid_evaluates_an_invalid_closed_form_with_a_warning(tmp_path, capsys, monkeypatch):
    class Reached(Exception):
        pass

    def reached(targets, **options):
        raise Reached([t.spec for t in targets])

    monkeypatch.setattr(evaluation, "evaluate", reached)  # past the checks: where the compute starts
    path = _invalid_closed_form(tmp_path)
    code, _, err = cli(["evaluate", str(path), "--quick", "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "nonnegative" in err
    with pytest.raises(Reached):
        cli(["evaluate", str(path), "--quick", "--allow-invalid", "--out", str(tmp_path / "out")], capsys)
    err = capsys.readouterr().err
    assert "warning: evaluating" in err and "nonnegative" in err and "flat_at_one" in err


def test_an_existing_output_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    code, _, err = cli(["evaluate", "dpo", "--envs", "CartPole-v1", "--out", str(out)], capsys)
    assert code != 0 and "already exists" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# --------------------------------------------------------------------------------------------
# The suites table and the command line stay in step; the parser does not import jax
# --------------------------------------------------------------------------------------------


def test_suites_have_budgets_and_appear_in_the_help_and_the_docs(capsys):
    assert set(suites.SUITES) == {"quick", "default"}
    table = suites.markdown_table()
    for suite, envs in suites.SUITES.items():
        for env in envs:
            budget = suites.BUDGETS[suite][env]
            assert suites.budget_for(env, suite) == budget
            assert f"| {suite} | {env} | {preset_name(env)} | {budget:,} |" in table
            assert env in suites.help_text()
    assert "at 5e4 each" in suites.help_text() and "brax/ant at 5e6" in suites.help_text()
    code, stdout, _ = cli(["evaluate", "--help"], capsys)  # the command's help is the generated one
    assert code == 0 and suites.help_text() in stdout


def test_the_suites_table_is_jax_free():
    code = ("import sys, metadisco.analysis.suites as s; s.help_text(); s.budget_for('brax/ant', 'quick'); "
            "print('jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_building_the_parser_does_not_import_jax():
    code = "import sys; from metadisco.cli import build_parser; build_parser(); print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_inner_settings_come_from_the_run_and_the_command_line(tiny_run, tmp_path, capsys, monkeypatch):
    """CPU-sized Brax needs the run's small PPO settings, not the accelerator preset: --inner-from-run
    takes the run's inner section (not its budget), --inner overrides it; bad values fail first."""
    from metadisco import api

    stored = RunConfig.from_dict(json.loads((tiny_run / "config.json").read_text())).inner.overrides()
    assert stored["total_timesteps"] == 2048
    seen = []

    def inner(target, items=(), from_run=True):
        """The PPO settings `api.evaluate` (and so `metadisco evaluate`) trains `target` with."""
        api.evaluate(str(target), "CartPole-v1", inner=items, inner_from_run=from_run, out=tmp_path / f"o{len(seen)}")
        return seen[-1]

    with monkeypatch.context() as m:
        m.setattr(evaluation, "evaluate", lambda targets, **kw: seen.append(kw["inner"]) or UNSAVED)
        m.setattr(render, "save", lambda results, out: out)
        assert inner(tiny_run) == {k: v for k, v in stored.items() if k != "total_timesteps"}
        assert inner(tiny_run, ["num_envs=2", "hidden=8,8"]) == {"num_envs": 2, "num_steps": 64, "hidden": (8, 8)}
        assert inner(tiny_run, {"num_envs": 2, "hidden": (8, 8)}) == seen[-2]  # a dict reads the same
        # a file inside the run (an export, objectives/mean.json) knows its run too
        in_run = tiny_run / "objectives" / "mean.json"
        assert resolve_target(str(in_run)).run_dir == str(tiny_run) and inner(in_run) == inner(tiny_run)
        elsewhere = tiny_run.parent / "copied.json"
        elsewhere.write_text(in_run.read_text())
        assert resolve_target(str(elsewhere)).run_dir is None
        with pytest.raises(ValueError, match="--inner"):
            inner("ppo", ["num_envs=many"], from_run=False)
        with pytest.raises(ValueError, match="RUN_DIR"):
            inner("ppo")

    code, stdout, err = cli(["evaluate", "ppo", "--envs", "CartPole-v1", "--inner", "num_envs=0", *TINY], capsys)
    assert code == 2 and "num_envs" in err and "--inner" in err  # rejected before anything compiles
    # the settings reach the programs every method trains with, and the results say so (a stand-in
    # trainer: the PPO programs of other settings are tested in tests/test_ppo.py)
    programs = ConfigPrograms()
    results = evaluation.evaluate(["ppo"], envs=["CartPole-v1"], seeds=1, budget=2048, progress=False,
                                  inner={"num_envs": 2, "hidden": (8,)}, programs=programs, bootstrap_reps=200)
    config = results.settings.presets["CartPole-v1"]["config"]
    assert config["num_envs"] == 2 and list(config["hidden"]) == [8] and config["total_timesteps"] == 2048
    assert {name for name, _ in programs.configs} == {"ppo_clip", "dpo"}
    assert all(c.num_envs == 2 and tuple(c.hidden) == (8,) and c.total_timesteps == 2048 for _, c in programs.configs)


@pytest.mark.slow
def test_evaluate_run_defaults_to_the_held_out_set_it_declared(tiny_run, tmp_path, capsys):
    """A run that fixed its held-out set before it ran (config `heldout`) is judged on that set by
    `metadisco evaluate RUN` with no environments named; flags still win over the declaration."""
    import shutil

    run = tmp_path / "declared"
    shutil.copytree(tiny_run, run)
    config = json.loads((run / "config.json").read_text())
    # the programs of the other evaluations of tiny_run (ENVS, TINY): compiled once in the suite
    config["heldout"] = {"envs": ["Acrobot-v1"], "timesteps": 4096, "seeds": 2, "inner_from_run": False}
    (run / "config.json").write_text(json.dumps(config))
    code, stdout, err = cli(["evaluate", str(run), "--no-progress", "--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert "declared before it ran" in err
    results = read_results(tmp_path / "a" / "results.json")
    assert list(results.envs) == ["Acrobot-v1"]
    assert results.envs["Acrobot-v1"].budget == 4096 and results.settings.seeds == 2
    code, stdout, err = cli(["evaluate", str(run), "--envs", "CartPole-v1", *TINY, "--out", str(tmp_path / "b")],
                            capsys)
    assert code == 0 and "declared before it ran" not in err
    assert list(read_results(tmp_path / "b" / "results.json").envs) == ["CartPole-v1"]


def test_the_cli_and_the_api_evaluate_a_run_on_its_declared_set_alike(tiny_run, tmp_path, capsys, monkeypatch):
    """`metadisco evaluate RUN` and `api.evaluate(RUN)` are one code path: the same environments,
    budget, seeds and PPO settings (the run's own, as its heldout.inner_from_run asks) for a run
    that declared its held-out set, and the same word on stderr that they were taken from it."""
    import shutil

    from metadisco import api

    run = tmp_path / "declared"
    shutil.copytree(tiny_run, run)
    config = json.loads((run / "config.json").read_text())
    config["inner"].update(num_envs=2, hidden=[8, 8])
    config["heldout"] = {"envs": ["Catch-bsuite"], "timesteps": 2048, "seeds": 3, "inner_from_run": True}
    (run / "config.json").write_text(json.dumps(config))
    calls = []
    monkeypatch.setattr(evaluation, "evaluate", lambda targets, **kw: calls.append(
        ([t.label for t in targets], {k: kw.get(k) for k in ("envs", "budget", "seeds", "inner")})) or UNSAVED)
    monkeypatch.setattr(render, "save", lambda results, out: out)
    monkeypatch.setattr(render, "to_markdown", lambda results: "")

    code, _, cli_err = cli(["evaluate", str(run), "--no-progress", "--out", str(tmp_path / "cli")], capsys)
    assert code == 0, cli_err
    api.evaluate(run, out=tmp_path / "api")
    api_err = capsys.readouterr().err
    assert calls[0] == calls[1] == (["declared"], {"envs": ["Catch-bsuite"], "budget": 2048, "seeds": 3,
                                                   "inner": {"num_envs": 2, "num_steps": 64, "hidden": (8, 8)}})
    for err in (cli_err, api_err):
        assert f"held-out set {run} declared before it ran: Catch-bsuite at 2,048 steps" in err


def test_a_recurrent_run_is_evaluated_with_its_own_network_on_any_environments(tiny_run, tmp_path, capsys, monkeypatch):
    """A run found with a GRU is evaluated with that GRU on environments it did not declare (not
    only with --inner-from-run on its declared set), and so are PPO and DPO beside it (one PPO
    config an environment), said on stderr; --inner network=NAME chooses another; a GRU run and an
    MLP run together are refused."""
    import shutil

    from metadisco.analysis.evaluation.plan import plan
    from metadisco.analysis.evaluation.protocol import resolve_protocol

    def copy(name, **inner):
        run = tmp_path / name
        shutil.copytree(tiny_run, run)
        config = json.loads((run / "config.json").read_text())
        config["inner"].update(inner)
        (run / "config.json").write_text(json.dumps(config))
        return str(run)

    gru, mlp = copy("gru", network="gru", rnn_size=16), copy("mlp")
    jobs = []
    monkeypatch.setattr(evaluation, "evaluate", lambda targets, **kw: jobs.append(plan(
        targets, Programs(), resolve_protocol("default", False, None), kw["envs"], kw["seeds"], kw["budget"],
        inner=kw["inner"]).jobs) or UNSAVED)
    monkeypatch.setattr(render, "save", lambda results, out: out)
    monkeypatch.setattr(render, "to_markdown", lambda results: "")

    def evaluate(*argv):
        code, _, err = cli(["evaluate", *argv, "--envs", "Acrobot-v1", *TINY, "--out", str(tmp_path / "out")], capsys)
        return code, err

    code, err = evaluate(gru, "ppo")
    assert code == 0, err
    (job,) = jobs[-1]
    assert (job.config.network, job.config.rnn_size, job.budget) == ("gru", 16, 4096)
    assert "PPO and DPO included, trains with the recurrent network the run's objectives were found with " \
           "(network=gru, rnn_size=16" in err
    assert evaluate(gru, "--inner", "network=mlp")[0] == 0 and jobs[-1][0].config.network == "mlp"
    assert evaluate(mlp)[0] == 0 and jobs[-1][0].config.network == "mlp"  # an MLP run: the preset's, as before
    code, err = evaluate(gru, mlp)
    assert code == 2 and f"found with different networks ({gru}: gru, {mlp}: mlp)" in err and len(jobs) == 3


def test_a_held_out_set_that_overlaps_meta_training_is_refused_before_training():
    from metadisco.config import HeldoutConfig, validate

    with pytest.raises(ValueError, match="never sees"):
        validate(RunConfig(envs=("CartPole-v1", "Acrobot-v1"), fitness="auc_norm",
                           heldout=HeldoutConfig(envs=("Acrobot-v1", "Catch-bsuite"))))
    with pytest.raises(ValueError, match="unknown environment"):
        validate(RunConfig(heldout=HeldoutConfig(envs=("Catchh-bsuite",))))
    validate(RunConfig(heldout=HeldoutConfig(envs=("Catch-bsuite",), timesteps=50_000)))


def _memory_mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="counts Linux memory mappings")
def test_an_evaluation_keeps_one_environments_programs_not_every_one(baseline_cli):
    """Each compiled PPO program holds about a thousand memory mappings on the CPU and a process
    may have 65,530: an evaluation of 6 environments x 5 methods (60 programs) crashed with "LLVM
    compilation error: Cannot allocate memory" while it kept them all. (The evaluation of
    test_evaluate_a_baseline_end_to_end, dpo and ppo on CartPole-v1 then Acrobot-v1: its Programs.)"""
    code, _, err, out, programs = baseline_cli
    assert code == 0, err
    assert set(read_results(out / "results.json").envs) == {"CartPole-v1", "Acrobot-v1"}
    assert programs.environments() == {"Acrobot-v1"}  # the first environment's programs went before the second began
    before = _memory_mappings()
    assert programs.release() == 2  # ppo and dpo on Acrobot
    assert _memory_mappings() < before - 200  # their JIT code is unmapped, not only forgotten

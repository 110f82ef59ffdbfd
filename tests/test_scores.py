"""metadisco.core.scores: the one registry meta-training's fitness and evaluation's scores read, its
normaliser guard and its divergence policy; the two paths must give the same number for the same run."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metadisco.analysis.evaluation import summary
from metadisco.analysis.evaluation.plan import EnvJob
from metadisco.analysis.evaluation.protocol import LABELS, Protocol, resolve_protocol
from metadisco.core import scores
from metadisco.es_step import centered_ranks
from metadisco.inner_loops import preset_for
from metadisco.inner_loops.ppo import TrainResult
from metadisco.scoring import Baseline, RunScores, fitness_from

SEEDS, UPDATES = 6, 20


def train_result(rng, level: float, spread: float = 5.0, init: float = 10.0) -> TrainResult:
    """A TrainResult of SEEDS seeds (float64 numpy leaves): a noisy curve rising to `level`."""
    curve = np.linspace(init, level, UPDATES) + rng.normal(0, spread, (SEEDS, UPDATES))
    return TrainResult(
        returns=curve, final_return=curve[:, -2:].mean(-1), diverged=np.zeros(SEEDS, bool),
        visited=np.zeros((SEEDS, UPDATES, 0, 4)), eval_return=level + rng.normal(0, spread, SEEDS),
        eval_return_greedy=level + 1 + rng.normal(0, spread, SEEDS), init_eval_return=init + rng.normal(0, 1, SEEDS),
        init_eval_return_greedy=init + 0.5 + rng.normal(0, 1, SEEDS))


def as_run(result: TrainResult, lr: float = 1e-3) -> dict:
    """What metadisco.analysis.evaluation.run keeps of a TrainResult."""
    return {name: np.asarray(getattr(result, name)) for name in
            ("returns", "eval_return", "eval_return_greedy", "init_eval_return", "init_eval_return_greedy")} | {
        "diverged": np.asarray(result.diverged), "lr": lr}


def env_stats(runs: dict, kind: str):
    job = EnvJob("CartPole-v1", None, preset_for("CartPole-v1"), 4096, ())
    protocol = resolve_protocol(Protocol("test", "", score=kind))
    return summary.env_stats(job, list(runs), {"runs": runs, "tuning": None, "time_s": 0.0}, protocol, reps=50)


@pytest.mark.parametrize("kind", scores.SCORES)
def test_meta_training_and_evaluation_score_a_run_alike(kind):
    """The same arrays through the engine's fitness (raw and `_norm`) and through evaluate's
    statistics give the same numbers: one registry, one normalisation, one zero."""
    rng = np.random.default_rng(0)
    ppo, method = train_result(rng, 100.0), train_result(rng, 60.0)
    baseline = Baseline.of(RunScores.of(jax.tree.map(lambda x: x[None], ppo))).mean()  # one training problem
    env = env_stats({"ppo": as_run(ppo), "m": as_run(method)}, scores.SCORES[kind].label)
    assert env.excluded_from_aggregate is None
    entry = env.methods["m"]
    np.testing.assert_allclose(entry.scores, fitness_from(RunScores.of(method), kind, None, 0), rtol=1e-12)
    np.testing.assert_allclose(entry.normalized, fitness_from(RunScores.of(method), kind + "_norm", baseline, 0), rtol=1e-12)
    raw = fitness_from(RunScores.of(method), kind, None, 0)
    assert entry.columns[scores.SCORES[kind].label] == pytest.approx(float(np.mean(raw)))
    # PPO is 1 in both, the initial policy 0
    np.testing.assert_allclose(np.mean(fitness_from(RunScores.of(ppo), kind + "_norm", baseline, 0)), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.mean(env.methods["ppo"].normalized), 1.0, rtol=1e-12)


def test_every_kind_has_one_name_for_a_run_config_and_one_for_an_evaluation():
    assert scores.FITNESS_KINDS == ("final_eval", "final_eval_norm", "greedy_eval", "greedy_eval_norm",
                                    "final", "final_norm", "auc", "auc_norm")
    assert LABELS == ("eval", "eval_greedy", "train_final", "auc")
    for s in scores.SCORES.values():
        assert scores.score_of(s.name) is scores.score_of(s.label) is scores.score_of(s.name + "_norm") is s
    assert resolve_protocol(Protocol("p", "", select="final", score="greedy_eval")).score == "eval_greedy"
    with pytest.raises(KeyError, match="unknown score 'best'"):
        scores.score_of("best")
    with pytest.raises(KeyError, match="unknown score 'best_norm'"):
        scores.score_of("best_norm")  # a suffix alone makes no kind


def test_a_fitness_is_read_from_the_registry_never_from_its_name():
    """Every run config's `fitness` is a Fitness: a Score, raw or normalised; what the engine, the
    checks and PPO's settings ask of it (normalised? greedy?) they ask the registry."""
    import ast
    from pathlib import Path

    assert scores.FITNESS_KINDS == tuple(scores.FITNESS)
    assert {(f.score.name, f.normalised) for f in scores.FITNESS.values()} == {
        (s, n) for s in scores.SCORES for n in (False, True)}
    for name, fitness in scores.FITNESS.items():
        assert scores.fitness_of(name) is fitness and scores.score_of(name) is fitness.score
    with pytest.raises(KeyError, match="unknown fitness 'eval'"):
        scores.fitness_of("eval")  # an evaluation's column is not a run's fitness
    root = Path(__file__).resolve().parents[1]
    library = [p for folder in ("metadisco", "analysis", "inner_loops", "meta_objectives") for p in (root / folder).rglob("*.py")]
    by_name = [f"{p.relative_to(root)}: {ast.unparse(node)}" for p in library for node in ast.walk(ast.parse(p.read_text()))
               if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("startswith", "endswith", "removesuffix")
               and "fitness" in ast.unparse(node.func.value) + "".join(map(ast.unparse, node.args))
               or isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("startswith", "endswith", "removesuffix")
               and any(isinstance(a, ast.Constant) and a.value in ("_norm", "greedy") for a in node.args)]
    assert not by_name, by_name


def test_the_final_score_is_the_inner_loops_final_return_bit_for_bit_under_jit_and_vmap():
    """The registry's tail of the learning curve equals TrainResult.final_return as the inner loop computes it."""
    curves = jax.random.normal(jax.random.key(0), (3, 4, 37)) * 100

    def inner(returns):  # metadisco.inner_loops.ppo.train's final_return
        return returns[-max(1, returns.shape[0] // 10):].mean()

    want = jax.jit(jax.vmap(jax.vmap(inner)))(curves)
    got = jax.jit(lambda c: scores.value({"returns": c}, "final"))(curves)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_the_normaliser_guard_is_two_standard_errors_of_the_paired_gain():
    zero = np.zeros(8)
    mean, se, usable = scores.normaliser_gain(np.array([1.0, -1.0] * 4) + 0.5, zero)  # gain 0.5 +- 0.378
    assert mean == pytest.approx(0.5) and not usable
    assert scores.normaliser_gain(np.array([1.0, -1.0] * 4) + 1.0, zero)[2]  # 1.0 > 2 * 0.378
    assert not scores.normaliser_gain(np.array([5.0]), np.array([0.0]))[2]  # one seed has no standard error
    assert not scores.normaliser_gain(np.full(4, 5.0), np.full(4, np.nan))[2]


def test_a_barely_learning_ppo_cannot_normalise_an_evaluation():
    """PPO's mean beats the initial policy (the old rule: any positive gain) but within noise: the
    environment is flagged, its normalised scores are None, and the message says why."""
    rng = np.random.default_rng(1)
    ppo, method = train_result(rng, 10.0, spread=5.0), train_result(rng, 60.0)
    gain = ppo.eval_return - ppo.init_eval_return
    assert 0 < gain.mean() < 2 * gain.std(ddof=1) / np.sqrt(SEEDS)
    env = env_stats({"ppo": as_run(ppo), "m": as_run(method)}, "eval")
    assert "ppo-flat" in env.flags and env.methods["m"].normalized is None
    assert "standard errors" in env.excluded_from_aggregate


@pytest.mark.parametrize("xp", [np, jnp])
def test_a_diverged_run_ties_the_worst_finite_one(xp):
    s = xp.asarray([3.0, np.nan, 1.0, 2.0])
    np.testing.assert_array_equal(scores.at_worst(s), [3.0, 1.0, 1.0, 2.0])
    flagged = xp.asarray([False, False, False, True])  # diverged with a finite score: still the worst
    np.testing.assert_array_equal(scores.at_worst(xp.asarray([3.0, 0.5, 1.0, 9.0]), flagged), [3.0, 0.5, 1.0, 0.5])
    np.testing.assert_array_equal(scores.at_worst(xp.asarray([np.nan, np.inf])), [-1e6, -1e6])
    columns = scores.at_worst(xp.asarray([[1.0, np.nan], [np.nan, 4.0], [2.0, 5.0]]), axis=0)
    np.testing.assert_array_equal(columns, [[1.0, 4.0], [1.0, 4.0], [2.0, 5.0]])
    if xp is jnp:
        np.testing.assert_array_equal(jax.jit(scores.at_worst)(s), [3.0, 1.0, 1.0, 2.0])


def test_meta_training_and_evaluation_place_a_diverged_run_alike():
    """The ES (mean over envs, and ranks per env) and evaluate both tie a diverged run with the worst finite one."""
    fitness = jnp.array([[3.0], [jnp.nan], [1.0], [2.0]])
    ranks = centered_ranks(fitness, jnp.array([False, True, False, False]))[:, 0]
    assert ranks[1] == ranks[2] == ranks.min()
    rng = np.random.default_rng(2)
    ppo, method = train_result(rng, 100.0), train_result(rng, 60.0)
    method = method.replace(eval_return=method.eval_return.copy(), diverged=method.diverged.copy())
    method.eval_return[0], method.diverged[1] = np.nan, True
    env = env_stats({"ppo": as_run(ppo), "m": as_run(method)}, "eval")
    worst = min(np.min(ppo.eval_return), np.min(method.eval_return[2:]))
    entry = env.methods["m"]
    assert entry.scores[0] == entry.scores[1] == worst and entry.nonfinite == 2 and entry.diverged == 1
    assert entry.scores[0] != pytest.approx(env.init_return)  # not the initial policy's score


def test_the_score_registry_is_jax_free():
    code = "import sys, metadisco.core.scores, metadisco.core.run_checks; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

"""The scoring program: one compiled training program serves a run's generations, baseline,
comparisons, validation and re-scoring, and a check's candidates x seeds come back where they belong."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metadisco.checks import seeds_of
from metadisco.config import ValidationConfig, run_plan
from metadisco.engine import MetaTrainer
from metadisco.scoring import fetch, pack
from metadisco.train import run
from tests.helpers import constant_train, quadratic_train, stand_in_result, tiny_config


@pytest.mark.parametrize("candidates, seeds, rows, per_row", [(3, 32, 16, 2), (2, 5, 4, 2), (1, 8, 4, 4), (5, 3, 8, 1)])
def test_packing_lays_every_candidate_and_seed_once_on_whole_rows(candidates, seeds, rows, per_row):
    calls = pack(candidates, seeds, rows, per_row)
    kept = [(int(call.candidate[r]), int(call.seed[r, s])) for call in calls
            for r, s in zip(*np.nonzero(call.keep))]
    assert sorted(kept) == list(itertools.product(range(candidates), range(seeds)))  # each once, none lost
    for call in calls:
        assert call.candidate.shape == (rows,) and call.seed.shape == (rows, per_row)  # the program's one shape
        assert (call.seed < seeds).all()
    # as few calls as whole rows allow
    assert len(calls) == -(-candidates * -(-seeds // per_row) // rows)


def seed_reporting_train(key, meta_params):
    """Return = 1000 * the member's first output weight + a number drawn from the seed: which member
    trained on which seed is readable from the score."""
    ret = 1000.0 * meta_params["drift"]["w2"].ravel()[0] + jax.random.uniform(key)
    return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(0.0))


def test_each_candidate_comes_back_with_its_own_scores_on_every_seed_paired_by_seed():
    """Three candidates on 5 seeds laid over the program's 4 rows x 1 seed (two calls, one padded):
    candidate c scores its own value on each seed, and seed j is the same seed for every candidate."""
    trainer = MetaTrainer(run_plan(tiny_config(seeds_per_member=1)), trains=[seed_reporting_train],
                          ppo_trains=[constant_train(0.0, 1.0)])
    start = trainer.initial_solution
    candidates = []
    for c in range(3):
        candidate = jax.tree.map(np.array, start)  # a copy
        candidate["drift"]["w2"].reshape(-1)[0] += c / 1000.0
        candidates.append(candidate)
    seeds = seeds_of(jax.random.key(7), 5)
    scores = trainer.program.score_candidates(0, candidates, seeds).final_eval  # [C, E]
    own = np.asarray(jax.vmap(lambda k: jax.random.uniform(jax.random.wrap_key_data(k)))(seeds))
    offset = 1000.0 * np.asarray(start["drift"]["w2"]).ravel()[0]
    for c in range(3):
        np.testing.assert_allclose(scores[c], offset + c + own, rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_a_run_compiles_one_training_program_for_generations_baseline_checks_validation_and_selection(tmp_path):
    """A validated run with a normalised fitness and comparisons: its generations, PPO's baseline, the
    comparisons on fresh seeds, the validation problem and the end's re-scoring all call the same
    compiled program, once compiled."""
    cfg = tiny_config(generations=4, eval_every=2, fitness="final_eval_norm",
                      validation=ValidationConfig(envs=("Acrobot-v1",), seeds=3))
    trainer = MetaTrainer(run_plan(cfg), trains=[quadratic_train], ppo_trains=[constant_train(-1.0, 0.0)],
                          validation_trains=[quadratic_train], validation_ppo_trains=[constant_train(-1.0, 0.0)])
    run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lambda *a: None)
    rows = [r for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and (tmp_path / "run" / "objectives" / "selected.json").is_file()
    assert trainer.program._score._cache_size() == 1  # one program: every call at one shape
    state = trainer.replicate(fetch(trainer.init()))
    baseline = trainer.replicate(trainer.baseline_template())
    trainer.rescore([trainer.initial_solution] * 3, baseline, 9)
    trainer.compare_selected(trainer.initial_solution, baseline, 9)
    trainer.generation(state, trainer.replicate(trainer.baseline_template()), 0)
    assert trainer.program._score._cache_size() == 1

"""Meta-validation (RunConfig.validation): refused overlaps, the selected objective, exact resume, and
a problem with a known answer where training fitness keeps rising past what generalises."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metadisco import api
from metadisco.analysis.figures.training import training_curves_figure
from metadisco.analysis.report import write_report
from metadisco.analysis.targets import resolve_target
from metadisco.config import ESConfig, HeldoutConfig, RunConfig, ValidationConfig, run_plan, validate
from metadisco.core.errors import ConfigError
from metadisco.core.records import Comparison, GenerationRecord, Violation, Violations, completed
from metadisco.engine import MetaTrainer
from metadisco.measure import selection as final_selection
from metadisco.measure.selection import selection
from metadisco.meta_objectives import load_objectives
from metadisco.rundir import RunDir, RunDirError
from metadisco.train import run
from tests.helpers import TARGET, constant_train, metric_rows, quadratic_train, stand_in_result, tiny_config

pytestmark = pytest.mark.timeout(120)

VALIDATION_TARGET = 0.02  # what the validation problem prefers: on the way from the start (0) to TARGET


def validation_train(noise: float, target: float = VALIDATION_TARGET):
    """A stand-in inner loop whose optimum is `target` (VALIDATION_TARGET), not training's TARGET:
    return = -100 |w2 - target|^2 (+ noise * N(0, 1))."""

    def train(key, meta_params):
        ret = -100.0 * jnp.mean(jnp.square(meta_params["drift"]["w2"] - target)) + noise * jax.random.normal(key)
        return stand_in_result(jnp.full((8,), ret), ret, jnp.float32(-1.0))

    return train


def validated(**changes) -> RunConfig:
    return tiny_config(validation=ValidationConfig(envs=("Acrobot-v1",), seeds=2), **changes)


def trainer_for(cfg, noise=0.01, target=VALIDATION_TARGET) -> MetaTrainer:
    return MetaTrainer(run_plan(cfg), trains=[quadratic_train], ppo_trains=[constant_train(-1.0, 0.0)],
                       validation_trains=[validation_train(noise, target)],
                       validation_ppo_trains=[constant_train(-1.0, 0.0)])


def checked(start, mean, generation=0) -> GenerationRecord:
    """A metrics row with a validation check: the start's and the ES mean's scores."""
    return GenerationRecord(generation, validation=Comparison(mean=mean, start=start))


@pytest.mark.parametrize("changes, message", [
    ({"validation": ValidationConfig(envs=("CartPole-v1",))}, "also in envs"),
    ({"validation": ValidationConfig(envs=("Acrobot-v1",)), "heldout": HeldoutConfig(envs=("Acrobot-v1",))},
     "also in heldout.envs"),
    ({"validation": ValidationConfig(envs=("Acrobot-v1",), lr=(0.1, 0.2))}, "one per env"),
    ({"validation": ValidationConfig(envs=("Acrobot-v1",)), "eval_every": 0}, "eval_every"),
    ({"validation": ValidationConfig(envs=("Acrobot-v1", "Catch-bsuite"))}, "normalised fitness"),
])
def test_overlapping_or_unusable_validation_sets_are_refused_before_any_compute(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate(RunConfig(**changes))


def test_validation_keeps_its_best_candidate_and_never_moves_the_es(tmp_path):
    cfg = validated()
    run(cfg, tmp_path / "run", progress=False, trainer=trainer_for(cfg), log=lambda *a: None)
    plain = tiny_config()
    run(plain, tmp_path / "plain", progress=False, trainer=MetaTrainer(run_plan(plain), trains=[quadratic_train]),
        log=lambda *a: None)
    rows = RunDir(tmp_path / "run").metrics()
    checks = [r for r in rows if r.validation is not None]
    assert [completed(r) for r in checks] == [2, 4] and rows[1].validation.problems[0].name == "Acrobot-v1"
    selected = json.loads((tmp_path / "run" / "objectives" / "selected.json").read_text())
    # the finalists, the start and every checked ES mean here, re-scored on common seeds: the highest there
    finalists = selected["extra"]["finalists"]
    assert [f["generation"] for f in finalists] == [0, *sorted((completed(r) for r in checks),
                                                               key=lambda g: -rows[g - 1].validation.mean)]
    best = max(finalists, key=lambda f: f["score"]["value"])
    assert selected["extra"]["generation"] == best["generation"]
    v = selected["extra"]["validation"]
    assert v["ranking_score"] == best["score"]  # ranked on one set of seeds, reported from another
    assert v["score"] != best["score"]["value"] and v["score_low"] < v["score"] < v["score_high"]
    for f in finalists[1:]:  # each ES mean kept at its check, and re-scored from that file
        assert (tmp_path / "run" / "objectives" / "candidates" / f"gen_{f['generation']:06d}.json").is_file()
    # the ES never reads validation: its trajectory equals the same run without it
    assert [r.fitness_mean for r in rows] == [r.fitness_mean for r in RunDir(tmp_path / "plain").metrics()]
    # every reader takes the selected objective when not told which, and says so; RUN:mean picks the last mean
    assert resolve_target(str(tmp_path / "run")).label == "run:selected"
    assert resolve_target(f"{tmp_path / 'run'}:mean").label == "run:mean"
    assert resolve_target(str(tmp_path / "plain")).label == "plain"
    which, what = api.chosen_objective(tmp_path / "run")
    assert which == "selected" and f"generation {selected['extra']['generation']}" in what
    api.plot(tmp_path / "run", formats=("png",))
    report = (tmp_path / "run" / "report.html").read_text()
    assert "<h2>Validation</h2>" in report and "objectives: <b>selected</b>" in report
    assert "re-scored together on 2 common fresh seeds" in report and report.count("<td>selected</td>") == 1
    assert selected["extra"]["comparison"].startswith("selected objective (")  # what the queue's summary reads


def test_stop_and_resume_with_validation_equals_uninterrupted(tmp_path):
    cfg = validated(generations=6)
    trainer = trainer_for(cfg)
    run(cfg, tmp_path / "full", progress=False, trainer=trainer, log=lambda *a: None)
    run(cfg, tmp_path / "part", progress=False, trainer=trainer, stop_after=3, log=lambda *a: None)
    run(None, tmp_path / "part", resume=True, progress=False, trainer=trainer, log=lambda *a: None)
    assert metric_rows(tmp_path / "part") == metric_rows(tmp_path / "full")
    for name in ("selected", "mean"):
        a, b = (json.loads((tmp_path / d / "objectives" / f"{name}.json").read_text()) for d in ("part", "full"))
        assert a == b, name


def test_selection_picks_the_generation_the_validation_problem_prefers(tmp_path):
    """The known answer: training's optimum is w2 = 0.05 and validation's 0.02. The ES mean walks from 0
    towards 0.05, passing 0.02; training fitness keeps rising past that point, so the last generation
    is worse on validation, and the selected one is the evaluated mean nearest 0.02."""
    cfg = validated(generations=16, eval_every=1, checkpoint_every=16,
                    es=ESConfig(population_size=16, sigma_init=0.02, lr=0.004))
    run(cfg, tmp_path / "run", progress=False, trainer=trainer_for(cfg, noise=0.0), log=lambda *a: None)
    rows = RunDir(tmp_path / "run").metrics()
    selected = json.loads((tmp_path / "run" / "objectives" / "selected.json").read_text())
    chosen = selected["extra"]["generation"]
    w_selected, w_last = (np.asarray(load_objectives(tmp_path / "run" / "objectives" / f"{name}.json")[1]["drift"]["w2"])
                          for name in ("selected", "mean"))
    train_fitness = [r.comparison.mean for r in rows]  # the ES mean on training, fresh seeds, every generation
    assert chosen < cfg.generations  # selection stopped before the end ...
    assert train_fitness[-1] > train_fitness[chosen - 1] + 0.005  # ... while training fitness kept rising
    # the selected mean is the evaluated one nearest validation's optimum: its score is exactly -100 msd
    msd = lambda w, t: float(np.mean(np.square(w - t)))  # noqa: E731
    assert -100 * msd(w_selected, VALIDATION_TARGET) == pytest.approx(max(r.validation.mean for r in rows), abs=1e-6)
    assert msd(w_selected, VALIDATION_TARGET) < msd(w_last, VALIDATION_TARGET)
    assert msd(w_last, TARGET) < msd(w_selected, TARGET)  # training prefers the last


def test_the_start_is_selected_where_no_es_mean_beats_it_on_validation(tmp_path):
    """The known answer: validation's optimum is the start itself (w2 = 0) while training pulls the ES
    mean towards TARGET; without noise every ES mean scores below the start, so selected.json holds the
    start's parameters, as generation 0, scored at the first check (the first of equals)."""
    cfg = validated()
    trainer = trainer_for(cfg, noise=0.0, target=0.0)
    lines = []
    run(cfg, tmp_path / "run", progress=False, trainer=trainer, log=lines.append)
    rows = RunDir(tmp_path / "run").metrics()
    checks = [r for r in rows if r.validation is not None]
    assert len(checks) == 2 and all(r.validation.mean < r.validation.start == 0.0 for r in checks)
    extra = json.loads((tmp_path / "run" / "objectives" / "selected.json").read_text())["extra"]
    assert (extra["generation"], extra["candidate"], extra["validation"]["rescored_at"]) == (0, "start", 4)
    assert extra["validation"]["score"] == 0.0 and "re-scored at the end" in extra["note"]
    start = trainer.objectives.start_params(cfg.seed)  # where the run starts: its one definition
    selected = load_objectives(tmp_path / "run" / "objectives" / "selected.json")[1]
    assert jax.tree.structure(selected) == jax.tree.structure(start)
    for a, b in zip(jax.tree.leaves(selected), jax.tree.leaves(start)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the summary, the readers, the report and the figure say it is the start
    assert any(line.startswith("  selected.json: the start (generation 0; no ES mean scored higher") for line in lines)
    assert "the start (generation 0" in api.chosen_objective(tmp_path / "run")[1]
    page = write_report(tmp_path / "report.html", tmp_path, cfg, rows, {}, {}, [], "selected", {}).read_text()
    assert "objectives/selected.json holds the start (generation 0" in page and "selected: its start" in page
    (fit,) = [ax for ax in training_curves_figure(rows).axes if ax.get_label() == "curves/fitness"]
    (star,) = [ln for ln in fit.lines if ln.get_label().startswith("selected")]
    assert star.get_label() == "selected: the start (best validation)"
    assert (star.get_xdata(), star.get_ydata()) == ([completed(checks[0])], [0.0])


def test_selection_takes_the_start_unless_an_es_mean_scores_strictly_higher_from_any_resume_point():
    """The fold a run and its resume share: candidates the start, then the ES mean, at each check; a
    non-finite score is no candidate; the first of equals is kept."""
    rows = [checked(start=1.0, mean=0.5, generation=1),
            checked(start=0.9, mean=0.8, generation=3),  # beats the earlier mean, not the start
            checked(start=np.nan, mean=1.0, generation=5),  # ties the start's best: not strictly higher
            checked(start=np.nan, mean=np.nan, generation=7)]
    chosen = selection(rows)
    assert (chosen.start, chosen.generation, chosen.score, chosen.record) == (True, 0, 1.0, rows[0])
    later = selection([*rows, checked(start=1.2, mean=1.2, generation=9), checked(start=1.0, mean=1.3, generation=11)])
    assert (later.start, later.generation, later.score) == (False, 12, 1.3)
    tie = selection([checked(start=1.2, mean=1.2, generation=9)])  # at one check, the ES mean must beat the start
    assert tie.start and tie.generation == 0
    assert selection([checked(start=np.inf, mean=0.1)]).start is False  # an infinite start is no candidate
    assert selection([GenerationRecord(0)]).record is None


def test_a_degenerate_es_mean_is_never_a_candidate():
    """The checks' fold and the finalists skip an ES mean whose constraint checks failed at its check."""
    bad = Violations(mean=(Violation("drift", "non-negative", "D < 0 at r = 2"),), best=())
    rows = [dataclasses.replace(checked(start=0.0, mean=5.0, generation=1), violations=bad),
            dataclasses.replace(checked(start=0.0, mean=1.0, generation=3), violations=Violations((), ()))]
    chosen = selection(rows)
    assert (chosen.start, chosen.generation) == (False, 4)
    assert [f.generation for f in final_selection.finalists(rows)] == [0, 4]


def test_the_finalists_are_the_start_and_the_best_checks_and_the_first_of_equals_is_chosen():
    """The start, then the FINALISTS ES means with the best check scores, best first (of equal scores the
    earlier generation; a check that did not score finitely after every one that did); of finalists
    re-scored equal, the first (the start) is chosen."""
    means = [0.1, 0.5, 0.3, np.nan, 0.4, 0.5]
    rows = [checked(start=0.2, mean=m, generation=2 * i) for i, m in enumerate(means)]  # completed 2i + 1
    assert final_selection.FINALISTS == 3
    assert [f.generation for f in final_selection.finalists(rows)] == [0, 3, 11, 9]
    assert [f.generation for f in final_selection.finalists(rows, k=6)] == [0, 3, 11, 9, 5, 1, 7]
    assert final_selection.finalists(rows)[0].checked == 0.2  # the start's best check score
    equal = final_selection.rescored([final_selection.Finalist(0, 0.2), final_selection.Finalist(3, 0.5)],
                                     np.full((2, 1, 4), 0.7))
    assert final_selection.chosen(equal) == 0
    assert final_selection.chosen(list(reversed(equal))) == 0


def test_a_diverged_seed_counts_as_a_failure_not_a_dropped_candidate():
    """A finalist with one diverged seed keeps a finite score: that seed ties the worst finite seed of any
    finalist on its problem, so a candidate that diverges on a seed cannot win by the seeds it kept."""
    candidates = [final_selection.Finalist(0, 0.5), final_selection.Finalist(8, 0.9)]
    per_seed = np.array([[[0.5, 0.5, 0.5]], [[2.0, 2.0, np.nan]]])  # [F, problems, S]
    start, mean = final_selection.rescored(candidates, per_seed)
    assert mean.score.value == pytest.approx((2.0 + 2.0 + 0.5) / 3) and np.isfinite(mean.score.low)
    assert mean.vs_start.value == pytest.approx((1.5 + 1.5 + 0.0) / 3)
    assert final_selection.chosen([start, mean]) == 1
    # better than the start on the seed it kept (0.75 > 0.6), but it failed the other two: the start wins
    worse = final_selection.rescored(candidates, np.array([[[0.5, 0.6, 0.7]], [[0.75, np.nan, np.nan]]]))
    assert worse[1].score.value == pytest.approx((0.75 + 0.5 + 0.5) / 3) and final_selection.chosen(worse) == 0


def test_re_scoring_the_finalists_removes_the_winners_curse():
    """The known answer at realistic noise: the ES mean walks from the start (w = 0) past validation's optimum
    (w = 0.02) to training's (0.05) over 16 checks, and each check's score carries seed noise about the size
    of the differences between neighbouring checks. Over 400 runs of that walk, the checks' maximum (the old
    rule) overstates the score of what it picks by far more than chance, while the finalists re-scored on
    common seeds (measure.selection) pick nearer the optimum and keep a little of the curse in their ranking
    score; the winner scored again on seeds of its own (`reported`, what selected.json stores) keeps none."""
    rng = np.random.default_rng(0)
    walk = np.linspace(0.0, 0.05, 17)  # w at generation g: the start, then 16 checks
    true = -100 * np.square(walk - VALIDATION_TARGET)
    noise, seeds = 0.02, 8
    old_error, new_error, reported_error, old_true, new_true = [], [], [], [], []
    for _ in range(400):
        checks = true + noise * rng.standard_normal((2, 17))  # each check: the start and the ES mean, fresh seeds
        rows = [checked(start=checks[0, 0], mean=checks[1, g], generation=g - 1) for g in range(1, 17)]
        old = selection(rows)
        old_error.append(old.score - true[old.generation])
        old_true.append(true[old.generation])
        finalists = final_selection.finalists(rows)
        common = noise * np.sqrt(2) * rng.standard_normal(seeds)  # what every finalist shares on a seed
        per_seed = np.stack([true[f.generation] + common + noise * np.sqrt(2) * rng.standard_normal(seeds)
                             for f in finalists])[:, None]  # [F, 1 problem, S]
        scored = final_selection.rescored(finalists, per_seed)
        new = scored[final_selection.chosen(scored)]
        new_error.append(new.score.value - true[new.finalist.generation])
        new_true.append(true[new.finalist.generation])
        third = noise * np.sqrt(2) * rng.standard_normal(seeds)  # the report's own seeds: the start and the winner
        pair = [0] if new.finalist.start else [0, new.finalist.generation]
        per_seed = np.stack([true[g] + third + noise * np.sqrt(2) * rng.standard_normal(seeds) for g in pair])[:, None]
        report = final_selection.reported(new.finalist, per_seed)
        reported_error.append(report.score.value - true[new.finalist.generation])
    old_error, new_error, reported_error = np.array(old_error), np.array(new_error), np.array(reported_error)
    se = lambda x: x.std(ddof=1) / np.sqrt(x.size)  # noqa: E731
    assert old_error.mean() > 6 * se(old_error)  # the winner's curse, well beyond chance
    assert new_error.mean() < old_error.mean() / 3  # re-scored: most of it gone (a pick among 4 keeps a little)
    assert new_error.mean() > 2 * se(new_error)  # ... but that little is real: the ranking's score is a maximum
    assert abs(reported_error.mean()) < 3 * se(reported_error)  # the score selected.json reports: unbiased
    assert np.mean(new_true) > np.mean(old_true)  # and a better pick on average


def test_overwrite_leaves_nothing_of_the_old_run_and_deletes_nothing_that_is_not_a_run(tmp_path):
    """A new run --overwrite into a validated run's directory: no reader may take the old run's
    selected.json (or its candidates, evaluations, distillations) for the new one's. A directory that is
    not a run directory is refused, its files kept."""
    cfg = validated()
    run(cfg, tmp_path / "run", progress=False, trainer=trainer_for(cfg), log=lambda *a: None)
    (tmp_path / "run" / "distil").mkdir()
    (tmp_path / "run" / "distil" / "report.json").write_text("{}")
    assert (tmp_path / "run" / "objectives" / "selected.json").is_file()
    plain = tiny_config()
    run(plain, tmp_path / "run", overwrite=True, progress=False, trainer=MetaTrainer(run_plan(plain), trains=[quadratic_train]),
        log=lambda *a: None)
    left = sorted(p.relative_to(tmp_path / "run").as_posix() for p in (tmp_path / "run").rglob("*"))
    assert "objectives/selected.json" not in left and not any(p.startswith(("distil", "objectives/candidates"))
                                                                for p in left), left
    assert api.chosen_objective(tmp_path / "run")[0] == "mean"
    assert RunDir(tmp_path / "run").config() == plain
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    with pytest.raises(RunDirError, match="not one"):
        run(plain, tmp_path / "notes", overwrite=True, progress=False,
            trainer=MetaTrainer(run_plan(plain), trains=[quadratic_train]), log=lambda *a: None)
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"


def test_the_validation_normaliser_and_the_validation_checks_train_on_disjoint_keys(monkeypatch):
    """Every key the baseline's PPO trains on (its seeds and the runner, network and environment keys split
    from each) is none of the keys the validation checks after 1..64 generations train on."""
    from metadisco.checks import seeds_of
    from metadisco.core import streams

    cfg = validated(baseline_seeds=4)
    trainer = trainer_for(cfg)
    given, score = [], trainer.program.score_candidates
    monkeypatch.setattr(trainer.program, "score_candidates",
                        lambda branch, candidates, seeds: given.append(np.asarray(seeds)) or score(branch, candidates, seeds))
    trainer.checks.baseline()  # what normalises a *_norm fitness

    def with_children(seeds):
        keys = [jax.random.wrap_key_data(s) for s in seeds]
        return {tuple(np.asarray(jax.random.key_data(k)).tolist()) for key in keys
                for k in (key, *jax.random.split(key, 3))}

    normaliser = set().union(*(with_children(s) for s in given))
    checks = set().union(*(with_children(seeds_of(streams.key(cfg.seed, streams.Stream.VALIDATION, g), 8))
                           for g in range(1, 65)))
    assert len(given) == 2 and not normaliser & checks


def test_selection_is_a_stage_final_only_after_its_re_scoring_inside_the_time_limit_and_resumed_once(tmp_path):
    """selected.json says final only once the end's re-scoring wrote it: a run whose time limit leaves no room
    for the re-scoring stops after its generations with a provisional pick (exit 75), which every reader flags;
    its resume re-scores only and writes what the uninterrupted run wrote; a finished run resumed re-scores
    nothing."""
    from benchmarks.gpu_queue import stage
    from metadisco.commands.evaluate import provisional_selections
    from metadisco.core.errors import EXIT_TIME_LIMIT, RunInterrupted
    from metadisco.measure.run_files import RunFiles
    from metadisco.time_limit import TimeLimit

    cfg = validated()
    trainer = trainer_for(cfg)
    run(cfg, tmp_path / "full", progress=False, trainer=trainer, log=lambda *a: None)
    assert RunFiles(tmp_path / "full").selection_final() is True and stage(tmp_path / "full") == "evaluate"
    limit = TimeLimit(3600)
    limit.fits_selection = lambda finalists: False  # the generations fit, the re-scoring does not
    with pytest.raises(RunInterrupted) as stopped:
        run(cfg, tmp_path / "part", progress=False, trainer=trainer, time_limit=limit, log=lambda *a: None)
    assert stopped.value.exit_code == EXIT_TIME_LIMIT and "selection" in str(stopped.value)
    part = RunFiles(tmp_path / "part")
    assert len(part.metrics()) == cfg.generations and part.selection_final() is False
    assert "provisional" in api.chosen_objective(tmp_path / "part")[1]  # plot, distil and export print it
    assert part.provisional_warning() in provisional_selections([str(tmp_path / "part"), f"{tmp_path / 'part'}:mean"])
    assert not provisional_selections([f"{tmp_path / 'part'}:mean", str(tmp_path / "full")])
    assert stage(tmp_path / "part") == "training"  # the queue resumes it
    said = []
    run(None, tmp_path / "part", resume=True, progress=False, trainer=trainer, log=said.append)
    full, resumed = (json.loads((tmp_path / d / "objectives" / "selected.json").read_text()) for d in ("full", "part"))
    assert resumed == full and part.selection_final() is True
    trainer.rescore = None  # a finished run resumed: re-scoring would fail
    said = []
    run(None, tmp_path / "part", resume=True, progress=False, trainer=trainer, log=said.append)
    assert any("final already" in line for line in said) and any("re-scored at the end" in line for line in said)

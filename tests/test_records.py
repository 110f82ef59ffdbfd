"""metadisco.core.records: a metrics row as a typed record, read and written without loss; stored
run directories read as they were written (jax-free)."""

import dataclasses
import json
import math
from pathlib import Path

import pytest

from metadisco.analysis.runs import Run
from metadisco.core.records import (
    Comparison,
    GenerationRecord,
    Health,
    Interval,
    ProblemScores,
    Violation,
    Violations,
    finite,
)
from metadisco.core.run_config import ExpectConfig
from metadisco.measure.run_files import RunDirError
from metadisco.measure.verdicts import es_mean_vs_ppo, verdict
from metadisco.rundir import RunDir
from tests.helpers import full_record

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
STORED = sorted((ROOT / "docs").rglob("*metrics.jsonl"))  # run directories' and the GPU benchmarks' rows




def test_a_stored_run_directory_reads_and_every_row_round_trips_byte_for_byte():
    """Every committed metrics.jsonl (older releases' rows among them: no start point, no
    `health/undefined`, no violations) reads through the records and writes back the same line."""
    assert len(STORED) >= 6, STORED
    for path in STORED:
        lines = path.read_text().splitlines()
        for line in lines:
            row = json.loads(line)
            record = GenerationRecord.from_row(row)
            assert record.extra == {}, (path, set(record.extra))  # every stored key is known
            assert record.to_row() == row, path
            assert json.dumps(record.to_row()) == line, path
    run = Run(ROOT / "docs" / "results" / "value_loss_demo" / "run")
    records = run.metrics()
    assert len(records) == run.config().generations and [r.generation for r in records] == list(range(len(records)))
    last = records[-1]
    assert last.comparison.problems[0].name == "CartPole-v1" and last.comparison.diff.bounded
    assert last.violations.mean == () and last.health.undefined == 0


def test_a_record_round_trips_through_its_row_and_writes_the_stored_order():
    record = full_record()
    row = record.to_row()
    assert list(row) == [
        "generation", "best_fitness", "draw/Acrobot-v1", "draw/CartPole-v1", "draw/horizon", "draw/lr_factor",
        "fitness_max", "fitness_mean", "fitness_min", "fitness_std", "health/grad_cos", "health/rank_corr",
        "health/undefined", "health/Acrobot-v1/grad_cos", "health/Acrobot-v1/rank_corr",
        "health/Acrobot-v1/undefined", "num_diverged", "sigma", "wall_time_s", "env_steps_per_s",
        "eval/CartPole-v1@0.5/mean", "eval/CartPole-v1@0.5/start", "eval/CartPole-v1@0.5/ppo",
        "eval/CartPole-v1@0.5/diff", "eval/CartPole-v1@0.5/diff_low", "eval/CartPole-v1@0.5/diff_high",
        "eval/Acrobot-v1@1/mean", "eval/Acrobot-v1@1/start", "eval/Acrobot-v1@1/ppo",
        "eval/Acrobot-v1@1/diff", "eval/Acrobot-v1@1/diff_low", "eval/Acrobot-v1@1/diff_high",
        "eval/Acrobot-v1@1/vs_start", "eval/Acrobot-v1@1/vs_start_low", "eval/Acrobot-v1@1/vs_start_high",
        "eval_mean_fitness", "eval_start_fitness", "eval_ppo_fitness", "eval_diff", "eval_diff_low", "eval_diff_high",
        "eval_vs_start", "eval_vs_start_low", "eval_vs_start_high", "eval_gap_closed", "eval_gap_closed_low",
        "eval_gap_closed_high", "eval_mean_violations", "eval_best_violations"]
    assert row["eval_mean_violations"] == [{"plug": "value_loss", "constraint": "trains_the_critic",
                                            "message": "0 everywhere"}] and row["eval_best_violations"] == []
    assert GenerationRecord.from_row(json.loads(json.dumps(row))) == record
    assert Comparison.from_row(row) == record.comparison
    bare = GenerationRecord(3)
    assert bare.to_row() == {"generation": 3} and GenerationRecord.from_row({"generation": 3}) == bare


def test_an_old_row_missing_fields_reads_them_as_absent():
    """An older release's row: no best_fitness, health, draws, start point, intervals against it or violations."""
    row = {"generation": 4, "fitness_max": 2.0, "fitness_mean": 1.0, "fitness_min": 0.0, "fitness_std": 0.5,
           "num_diverged": 0, "sigma": 0.1, "wall_time_s": 1.5, "env_steps_per_s": 10.0,
           "eval/CartPole-v1/mean": 3.0, "eval/CartPole-v1/ppo": 2.0, "eval_mean_fitness": 3.0, "eval_ppo_fitness": 2.0,
           "eval_diff": 1.0, "eval_diff_low": 0.5, "eval_diff_high": 1.5}
    record = GenerationRecord.from_row(row)
    assert record.best_fitness is None and record.health is None and record.draw == {} and record.violations is None
    c = record.comparison
    assert c.problems == (ProblemScores("CartPole-v1", mean=3.0, start=None, ppo=2.0),)
    assert c.start is None and c.vs_start is None and c.gap_closed is None and c.diff == Interval(1.0, 0.5, 1.5)
    assert record.to_row() == row
    assert es_mean_vs_ppo(c).endswith("(95% t-interval; better than PPO)")  # nothing said of a start it lacks
    # it beats PPO, but nothing checked what it found: never FOUND
    assert verdict(record, ExpectConfig(beats="ppo")).startswith("verdict: UNCHECKED after generation 5")
    assert verdict(dataclasses.replace(record, violations=Violations((), ())), ExpectConfig(beats="ppo")).startswith(
        "verdict: FOUND after generation 5")
    minimal = GenerationRecord.from_row({"generation": 0, "fitness_mean": 1.0})
    assert minimal.comparison is None and minimal.sigma is None and minimal.fitness_mean == 1.0
    assert Comparison.from_row({"generation": 0, "fitness_mean": 1.0}) is None


def test_unknown_keys_are_kept_and_written_back():
    """A key this version does not know, also under a known prefix, is kept, and survives a
    resume's rewrite of metrics.jsonl."""
    row = {**full_record(generation=0).to_row(), "health/new_measure": 0.5, "eval/CartPole-v1@0.5/iqm": 1.5,
           "eval_mean_violations": None, "throughput_note": {"gpu": "h100"}, "eval/": 2.0}
    del row["eval_best_violations"]
    record = GenerationRecord.from_row(row)
    assert record.extra == {"health/new_measure": 0.5, "eval/CartPole-v1@0.5/iqm": 1.5, "eval_mean_violations": None,
                            "throughput_note": {"gpu": "h100"}, "eval/": 2.0}
    assert record.violations is None and record.health == Health(0.5, 0.25, 0)
    assert record.to_row() == row


def test_truncating_on_resume_keeps_the_rows_it_keeps_byte_for_byte(tmp_path):
    run = RunDir(tmp_path)
    lines = [json.dumps({**full_record(generation=g).to_row(), "future_field": g}) + "\n" for g in range(3)]
    run.metrics_path.write_text("".join(lines))
    run.truncate_metrics(2)
    assert run.metrics_path.read_text() == "".join(lines[:2])


def test_a_nan_is_written_as_null_and_reads_back_as_nan(tmp_path):
    """A comparison whose seeds diverged: NaN scores and intervals (JSON has no NaN) are stored as
    null, read back as NaN, and read as no interval, never as a finding."""
    nan = math.nan
    record = full_record(generation=0, fitness_mean=nan, health=Health(nan, nan, 1),
                         comparison=dataclasses.replace(full_record().comparison, mean=nan, diff=Interval(nan, nan, nan),
                                                        vs_start=Interval(nan, nan, nan),
                                                        gap_closed=Interval(nan, nan, nan)))
    run = RunDir(tmp_path)
    run.append_metrics(record)
    line = run.metrics_path.read_text()
    assert "NaN" not in line and json.loads(line)["eval_diff_low"] is None and json.loads(line)["fitness_mean"] is None
    (read,) = run.metrics()
    assert math.isnan(read.fitness_mean) and math.isnan(read.health.grad_cos) and read.health.undefined == 1
    c = read.comparison
    assert not c.scored and not c.diff.bounded and not c.vs_start.bounded and math.isnan(c.gap_closed.value)
    assert c.start == -1.75 and finite(c.start) and not finite(c.mean) and not finite(None)
    assert es_mean_vs_ppo(c) == "ES mean nan vs PPO -0.25 on the same fresh seeds"
    assert verdict(dataclasses.replace(read, violations=None), ExpectConfig(beats="ppo")).startswith(
        "verdict: NOT FOUND after generation 1")
    assert read.to_row() == json.loads(line)
    assert "fitness_mean" not in read.scalars() and "eval_diff" not in read.scalars()
    assert "generation" not in read.scalars() and read.scalars()["eval_start_fitness"] == -1.75


def test_a_line_that_is_not_a_metrics_row_is_refused_with_its_place(tmp_path):
    with pytest.raises(ValueError, match="integer generation"):
        GenerationRecord.from_row({"fitness_mean": 1.0})
    run = Run(tmp_path)
    run.metrics_path.write_text('{"generation": 0}\n{"generation": "1"}\n')
    with pytest.raises(RunDirError, match="metrics.jsonl line 2 is not a metrics row"):
        run.metrics()
    # a violation is a record with fields, never a string to parse
    run.metrics_path.write_text('{"generation": 0, "eval_mean_violations": ["value_loss/finite: L is not finite"]}\n')
    with pytest.raises(RunDirError, match="line 1 is not a metrics row: a violation is an object with string fields"):
        run.metrics()


def test_a_violation_is_stored_as_an_object_and_reads_back_as_the_same_violation():
    found = Violation("drift", "nonnegative", "D < 0 at 3 of 10 grid points", where="initial parameters")
    assert str(found) == "D < 0 at 3 of 10 grid points [initial parameters]"
    assert Violation.from_json(json.loads(json.dumps(found.to_json()))) == found
    assert Violation("drift", "finite", "D is not finite").to_json() == {
        "plug": "drift", "constraint": "finite", "message": "D is not finite"}
    for bad in ("drift/finite: D is not finite", {"plug": "drift", "constraint": "finite"},
                {"plug": "drift", "constraint": "finite", "message": 1}, {"plug": "drift", "constraint": "finite",
                                                                          "message": "m", "why": "x"}):
        with pytest.raises(ValueError, match="a violation is an object"):
            Violation.from_json(bad)


def test_a_verdict_names_each_game_and_warns_of_a_search_that_traded_one_for_another():
    """The H200 run's pattern: the mean over two games level with PPO, one game better, the other worse.
    The verdict line gives each game's interval and says it was a trade, with both intervals."""
    games = (ProblemScores("Breakout-MinAtar", 1.20, 1.0, 1.04, diff=Interval(0.16, 0.05, 0.27)),
             ProblemScores("Freeway-MinAtar", 0.84, 1.0, 1.09, diff=Interval(-0.25, -0.4, -0.1)))
    c = Comparison(problems=games, mean=1.02, start=1.0, ppo=1.065, diff=Interval(-0.045, -0.15, 0.06))
    row = GenerationRecord(generation=99, comparison=c, violations=Violations((), ()))
    line = verdict(row, ExpectConfig(beats="ppo"))
    assert line.startswith("verdict: NOT FOUND after generation 100")
    assert "per problem: Breakout-MinAtar +0.16 [+0.05, +0.27], Freeway-MinAtar -0.25 [-0.4, -0.1]" in line
    assert "a trade, not a gain: it improves Breakout-MinAtar +0.16 [+0.05, +0.27] while Freeway-MinAtar " \
           "-0.25 [-0.4, -0.1] gets worse" in line
    # both games inside noise: the games are named, no trade is claimed
    level = dataclasses.replace(c, problems=tuple(dataclasses.replace(g, diff=Interval(g.diff.value, -0.5, 0.5))
                                                  for g in games))
    line = verdict(dataclasses.replace(row, comparison=level), ExpectConfig(beats="ppo"))
    assert "per problem: Breakout-MinAtar" in line and "trade" not in line
    # a single game: the line is as it was
    one = dataclasses.replace(c, problems=games[:1])
    assert "per problem" not in verdict(dataclasses.replace(row, comparison=one), ExpectConfig(beats="ppo"))

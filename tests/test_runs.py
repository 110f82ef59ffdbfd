"""metadisco.analysis.runs: the one reader of a run directory (jax-free; complete lines and files only)."""

import json
import subprocess
import sys

import pytest

from metadisco.analysis.runs import Run, run_containing
from metadisco.core.errors import MetadiscoError
from metadisco.core.run_config import HeldoutConfig, InnerConfig, ObjectivesConfig, RunConfig
from metadisco.measure.run_files import RunDirError, parse_metrics


def test_importing_the_reader_does_not_import_jax():
    code = "import sys, metadisco.analysis.runs; assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_metrics_keep_complete_lines_only():
    rows = [{"generation": 0, "fitness_mean": 1.0}, {"generation": 1, "fitness_mean": 2.0}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    assert parse_metrics(text) == rows
    assert parse_metrics(text + '{"generation": 2, "fitness_me') == rows  # being written
    assert parse_metrics(text + '{"generation": 2}') == rows  # its newline not written yet
    assert parse_metrics(text + '{"generation": 2, "fitn\n{"generation": 3}\n') == rows  # cut by a crash


def test_a_missing_or_corrupt_run_says_what_it_is(tmp_path):
    with pytest.raises(RunDirError, match="no run directory"):
        Run(tmp_path / "nope").config()
    run = Run(tmp_path)
    with pytest.raises(RunDirError, match="config.json is missing"):
        run.config()
    run.config_path.write_text("{not json")
    with pytest.raises(RunDirError, match="corrupt"):
        run.config()
    run.config_path.write_text(json.dumps({"envs": ["CartPole-v1"], "genrations": 3}))
    with pytest.raises(RunDirError, match="unknown config field 'genrations'. Did you mean generations"):
        run.config()
    run.config_path.write_text(json.dumps({"seed": "seven"}))
    with pytest.raises(RunDirError, match="config field seed: cannot read 'seven' as int"):
        run.config()
    assert issubclass(RunDirError, MetadiscoError)
    assert run.metrics() == [] and run.baseline() is None and run.checkpoints() == []


def test_layout_listing_and_declared_heldout(tmp_path):
    run = Run(tmp_path)
    run.config_path.write_text(json.dumps({"envs": ["CartPole-v1"], "heldout": {"envs": []}}))
    assert run.is_run() and run.heldout() is None
    run.config_path.write_text(json.dumps({"heldout": {"envs": ["Acrobot-v1"], "timesteps": 5}}))
    assert run.heldout() == HeldoutConfig(envs=("Acrobot-v1",), timesteps=5)  # seeds: the declared default
    run.checkpoint_dir.mkdir()
    for name in ("gen_000002.msgpack", "gen_000010.msgpack", ".gen_000011.msgpack.x.tmp", "gen_000011.tmp"):
        (run.checkpoint_dir / name).write_bytes(b"")
    assert [p.name for p in run.checkpoints()] == ["gen_000002.msgpack", "gen_000010.msgpack"]
    assert Run.checkpoint_generation(run.checkpoints()[-1]) == 10
    assert run.objectives_path("best") == tmp_path / "objectives" / "best.json"
    with pytest.raises(RunDirError, match="which"):
        run.objectives_path("worst")
    with pytest.raises(RunDirError, match="has not written its objectives yet"):
        run.objectives("mean")
    run.objectives_dir.mkdir()
    assert run_containing(run.objectives_dir / "mean.json").path == tmp_path
    assert run_containing(tmp_path / "elsewhere.json") is None


def test_the_stored_config_is_read_typed_as_train_wrote_it(tmp_path):
    """config.json is read back as the RunConfig `metadisco train` stored (tuples, sections,
    objective choices), and a field the file lacks takes RunConfig's default, as resume reads it."""
    cfg = RunConfig(name="typed", envs=("CartPole-v1", "Acrobot-v1"), fitness="auc_norm", seed=7,
                    inner=InnerConfig(total_timesteps=4096, hidden=(16, 16)),
                    objectives=ObjectivesConfig(drift={"name": "lpo", "hidden": 8}, evolve=("drift", "value_loss")),
                    heldout=HeldoutConfig(envs=("Catch-bsuite",), seeds=3))
    run = Run(tmp_path)
    run.config_path.write_text(json.dumps(cfg.to_dict()))
    read = run.config()
    assert read == cfg and read.inner.hidden == (16, 16) and read.objectives.evolve == ("drift", "value_loss")
    assert read.objectives.drift.options == (("hidden", 8),) and run.heldout() == cfg.heldout
    run.config_path.write_text(json.dumps({"envs": ["Acrobot-v1"]}))
    # a field the file lacks reads at its default, but member_batch: a run from before it ran each shard whole
    assert run.config() == RunConfig(envs=("Acrobot-v1",), member_batch=0)


def test_a_run_whose_selection_kept_the_start_suggests_evaluating_its_last_es_mean(tmp_path):
    """Evaluating the selection of the start (PPO, where the run starts at PPO) would compare PPO with itself."""
    (tmp_path / "config.json").write_text(json.dumps(RunConfig().to_dict()))
    run = Run(tmp_path)
    assert f"metadisco evaluate {tmp_path} --quick" in run.next_steps()  # no selection: the run's default
    (tmp_path / "objectives").mkdir()
    (tmp_path / "objectives" / "selected.json").write_text(json.dumps({"extra": {"candidate": "start"}}))
    assert f"metadisco evaluate {tmp_path}:mean --quick" in run.next_steps()
    (tmp_path / "objectives" / "selected.json").write_text(json.dumps({"extra": {"candidate": 4}}))
    assert f"metadisco evaluate {tmp_path} --quick" in run.next_steps()

"""benchmarks/gpu_queue.sh: the GPU experiments in order, each trained within a time budget and
resumed by the next call, then evaluated; one summary. Tested on the CPU (tiny, --smoke)."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from metadisco.config import list_experiments, resolve

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_queue  # noqa: E402

pytestmark = pytest.mark.timeout(400)

QUEUE = gpu_queue.load_queue()


def test_the_queue_holds_every_gpu_experiment_and_each_entry_resolves():
    assert {e.experiment for e in QUEUE.entries} == {n for n in list_experiments() if n.endswith("_gpu")}
    for entry in QUEUE.entries:
        cfg = resolve(entry.experiment, list(entry.overrides))
        assert cfg.generations >= 1 and entry.device and entry.measured
        assert cfg.eval_every and cfg.expect.beats, entry.name  # each reaches a verdict on fresh seeds
    resolve(QUEUE.entries[0].experiment, [*QUEUE.entries[0].overrides, *QUEUE.smoke])  # what --smoke runs
    assert QUEUE.entries[0].experiment == "discobench_loss_gpu"  # issue 54: DiscoBench's split first
    assert resolve(QUEUE.entries[0].experiment).validation.envs  # ... with its validation set
    replications = [e for e in QUEUE.entries if e.experiment == "drift_mix_minatar_gpu"]
    assert [e.name for e in QUEUE.entries[1:3]] == [e.name for e in replications]  # then the replication
    assert sorted(resolve(e.experiment, list(e.overrides)).seed for e in replications) == [1, 2]  # seed 0 ran


def fake_run(state: Path, name: str, rows: int, generations: int = 3, evaluated: bool = False) -> Path:
    """A run directory as `metadisco train` leaves it after `rows` generations (no compute)."""
    run_dir = state / name
    (run_dir / "checkpoints").mkdir(parents=True)
    cfg = resolve(None, [f"generations={generations}"]).to_dict()
    (run_dir / "config.json").write_text(json.dumps(cfg))
    (run_dir / "checkpoints" / f"gen_{rows:06d}.msgpack").write_bytes(b"")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"generation": g, "fitness_mean": 1.0}) + "\n"
                                                   for g in range(rows)))
    if evaluated:
        (run_dir / "evaluation" / "queue").mkdir(parents=True)
        (run_dir / "evaluation" / "queue" / "results.json").write_text("{}")
    return run_dir


def test_each_call_starts_resumes_or_evaluates_from_where_the_run_directory_stands(tmp_path):
    entry = QUEUE.entries[0]
    kind, command = gpu_queue.next_step(entry, tmp_path, left_s=540)
    assert kind == "train" and command[3:5] == ["train", entry.experiment]
    assert command[command.index("--time-limit") + 1] == str(540 - int(gpu_queue.RESERVE_S))
    kind, reason = gpu_queue.next_step(entry, tmp_path, left_s=100)
    assert kind == "stop" and "too little for a training leg" in reason

    run_dir = fake_run(tmp_path, entry.name, rows=1)  # a leg that stopped on time
    assert gpu_queue.stage(run_dir) == "training"
    kind, command = gpu_queue.next_step(entry, tmp_path, left_s=300)
    assert kind == "resume" and command[3:6] == ["train", "--resume", str(run_dir)] and "--time-limit" in command

    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"generation": g}) + "\n" for g in range(3)))
    assert gpu_queue.stage(run_dir) == "evaluate"
    kind, command = gpu_queue.next_step(entry, tmp_path, left_s=60 * entry.eval_minutes + 1)
    assert kind == "evaluate" and command[3:5] == ["evaluate", str(run_dir)]
    assert [*entry.evaluate] == command[5:5 + len(entry.evaluate)]  # the declared evaluation, as stated
    kind, reason = gpu_queue.next_step(entry, tmp_path, left_s=60 * entry.eval_minutes - 1)
    assert kind == "defer" and "did not fit" in reason  # never cut off: a later call runs it, the next entry trains

    other = QUEUE.entries[1]
    fake_run(tmp_path, other.name, rows=3, evaluated=True)
    assert gpu_queue.next_step(other, tmp_path, left_s=540) == ("done", "")  # the queue goes on
    assert gpu_queue.stage(tmp_path / "missing") == "new"


@pytest.mark.slow
def test_smoke_runs_the_first_entry_through_training_and_evaluation_and_writes_one_summary(tmp_path):
    out = tmp_path / "out"
    committed = ROOT / "docs" / "results" / "gpu_runs"

    def snapshot():
        return sorted((str(p.relative_to(committed)), p.stat().st_mtime_ns) for p in committed.rglob("*"))

    before = snapshot()
    env = os.environ | {"OUT": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run([str(ROOT / "benchmarks" / "gpu_queue.sh"), "--smoke", "--max-runs", "1", "--budget", "5m"],
                          capture_output=True, text=True, env=env, timeout=360)  # as documented: no --state
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert snapshot() == before  # the committed queue state: not resumed, not locked, not written
    summary = json.loads((out / "summary.json").read_text())
    first = summary["entries"][0]
    assert [s["kind"] for s in summary["steps"]] == ["train", "evaluate"]
    assert first["stage"] == "done" and first["generations"] == [2, 2]
    assert first["verdict"].startswith(("verdict: FOUND", "verdict: NOT FOUND"))
    # at the smoke's size PPO does not learn Catch, so there is no normaliser and no aggregate, and it says so
    assert first["heldout"]["envs"] == ["Catch-bsuite"]
    assert "point" in first["heldout"]["iqm"] if first["heldout"]["iqm"] else first["heldout"]["not_aggregated"]
    assert all(e["stage"] == "new" for e in summary["entries"][1:])
    assert summary["stopped"] == "--max-runs 1" and summary["smoke"]
    assert f"| {first['name']} | done | 2/2 |" in (out / "summary.md").read_text()
    log = (out / "queue.log").read_text()
    assert "--time-limit" in log and "results written to" in log
    with tarfile.open(out / "state.tar.gz") as tar:  # what a later call (or this repo) unpacks to resume
        names = set(tar.getnames())
    assert {f"{first['name']}/config.json", f"{first['name']}/metrics.jsonl",
            f"{first['name']}/evaluation/queue/results.json"} <= names
    assert not any(n.endswith(".lock") for n in names)
    assert (out / "state" / first["name"] / "metrics.jsonl").is_file()  # the smoke's runs: under OUT
    assert {p.name for p in out.iterdir()} <= {"summary.md", "summary.json", "queue.log", "metrics.jsonl",
                                               "results.md", "state.tar.gz", "gpu.txt", "state"}  # state: the smoke's own


def test_an_evaluation_that_does_not_fit_waits_and_the_queue_goes_on_to_train_the_next(tmp_path):
    first, second = QUEUE.entries[:2]
    fake_run(tmp_path / "state", first.name, rows=3)  # trained, not evaluated
    code = gpu_queue.main(["--state", str(tmp_path / "state"), "--out", str(tmp_path / "out"), "--budget", "100"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert code == 0 and summary["steps"] == []  # nothing started that could not finish
    assert summary["deferred"] == [f"{first.name} trained; its evaluation ({first.eval_minutes:g} min) did not fit "
                                   "in the 1 min 40 s left: a later call runs it"]
    assert summary["stopped"].endswith(f"too little for a training leg of {second.name}")
    assert [e["stage"] for e in summary["entries"][:2]] == ["evaluate", "new"]
    assert "Deferred: " in (tmp_path / "out" / "summary.md").read_text()


def test_a_bad_budget_is_a_usage_error_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        gpu_queue.main(["--budget", "soon", "--state", str(tmp_path / "state"), "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2 and "--budget 'soon': give a positive duration" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "state").exists()


def test_unpack_replaces_each_run_directory_whole_and_leaves_the_others(tmp_path):
    # a call's state: run "a" pruned its checkpoints to the newest; a plain `tar x` over the old copy
    # would leave gen_1 beside gen_3
    state, call = tmp_path / "state", tmp_path / "call"
    for root, run, files in ((state, "a", ("gen_1", "gen_2")), (state, "b", ("gen_9",)), (call, "a", ("gen_3",))):
        (root / run / "checkpoints").mkdir(parents=True)
        for name in files:
            (root / run / "checkpoints" / f"{name}.msgpack").write_text(name)
    gpu_queue.pack(call, ["a"], tmp_path / "state.tar.gz")
    assert gpu_queue.main(["--unpack", str(tmp_path / "state.tar.gz"), "--state", str(state)]) == 0
    assert sorted(p.name for p in (state / "a" / "checkpoints").iterdir()) == ["gen_3.msgpack"]
    assert sorted(p.name for p in (state / "b" / "checkpoints").iterdir()) == ["gen_9.msgpack"]
    assert sorted(p.name for p in state.iterdir()) == ["a", "b"]  # no staging folder left behind


def test_the_summary_names_this_projects_commit_not_an_enclosing_repositorys(tmp_path, monkeypatch):
    """A copy without .git of its own inside another repository (as a GPU machine receives it) must not
    name that repository's commit: it names what the caller says (METADISCO_COMMIT), else unknown."""
    outer = tmp_path / "outer"
    copy = outer / "project"
    copy.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    subprocess.run(["git", "-C", str(outer), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q",
                    "--allow-empty", "-m", "outer"], check=True)
    monkeypatch.setattr(gpu_queue, "ROOT", copy)
    monkeypatch.delenv("METADISCO_COMMIT", raising=False)
    assert gpu_queue.project_commit().startswith("unknown")
    monkeypatch.setenv("METADISCO_COMMIT", "7f73e29")
    assert gpu_queue.project_commit() == "7f73e29"
    monkeypatch.setattr(gpu_queue, "ROOT", outer)  # a checkout of its own: git's own answer
    assert gpu_queue.project_commit() != "7f73e29" and not gpu_queue.project_commit().startswith("unknown")

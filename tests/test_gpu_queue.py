"""benchmarks/gpu_queue.sh: the GPU experiments in order, each trained within a time budget and
resumed by the next call, then evaluated; one summary. Tested on the CPU (tiny, --smoke)."""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from metadisco.config import list_experiments, resolve, run_plan
from tests.helpers import gpu_queue_smoke

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_queue  # noqa: E402

QUEUE = gpu_queue.load_queue()


def test_the_queue_holds_every_gpu_experiment_and_each_entry_resolves():
    assert {e.experiment for e in QUEUE.entries} == {n for n in list_experiments() if n.endswith("_gpu")}
    for entry in QUEUE.entries:
        cfg = resolve(entry.experiment, list(entry.overrides))
        assert cfg.generations >= 1 and entry.device and entry.measured
        assert cfg.eval_every and cfg.expect.beats, entry.name  # each reaches a verdict on fresh seeds
    for entry in QUEUE.entries:  # what --smoke runs, each entry with a held-out set its objectives run on
        resolve(entry.experiment, [*entry.overrides, *QUEUE.smoke, *entry.smoke])
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


@pytest.mark.parametrize("entry", QUEUE.entries, ids=lambda e: e.name)
def test_every_entry_builds_and_traces_its_program_at_the_smoke_size(entry):
    """What `make gpu-preflight` trains, planned: each entry at its smoke size builds its run (envs, objectives,
    problems, checks) and traces the one training program, without compiling or training it."""
    from metadisco.engine import MetaTrainer

    trainer = MetaTrainer(run_plan(resolve(entry.experiment, [*entry.overrides, *QUEUE.smoke, *entry.smoke])))
    program, rows, per_row = trainer.program, trainer.cfg.es.population_size, trainer.cfg.seeds_per_member
    params = jax.tree.map(lambda x: jnp.broadcast_to(x, (rows, *jnp.shape(x))), trainer.initial_solution)
    seeds = jax.random.key_data(jax.random.split(jax.random.key(0), rows * per_row)).reshape(rows, per_row, -1)
    scores = jax.eval_shape(program.score, jnp.int32(0), params, jnp.ones(rows), seeds)
    assert scores.final_eval.shape == (rows, per_row), entry.name


def one_entry_queue(tmp_path: Path) -> Path:
    """The queue file with its first entry alone (a resumed sitting's: DiscoBench's split, validated)."""
    text = (ROOT / "benchmarks" / "gpu_queue.toml").read_text()
    first = text.index("[[run]]")
    path = tmp_path / "queue.toml"
    path.write_text(text[: text.index("[[run]]", first + 1)])
    assert [e.name for e in gpu_queue.load_queue(path).entries] == [QUEUE.entries[0].name]
    return path


@pytest.fixture(scope="module")
def first_call(tmp_path_factory):
    """Call 1, as documented, on the queue's first entry alone: (OUT, its summary, the queue file), with the
    committed queue state's files (name, mtime) before and after."""
    tmp = tmp_path_factory.mktemp("queue")
    committed = ROOT / "docs" / "results" / "gpu_runs"

    def snapshot():
        return sorted((str(p.relative_to(committed)), p.stat().st_mtime_ns) for p in committed.rglob("*"))

    before, queue = snapshot(), one_entry_queue(tmp)
    summary = gpu_queue_smoke(tmp / "out", "--queue", str(queue))
    return tmp / "out", summary, queue, (before, snapshot())


@pytest.mark.slow
def test_an_entry_trains_to_its_verdict_and_a_second_call_given_its_compile_cache_compiles_nothing(first_call,
                                                                                                   tmp_path):
    """Call 1, as documented: the queue's first entry trains to its verdict and runs its held-out evaluation.
    Call 2, on a fresh OUT (a fresh machine) given call 1's compile_cache.tar.gz, runs it again from the start
    (every program a resumed sitting runs, and the baseline's): it compiles nothing. Every entry through the
    whole queue is `make gpu-preflight` (tests/preflight_gpu_queue.py), run before a GPU sitting."""
    out, summary, queue, (before, after) = first_call
    again = tmp_path / "again"
    assert after == before  # the committed queue state: not resumed, not locked, not written
    assert summary["stopped"] == "" and summary["smoke"]  # the queue is done
    first = QUEUE.entries[0]
    assert [(s["entry"], s["kind"]) for s in summary["steps"]] == [(first.name, "train"), (first.name, "evaluate")]
    (entry,) = summary["entries"]
    assert entry["stage"] == "done" and entry["generations"] == [2, 2]
    assert entry["verdict"].startswith(("verdict: FOUND", "verdict: NOT FOUND"))
    assert f"| {first.name} | done | 2/2 |" in (out / "summary.md").read_text()
    # at the smoke's size PPO does not learn Catch, so there is no normaliser and no aggregate, and it says so
    assert entry["heldout"]["envs"] == ["Catch-bsuite"]
    assert "point" in entry["heldout"]["iqm"] if entry["heldout"]["iqm"] else entry["heldout"]["not_aggregated"]
    log = (out / "queue.log").read_text()
    assert "--time-limit" in log and "results written to" in log
    with tarfile.open(out / "state.tar.gz") as tar:  # what a later call (or this repo) unpacks to resume
        names = set(tar.getnames())
    assert {f"{first.name}/{f}" for f in ("config.json", "metrics.jsonl", "evaluation/queue/results.json")} <= names
    assert not any(n.endswith(".lock") for n in names)
    assert (out / "state" / first.name / "metrics.jsonl").is_file()  # the smoke's runs: under OUT
    assert {p.name for p in out.iterdir()} <= {"summary.md", "summary.json", "queue.log", "metrics.jsonl", "results.md",
                                               "state.tar.gz", "compile_cache.tar.gz", "gpu.txt", "state"}
    cache = summary["compile_cache"]
    assert cache["from"] is None and cache["compiled"] == cache["programs"] > 0  # cold, and the count sees it
    assert f"compile_cache.tar.gz holds {cache['programs']} programs" in (out / "summary.md").read_text()

    summary = gpu_queue_smoke(again, "--queue", str(queue), "--cache-from", str(out / gpu_queue.CACHE_ARCHIVE))
    assert [s["kind"] for s in summary["steps"]] == ["train", "evaluate"] and summary["entries"][0]["stage"] == "done"
    assert summary["compile_cache"]["restored"] == cache["programs"]
    assert summary["compile_cache"]["compiled"] == 0  # no program stored that call 1 had not
    assert f"restored from {out / gpu_queue.CACHE_ARCHIVE}; this call compiled 0" in (again / "summary.md").read_text()


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
    assert summary["compile_cache"]["from"] is None and summary["compile_cache"]["programs"] == 0
    # a later call with the same OUT restores the compile cache the last one left there
    gpu_queue.main(["--state", str(tmp_path / "state"), "--out", str(tmp_path / "out"), "--budget", "100"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["compile_cache"]["from"] == str(tmp_path / "out" / gpu_queue.CACHE_ARCHIVE)


def test_the_compile_cache_travels_with_its_origins_and_past_its_limit_leaves_out_finished_experiments(tmp_path):
    """What a command stores in the queue's cache is counted and attributed to its experiment; the archive
    holds it all, or past its limit only that of experiments with an unfinished entry."""
    autotune = "xla_gpu_per_fusion_autotune_cache_dir/fusion_1"  # XLA's, beside jax's KEY-cache files
    cache = gpu_queue.CompileCache()
    try:
        assert cache.env()["JAX_COMPILATION_CACHE_DIR"] == str(cache.path)
        stored = cache.entries()
        (cache.path / "jit_train-1-cache").write_bytes(bytes(100))
        (cache.path / autotune).parent.mkdir()
        (cache.path / autotune).write_bytes(bytes(10))
        assert cache.took(stored, "finished") == 1  # one program compiled
        stored = cache.entries()
        assert cache.took(stored, "open") == 0  # one that loaded every program
        (cache.path / "jit_eval-2-cache").write_bytes(bytes(100))
        assert cache.took(stored, "open") == 1
        whole = cache.pack(tmp_path / "whole.tar.gz", {"open"}, limit_bytes=210)
        part = cache.pack(tmp_path / "part.tar.gz", {"open"}, limit_bytes=209)
    finally:
        cache.close()
    assert not cache.root.exists()  # the folder is this call's own
    assert (whole["programs"], whole["left_out"], part["programs"], part["left_out"]) == (2, 0, 1, 1)

    restored = gpu_queue.CompileCache()
    try:
        assert restored.restore(tmp_path / "whole.tar.gz") == 2
        assert restored.entries() == {"jit_train-1-cache", "jit_eval-2-cache", autotune}
        assert restored.origin == {"jit_train-1-cache": "finished", autotune: "finished", "jit_eval-2-cache": "open"}
        (tmp_path / "bad.tar.gz").write_text("not an archive")
        assert restored.restore(tmp_path / "bad.tar.gz") == 0 and restored.entries() == set()  # cold, not fatal
    finally:
        restored.close()


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

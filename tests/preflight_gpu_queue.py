"""`make gpu-preflight`: the GPU queue's whole smoke, run before a GPU sitting (docs/scaling.md), not by
`make test`. Every entry of benchmarks/gpu_queue.toml trains on the CPU at a tiny size to its verdict and
runs its held-out evaluation (`benchmarks/gpu_queue.sh --smoke`), then the first entry runs again on a fresh
OUT from the first call's compile cache and compiles nothing. About 17 minutes on 2 cores.

The suite keeps what this needs a GPU sitting for at no cost: every entry resolved, built and traced at
its smoke size, and one entry through the queue twice (tests/test_gpu_queue.py). This file is not
collected by `make test` (not a test_*.py file): `pytest tests/preflight_gpu_queue.py` runs it."""

import sys
import tarfile

import pytest

from tests.helpers import ROOT
from tests.helpers import gpu_queue_smoke as smoke

sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_queue  # noqa: E402

QUEUE = gpu_queue.load_queue()


@pytest.mark.timeout(1800)  # about 17 min on 2 cores for call 1, 1 for call 2: a timeout of its own, not make test's
def test_smoke_passes_every_entry_and_a_second_call_given_its_compile_cache_compiles_nothing(tmp_path):
    """Call 1, as documented: every entry of the queue trains to its verdict and runs its held-out
    evaluation. Call 2, on a fresh OUT (a fresh machine) given call 1's compile_cache.tar.gz, runs the first
    entry again from the start (every program a resumed sitting runs, and the baseline's): it compiles
    nothing."""
    out, again = tmp_path / "out", tmp_path / "again"
    committed = ROOT / "docs" / "results" / "gpu_runs"

    def snapshot():
        return sorted((str(p.relative_to(committed)), p.stat().st_mtime_ns) for p in committed.rglob("*"))

    before = snapshot()
    summary = smoke(out)
    assert snapshot() == before  # the committed queue state: not resumed, not locked, not written
    assert summary["stopped"] == "" and summary["smoke"]  # the queue is done
    assert [(s["entry"], s["kind"]) for s in summary["steps"]] == [(e.name, kind) for e in QUEUE.entries
                                                                   for kind in ("train", "evaluate")]
    for entry in summary["entries"]:  # each to its verdict and its held-out evaluation
        assert entry["stage"] == "done" and entry["generations"] == [2, 2], entry["name"]
        assert entry["verdict"].startswith(("verdict: FOUND", "verdict: NOT FOUND")), entry["name"]
        assert f"| {entry['name']} | done | 2/2 |" in (out / "summary.md").read_text()
    first = summary["entries"][0]
    # at the smoke's size PPO does not learn Catch, so there is no normaliser and no aggregate, and it says so
    assert first["heldout"]["envs"] == ["Catch-bsuite"]
    assert "point" in first["heldout"]["iqm"] if first["heldout"]["iqm"] else first["heldout"]["not_aggregated"]
    shaping = next(e for e in summary["entries"] if e["name"] == "shaping_hopper_gpu")
    assert shaping["heldout"]["envs"] == ["CartPole-v1"]  # a potential reads its game's observations: fresh seeds there
    log = (out / "queue.log").read_text()
    assert "--time-limit" in log and "results written to" in log
    with tarfile.open(out / "state.tar.gz") as tar:  # what a later call (or this repo) unpacks to resume
        names = set(tar.getnames())
    assert {f"{e.name}/{f}" for e in QUEUE.entries
            for f in ("config.json", "metrics.jsonl", "evaluation/queue/results.json")} <= names
    assert not any(n.endswith(".lock") for n in names)
    assert (out / "state" / first["name"] / "metrics.jsonl").is_file()  # the smoke's runs: under OUT
    assert {p.name for p in out.iterdir()} <= {"summary.md", "summary.json", "queue.log", "metrics.jsonl", "results.md",
                                               "state.tar.gz", "compile_cache.tar.gz", "gpu.txt", "state"}
    cache = summary["compile_cache"]
    assert cache["from"] is None and cache["compiled"] == cache["programs"] > 0  # cold, and the count sees it
    assert f"compile_cache.tar.gz holds {cache['programs']} programs" in (out / "summary.md").read_text()

    summary = smoke(again, "--max-runs", "1", "--cache-from", str(out / gpu_queue.CACHE_ARCHIVE))
    assert [s["kind"] for s in summary["steps"]] == ["train", "evaluate"] and summary["stopped"] == "--max-runs 1"
    assert summary["entries"][0]["stage"] == "done" and all(e["stage"] == "new" for e in summary["entries"][1:])
    assert summary["compile_cache"]["restored"] == cache["programs"]
    assert summary["compile_cache"]["compiled"] == 0  # no program stored that call 1 had not
    assert f"restored from {out / gpu_queue.CACHE_ARCHIVE}; this call compiled 0" in (again / "summary.md").read_text()


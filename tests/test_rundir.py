"""The run directory's guarantees: one writer, every file whole, resumable after any stop.

A second writer is refused while the first lives (however the first dies); a write that fails at
any site (checkpoint, metrics line, objectives, an analysis output) ends with a message naming the
file and the cause, leaves no partial file, and the run resumes to the uninterrupted result;
SIGTERM is Ctrl-C; every file follows the umask.
"""

import errno
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from metadisco.analysis.distillation.run import write_output
from metadisco.analysis.runs import Run
from metadisco.config import resolve, run_plan
from metadisco.core.errors import EXIT_TERMINATED, MetadiscoError
from metadisco.engine import MetaTrainer
from metadisco.measure.run_files import parse_metrics
from metadisco.rundir import RunDir, RunLockedError, RunWriteError
from metadisco.train import run
from tests.helpers import LPO, TINY, metric_rows, quadratic_train, start_metadisco, tiny_config, wait_for_rows

pytestmark = pytest.mark.timeout(120)

QUIET = {"progress": False, "log": lambda *a: None}


@pytest.fixture(scope="module")
def cfg():
    return tiny_config(generations=4, eval_every=0, checkpoint_every=1)


@pytest.fixture(scope="module")
def trainer(cfg):
    """The stand-in inner loop of tests.helpers: a run of 4 generations takes a second."""
    return MetaTrainer(run_plan(cfg), trains=[quadratic_train])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cfg, trainer):
    path = tmp_path_factory.mktemp("full") / "run"
    run(cfg, path, trainer=trainer, **QUIET)
    return path


def objective_params(path):
    return json.loads((path / "objectives" / "mean.json").read_text())["params"]


HOLD_LOCK = """
import sys
from metadisco.rundir import RunDir
with RunDir(sys.argv[1]).lock():
    print("locked", flush=True)
    sys.stdin.read()  # hold it until stdin closes (or the process is killed)
"""


def hold_lock(path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_writer_is_refused_until_the_first_has_exited(tmp_path, cfg, trainer, uninterrupted):
    path = tmp_path / "run"
    run(cfg, path, stop_after=2, trainer=trainer, **QUIET)
    before = path.joinpath("metrics.jsonl").read_text()
    first = hold_lock(path)
    try:
        with pytest.raises(RunLockedError, match=rf"pid {first.pid} on {socket.gethostname()}.*--resume"):
            run(None, path, resume=True, trainer=trainer, **QUIET)
        assert path.joinpath("metrics.jsonl").read_text() == before  # the refused writer wrote nothing
        with pytest.raises(RunLockedError, match=f"pid {first.pid}"):
            RunDir(path).check_unlocked()  # what a command can ask before it imports jax
        assert len(Run(path).metrics()) == 2  # readers are not locked out
    finally:
        first.communicate(input="")  # the first writer exits normally
    second = hold_lock(path)
    second.send_signal(signal.SIGKILL)  # ... and now one that dies without any clean-up
    second.wait()
    run(None, path, resume=True, trainer=trainer, **QUIET)  # nothing stale to clean by hand
    assert metric_rows(path) == metric_rows(uninterrupted)


def fault_on_fsync(monkeypatch, name: str, nth: int = 1, endswith: bool = False):
    """The nth fsync of a file whose name contains (or ends with) `name` fails with ENOSPC, as a full
    disk does: the bytes may be in the page cache, the write is not durable."""
    real, seen = os.fsync, []

    def fsync(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        if (target.endswith(name) if endswith else name in os.path.basename(target)):
            seen.append(target)
            if len(seen) == nth:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("site, name, nth, endswith", [
    ("checkpoint", "gen_000002.msgpack", 1, False),
    ("metrics line", "metrics.jsonl", 3, True),
    ("objectives", "mean.json", 3, False),
])
def test_a_write_fault_ends_cleanly_and_resumes_to_the_uninterrupted_result(
        site, name, nth, endswith, tmp_path, monkeypatch, cfg, trainer, uninterrupted):
    path = tmp_path / "run"
    fault_on_fsync(monkeypatch, name, nth, endswith)
    with pytest.raises(RunWriteError) as info:
        run(cfg, path, trainer=trainer, **QUIET)
    monkeypatch.undo()  # the cause is fixed
    message = str(info.value)
    assert f"could not write {path}" in message and name in message, message
    assert "[Errno 28] No space left on device" in message and f"metadisco train --resume {path}" in message
    # nothing partial where a reader would take it for a real file; the earlier files intact
    assert not [p for p in path.rglob("*") if p.name.endswith(".tmp")]
    text = (path / "metrics.jsonl").read_text()
    assert text.endswith("\n") and len(parse_metrics(text)) == len(text.splitlines()) >= 2
    assert [Run.checkpoint_generation(p) for p in Run(path).checkpoints()][-1] >= 1
    run(None, path, resume=True, trainer=trainer, **QUIET)
    assert metric_rows(path) == metric_rows(uninterrupted)
    assert objective_params(path) == objective_params(uninterrupted)


def test_an_analysis_output_fault_names_the_file(tmp_path, monkeypatch):
    out = tmp_path / "distil" / "distil.json"
    write_output(out, "{}")
    fault_on_fsync(monkeypatch, "distil.json")
    with pytest.raises(MetadiscoError, match=rf"could not write {out}: \[Errno 28\]"):
        write_output(out, '{"new": 1}')
    assert out.read_text() == "{}" and os.listdir(out.parent) == ["distil.json"]  # the old file, no temp


def test_every_file_written_follows_the_umask(tmp_path, cfg, trainer):
    path = tmp_path / "run"
    old = os.umask(0o027)
    try:
        run(cfg, path, stop_after=1, trainer=trainer, **QUIET)
        written = [p for p in path.rglob("*") if p.is_file()]
    finally:
        os.umask(old)
    names = {p.name for p in written}
    assert {"config.json", "metrics.jsonl", "best.json", "mean.json", "gen_000001.msgpack", ".lock"} <= names
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in written} == {p.name: oct(0o640) for p in written}


@pytest.mark.slow
def test_sigterm_writes_a_checkpoint_and_the_resumed_run_equals_an_uninterrupted_one(tmp_path):
    # tests.helpers.tiny_config()'s program (TINY with LPO of 8 hidden units, 2 seeds per
    # member; 10 generations of it take as long as the 20 of one seed this test ran before), compiled
    # once in the suite. Only the stopped run needs a real process (the signal); the resume and the
    # reference run are in-process, through one trainer (`metadisco train --resume` is tests/test_cli.py's).
    args = ["train", *LPO, *TINY, "objectives.drift.hidden=8", "generations=10", "checkpoint_every=100", "--no-progress"]
    run_dir = tmp_path / "run"
    proc = start_metadisco(*args, "--run-dir", str(run_dir))
    try:
        wait_for_rows(run_dir, 2, proc)
        proc.send_signal(signal.SIGTERM)  # a scheduler's preemption
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_TERMINATED, err[-2000:]
    done = len(Run(run_dir).metrics())
    assert 2 <= done < 10
    assert Run.checkpoint_generation(Run(run_dir).checkpoints()[-1]) == done  # checkpoint_every=100: written on SIGTERM
    assert f"interrupted: checkpoint written at generation {done}/10" in out + err
    assert f"metadisco train --resume {run_dir}" in out + err
    cfg = resolve(None, [a for a in args if "=" in a])  # the run's config, as the command parsed it
    assert Run(run_dir).config() == cfg
    trainer = MetaTrainer(run_plan(cfg))  # one trainer (one trace) for the resumed and the reference run
    run(None, run_dir, resume=True, trainer=trainer, **QUIET)
    run(cfg, tmp_path / "full", trainer=trainer, **QUIET)
    assert metric_rows(run_dir) == metric_rows(tmp_path / "full")
    assert objective_params(run_dir) == objective_params(tmp_path / "full")


def test_a_checkpoint_of_another_versions_run_state_says_so(tmp_path):
    """A checkpoint that decodes but does not fit this version's run state (a field added since)
    is not called corrupt: the message says which version can resume it and what still works."""
    import numpy as np

    run_dir = RunDir(tmp_path / "run")
    run_dir.save_checkpoint(3, {"state": {"a": np.zeros(2)}})
    with pytest.raises(MetadiscoError, match="another metadisco version") as err:
        run_dir.load_checkpoint({"state": {"a": np.zeros(2), "b": np.zeros(1)}})
    assert "evaluate" in str(err.value)
    tree, path, warnings = run_dir.load_checkpoint({"state": {"a": np.ones(2)}})
    assert path.name == "gen_000003.msgpack" and not warnings and np.all(tree["state"]["a"] == 0)

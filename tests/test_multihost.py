"""Two local processes as a two-host jax.distributed job (CPU collectives over gloo on
127.0.0.1) give the same generations as one process with two devices."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import LPO, TINY

OVERRIDES = [*LPO, *TINY, "generations=2", "objectives.drift.hidden=8", "checkpoint_every=1"]  # tiny_config()'s programs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metrics(path):
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return [{k: r[k] for k in ("fitness_mean", "fitness_max", "fitness_min", "best_fitness")} for r in rows]


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path, capsys):
    # One process with two devices: this process (conftest sets two CPU devices), the same command
    # in-process; its program is tests.helpers.tiny_config()'s, compiled once in the suite.
    from metadisco.cli import main

    main(["train", *OVERRIDES, "--no-progress", "--run-dir", str(tmp_path / "single")])  # returns: exit code 0
    assert "population split over 2 cpu device(s) in 1 process(es)" in capsys.readouterr().out

    # Two processes of one device each (--host-devices 1 in a fresh process: 4 devices otherwise)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    cmd = [sys.executable, "-m", "metadisco.cli", "train", *OVERRIDES, "--no-progress"]

    port = _free_port()
    procs = [
        subprocess.Popen([*cmd, "--run-dir", str(tmp_path / "multi"), "--host-devices", "1",
                          "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=300))
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert "population split over 2 cpu device(s) in 2 process(es)" in outs[0][0]
    np.testing.assert_allclose(
        [list(r.values()) for r in _metrics(tmp_path / "multi")],
        [list(r.values()) for r in _metrics(tmp_path / "single")], rtol=1e-5,
    )

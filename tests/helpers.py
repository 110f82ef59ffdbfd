"""Running the `metadisco` command as a user does, for the tests that need a real process."""

import subprocess
import sys
import time
from pathlib import Path

# The engine's defaults, RunConfig(), as a named experiment: overrides without an experiment apply
# to the demo (`metadisco train eval_every=0` is the demo), so a test that means LPO on CartPole names it.
LPO = ["lpo_cartpole_cpu", "fitness=final_eval"]
TINY = ["inner.total_timesteps=2048", "inner.num_envs=4", "inner.num_steps=64", "inner.hidden=16,16",
        "es.population_size=4", "eval_every=0"]  # CPU-sized: seconds per run


def metadisco(*args, timeout=300) -> subprocess.CompletedProcess:
    """`metadisco ARGS...` to completion, output captured as text."""
    return subprocess.run([sys.executable, "-m", "metadisco.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def metadisco_in_process(argv, capsys) -> tuple[int, str, str]:
    """`metadisco ARGV` in this process (its imports and jit caches shared; `main` is what the console
    command runs) -> (exit code, stdout, stderr); 0 where main returns. Use `metadisco` where the
    process itself is tested: signals, checks that must finish before jax is imported."""
    from metadisco.cli import main

    try:
        main(list(argv))
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def start_metadisco(*args) -> subprocess.Popen:
    """`metadisco ARGS...` started in the background (stdout and stderr piped, as text)."""
    return subprocess.Popen([sys.executable, "-m", "metadisco.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_rows(run_dir, rows: int, proc: subprocess.Popen | None = None, timeout: float = 240) -> None:
    """Block until RUN_DIR/metrics.jsonl has `rows` lines (fails if `proc` exits first, or on timeout)."""
    metrics = Path(run_dir) / "metrics.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= rows:
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"metadisco exited ({proc.returncode}) before {rows} rows: {proc.stderr.read()[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no {rows} rows in {metrics} after {timeout} s")

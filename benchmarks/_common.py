"""Helpers shared by the benchmark scripts: child processes with their own XLA host-device count,
JSON-line results, the machine description and peak memory.

Every measurement runs in a fresh child process because XLA reads
`--xla_force_host_platform_device_count` only when jax starts, and so that the peak resident
memory (`ru_maxrss`) belongs to that measurement alone. This module does not import jax. The
scripts import metadisco as installed (`make setup`; on a GPU image, benchmarks/gpu_env.sh).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEVICE_FLAG = "--xla_force_host_platform_device_count"


def run_child(script: str, args: list[str], devices: int, timeout: float | None = None) -> list[dict]:
    """Run `python script args` with `devices` host devices; return the JSON lines it printed.

    A child that fails gives one record {"error": ...} holding the tail of its stderr, so that one
    bad measurement does not lose the others.
    """
    cmd = [sys.executable, script, *args]
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_FLAG)]
    env = {"PYTHONUNBUFFERED": "1"} | dict(os.environ) | {"XLA_FLAGS": " ".join([*flags, f"{DEVICE_FLAG}={devices}"])}
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return [{"error": f"timed out after {timeout} s: {' '.join(cmd)}"}]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        records.append({"error": f"exit {proc.returncode}: {' '.join(cmd)}\n{tail}"})
    return records


def emit(record: dict) -> None:
    """A child's result: one JSON line on stdout."""
    print(json.dumps(record), flush=True)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _proc(path: str, key: str) -> str:
    """The value after `key:` in a Linux /proc file ("" where there is none)."""
    try:
        return next((line.split(":", 1)[1].strip() for line in Path(path).read_text().splitlines()
                     if line.startswith(key)), "")
    except OSError:
        return ""


def total_memory_mb() -> float:
    """The machine's RAM, MB (0 where /proc/meminfo cannot be read)."""
    return int((_proc("/proc/meminfo", "MemTotal:").split() or ["0"])[0]) / 1024


def usable_cpus() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def median(xs) -> float:
    return float(statistics.median(xs))


def machine_info() -> dict:
    """What the numbers were measured on (imports jax in this process: call it in the parent)."""
    import jax
    import jaxlib

    return {
        "processor": platform.processor() or platform.machine(),
        "cpu_model": _proc("/proc/cpuinfo", "model name"),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable_cpus(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "jax_devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,
        "platform": platform.platform(),
        "commit": commit(),
    }


def commit() -> str | None:
    """The checkout's commit (short), "+changes" after it where tracked files differ from it; None
    outside a git checkout: the code the numbers were measured at."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=here)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=here)
    except OSError:
        return None
    if head.returncode:
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def machine_markdown(info: dict) -> str:
    lines = [
        f"- CPU: {info['cpu_model'] or info['processor']} ({info['processor']}), os.cpu_count() = "
        f"{info['cpu_count']}, usable by this process: {info['cpus_usable']}",
        f"- load average when the benchmark started: {', '.join(map(str, info['load_average_at_start']))} "
        "(anything near the core count means the numbers are not from an idle machine)",
        f"- Python {info['python']}, jax {info['jax']}, jaxlib {info['jaxlib']}; "
        f"jax.devices() in the parent: {', '.join(info['jax_devices'])} "
        f"({info.get('device_kind', '?')}; children set {DEVICE_FLAG} per measurement)",
        f"- {info['platform']}",
    ]
    if info.get("commit"):  # records from before it was kept have none
        lines.append(f"- measured at commit {info['commit']}")
    return "\n".join(lines)


def write_json(path: str, payload: dict) -> None:
    Path(path).write_text(json.dumps(payload, indent=2) + "\n")

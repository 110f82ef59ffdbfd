"""Cold vs warm start of `metadisco` commands: seconds spent compiling XLA programs.

Each command runs twice in fresh processes sharing one new compilation cache (the first fills it,
the second reads it), then once more with the cache off as a check. Compile seconds are the sum of
jax's backend-compile events in the process, which also time a program loaded from the cache;
the loads are counted apart (jax's cache-hit and retrieval-time events), so a warm run's
compilation proper is the compile seconds less the load seconds. Wall seconds are the whole command.

    python benchmarks/warm_start.py                  # the default demo (1 generation) and evaluate --quick
    python benchmarks/warm_start.py --quick          # tiny commands, to check the script runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

CHILD = """
import json, os, sys, time
from metadisco import compile_cache
compile_cache.configure()  # as the CLI does, before jax starts: jax reads these at import
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count()}")
import jax
compile_s, load_s = [], []
def on_duration(name, secs, **kw):
    if name == "/jax/core/compile/backend_compile_duration":
        compile_s.append(secs)
    elif name == "/jax/compilation_cache/cache_retrieval_time_sec":
        load_s.append(secs)
jax.monitoring.register_event_duration_secs_listener(on_duration)
from metadisco.cli import main
t = time.perf_counter()
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
print("RESULT " + json.dumps({"compile_s": sum(compile_s), "programs": len(compile_s), "loaded": len(load_s),
                              "load_s": sum(load_s), "wall_s": time.perf_counter() - t}))
"""

COMMANDS = {
    "train (demo, 1 generation)": ["train", "--stop-after", "1", "--no-progress", "--run-dir", "{tmp}/run-{i}"],
    "evaluate --quick": ["evaluate", "ppo", "--quick", "--no-progress", "--out", "{tmp}/eval-{i}"],
}
QUICK = {
    "train (tiny, 1 generation)": ["train", "generations=1", "inner.total_timesteps=2048", "es.population_size=4",
                                   "eval_every=0", "--no-progress", "--run-dir", "{tmp}/run-{i}"],
    "evaluate (tiny)": ["evaluate", "ppo", "--envs", "CartPole-v1", "--timesteps", "2048", "--seeds", "2",
                        "--no-progress", "--out", "{tmp}/eval-{i}"],
}


def measure(args: list[str], cache: str, tmp: str, i: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["METADISCO_CACHE_DIR"] = cache
    argv = [a.format(tmp=tmp, i=i) for a in args]
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, env=env, check=True)
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", help="write the markdown table here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, command in (QUICK if args.quick else COMMANDS).items():
            cache = os.path.join(tmp, f"cache-{len(rows)}")
            cold = measure(command, cache, tmp, 3 * len(rows))
            warm = measure(command, cache, tmp, 3 * len(rows) + 1)
            off = measure(command, "off", tmp, 3 * len(rows) + 2)
            rows.append((name, cold, warm, off))
            print(name, json.dumps({"cold": cold, "warm": warm, "off": off}), file=sys.stderr)
    command = "python benchmarks/warm_start.py" + (" --quick" if args.quick else "")
    lines = [_common.machine_markdown(_common.machine_info()), "",
             f"Measured {time.strftime('%Y-%m-%d')} with `{command}`.", "",
             "| command | compile s, cold | warm: compile + load s | warm: loaded from the cache | "
             "warm: compiled | wall s, cold | wall s, warm | compile s, cache off |",
             "|---|---|---|---|---|---|---|---|"]
    for name, cold, warm, off in rows:
        compiled_s = warm["compile_s"] - warm.get("load_s", 0.0)
        lines.append(f"| {name} | {cold['compile_s']:.1f} ({cold['programs']} programs) | {warm['compile_s']:.1f} | "
                     f"{warm.get('loaded', 0)} programs, {warm.get('load_s', 0.0):.1f} s | "
                     f"{warm['programs'] - warm.get('loaded', 0)} programs, {compiled_s:.1f} s | "
                     f"{cold['wall_s']:.1f} | {warm['wall_s']:.1f} | {off['compile_s']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()

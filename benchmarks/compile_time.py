"""Time to a result when compilation dominates: two checkouts of metadisco side by side, alternating.

    python benchmarks/compile_time.py evaluate --before /tmp/old --after . --reps 3 --out FILE.json
    python benchmarks/compile_time.py demo --before /tmp/old --after . --reps 3

evaluate: `metadisco evaluate RUN RUN:init --envs CartPole-v1,Acrobot-v1 --seeds 2 --timesteps 8192
  --host-devices 1` on a one-generation run of the built-in defaults (`metadisco train
  generations=1 es.population_size=4 seeds_per_member=1 inner.total_timesteps=4096 eval_every=0`,
  made once with the --after checkout), whole command wall time.
demo: `metadisco train rediscover_value_loss` (the demo) until its first generation's line is
  printed, then stopped: the time a new user waits for the first sign of life.
Both with METADISCO_CACHE_DIR=off (every program compiled) and JAX_LOG_COMPILES=1, whose log lines
count the programs each command compiled. Each checkout runs its own code (`python -m
metadisco.cli` from its root, its package laid out as installed by scripts/link-layout and first on
PYTHONPATH) in the same virtual environment; the two alternate within each repetition so that slow
drift on the machine hits both alike.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_info, median, write_json

EVALUATE = ["--envs", "CartPole-v1,Acrobot-v1", "--seeds", "2", "--timesteps", "8192", "--host-devices", "1"]
RUN = ["generations=1", "es.population_size=4", "seeds_per_member=1", "inner.total_timesteps=4096", "eval_every=0"]
COMPILED = re.compile(r"Compiling (\S+)")


LAYOUTS = Path(tempfile.mkdtemp(prefix="metadisco-layouts-"))
LINK_LAYOUT = Path(__file__).resolve().parent.parent / "scripts" / "link-layout"


def _env(tree: Path) -> dict:
    """The environment that runs `tree`'s own metadisco: its installed layout first on the path,
    and neither the working directory's metadisco/ folder nor the environment's install before it."""
    layout = LAYOUTS / tree.as_posix().strip("/").replace("/", "_")
    if not (layout / "metadisco").is_dir():
        subprocess.run([sys.executable, str(LINK_LAYOUT), str(layout), str(tree)], check=True, capture_output=True)
    return os.environ | {"METADISCO_CACHE_DIR": "off", "JAX_LOG_COMPILES": "1", "PYTHONUNBUFFERED": "1",
                         "PYTHONPATH": str(layout), "PYTHONSAFEPATH": "1"}


def _metadisco(*args: str) -> list[str]:
    return [sys.executable, "-m", "metadisco.cli", *args]


def timed_evaluate(tree: Path, run_dir: Path, counts: dict) -> float:
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        proc = subprocess.run(_metadisco("evaluate", str(run_dir), f"{run_dir}:init", *EVALUATE, "--out",
                                         f"{out}/e", "--no-progress"), cwd=tree, env=_env(tree), capture_output=True,
                              text=True)
        seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: evaluate failed:\n{proc.stderr[-3000:]}")
    counts.setdefault(str(tree), []).append(len(COMPILED.findall(proc.stderr)))
    return seconds


def timed_demo(tree: Path, counts: dict) -> float:
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        proc = subprocess.Popen(_metadisco("train", "rediscover_value_loss", "--run-dir", f"{out}/r",
                                           "--no-progress"), cwd=tree, env=_env(tree), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        for line in proc.stdout:
            if line.startswith("gen 1/"):
                seconds = time.perf_counter() - t
                break
        else:
            raise SystemExit(f"{tree}: the demo ended before its first generation:\n{proc.stderr.read()[-3000:]}")
        proc.terminate()
        _, err = proc.communicate()
    counts.setdefault(str(tree), []).append(len(COMPILED.findall(err)))
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("evaluate", "demo"))
    p.add_argument("--before", type=Path, required=True, help="the checkout to compare against (e.g. a worktree of bdb3201)")
    p.add_argument("--after", type=Path, default=Path("."))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", help="write the records here as JSON")
    args = p.parse_args()
    before, after = args.before.resolve(), args.after.resolve()
    counts: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.what == "evaluate":
            run_dir = Path(tmp) / "run"
            made = subprocess.run(_metadisco("train", *RUN, "--run-dir", str(run_dir), "--no-progress"),
                                  cwd=after, env=_env(after), capture_output=True, text=True)
            if made.returncode != 0:
                raise SystemExit(f"the one-generation run failed:\n{made.stderr[-3000:]}")
            calls = {"before": lambda: timed_evaluate(before, run_dir, counts),
                     "after": lambda: timed_evaluate(after, run_dir, counts)}
        else:
            calls = {"before": lambda: timed_demo(before, counts), "after": lambda: timed_demo(after, counts)}
        info = machine_info()
        times = {label: [] for label in calls}
        for _ in range(args.reps):  # alternating within each repetition, so that slow drift hits both alike
            for label, call in calls.items():
                times[label].append(call())
    # how many times faster `after` ran: fastest call against fastest call, and the median paired ratio
    fastest = min(times["before"]) / min(times["after"])
    paired = median([b / a for b, a in zip(times["before"], times["after"])])
    rows = {label: {"tree": str(tree), "seconds": times[label], "median_s": median(times[label]),
                    "programs_compiled": counts[str(tree)]}
            for label, tree in (("before", before), ("after", after))}
    print(f"{args.what}: before {rows['before']['median_s']:.1f} s [{min(times['before']):.1f}-"
          f"{max(times['before']):.1f}], {rows['before']['programs_compiled']} programs; after "
          f"{rows['after']['median_s']:.1f} s [{min(times['after']):.1f}-{max(times['after']):.1f}], "
          f"{rows['after']['programs_compiled']} programs; faster {fastest:.2f}x (fastest), {paired:.2f}x "
          f"(median of paired ratios); load average at start {info['load_average_at_start']}")
    if args.out:
        write_json(args.out, {"machine": info, "what": args.what, "reps": args.reps, "rows": rows,
                              "speedup_fastest": fastest, "speedup_paired_median": paired})


if __name__ == "__main__":
    main()

"""XLA's flags against a meta-training run's compile time, its run time and its numbers.

    python benchmarks/xla_compile_flags.py --reps 2 --out docs/benchmark_results/xla_compile_flags.json
    JAX_DISABLE_MOST_OPTIMIZATIONS=1 python benchmarks/xla_compile_flags.py ...   # the test suite's build
    # the GPU-only levers of issue 38, on a GPU (jax config switches go in as NAME=VALUE):
    python benchmarks/xla_compile_flags.py --experiment drift_mix_minatar_gpu --generations 3 --reps 2 \
        --flags= --flags=--xla_gpu_autotune_level=0 --flags=JAX_THREEFRY_GPU_KERNEL_LOWERING=1

Each flag set runs `metadisco train EXPERIMENT [--set overrides]` (the demo by default) in a fresh
process (XLA reads its flags at start-up) with METADISCO_CACHE_DIR=off, until its `--generations`-th
generation's line, then stops it. A flag set is space-separated: `--xla_...` words go to
XLA_FLAGS, `NAME=VALUE` words into the process's environment. Per run: the seconds to the first
generation's line (start-up, tracing and compiling, one generation), the seconds a later
generation takes (the mean gap between later lines: compute, with nothing left to compile), the
programs compiled (JAX_LOG_COMPILES lines), and whether the generations' metrics (metrics.jsonl,
every number but the clock's) are bit for bit those of the run without flags. The flag sets
alternate within each repetition, so slow drift on the machine hits them alike. Only the children
compile anything.
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
from _common import REPO, machine_info, median, write_json  # noqa: E402
from compile_time import COMPILED  # noqa: E402  (the JAX_LOG_COMPILES line of one compiled program)

FLAG_SETS = (
    "",
    "--xla_backend_optimization_level=1",
    "--xla_backend_optimization_level=2",
    "--xla_cpu_parallel_codegen_split_count=2",
    "--xla_cpu_use_thunk_runtime=false",
    "--xla_llvm_disable_expensive_passes=true",
)  # jax 0.11.2's XLA knows no --xla_cpu_use_fusion_emitters nor --xla_cpu_disable_loop_unrolling
GENERATIONS = 4  # --generations
EXPERIMENT = "rediscover_value_loss"  # the demo


def flag_environment(flags: str) -> dict[str, str]:
    """A flag set -> the environment it adds: `--xla_...` words as XLA_FLAGS, NAME=VALUE as is."""
    words = flags.split()
    env = {"XLA_FLAGS": " ".join(w for w in words if w.startswith("--"))}
    for word in words:
        if not word.startswith("--"):
            name, sep, value = word.partition("=")
            if not sep or not name:
                raise SystemExit(f"flag set {flags!r}: {word!r} is neither --xla_FLAG[=V] nor NAME=VALUE")
            env[name] = value
    return env


def timed_run(flags: str, generations: int = GENERATIONS, experiment: str = EXPERIMENT,
              overrides: tuple[str, ...] = ()) -> dict:
    """One run of `experiment` to its `generations`-th generation under the flag set `flags`."""
    env = os.environ | {"METADISCO_CACHE_DIR": "off", "JAX_LOG_COMPILES": "1", "PYTHONUNBUFFERED": "1",
                        **flag_environment(flags)}
    with tempfile.TemporaryDirectory() as out:
        run_dir = Path(out) / "r"
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "metadisco.cli", "train", experiment, *overrides,
                                 "--run-dir", str(run_dir), "--no-progress"], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = {}
        for line in proc.stdout:
            for gen in range(1, generations + 1):
                if line.startswith(f"gen {gen}/"):
                    lines[gen] = time.perf_counter() - t
            if generations in lines:
                break
        proc.terminate()
        _, err = proc.communicate()
        if generations not in lines:
            return {"flags": flags, "error": err[-3000:]}
        metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    numbers = [{k: v for k, v in row.items() if "time" not in k and not k.endswith("_per_s")}  # not the clock's
               for row in metrics[:generations]]
    return {"flags": flags, "first_generation_s": round(lines[1], 2),
            "later_generation_s": round((lines[generations] - lines[1]) / (generations - 1), 3),
            "programs_compiled": len(COMPILED.findall(err)), "metrics": numbers}


def largest_relative_difference(metrics: list[dict], reference: list[dict]) -> float:
    """The largest |a - b| / |b| over the numbers two runs' metrics share (0 when bit for bit)."""
    worst = 0.0
    for row, ref in zip(metrics, reference):
        for key, b in ref.items():
            a = row.get(key)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a != b:
                worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
    return worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--flags", action="append", help="one flag set, repeatable: --flags= (none) "
                   "--flags=--xla_backend_optimization_level=1 (default: FLAG_SETS)")
    p.add_argument("--generations", type=int, default=GENERATIONS, help="how far each run goes (at least 2)")
    p.add_argument("--experiment", default=EXPERIMENT, help="the named experiment to train (default: the demo)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="an override, repeatable")
    p.add_argument("--out", help="write the records here as JSON")
    args = p.parse_args()
    args.flags = args.flags or list(FLAG_SETS)
    if args.generations < 2:
        p.error("--generations must be at least 2 (a later generation is timed)")
    for flags in args.flags:
        flag_environment(flags)  # a malformed set fails before any run
    info = machine_info()
    records = []
    for rep in range(args.reps):
        for flags in args.flags:
            record = timed_run(flags, args.generations, args.experiment, tuple(args.set)) | {"rep": rep}
            records.append(record)
            print(json.dumps({k: v for k, v in record.items() if k != "metrics"}), flush=True)
    reference = next((r["metrics"] for r in records if r["flags"] == "" and "metrics" in r), None)
    rows = {}
    for flags in args.flags:
        mine = [r for r in records if r["flags"] == flags and "metrics" in r]
        if not mine:
            continue
        rows[flags or "(none)"] = {
            "first_generation_s": [r["first_generation_s"] for r in mine],
            "later_generation_s": [r["later_generation_s"] for r in mine],
            "programs_compiled": [r["programs_compiled"] for r in mine],
            "bit_for_bit": None if reference is None else all(r["metrics"] == reference for r in mine),
            "largest_relative_difference": None if reference is None else max(
                largest_relative_difference(r["metrics"], reference) for r in mine),
        }
    for name, row in rows.items():
        moved = row["largest_relative_difference"]  # None without the no-flags run to compare against
        print(f"{name:48s} first generation {median(row['first_generation_s']):6.1f} s "
              f"[{min(row['first_generation_s']):.1f}-{max(row['first_generation_s']):.1f}]  later "
              f"{median(row['later_generation_s']):5.2f} s  programs {row['programs_compiled']}  "
              f"bit for bit: {row['bit_for_bit']} (largest relative difference "
              f"{'n/a: no run without flags' if moved is None else format(moved, '.2g')})")
    if args.out:
        write_json(args.out, {"machine": info, "reps": args.reps, "rows": rows,
                              "generations": args.generations, "experiment": args.experiment, "overrides": args.set,
                              "JAX_DISABLE_MOST_OPTIMIZATIONS": os.environ.get("JAX_DISABLE_MOST_OPTIMIZATIONS", "0"),
                              "errors": [r for r in records if "error" in r]})
    if any("error" in r for r in records):
        raise SystemExit("some runs failed: their stderr is in the records above")


if __name__ == "__main__":
    main()

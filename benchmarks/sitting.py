"""A fresh sitting's first minutes: what compiles before the search runs, two checkouts side by side.

    python benchmarks/sitting.py --before /tmp/old --after . --reps 3 --out FILE.json [FIELD=VALUE ...]
    python benchmarks/sitting.py --after . --reps 1 --experiment discobench_loss_gpu --cache C   # on a GPU, twice:
                                                                                   # cold, then resumed (C filled)

In one process per checkout and repetition, alternating, with the persistent compile cache off (every
program compiled; --cache: that cache instead), the demo's run config (`metadisco train`'s; or
--experiment's), FIELD=VALUE overrides on top, is built and then, as `metadisco train` calls them,
timed one by one (each to its result on the host):

    baseline      PPO on every problem (the normaliser; only for a `*_norm` fitness)
    generation 1  the first generation (compiles what a generation runs)
    generation 2  a later one (steady state)
    comparison 1  the first comparison on fresh seeds (eval_every's)
    comparison 2  a later one
    generation 3  steady state again, after the comparisons
    steady generation  the median of --steady more generations (5)

with the number of XLA programs each compiled (jax's compile log). The question it answers: does a
comparison or the baseline compile a training program of its own, or does a run compile one?
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import machine_info, median, write_json

LINK_LAYOUT = Path(__file__).resolve().parent.parent / "scripts" / "link-layout"
LAYOUTS = Path(tempfile.mkdtemp(prefix="metadisco-layouts-"))
STEADY = 5
STEPS = ("baseline", "generation 1", "generation 2", "comparison 1", "comparison 2", "generation 3", "steady generation")

CHILD_CACHE = "from metadisco import compile_cache; compile_cache.configure()\n"
# Run in the checkout's own process: its metadisco, the same calls in every version since the
# engine's public calls (baseline, generation, check) were fixed.
CHILD = r"""
import json, logging, os, sys, time
import jax
compiles = []
class Count(logging.Handler):
    def emit(self, record):
        if "Finished XLA compilation" in record.getMessage() or "Compiling" in record.getMessage():
            compiles.append(record.getMessage())
logging.getLogger("jax").addHandler(Count()); logging.getLogger("jax").setLevel(logging.DEBUG)
jax.config.update("jax_log_compiles", True)
from metadisco.config import demo, resolve, run_plan
from metadisco.engine import MetaTrainer
fetch = getattr(__import__("metadisco.engine", fromlist=["x"]), "fetch", None)
if fetch is None:
    from metadisco.scoring import fetch
experiment, overrides = sys.argv[1], sys.argv[2:]
cfg = resolve(experiment, overrides) if experiment else demo(overrides)
trainer = MetaTrainer(run_plan(cfg))
out = {}
def timed(name, f):
    n, t = len(compiles), time.perf_counter()
    value = f()
    out[name] = {"s": time.perf_counter() - t, "compiled": sum("Finished" in c for c in compiles[n:])}
    return value
baseline = timed("baseline", trainer.baseline)
state, baseline = trainer.replicate(fetch(trainer.init())), trainer.replicate(fetch(baseline))
def generation(g):
    global state
    state, metrics = trainer.generation(state, baseline, g)
    return fetch(metrics)
timed("generation 1", lambda: generation(0))
timed("generation 2", lambda: generation(1))
timed("comparison 1", lambda: trainer.check(state, baseline, 2))
timed("comparison 2", lambda: trainer.check(state, baseline, 3))
timed("generation 3", lambda: generation(2))
steady = []
for g in range(3, 3 + int(os.environ.get("SITTING_STEADY", "5"))):
    timed("g", lambda: generation(g)); steady.append(out.pop("g")["s"])
out["steady generation"] = {"s": sorted(steady)[len(steady) // 2], "compiled": 0, "all": steady}
print("RESULT " + json.dumps(out))
"""


def _env(tree: Path, cache: Path | None) -> dict:
    layout = LAYOUTS / tree.as_posix().strip("/").replace("/", "_")
    if not (layout / "metadisco").is_dir():
        subprocess.run([sys.executable, str(LINK_LAYOUT), str(layout), str(tree)], check=True, capture_output=True)
    caching = {"METADISCO_CACHE_DIR": str(cache)} if cache else {"METADISCO_CACHE_DIR": "off",
                                                                 "JAX_ENABLE_COMPILATION_CACHE": "0"}
    return os.environ | caching | {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(layout), "PYTHONSAFEPATH": "1",
                                   "SITTING_STEADY": str(STEADY)}


def sitting(tree: Path, experiment: str, overrides: list[str], cache: Path | None = None) -> dict:
    child = (CHILD_CACHE if cache else "") + CHILD
    proc = subprocess.run([sys.executable, "-c", child, experiment, *overrides], cwd=tree, env=_env(tree, cache),
                          capture_output=True, text=True, timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"{tree}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="an older checkout to time beside --after (none: --after alone)")
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--experiment", default="", help="a named experiment instead of the demo")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cache", type=Path, help="a persistent compile cache to use (run twice: cold, then resumed)")
    parser.add_argument("--steady", type=int, default=5, help="generations timed at the end (their median: steady state)")
    parser.add_argument("overrides", nargs="*", default=["eval_every=2"])
    args = parser.parse_args()
    global STEADY
    STEADY = args.steady
    sides = ("before", "after") if args.before else ("after",)
    records = {side: [] for side in sides}
    for rep in range(args.reps):
        for side in sides if rep % 2 == 0 else sides[::-1]:
            records[side].append(sitting(getattr(args, side).resolve(), args.experiment, args.overrides, args.cache))
            print(side, json.dumps(records[side][-1]), flush=True)
    print("\n| step | " + " | ".join(f"{side}: median [min-max] s (programs)" for side in sides) + " |")
    print("|---|" + "---|" * len(sides))
    for step in STEPS:
        cells = []
        for side in sides:
            s = [r[step]["s"] for r in records[side]]
            n = sorted({r[step]["compiled"] for r in records[side]})
            cells.append(f"{median(s):.1f} [{min(s):.1f}-{max(s):.1f}] ({'/'.join(map(str, n))})")
        print(f"| {step} | " + " | ".join(cells) + " |")
    if args.out:
        write_json(args.out, {"machine": machine_info(), "overrides": args.overrides, "records": records})


if __name__ == "__main__":
    main()

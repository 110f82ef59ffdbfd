"""An evaluation's training programs on the CPU: seeds split over every host device, or on one.

    python benchmarks/evaluation_layout.py --reps 3 --out docs/benchmark_results/evaluation_layout.json

Each measurement is a fresh child process with 2 host devices (the CLI's layout on 2 cores) that
compiles one program of `metadisco evaluate` (PPO's preset on --env at --timesteps, --seeds seeds;
with --tune-lr's grid of 5 learning rates, and without: the scored runs), then times one execution
of it and reports the process's peak resident memory. The layouts alternate within each repetition,
so that drift on the machine hits both alike. "split" is the mesh over both host devices (what
`evaluate` did before it trained on one CPU device), "one" is `mesh`'s CPU default.
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import emit, machine_info, median, peak_rss_mb, run_child, write_json

LAYOUTS = ("split", "one")
GRID = 5  # --tune-lr's rates (metadisco.analysis.evaluation.protocol.LR_FACTORS)


def child(layout: str, env_name: str, timesteps: int, seeds: int, grid: int) -> None:
    import jax
    import numpy as np

    from metadisco.analysis.evaluation.programs import Programs, hparams
    from metadisco.analysis.targets import builtin, full_params
    from metadisco.inner_loops import preset_for

    config = preset_for(env_name).replace(total_timesteps=timesteps)
    objectives = builtin("ppo")
    params = full_params(objectives)
    hp = hparams(config)
    if grid:
        hp = jax.tree.map(lambda x: np.full((grid,), x, np.float32), hp)
    programs = Programs(devices=jax.local_devices() if layout == "split" else None)
    keys = jax.random.split(jax.random.key(0), seeds)
    program = programs.get(programs.env(env_name), config, objectives, seeds, grid=grid)
    networks = program.init(keys)
    compiled = program.train.lower(keys, params, hp, networks).compile()
    start = time.perf_counter()
    jax.block_until_ready(compiled(keys, params, hp, networks))
    emit({"layout": layout, "grid": grid, "run_s": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb(),
          "devices": len(jax.local_devices())})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--timesteps", type=int, default=131072)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--child", nargs=2, metavar=("LAYOUT", "GRID"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.env, args.timesteps, args.seeds, int(args.child[1]))
        return
    info = machine_info()
    common = ["--env", args.env, "--timesteps", str(args.timesteps), "--seeds", str(args.seeds)]
    records = []
    for rep in range(args.reps):
        for grid in (GRID, 0):
            for layout in LAYOUTS if rep % 2 == 0 else LAYOUTS[::-1]:
                for r in run_child(__file__, [*common, "--child", layout, str(grid)], devices=2):
                    records.append(r | {"rep": rep})
                    print(r, file=sys.stderr, flush=True)
    summary = {}
    for grid in (GRID, 0):
        for layout in LAYOUTS:
            rows = [r for r in records if r.get("layout") == layout and r.get("grid") == grid]
            if rows:
                times, mem = [r["run_s"] for r in rows], [r["peak_rss_mb"] for r in rows]
                summary[f"{layout}, grid {grid}"] = {
                    "run_s": [median(times), min(times), max(times)],
                    "peak_rss_mb": [median(mem), min(mem), max(mem)]}
    for name, row in summary.items():
        print(f"{name}: run {row['run_s'][0]:.1f} s [{row['run_s'][1]:.1f}-{row['run_s'][2]:.1f}], "
              f"peak {row['peak_rss_mb'][0] / 1024:.2f} GB [{row['peak_rss_mb'][1] / 1024:.2f}-"
              f"{row['peak_rss_mb'][2] / 1024:.2f}]")
    if args.out:
        write_json(args.out, {"machine": info, "settings": vars(args) | {"grid": GRID}, "records": records,
                              "summary": summary})


if __name__ == "__main__":
    main()

"""What the final-policy evaluation costs: PPO with and without it, compile excluded.

    python benchmarks/eval_overhead.py [--reps 3] [--out FILE.json]

Each workload runs the environment's preset twice, with `eval_episodes` = 16 (the default: 16
sampled and 16 greedy episodes of the initial and of the final policy) and with 0 (no
evaluation); calls alternate; the fastest and the median of `--reps` timed calls are reported
(on a shared machine the fastest is the one least disturbed by other processes). Breakout-MinAtar
runs at 1e6 steps (a tenth of its preset) so the measurement fits in minutes on 2 cores; the
evaluation's cost does not grow with the budget, so its share at 1e7 steps is smaller.
"""

from __future__ import annotations

import argparse
import time

import _common

_common.ensure_repo_on_path()

WORKLOADS = {"CartPole-v1": 500_000, "Breakout-MinAtar": 1_000_000}


def timed(fn, *args) -> float:
    import jax

    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every budget (a smoke test: 0.05)")
    parser.add_argument("--envs", default=",".join(WORKLOADS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import jax

    from metadisco.inner_loops import make_env, make_train, preset_for

    rows = []
    for name in args.envs.split(","):
        steps = WORKLOADS[name]
        env = make_env(name)
        preset = preset_for(name).replace(total_timesteps=int(steps * args.scale))
        key = jax.random.key(0)
        programs = {
            n: jax.jit(make_train(env, preset.replace(eval_episodes=n))).lower(key, {}).compile() for n in (16, 0)
        }
        times = {n: [] for n in programs}
        for _ in range(args.reps):
            for n, program in programs.items():
                times[n].append(timed(program, key, {}))
        row = {"env": name, "steps": preset.steps_per_run, "times": times}
        for stat, f in (("min", min), ("median", _common.median)):
            row[f"overhead_pct_{stat}"] = 100 * (f(times[16]) / f(times[0]) - 1)
        rows.append(row)
        _common.emit(row)
    if args.out:
        _common.write_json(args.out, {"machine": _common.machine_info(), "rows": rows})


if __name__ == "__main__":
    main()

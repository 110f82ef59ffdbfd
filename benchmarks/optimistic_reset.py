"""What optimistic resets buy in a PPO run: `reset_ratio` 1 (a reset per environment per step, gymnax's
own auto-reset) against larger ratios, compile excluded.

    python benchmarks/optimistic_reset.py [--envs CartPole-v1,Breakout-MinAtar] [--agents 8,64]
        [--ratios 1,4,16] [--reps 5] [--out FILE.json]

Each cell trains `agents` PPO agents vmapped over keys (the environment's preset, no in-run
evaluation: eval_episodes = 0), one program per ratio compiled ahead of time; calls alternate
between the ratios; the fastest and the median of `--reps` timed calls are reported, and each
ratio's speed relative to ratio 1 (the fastest calls, and the median of the per-repetition ratios).
Also reported: the mean final training return per ratio, which is a check on the learning curve
and not a comparison of results (another ratio changes the start states after a reset).
"""

from __future__ import annotations

import argparse
import time

import _common

_common.ensure_repo_on_path()

WORKLOADS = {"CartPole-v1": 99_840, "Breakout-MinAtar": 32_768, "SpaceInvaders-MinAtar": 32_768,
             "Asterix-MinAtar": 32_768}


def timed(fn, *args) -> float:
    import jax

    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="CartPole-v1,Breakout-MinAtar")
    parser.add_argument("--agents", default="8,64")
    parser.add_argument("--ratios", default="1,4,16")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every budget (a smoke test: 0.05)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import jax

    from inner_loops import make_env, make_train, preset_for

    ratios = [int(r) for r in args.ratios.split(",")]
    if ratios[0] != 1:
        raise SystemExit("--ratios must start with 1 (the baseline)")
    rows = []
    for name in args.envs.split(","):
        env = make_env(name)
        for agents in (int(a) for a in args.agents.split(",")):
            preset = preset_for(name).replace(total_timesteps=int(WORKLOADS[name] * args.scale), eval_episodes=0)
            keys = jax.random.split(jax.random.key(0), agents)
            programs = {}
            for r in ratios:
                train = make_train(env, preset.replace(reset_ratio=r))
                programs[r] = jax.jit(jax.vmap(lambda k, train=train: train(k, {}))).lower(keys).compile()
            times = {r: [] for r in ratios}
            finals = {r: float(programs[r](keys).final_return.mean()) for r in ratios}  # warm-up call
            for _ in range(args.reps):
                for r, program in programs.items():
                    times[r].append(timed(program, keys))
            steps = agents * preset.steps_per_run
            row = {"env": name, "agents": agents, "num_envs": preset.num_envs, "steps_per_agent": preset.steps_per_run,
                   "times": times, "final_return": finals,
                   "steps_per_s_max": {r: steps / min(t) for r, t in times.items()},
                   "speedup_fastest": {r: min(times[1]) / min(times[r]) for r in ratios},
                   "speedup_median_paired": {r: _common.median([a / b for a, b in zip(times[1], times[r])])
                                             for r in ratios}}
            rows.append(row)
            _common.emit(row)
    if args.out:
        _common.write_json(args.out, {"machine": _common.machine_info(), "settings": vars(args), "rows": rows})


if __name__ == "__main__":
    main()

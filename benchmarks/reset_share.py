"""What an auto-reset costs: the share of a vectorised gymnax step spent on the reset it always computes.

gymnax's `Environment.step` runs `step_env` and `reset_env` for every environment and selects the
reset where an episode ended; an optimistic reset (Craftax's `OptimisticResetVecEnvWrapper`)
computes one reset per k environments instead. Before building one (issue 28), this measured the
ceiling of what it can save: per environment and batch size, the time of a jitted, scanned loop of
`steps` vectorised calls of (a) gymnax's auto-resetting `step`, (b) `step_env` alone (no reset),
(c) `reset_env` alone, with random actions. (a) - (b) is what resets cost; an optimistic reset with
ratio k costs about (b) + (c)/k plus a gather. (The optimistic reset was then built, measured in
whole PPO runs at 0.99-1.01x, and removed in issue 39: docs/benchmark_results/speed_changes.md.
This script uses gymnax alone, so it still runs.)

    .venv/bin/python benchmarks/reset_share.py --envs Breakout-MinAtar,CartPole-v1 --batch 64,512

Prints a markdown table (median of `--reps` timed calls after one warm-up call, compile excluded).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import ensure_repo_on_path, machine_info, machine_markdown

ensure_repo_on_path()


def measure(env_name: str, batch: int, steps: int, reps: int) -> dict:
    import gymnax
    import jax
    import jax.numpy as jnp

    env, params = gymnax.make(env_name)
    num_actions = env.action_space(params).n

    def loop(kind):
        def body(carry, key):
            state, = carry
            k_act, k_step = jax.random.split(key)
            action = jax.random.randint(k_act, (batch,), 0, num_actions)
            keys = jax.random.split(k_step, batch)
            if kind == "step (auto-reset)":
                _, state, reward, *_ = jax.vmap(env.step, (0, 0, 0, None))(keys, state, action, params)
            elif kind == "step_env (no reset)":
                _, state, reward, *_ = jax.vmap(env.step_env, (0, 0, 0, None))(keys, state, action, params)
            else:  # reset_env alone
                _, state = jax.vmap(env.reset_env, (0, None))(keys, params)
                reward = jnp.zeros(batch)
            return (state,), reward.sum()

        @jax.jit
        def run(key):
            _, state = jax.vmap(env.reset, (0, None))(jax.random.split(key, batch), params)
            (state,), rewards = jax.lax.scan(body, (state,), jax.random.split(key, steps))
            return rewards.sum()

        return run

    out = {}
    for kind in ("step (auto-reset)", "step_env (no reset)", "reset_env alone"):
        run = loop(kind)
        jax.block_until_ready(run(jax.random.key(0)))  # compile and warm up
        times = []
        for rep in range(reps):
            t = time.perf_counter()
            jax.block_until_ready(run(jax.random.key(rep + 1)))
            times.append(time.perf_counter() - t)
        out[kind] = statistics.median(times) / (steps * batch) * 1e9  # ns per environment step
        out[kind + " spread"] = (min(times) / (steps * batch) * 1e9, max(times) / (steps * batch) * 1e9)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="Breakout-MinAtar,SpaceInvaders-MinAtar,CartPole-v1")
    p.add_argument("--batch", default="64,512", help="environments per vectorised step")
    p.add_argument("--steps", type=int, default=256, help="scanned steps per timed call")
    p.add_argument("--reps", type=int, default=5, help="timed calls (median reported, min-max as spread)")
    args = p.parse_args()
    print(machine_markdown(machine_info()) + "\n")
    print("| environment | batch | auto-reset step, ns/env-step | step_env alone | reset_env alone | reset share of the step |")
    print("|---|---|---|---|---|---|")
    for name in args.envs.split(","):
        for batch in (int(b) for b in args.batch.split(",")):
            r = measure(name, batch, args.steps, args.reps)
            a, b, c = r["step (auto-reset)"], r["step_env (no reset)"], r["reset_env alone"]

            def cell(kind, value):
                low, high = r[kind + " spread"]
                return f"{value:.0f} [{low:.0f}-{high:.0f}]"

            print(f"| {name} | {batch} | {cell('step (auto-reset)', a)} | {cell('step_env (no reset)', b)} | "
                  f"{cell('reset_env alone', c)} | {(a - b) / a:.0%} |", flush=True)


if __name__ == "__main__":
    main()

"""The order of a generation's two batch axes: members outside and seeds inside (the engine's
`MetaTrainer._problem`), against seeds outside and members inside, in whole PPO runs.

    python benchmarks/axis_order.py [--envs CartPole-v1,Breakout-MinAtar] [--population 8] \
        [--seeds 2] [--reps 3] [--scale 1.0] [--out FILE.json]

Each cell trains `population` LPO drifts (each member its own random parameters) x `seeds` PPO
runs, the environment's preset without in-run evaluation (ppo_variants.py's budgets), as one
program per order, compiled ahead of time; the seeds-outside program's results are transposed
back to [population, seeds] (part of what it costs). Calls alternate; reported are the fastest
and the median of `--reps` timed calls, the members-outside order's speed relative to the other
(fastest, and the median of per-repetition ratios), and whether the two orders' final returns
are equal.
"""

from __future__ import annotations

import argparse
import functools

import _common

_common.ensure_repo_on_path()


def main() -> None:
    from ppo_variants import WORKLOADS, timed

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="CartPole-v1,Breakout-MinAtar")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every budget (a smoke test: 0.05)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import jax
    import numpy as np

    from inner_loops import make_env, make_train, preset_for
    from meta_objectives import LPO, Objectives

    rows = []
    for name in args.envs.split(","):
        env = make_env(name)
        config = preset_for(name).replace(total_timesteps=int(WORKLOADS[name] * args.scale), eval_episodes=0)
        objectives = Objectives(drift=LPO()).for_env(env.obs_shape)
        members = jax.random.split(jax.random.key(0), args.population)
        pop = jax.vmap(lambda k: {"drift": objectives.init(k)["drift"]})(members)  # leaves [P, ...]
        seeds = jax.random.split(jax.random.key(1), args.seeds)
        train = make_train(env, config, objectives)

        def members_outside(pop, seeds):
            return jax.vmap(lambda m: jax.vmap(lambda k: train(k, m))(seeds))(pop).final_return  # [P, S]

        def seeds_outside(pop, seeds):
            return jax.vmap(lambda k: jax.vmap(lambda m: train(k, m))(pop))(seeds).final_return.T  # [S, P] -> [P, S]

        programs = {label: jax.jit(f).lower(pop, seeds).compile()
                    for label, f in (("members outside", members_outside), ("seeds outside", seeds_outside))}
        finals = {label: np.asarray(p(pop, seeds)) for label, p in programs.items()}  # warm-up call
        times = _common.alternate({label: functools.partial(timed, p, pop, seeds) for label, p in programs.items()},
                                  args.reps)
        fastest, median_paired = _common.speed_vs(times["seeds outside"], times["members outside"])
        row = {"env": name, "population": args.population, "seeds": args.seeds, "steps_per_run": config.steps_per_run,
               "times": times, "fastest_s": {k: min(v) for k, v in times.items()},
               "members_outside_speedup_fastest": fastest,
               "members_outside_speedup_median_paired": median_paired,
               "final_returns_equal": bool(np.array_equal(finals["members outside"], finals["seeds outside"])),
               "final_returns_max_abs_diff": float(np.max(np.abs(finals["members outside"] - finals["seeds outside"])))}
        rows.append(row)
        _common.emit(row)
    _common.save_rows(args.out, args, rows)


if __name__ == "__main__":
    main()

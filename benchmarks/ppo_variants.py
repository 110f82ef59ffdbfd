"""What a PPO setting buys in whole runs: the preset against variants of it, compile excluded.

    python benchmarks/ppo_variants.py --variants num_minibatches=8 update_epochs=2,num_minibatches=8 \
        [--envs CartPole-v1,Breakout-MinAtar] [--agents 8,64] [--reps 5] [--eval-episodes 0] [--out FILE.json]

Each variant is PPOConfig field overrides of numbers or true / false (`num_minibatches=8`,
`update_epochs=2,num_minibatches=8`, `eval_greedy=false`). Each cell trains `agents` PPO agents
vmapped over keys (the environment's preset; the initial and final policies evaluated over
`--eval-episodes` episodes per mode, none by default), one program per variant compiled ahead of
time, calls alternating between them; the fastest and the median of `--reps` timed calls are
reported, and each variant's speed relative to the preset (the fastest calls, and the median of the
per-repetition ratios). Also reported: the mean final training return and final-policy evaluation
(sampled) per variant, a check on the learning curve and not a comparison of results (a variant may
change what is computed). The levers measured with it are in docs/benchmarks.md ("Greedy
episodes", "XLA CPU flags") and docs/benchmark_results/speed_changes.md (optimistic resets and scan
unrolling, measured with it in issue 28 and removed in issue 39).
"""

from __future__ import annotations

import argparse
import functools
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


def parse_variant(text: str) -> dict:
    """"num_minibatches=8,eval_greedy=false" -> {"num_minibatches": 8, "eval_greedy": False}
    (integers, floats, true / false)."""
    out = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        value = value.strip()
        if value.lower() in ("true", "false"):
            out[name.strip()] = value.lower() == "true"
        else:
            out[name.strip()] = float(value) if "." in value else int(value)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", required=True, help="PPOConfig overrides, one variant each")
    parser.add_argument("--envs", default="CartPole-v1,Breakout-MinAtar")
    parser.add_argument("--agents", default="8,64")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--eval-episodes", type=int, default=0, help="evaluation episodes per mode in every run")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every budget (a smoke test: 0.05)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import jax

    from inner_loops import make_env, make_train, preset_for

    variants = {"preset": {}, **{v: parse_variant(v) for v in args.variants}}
    rows = []
    for name in args.envs.split(","):
        env = make_env(name)
        for agents in (int(a) for a in args.agents.split(",")):
            preset = preset_for(name).replace(total_timesteps=int(WORKLOADS[name] * args.scale),
                                                eval_episodes=args.eval_episodes)
            keys = jax.random.split(jax.random.key(0), agents)
            programs = {}
            for label, changes in variants.items():
                train = make_train(env, preset.replace(**changes))
                programs[label] = jax.jit(jax.vmap(lambda k, train=train: train(k, {}))).lower(keys).compile()
            warm = {label: p(keys) for label, p in programs.items()}  # warm-up call
            finals = {label: float(r.final_return.mean()) for label, r in warm.items()}
            evals = {label: float(r.eval_return.mean()) for label, r in warm.items()}  # NaN without episodes
            times = _common.alternate({label: functools.partial(timed, p, keys) for label, p in programs.items()},
                                      args.reps)
            steps = agents * preset.steps_per_run
            speeds = {label: _common.speed_vs(times["preset"], t) for label, t in times.items()}
            row = {"env": name, "agents": agents, "num_envs": preset.num_envs, "steps_per_agent": preset.steps_per_run,
                   "times": times, "final_return": finals, "eval_return": evals,
                   "steps_per_s_max": {label: steps / min(t) for label, t in times.items()},
                   "speedup_fastest": {label: s[0] for label, s in speeds.items()},
                   "speedup_median_paired": {label: s[1] for label, s in speeds.items()}}
            rows.append(row)
            _common.emit(row)
    _common.save_rows(args.out, args, rows)


if __name__ == "__main__":
    main()

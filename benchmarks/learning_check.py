"""Does each preset learn like PureJaxRL's? metadisco's PPO beside the PureJaxRL-style reference.

    python benchmarks/learning_check.py --out learning_check.md        # the full check
    python benchmarks/learning_check.py --quick                         # a smoke test, ~2 min

For each environment both implementations train with identical settings (the preset, checked
against the reference's PureJaxRL config by `inner_loop.reference_config`), the same budget and
the same seeds (jax.random.key(seed), seed = 0 .. --seeds - 1; each implementation draws its own
keys from it), vmapped over the seeds. Each is then scored by the same final-policy evaluation:
16 episodes with sampled actions and 16 greedy ones (argmax / Gaussian mean) of the final policy,
the observation normaliser frozen, undiscounted return in the environment's own reward
(metadisco: `TrainResult.eval_return*`, inside its run; the reference: `make_evaluate`, a
separate evaluation after training, as PureJaxRL would add one). The table gives the mean over
seeds with its 95% Student-t interval.

Budgets (steps per run): CartPole-v1 5e5 and Breakout-MinAtar 1e7
(their presets' full budgets), brax/hopper 1e6 (2% of the preset's 5e7: a CPU-sized check; brax on
the positional backend, as the preset). Expected duration on 2 idle cores with 5 seeds: about
1 minute for CartPole, 30-40 for MinAtar, 20-30 for hopper (estimates, not measurements).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import _common

BUDGETS = {"CartPole-v1": 500_000, "Breakout-MinAtar": 10_000_000, "brax/hopper": 1_000_000}
QUICK = {"CartPole-v1": 4096, "Breakout-MinAtar": 16_384, "brax/hopper": 40_960}
IMPLS = ("metadisco", "reference")


def run_metadisco(env_name: str, steps: int, seeds: list[int]) -> dict:
    import jax

    from metadisco.inner_loops import make_env, make_train, preset_for

    train = make_train(make_env(env_name), preset_for(env_name).replace(total_timesteps=steps))
    keys = jax.vmap(jax.random.key)(jax.numpy.asarray(seeds))
    result = jax.jit(jax.vmap(lambda k: train(k, {})))(keys)
    return {"sampled": result.eval_return, "greedy": result.eval_return_greedy}


def run_reference(env_name: str, steps: int, seeds: list[int]) -> dict:
    import inner_loop
    import jax
    import reference_ppo

    config = inner_loop.reference_config(env_name, steps)
    train, evaluate = reference_ppo.make_train(config), reference_ppo.make_evaluate(config)

    def one(key):
        out = train(key)
        return evaluate(jax.random.fold_in(key, 1), out["runner_state"])

    sampled, greedy = jax.jit(jax.vmap(one))(jax.vmap(jax.random.key)(jax.numpy.asarray(seeds)))
    return {"sampled": sampled, "greedy": greedy}


def interval(values) -> dict:
    import numpy as np

    from metadisco.measure.stats import t_interval

    mean, low, high = t_interval(np.asarray(values, np.float64))
    return {"mean": float(mean), "low": float(low), "high": float(high), "values": [float(v) for v in values]}


def render(rows: list[dict], seeds: int) -> str:
    def cell(s):
        return f"{s['mean']:.1f} [{s['low']:.1f}, {s['high']:.1f}]"

    lines = [
        f"Final-policy return, mean over {seeds} seeds [95% t-interval]; 16 evaluation episodes per seed and mode.",
        "",
        "| environment | steps per run | metadisco sampled | reference sampled | metadisco greedy | reference greedy |"
        " within interval | time metadisco / reference (s, compile included) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours, ref = r["metadisco"], r["reference"]
        within = ref["sampled"]["low"] <= ours["sampled"]["mean"] <= ref["sampled"]["high"]
        lines.append(
            f"| {r['env']} | {r['steps']:,} | {cell(ours['sampled'])} | {cell(ref['sampled'])} | "
            f"{cell(ours['greedy'])} | {cell(ref['greedy'])} | {'yes' if within else 'no'} | "
            f"{ours['time_s']:.0f} / {ref['time_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default=",".join(BUDGETS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help=f"tiny budgets, 2 seeds: {QUICK}")
    parser.add_argument("--out", help="write the markdown table here (and the records beside it as .json)")
    args = parser.parse_args()

    budgets = QUICK if args.quick else BUDGETS
    seeds = list(range(2 if args.quick else args.seeds))
    runners = {"metadisco": run_metadisco, "reference": run_reference}
    rows = []
    for env_name in args.envs.split(","):
        row = {"env": env_name, "steps": budgets[env_name], "seeds": seeds}
        for impl in IMPLS:
            t = time.perf_counter()
            out = runners[impl](env_name, budgets[env_name], seeds)
            row[impl] = {mode: interval(v) for mode, v in out.items()} | {"time_s": time.perf_counter() - t}
        _common.emit(row)
        rows.append(row)
    table = render(rows, len(seeds))
    print(table)
    if args.out:
        Path(args.out).write_text(table)
        _common.write_json(args.out.rsplit(".", 1)[0] + ".json", {"machine": _common.machine_info(), "rows": rows})


if __name__ == "__main__":
    main()

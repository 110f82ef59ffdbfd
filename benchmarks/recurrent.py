"""Recurrent PPO side by side: metadisco's (inner.network=gru) against the PureJaxRL ppo_rnn.py-style
reference (benchmarks/reference_ppo_rnn.py), for learning and for throughput.

    .venv/bin/python benchmarks/recurrent.py --quick                          # smoke check, ~4 min
    .venv/bin/python benchmarks/recurrent.py --out docs/benchmark_results/recurrent.json \\
        --markdown docs/benchmark_results/recurrent.md                        # the full run (idle machine)
    .venv/bin/python benchmarks/recurrent.py --table docs/benchmark_results/recurrent.json

Both train the same PPO: ppo_rnn.py's settings (4 environments x 128 steps, 4 epochs of 4
minibatches of whole sequences, lr 2.5e-4 annealed, a GRU of 128 units between a Dense(128) + relu
embedding and Dense(128) + relu heads), checked equal at start-up (`configs`), with a workload's
changes (`WORKLOADS`) made on both sides.

Learning: per environment, each implementation trains `--seeds` seeds (vmapped) and is scored by
its final policy over 16 sampled and 16 greedy episodes (metadisco: TrainResult.eval_return*, in
its run; the reference: make_evaluate after training); mean over seeds [95% t-interval], and
whether metadisco's mean lies in the reference's interval.

Throughput: per environment and population (1 and 64 agents, vmapped on one CPU device), each
implementation runs in its own child process (alternating, `--reps` times), compiles ahead of time
and keeps the fastest of `--calls` calls (steps/s = agents * steps per run / time, compile
excluded); metadisco without its in-run evaluation (eval_episodes=0), as the reference has none.
The ratio metadisco/reference is of paired repetitions. metadisco does more work per step: it
values every step's final observation with the carry that saw it (the bootstrap of a truncated
step), where the reference never bootstraps a time limit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import _common
import inner_loop

IMPLS = ("reference", "metadisco")
# environment -> (learning budget, throughput budget per agent, quick budgets, settings changed on both sides)
WORKLOADS = {
    # ppo_rnn.py's own problem and settings (its __main__ runs 5e5 steps)
    "CartPole-v1": {"learn": 500_000, "speed": 65_536, "quick": 4_096, "changes": {}},
    # the memory probe: the context at step 1 recalled at step 6 (tests/test_recurrent.py); 16 x 32
    # steps a rollout and lr 3e-3, as there, so that it is learnt within the budget
    "MemoryChain-bsuite": {"learn": 65_536, "speed": 65_536, "quick": 4_096,
                           "changes": {"num_envs": 16, "num_steps": 32, "lr": 3e-3}},
}
DEFAULTS = {"envs": ",".join(WORKLOADS), "pops": "1,64", "reps": 3, "calls": 2, "seeds": 5}
QUICK = {"envs": "MemoryChain-bsuite", "pops": "2", "reps": 1, "calls": 1, "seeds": 2}  # the path, not numbers
CHILD_TIMEOUT_S = 1800
REFERENCE_KEYS = {**inner_loop.REFERENCE_KEYS, "rnn_size": "GRU_HIDDEN_DIM"}


def configs(env_name: str, timesteps: int):
    """(metadisco PPOConfig, reference config dict) of a workload, after checking that they agree
    in every setting both have."""
    import reference_ppo_rnn

    from metadisco.inner_loops import preset_for
    from metadisco.meta_objectives import Objectives

    changes = WORKLOADS[env_name]["changes"]
    ours = preset_for(env_name).replace(network="gru", rnn_size=128, total_timesteps=timesteps, **changes)
    ref = {**reference_ppo_rnn.CONFIG, "ENV_NAME": env_name, "TOTAL_TIMESTEPS": timesteps,
           **{REFERENCE_KEYS[k]: v for k, v in changes.items()}}
    fields = {k: getattr(ours.hparams if hasattr(ours.hparams, k) else ours, k) for k in REFERENCE_KEYS
              if hasattr(ours, k) or hasattr(ours.hparams, k)}
    fields.pop("activation")  # the recurrent network's relu is fixed on both sides (ppo_rnn.py)
    objectives = Objectives()
    ours_ref = {REFERENCE_KEYS[k]: v for k, v in fields.items()} | {
        "CLIP_EPS": getattr(objectives.drift, "clip_eps", None), "VALUE_CLIP": getattr(objectives.value_loss, "clip_eps", None)}
    theirs = {**ref, "VALUE_CLIP": ref["CLIP_EPS"]}
    differ = {k: (theirs.get(k), v) for k, v in ours_ref.items() if theirs.get(k) != v}
    if differ or ours.normalize_obs or ours.normalize_reward:
        raise SystemExit(f"{env_name}: reference and metadisco settings differ (reference, metadisco): {differ}")
    return ours, ref


# ============================================================================ learning (in this process)

def learn(impl: str, env_name: str, timesteps: int, seeds: list[int]) -> dict:
    import jax

    ours, ref = configs(env_name, timesteps)
    keys = jax.vmap(jax.random.key)(jax.numpy.asarray(seeds))
    if impl == "metadisco":
        from metadisco.inner_loops import make_env, make_train

        train = make_train(make_env(env_name), ours)
        result = jax.jit(jax.vmap(lambda k: train(k, {})))(keys)
        return {"sampled": result.eval_return, "greedy": result.eval_return_greedy}
    import reference_ppo_rnn

    train, evaluate = reference_ppo_rnn.make_train(ref), reference_ppo_rnn.make_evaluate(ref)

    def one(key):
        return evaluate(jax.random.fold_in(key, 1), train(key)["runner_state"])

    sampled, greedy = jax.jit(jax.vmap(one))(keys)
    return {"sampled": sampled, "greedy": greedy}


def interval(values) -> dict:
    import numpy as np

    from metadisco.measure.stats import t_interval

    mean, low, high = t_interval(np.asarray(values, np.float64))
    return {"mean": float(mean), "low": float(low), "high": float(high), "values": [float(v) for v in values]}


# ============================================================================ throughput (a child each)

def measure_one(impl: str, env_name: str, pop: int, timesteps: int, calls: int) -> dict:
    import jax

    jax.config.update("jax_enable_compilation_cache", False)  # time real compilations
    ours, ref = configs(env_name, timesteps)
    if impl == "metadisco":
        from metadisco.inner_loops import make_env, make_train

        train = make_train(make_env(env_name), ours.replace(eval_episodes=0))

        def batched(key_data):
            return jax.vmap(lambda kd: train(jax.random.wrap_key_data(kd), {}))(key_data)
    else:
        import reference_ppo_rnn

        train = reference_ppo_rnn.make_train(ref)

        def batched(key_data):
            return jax.vmap(lambda kd: train(jax.random.wrap_key_data(kd)))(key_data)

    steps_per_run = ours.steps_per_run
    args = inner_loop._keys(0, pop)
    t0 = time.perf_counter()
    compiled = jax.jit(batched).lower(args).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for call in range(calls):
        args = jax.block_until_ready(inner_loop._keys(call, pop))
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(args))
        times.append(time.perf_counter() - t0)
    return {"impl": impl, "env": env_name, "pop": pop, "timesteps": timesteps, "steps_per_run": steps_per_run,
            "compile_s": compile_s, "times_s": times, "time_s": min(times),
            "steps_per_s": pop * steps_per_run / min(times), "peak_rss_mb": _common.peak_rss_mb()}


# ============================================================================ markdown

def render(payload: dict) -> str:
    settings = payload["settings"]
    out = ["# Recurrent PPO: metadisco (inner.network=gru) vs the PureJaxRL ppo_rnn.py-style reference", ""]
    rows = payload.get("learning", [])
    if rows:
        out += [f"## Learning: final-policy return, mean over {settings['seeds']} seeds [95% t-interval]", "",
                "| environment | steps per run | metadisco sampled | reference sampled | metadisco greedy "
                "| reference greedy | metadisco in the reference's interval | time metadisco / reference (s) |",
                "|---|---:|---:|---:|---:|---:|---|---:|"]

        def cell(s):
            return f"{s['mean']:.2f} [{s['low']:.2f}, {s['high']:.2f}]"

        for r in rows:
            ours, ref = r["metadisco"], r["reference"]
            within = ref["sampled"]["low"] <= ours["sampled"]["mean"] <= ref["sampled"]["high"]
            out.append(f"| {r['env']} | {r['steps']:,} | {cell(ours['sampled'])} | {cell(ref['sampled'])} "
                       f"| {cell(ours['greedy'])} | {cell(ref['greedy'])} | {'yes' if within else 'no'} "
                       f"| {ours['time_s']:.0f} / {ref['time_s']:.0f} |")
        out.append("")
    records = payload.get("throughput", [])
    cells = list(dict.fromkeys((r["env"], r["pop"]) for r in records if "steps_per_s" in r))
    if cells:
        out += [f"## Throughput on one CPU device: environment steps per second, median [min-max] of "
                f"{settings['reps']} paired repetitions", "",
                "| environment | agents | steps per agent | reference steps/s | metadisco steps/s | metadisco/reference "
                "| compile s ref | compile s md |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for env, pop in cells:
            mine = [r for r in records if (r.get("env"), r.get("pop")) == (env, pop) and "steps_per_s" in r]
            by = {i: [r for r in mine if r["impl"] == i] for i in IMPLS}
            rate = {(r["impl"], r["rep"]): r["steps_per_s"] for r in mine}
            ratio = inner_loop.spread([rate["metadisco", i] / rate["reference", i] for i in range(settings["reps"])
                                       if ("metadisco", i) in rate and ("reference", i) in rate])

            def s(impl, key):
                return inner_loop.spread([r[key] for r in by[impl]])

            out.append(f"| {env} | {pop} | {mine[0]['steps_per_run']:,} "
                       f"| {inner_loop._cell(s('reference', 'steps_per_s'), inner_loop._rate)} "
                       f"| {inner_loop._cell(s('metadisco', 'steps_per_s'), inner_loop._rate)} "
                       f"| {inner_loop._cell(ratio, '{:.2f}'.format)} "
                       f"| {inner_loop._cell(s('reference', 'compile_s'), '{:.1f}'.format)} "
                       f"| {inner_loop._cell(s('metadisco', 'compile_s'), '{:.1f}'.format)} |")
        out.append("")
    errors = [r for r in records if "error" in r]
    if errors:
        out += ["Failed measurements:", "", *[f"- {r.get('impl')} {r.get('env')} {r.get('pop')}: "
                                              f"{r['error'].splitlines()[0]}" for r in errors], ""]
    out += ["## How it was measured", "", f"Command: `{settings['command']}`.", "",
            _common.machine_markdown(payload["machine"]),
            f"- settings: {json.dumps({k: v for k, v in settings.items() if k != 'command'})}"]
    if "elapsed_s" in payload:
        out.append(f"- wall time of the whole benchmark: {payload['elapsed_s'] / 60:.1f} min")
    return "\n".join(out) + "\n"


# ============================================================================ driver

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", help=f"comma-separated environments of WORKLOADS (default {DEFAULTS['envs']})")
    p.add_argument("--pops", help=f"populations for throughput (default {DEFAULTS['pops']})")
    p.add_argument("--reps", type=int, help=f"paired repetitions per throughput cell (default {DEFAULTS['reps']})")
    p.add_argument("--calls", type=int, help=f"timed calls per process; the fastest counts (default {DEFAULTS['calls']})")
    p.add_argument("--seeds", type=int, help=f"seeds per implementation for learning (default {DEFAULTS['seeds']})")
    p.add_argument("--speed-steps", type=int, help="steps per agent in a throughput measurement, for every "
                   "environment (default: the workload's; fewer keep 64 agents in minutes)")
    p.add_argument("--skip", choices=("learning", "throughput"), help="measure only the other")
    p.add_argument("--quick", action="store_true", help=f"a smoke check with tiny budgets: {QUICK}")
    p.add_argument("--out", help="write the records, settings and machine to this JSON file")
    p.add_argument("--markdown", help="write the markdown rendering to this file")
    p.add_argument("--table", metavar="JSON", help="print the markdown of a saved --out file and exit")
    p.add_argument("--one", nargs=4, metavar=("IMPL", "ENV", "POP", "TIMESTEPS"),
                   help="(internal) one throughput measurement in this process, printed as a JSON line")
    args = p.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    for k, v in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.table:
        print(render(json.loads(Path(args.table).read_text())), end="")
        return
    if args.one:
        impl, env, pop, timesteps = args.one
        _common.emit(measure_one(impl, env, int(pop), int(timesteps), args.calls))
        return

    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    unknown = set(envs) - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"no workload for {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    budget = {env: {k: WORKLOADS[env]["quick"] if args.quick else WORKLOADS[env][k] for k in ("learn", "speed")}
              for env in envs}
    if args.speed_steps:
        for env in envs:
            budget[env]["speed"] = args.speed_steps
    payload = {"machine": _common.machine_info(),
               "settings": {"command": " ".join(["benchmarks/recurrent.py", *argv]), "envs": envs, "pops": args.pops,
                            "reps": args.reps, "calls": args.calls, "seeds": args.seeds, "budgets": budget,
                            "changes": {env: WORKLOADS[env]["changes"] for env in envs}},
               "learning": [], "throughput": []}
    start = time.perf_counter()

    def save():
        if args.out:
            _common.write_json(args.out, payload)

    if args.skip != "learning":
        seeds = list(range(args.seeds))
        for env in envs:
            row = {"env": env, "steps": budget[env]["learn"], "seeds": seeds}
            for impl in IMPLS:
                t = time.perf_counter()
                out = learn(impl, env, budget[env]["learn"], seeds)
                row[impl] = {mode: interval(v) for mode, v in out.items()} | {"time_s": time.perf_counter() - t}
                print(f"learning {impl:9s} {env}: {row[impl]['sampled']['mean']:.2f} "
                      f"({row[impl]['time_s']:.0f} s)", file=sys.stderr, flush=True)
            payload["learning"].append(row)
            save()
    if args.skip != "throughput":
        for env in envs:
            for pop in inner_loop.parse_ints(args.pops):
                for rep in range(args.reps):
                    for impl in IMPLS:  # alternating: reference, metadisco, reference, ...
                        t0 = time.perf_counter()
                        child = ["--one", impl, env, str(pop), str(budget[env]["speed"]), "--calls", str(args.calls)]
                        recs = _common.run_child(__file__, child, 1, timeout=CHILD_TIMEOUT_S) or [{"error": "no output"}]
                        for r in recs:
                            r.update({"impl": impl, "env": env, "pop": pop, "rep": rep, "wall_s": time.perf_counter() - t0})
                        payload["throughput"] += recs
                        r = recs[-1]
                        what = (f"{inner_loop._rate(r['steps_per_s'])} steps/s, compile {r['compile_s']:.1f} s"
                                if "error" not in r else "FAILED\n" + r["error"])
                        print(f"throughput {impl:9s} {env} {pop} agents rep {rep}: {what}", file=sys.stderr, flush=True)
                        save()
    payload["elapsed_s"] = time.perf_counter() - start
    save()
    text = render(payload)
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()

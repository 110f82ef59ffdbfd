"""Like-for-like inner-loop throughput: metadisco's PPO against a PureJaxRL-style reference.

Both implementations train the same PPO (identical settings, checked at start-up by
`reference_config`) on the same devices, in the same run: `reference` is
`benchmarks/reference_ppo.py` (PureJaxRL's `make_train`; for brax its ppo_continuous_action path),
`metadisco` is `metadisco.inner_loops.make_train(env, preset, Objectives())` (PPO) with
eval_episodes=0, as the reference has no in-run final-policy evaluation. A cell is (environment,
population, devices): N agents are `jit(vmap(train))` on one device and
`jit(shard_map(vmap(train)))` over a 1-D mesh of D host devices (N/D agents each, as the engine
splits its population). Each cell runs `--reps` times in alternating child processes (reference,
metadisco, reference, ...), each with its own XLA host-device count, which compiles ahead of time
(compile_s, persistent cache off), keeps the fastest of `--calls` calls with new keys (steps/s =
population * steps_per_run / time) and reports its peak memory (`ru_maxrss`). Per cell: median
and range of each, and of the ratio metadisco/reference of the paired repetitions. A population
whose peak memory, extrapolated from the cell's largest smaller one, exceeds `--mem-limit-gb` is
skipped, with the reason in the output. docs/benchmarks.md says more.

Usage (from the repository root):

    make bench      # the full run: JSON + markdown into docs/benchmark_results/
    .venv/bin/python benchmarks/inner_loop.py --quick                 # smoke check, ~3 min, mostly compiling
    .venv/bin/python benchmarks/inner_loop.py --envs CartPole-v1 --pops 1,64 --devices 1
    .venv/bin/python benchmarks/inner_loop.py --table docs/benchmark_results/inner_loop.json
    .venv/bin/python benchmarks/inner_loop.py --profile prof --envs Breakout-MinAtar --pops 64 --devices 1

`--profile DIR` measures one cell once per implementation and writes, in DIR/<impl>/, a
jax.profiler trace of one call (`trace/`), the optimised HLO (`hlo.txt`), XLA's flop and byte
estimates (`cost_analysis.json`) and benchmarks/profiling.py's summary (`summary.md`), which it
prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import _common

IMPLS = ("reference", "metadisco")
CHILD_TIMEOUT_S = 1800  # a measurement still running after this is abandoned


@dataclass(frozen=True)
class Workload:
    """What one environment's cells run: env steps per agent (full and --quick) and the PPO
    settings changed from the published preset, on both sides (PPOConfig / PPOHyperparams names)."""

    timesteps: int
    quick_timesteps: int
    overrides: tuple[tuple[str, object], ...] = ()


WORKLOADS = {
    "CartPole-v1": Workload(100_000, 2_048),  # classic preset: 4 envs x 128 steps
    "Breakout-MinAtar": Workload(32_768, 8_192),  # minatar preset: 64 envs x 128 steps
    # brax preset (positional backend, obs + reward normalisation) at 64 envs instead of 2048: CPU-sized.
    "brax/hopper": Workload(6_400, 1_280, overrides=(("num_envs", 64),)),
}
DEFAULTS = {"envs": ",".join(WORKLOADS), "pops": "1,8,64,256", "devices": "1,all", "reps": 3, "calls": 2}
QUICK = {"envs": ",".join(WORKLOADS), "pops": "2", "devices": "all", "reps": 1, "calls": 1}

# metadisco's PPOConfig / PPOHyperparams field -> the reference's (PureJaxRL's) config key.
REFERENCE_KEYS = {
    "lr": "LR", "num_envs": "NUM_ENVS", "num_steps": "NUM_STEPS", "update_epochs": "UPDATE_EPOCHS",
    "num_minibatches": "NUM_MINIBATCHES", "gamma": "GAMMA", "gae_lambda": "GAE_LAMBDA", "ent_coef": "ENT_COEF",
    "vf_coef": "VF_COEF", "max_grad_norm": "MAX_GRAD_NORM", "activation": "ACTIVATION", "anneal_lr": "ANNEAL_LR",
}


# ============================================================================ the two trainers

def metadisco_config(env_name: str, timesteps: int, overrides=()):
    """metadisco's PPOConfig of a cell: the preset with `overrides`, no in-run evaluation."""
    from metadisco.inner_loops import preset_for

    return preset_for(env_name).replace(total_timesteps=timesteps, eval_episodes=0, **dict(overrides))


def reference_config(env_name: str, timesteps: int, overrides=()) -> dict:
    """PureJaxRL's config for the env's family with `overrides`, after checking that it equals
    metadisco's preset (with the same overrides) in every setting both have."""
    import reference_ppo

    from metadisco.core.catalog import DEFAULT_BRAX_BACKEND
    from metadisco.inner_loops import preset_for, preset_name
    from metadisco.meta_objectives import Objectives

    unknown = set(dict(overrides)) - set(REFERENCE_KEYS)
    if unknown:
        raise SystemExit(f"{env_name}: overrides {sorted(unknown)} have no reference equivalent")
    base, _, backend = env_name.partition(":")  # brax/NAME:BACKEND: the reference runs the same backend
    ref = {**reference_ppo.CONFIGS[preset_name(env_name)], "ENV_NAME": base, "TOTAL_TIMESTEPS": timesteps,
           **{REFERENCE_KEYS[k]: v for k, v in overrides}}
    if base.startswith("brax/"):
        ref["BACKEND"] = backend or DEFAULT_BRAX_BACKEND
    pc = preset_for(env_name).replace(**dict(overrides))
    fields = {**{k: getattr(pc, k) for k in REFERENCE_KEYS if hasattr(pc, k)},
              **{k: getattr(pc.hparams, k) for k in REFERENCE_KEYS if hasattr(pc.hparams, k)}}
    objectives = Objectives()
    metadisco_settings = {REFERENCE_KEYS[k]: v for k, v in fields.items()}
    metadisco_settings |= {"HIDDEN": pc.hidden, "NORMALIZE_ENV": (pc.normalize_obs, pc.normalize_reward),
                           "CLIP_EPS": getattr(objectives.drift, "clip_eps", None),
                           "VALUE_CLIP_EPS": getattr(objectives.value_loss, "clip_eps", None)}
    reference_settings = {**ref, "HIDDEN": (ref.get("HIDDEN", 64),) * 2, "VALUE_CLIP_EPS": ref["CLIP_EPS"],
                          "NORMALIZE_ENV": (bool(ref.get("NORMALIZE_ENV")),) * 2}
    differ = {k: (reference_settings[k], v) for k, v in metadisco_settings.items() if reference_settings[k] != v}
    if differ:
        raise SystemExit(f"{env_name}: reference and metadisco settings differ (reference, metadisco): {differ}")
    return ref


def build(impl: str, env_name: str, pop: int, timesteps: int):
    """-> (batched fn of per-agent args, args_for(call) -> per-agent args [pop, ...], steps_per_run)."""
    import jax

    overrides = WORKLOADS[env_name].overrides if env_name in WORKLOADS else ()
    if impl == "reference":
        import reference_ppo

        config = reference_config(env_name, timesteps, overrides)
        train = reference_ppo.make_train(config)
        batch = config["NUM_STEPS"] * config["NUM_ENVS"]
        steps_per_run = (timesteps // batch) * batch

        def batched(key_data):
            return jax.vmap(lambda kd: train(jax.random.wrap_key_data(kd)))(key_data)

        def args_for(call):
            return (_keys(call, pop),)

    elif impl == "metadisco":
        from metadisco.inner_loops import make_env, make_train
        from metadisco.meta_objectives import Objectives

        objectives = Objectives()
        cfg = metadisco_config(env_name, timesteps, overrides)
        train = make_train(make_env(env_name), cfg, objectives)
        steps_per_run = cfg.steps_per_run
        meta = objectives.default_params()
        meta_pop = jax.tree.map(lambda x: jax.numpy.broadcast_to(x, (pop,) + x.shape), meta)

        def batched(meta_params, key_data):
            return jax.vmap(lambda m, kd: train(jax.random.wrap_key_data(kd), m))(meta_params, key_data)

        def args_for(call):
            return (meta_pop, _keys(call, pop))

    else:
        raise SystemExit(f"unknown implementation {impl!r}; choose from {IMPLS}")
    return batched, args_for, steps_per_run


def _keys(call: int, pop: int):
    """Raw key data [pop, 2] for call `call`: new keys every timed call."""
    import jax

    return jax.random.key_data(jax.random.split(jax.random.fold_in(jax.random.key(0), call), pop))


def final_return(impl: str, out) -> float:
    """Mean return of the episodes that ended in the last tenth of the updates, over the population
    (metadisco: `TrainResult.final_return`, its learning curve carried forward over updates in which
    none ended): a check that both learn alike, not a score."""
    import numpy as np

    if impl == "metadisco":
        return float(np.mean(np.asarray(out.final_return)))
    m = out["metrics"]  # leaves [pop, num_updates, num_steps, num_envs]
    tail = max(1, m["returned_episode"].shape[1] // 10)
    done = np.asarray(m["returned_episode"])[:, -tail:]
    returns = np.asarray(m["returned_episode_returns"])[:, -tail:]
    return float(returns[done].mean()) if done.any() else float("nan")


# ============================================================================ one measurement (a child)

def measure_one(impl: str, env_name: str, pop: int, devices: int, timesteps: int, calls: int,
                profile_dir: str | None = None) -> dict:
    """One measurement in this (child) process; see the module docstring. With `profile_dir`,
    one more call runs under jax.profiler and its summary is written there."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_enable_compilation_cache", False)  # time real compilations
    if jax.device_count() < devices:
        raise SystemExit(f"need {devices} devices, jax sees {jax.devices()} (XLA_FLAGS not set?)")
    if pop % devices:
        raise SystemExit(f"population {pop} does not split over {devices} devices")
    batched, args_for, steps_per_run = build(impl, env_name, pop, timesteps)
    if devices == 1:
        fn, target = batched, jax.devices()[0]
    else:
        mesh = Mesh(np.array(jax.devices()[:devices]), ("pop",))
        specs = (P("pop"),) * len(args_for(0))
        fn = jax.shard_map(batched, mesh=mesh, in_specs=specs, out_specs=P("pop"), check_vma=False)
        target = NamedSharding(mesh, P("pop"))

    args = jax.block_until_ready(jax.device_put(args_for(0), target))
    base_rss_mb = _common.peak_rss_mb()  # libraries loaded, inputs placed: what does not grow with the population
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    times, sanity = [], float("nan")
    for call in range(calls):
        if call:
            args = jax.block_until_ready(jax.device_put(args_for(call), target))
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
        if call == 0:
            sanity = final_return(impl, out)
        del out
    record = {
        "impl": impl, "env": env_name, "pop": pop, "devices": devices, "timesteps": timesteps,
        "steps_per_run": steps_per_run, "compile_s": compile_s, "times_s": times, "time_s": min(times),
        "steps_per_s": pop * steps_per_run / min(times), "peak_rss_mb": _common.peak_rss_mb(),
        "base_rss_mb": base_rss_mb,
        "jax_devices": [str(d) for d in jax.devices()], "final_return": sanity,
    }
    device_stats = jax.devices()[0].memory_stats() or {}  # accelerators report their own memory; CPUs none
    if "peak_bytes_in_use" in device_stats:
        record["device_peak_mb"] = device_stats["peak_bytes_in_use"] / 2**20
    if profile_dir:
        record["profile"] = write_profile(Path(profile_dir), compiled, args, f"{impl}, {env_name}, {pop}x{devices}")
    return record


def write_profile(folder: Path, compiled, args, title: str) -> str:
    """Trace one call of `compiled` into folder/trace and write hlo.txt, cost_analysis.json and
    summary.md beside it; -> the summary's path."""
    import jax
    import profiling

    folder.mkdir(parents=True, exist_ok=True)
    hlo = compiled.as_text()
    (folder / "hlo.txt").write_text(hlo)
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    # XLA's static estimate of the whole program (per-operand "{}" keys dropped); a while loop's
    # body is counted once, not once per iteration.
    _common.write_json(str(folder / "cost_analysis.json"), {k: float(v) for k, v in (cost or {}).items() if "{" not in k})
    with jax.profiler.trace(str(folder / "trace")):
        jax.block_until_ready(compiled(*args))
    summary = folder / "summary.md"
    summary.write_text(profiling.summarize_trace(folder / "trace", hlo, title=title) + "\n")
    return str(summary)


# ============================================================================ the plan and its statistics

def parse_ints(spec: str, all_value: int | None = None) -> list[int]:
    """'1,8,64' -> [1, 8, 64]; 'all' -> all_value (duplicates dropped, order kept)."""
    out = []
    for item in spec.split(","):
        item = item.strip()
        value = all_value if item == "all" and all_value is not None else int(item)
        if value <= 0:
            raise SystemExit(f"{spec!r}: expected positive integers")
        if value not in out:
            out.append(value)
    return out


def plan_cells(envs: list[str], pops: list[int], devices: list[int]) -> list[tuple[str, int, int]]:
    """[(env, pop, devices)] in run order (env, then devices, then growing population), the
    populations that do not split evenly over the devices left out."""
    return [(env, pop, dev) for env in envs for dev in devices for pop in sorted(pops) if pop % dev == 0]


def predicted_peak_mb(records: list[dict], env: str, pop: int, devices: int) -> float | None:
    """Peak memory of (env, pop, devices) extrapolated linearly in the population from the largest
    measured smaller population of the same env and device count (the larger prediction of its
    records); None when there is none. Only what the run added to the process (peak minus
    `base_rss_mb`, the libraries and inputs before compiling) is scaled: scaling the whole peak
    predicted 12.2 GB for 8 agents of brax/hopper from 1.5 GB at 1 agent, most of it brax's import.
    Records without a base scale the whole peak."""
    smaller = [r for r in records if "peak_rss_mb" in r and r["env"] == env and r["devices"] == devices
               and r["pop"] < pop]
    if not smaller:
        return None
    largest = max(r["pop"] for r in smaller)
    return max(r.get("base_rss_mb", 0.0) + (r["peak_rss_mb"] - r.get("base_rss_mb", 0.0)) * pop / largest
               for r in smaller if r["pop"] == largest)


def spread(values: list[float]) -> dict | None:
    """{median, min, max, n} of `values` (None when empty)."""
    if not values:
        return None
    return {"median": _common.median(values), "min": float(min(values)), "max": float(max(values)), "n": len(values)}


def summarize(records: list[dict]) -> list[dict]:
    """One row per measured cell: per implementation the spread of steps/s, compile s and peak
    memory over its repetitions, and the spread of the paired ratios metadisco/reference."""
    ok = [r for r in records if "steps_per_s" in r]
    cells = list(dict.fromkeys((r["env"], r["pop"], r["devices"]) for r in ok))
    rows = []
    for env, pop, dev in cells:
        mine = [r for r in ok if (r["env"], r["pop"], r["devices"]) == (env, pop, dev)]
        row = {"env": env, "pop": pop, "devices": dev,
               "steps_per_run": sorted({r["steps_per_run"] for r in mine})}
        for impl in IMPLS:
            rs = [r for r in mine if r["impl"] == impl]
            row[impl] = {k: spread([r[k] for r in rs if k in r])
                         for k in ("steps_per_s", "compile_s", "peak_rss_mb", "device_peak_mb")}
        rate = {(r["impl"], r.get("rep", 0)): r["steps_per_s"] for r in mine}
        reps = sorted({rep for _, rep in rate})
        row["ratio"] = spread([rate["metadisco", i] / rate["reference", i] for i in reps
                               if ("metadisco", i) in rate and ("reference", i) in rate])
        rows.append(row)
    return rows


# ============================================================================ markdown

def _rate(x: float) -> str:
    return f"{x / 1e3:,.0f}k" if x >= 1e4 else f"{x / 1e3:,.1f}k"


def _cell(s: dict | None, fmt) -> str:
    """'median [min-max]' (or just the value when there is one repetition), '-' when missing."""
    if not s:
        return "-"
    if s["n"] == 1:
        return fmt(s["median"])
    return f"{fmt(s['median'])} [{fmt(s['min'])}-{fmt(s['max'])}]"


def render(payload: dict) -> str:
    """Markdown: the like-for-like ratios per env and device count, then one table per env,
    then the machine and settings, skipped cells and failures."""
    rows = summarize(payload["records"])
    settings = payload["settings"]
    reps = settings.get("reps", "?")
    out = ["# Inner-loop throughput: metadisco vs the PureJaxRL-style reference, like for like", "",
           f"metadisco/reference environment steps per second, both on the same devices, median "
           f"[min-max] of {reps} paired repetition{'' if reps == 1 else 's'} in alternating processes.", ""]
    pops = sorted({r["pop"] for r in rows})
    if rows:
        out += ["| environment | devices | " + " | ".join(f"{p} agent{'s' * (p > 1)}" for p in pops) + " |",
                "|---|---:|" + "---:|" * len(pops)]
        for env in dict.fromkeys(r["env"] for r in rows):
            for dev in sorted({r["devices"] for r in rows if r["env"] == env}):
                by_pop = {r["pop"]: r for r in rows if r["env"] == env and r["devices"] == dev}
                cells = [_cell(by_pop[p]["ratio"], "{:.2f}".format) if p in by_pop else "-" for p in pops]
                out.append(f"| {env} | {dev} | " + " | ".join(cells) + " |")
        out.append("")
    for env in dict.fromkeys(r["env"] for r in rows):
        mine = [r for r in rows if r["env"] == env]
        steps = sorted({s for r in mine for s in r["steps_per_run"]})
        on_device = any(r[i]["device_peak_mb"] for r in mine for i in IMPLS)  # an accelerator's own memory
        out += [f"## {env} ({'/'.join(f'{s:,}' for s in steps)} steps per agent)", "",
                "| agents | devices | reference steps/s | metadisco steps/s | metadisco/reference "
                "| compile s ref | compile s md | peak RSS MB ref | peak RSS MB md |"
                + (" peak device MB ref | peak device MB md |" if on_device else ""),
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if on_device else "")]
        for r in sorted(mine, key=lambda r: (r["devices"], r["pop"])):
            ref, md = r["reference"], r["metadisco"]
            out.append(
                f"| {r['pop']} | {r['devices']} | {_cell(ref['steps_per_s'], _rate)} | {_cell(md['steps_per_s'], _rate)} "
                f"| {_cell(r['ratio'], '{:.2f}'.format)} | {_cell(ref['compile_s'], '{:.1f}'.format)} "
                f"| {_cell(md['compile_s'], '{:.1f}'.format)} | {_cell(ref['peak_rss_mb'], '{:,.0f}'.format)} "
                f"| {_cell(md['peak_rss_mb'], '{:,.0f}'.format)} |"
                + (f" {_cell(ref['device_peak_mb'], '{:,.0f}'.format)} | {_cell(md['device_peak_mb'], '{:,.0f}'.format)} |"
                   if on_device else "")
            )
        out.append("")
    skipped = [r for r in payload["records"] if "skipped" in r]
    errors = [r for r in payload["records"] if "error" in r]
    if skipped:
        out += ["Not measured:", "", *[f"- {r['env']}, {r['pop']} agents on {r['devices']} devices: {r['skipped']}"
                                       for r in skipped], ""]
    if errors:
        out += ["Failed measurements:", "",
                *[f"- {r.get('impl')} {r.get('env')} {r.get('pop')}x{r.get('devices')}: {r['error'].splitlines()[0]}"
                  for r in errors], ""]
    out += ["## How it was measured", "",
            "steps/s: the fastest of the process's timed calls, compile excluded; spread over repetitions "
            "(one process each); ratio: metadisco/reference of paired repetitions; compile s: trace + lower "
            "+ compile, no persistent cache; peak RSS: ru_maxrss of the measurement's own process. "
            "metadisco runs without its in-run final-policy evaluation (eval_episodes=0), as the reference "
            "has none. Command: `" + settings.get("command", "benchmarks/inner_loop.py") + "`.", "",
            _common.machine_markdown(payload["machine"]),
            f"- settings: {json.dumps({k: v for k, v in settings.items() if k != 'command'})}"]
    if "elapsed_s" in payload:
        out.append(f"- wall time of the whole benchmark: {payload['elapsed_s'] / 60:.1f} min")
    return "\n".join(out) + "\n"


# ============================================================================ driver

def child_args(impl: str, env: str, pop: int, dev: int, timesteps: int, calls: int) -> list[str]:
    return ["--one", impl, env, str(pop), str(dev), str(timesteps), "--calls", str(calls)]


def timesteps_for(env: str, args) -> int:
    if args.timesteps:
        return args.timesteps
    work = WORKLOADS.get(env)
    if work is None:
        raise SystemExit(f"{env}: no default workload (known: {', '.join(WORKLOADS)}); pass --timesteps")
    return work.quick_timesteps if args.quick else work.timesteps


def planned(args) -> tuple[list[str], list[tuple[str, int, int]]]:
    """The environments and the cells that --envs, --pops and --devices name."""
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    return envs, plan_cells(envs, parse_ints(args.pops), parse_ints(args.devices, _common.usable_cpus()))


def run_all(args) -> dict:
    envs, cells = planned(args)
    limit_mb = args.mem_limit_gb * 1024
    payload = {
        "machine": _common.machine_info(),
        "settings": {"command": " ".join(["benchmarks/inner_loop.py", *args.argv]), "envs": envs,
                     "pops": args.pops, "devices": args.devices, "reps": args.reps, "calls": args.calls,
                     "timesteps": {env: timesteps_for(env, args) for env in envs},
                     "overrides": {env: dict(WORKLOADS[env].overrides) for env in envs if env in WORKLOADS},
                     "mem_limit_gb": args.mem_limit_gb},
        "records": [],
    }
    n_children = len(cells) * args.reps * len(IMPLS)
    print(f"{len(cells)} cells x {args.reps} repetitions x {len(IMPLS)} implementations = {n_children} processes",
          file=sys.stderr, flush=True)
    start, done = time.perf_counter(), 0
    for env, pop, dev in cells:
        predicted = predicted_peak_mb(payload["records"], env, pop, dev)
        if predicted is not None and predicted > limit_mb:
            reason = f"predicted peak memory {predicted / 1024:.1f} GB > --mem-limit-gb {args.mem_limit_gb:g}"
            payload["records"].append({"env": env, "pop": pop, "devices": dev, "skipped": reason})
            print(f"skip {env} {pop}x{dev}: {reason}", file=sys.stderr, flush=True)
            continue
        for rep in range(args.reps):
            for impl in IMPLS:  # alternating: reference, metadisco, reference, metadisco, ...
                done += 1
                t0 = time.perf_counter()
                child = child_args(impl, env, pop, dev, timesteps_for(env, args), args.calls)
                recs = _common.run_child(__file__, child, dev, timeout=CHILD_TIMEOUT_S) or [{"error": "no output"}]
                for r in recs:
                    r.update({"impl": impl, "env": env, "pop": pop, "devices": dev, "rep": rep,
                              "wall_s": time.perf_counter() - t0})
                payload["records"] += recs
                r = recs[-1]
                what = (f"{_rate(r['steps_per_s'])} steps/s, compile {r['compile_s']:.1f} s, "
                        f"{r['peak_rss_mb']:,.0f} MB" if "error" not in r else "FAILED\n" + r["error"])
                print(f"[{done}/{n_children}] {impl:9s} {env} {pop}x{dev} rep {rep}: {what} "
                      f"({r['wall_s']:.0f} s)", file=sys.stderr, flush=True)
                if args.out:
                    _common.write_json(args.out, payload)  # partial results survive an interruption
    payload["elapsed_s"] = time.perf_counter() - start
    return payload


def run_profile(args) -> None:
    """`--profile DIR`: one cell, one process per implementation, summaries printed."""
    _, cells = planned(args)
    if len(cells) != 1:
        raise SystemExit("--profile measures one cell: give one --envs, one --pops and one --devices "
                         "(the population divisible by the devices)")
    [(env, pop, dev)] = cells
    for impl in [i.strip() for i in args.impls.split(",")]:
        folder = Path(args.profile).resolve() / impl
        child = [*child_args(impl, env, pop, dev, timesteps_for(env, args), 1), "--profile-dir", str(folder)]
        r = _common.run_child(__file__, child, dev, timeout=CHILD_TIMEOUT_S)[-1]
        if "error" in r:
            print(f"{impl}: FAILED\n{r['error']}", file=sys.stderr)
            continue
        print(f"{impl} {env} {pop}x{dev}: {_rate(r['steps_per_s'])} steps/s; files in {folder}\n")
        print(Path(r["profile"]).read_text())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", help=f"comma-separated environments (default {DEFAULTS['envs']})")
    p.add_argument("--pops", help=f"populations (default {DEFAULTS['pops']})")
    p.add_argument("--devices", help=f"host device counts, 'all' = one per usable core (default {DEFAULTS['devices']})")
    p.add_argument("--reps", type=int, help=f"paired repetitions per cell, one process each (default {DEFAULTS['reps']})")
    p.add_argument("--calls", type=int, help=f"timed calls per process; the fastest counts (default {DEFAULTS['calls']})")
    p.add_argument("--timesteps", type=int, help="env steps per agent for every env (default: per env, WORKLOADS)")
    p.add_argument("--mem-limit-gb", type=float, default=None,
                   help="skip a population whose extrapolated peak memory exceeds this (default: half the RAM)")
    p.add_argument("--quick", action="store_true", help=f"a smoke check with tiny budgets: {QUICK}")
    p.add_argument("--out", help="write the records, settings and machine to this JSON file")
    p.add_argument("--markdown", help="write the markdown rendering to this file")
    p.add_argument("--table", metavar="JSON", help="print the markdown of a saved --out file and exit")
    p.add_argument("--profile", metavar="DIR", help="profile one cell into DIR/<impl>/ (see below) and exit")
    p.add_argument("--impls", default=",".join(IMPLS), help="implementations to --profile")
    p.add_argument("--one", nargs=5, metavar=("IMPL", "ENV", "POP", "DEVICES", "TIMESTEPS"),
                   help="(internal) run one measurement in this process and print it as a JSON line")
    p.add_argument("--profile-dir", help="(internal, with --one) profile the measurement into this folder")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    for k, v in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.mem_limit_gb is None:
        args.mem_limit_gb = round(_common.total_memory_mb() / 1024 / 2, 1)

    if args.table:
        print(render(json.loads(Path(args.table).read_text())), end="")
        return
    if args.one:
        impl, env, pop, devices, timesteps = args.one
        _common.emit(measure_one(impl, env, int(pop), int(devices), int(timesteps), args.calls, args.profile_dir))
        return
    if args.profile:
        run_profile(args)
        return
    payload = run_all(args)
    if args.out:
        _common.write_json(args.out, payload)
    text = render(payload)
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()

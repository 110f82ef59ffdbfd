"""Inner-loop throughput: environment steps per second of full PPO training, compile time apart.

Two implementations of the same PPO, same hyperparameters:

- `metadisco`: `inner_loops.make_train(env, preset, Objectives())` (default objectives = PPO),
  vmapped over (meta_params, key);
- `reference`: a plain single-file PureJaxRL-style PPO (`benchmarks/reference_ppo.py`,
  `make_train(config)`), vmapped over seeds.

Workloads: CartPole-v1 (classic preset: 4 envs x 128 steps, lr 2.5e-4) and Breakout-MinAtar
(minatar preset: 64 envs x 128 steps, lr 5e-3); populations of 1, 8, 32 and 64 agents on one
device (`jit(vmap(train))`), and 64 agents split over 2 host devices (`64x2` in `--pops`:
`jit(shard_map(vmap(train)))` over a 1-D mesh, as metadisco's engine splits its population), so
that both cores work.

What is measured, and how. Each (implementation, env, population, devices) runs in a child
process of its own (`--one IMPL ENV POP DEVICES TIMESTEPS`, which prints one JSON line), so that
the XLA host-device count can differ and the peak memory belongs to one measurement:

- compile_s: trace + lower + XLA compile, ahead of time (`jax.jit(f).lower(*args).compile()`);
- first_call_s: compile_s plus the first execution;
- time_s: median over `--repeats` executions (the first one included), each with different keys
  and timed to `block_until_ready`; all times are kept in the JSON;
- steps/s = population * steps_per_run / time_s, with steps_per_run = num_updates * num_envs *
  num_steps (timesteps rounded down to whole updates, the same for both);
- peak RSS: `resource.getrusage(RUSAGE_SELF).ru_maxrss` of the child, compile included.

Headline numbers: metadisco/reference at 1 agent, and metadisco's 64 agents on 2 devices against
the reference's plain single-device vmap of 64 (what a user of PureJaxRL would run).

Usage (from the repository root):

    .venv/bin/python benchmarks/inner_loop.py --out inner_loop.json     # full run, ~14 min
    .venv/bin/python benchmarks/inner_loop.py --quick                   # smoke check, ~1 min
    .venv/bin/python benchmarks/inner_loop.py --envs CartPole-v1 --pops 1,64,64x2
    .venv/bin/python benchmarks/inner_loop.py --table inner_loop.json   # re-print a saved table

Expected duration of the full default run (2 envs x 5 populations x 2 implementations = 20
children, 2 timed runs each) on 2 idle cores: about 13-14 minutes, ~6.5 for CartPole and ~7 for
Breakout-MinAtar. This is an estimate, not a measurement: the reference throughput measured on
this machine (../shared/REFERENCE.md: 130k-300k steps/s for CartPole by population, 73k for
MinAtar at any population) plus ~10-15 s per child for imports and compilation; if metadisco is
slower than the reference, its half takes correspondingly longer. Lower `--timesteps-*` or
`--repeats` to shorten it. `--quick` runs 4 children (both envs, 2 agents on 2 devices, tiny
budgets), about a minute, nearly all of it start-up and compilation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import _common
import jax
import numpy as np
import reference_ppo
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

IMPLS = ("reference", "metadisco")
DEFAULT_ENVS = "CartPole-v1,Breakout-MinAtar"
DEFAULT_POPS = "1,8,32,64,64x2"
QUICK = {"pops": "2x2", "timesteps_cartpole": 2048, "timesteps_minatar": 8192, "repeats": 1}


# ============================================================================ one measurement

def reference_config(env_name: str, timesteps: int) -> dict:
    """PureJaxRL's config for the env's family, after checking it equals metadisco's preset."""
    from inner_loops import preset_for, preset_name
    from inner_loops.catalog import DEFAULT_BRAX_BACKEND

    base, _, backend = env_name.partition(":")  # brax/NAME:BACKEND: the reference runs the same backend
    ref = {**reference_ppo.CONFIGS[preset_name(env_name)], "ENV_NAME": base, "TOTAL_TIMESTEPS": timesteps}
    if base.startswith("brax/"):
        ref["BACKEND"] = backend or DEFAULT_BRAX_BACKEND
    pc = preset_for(env_name)
    hp = pc.hparams
    ours = {
        "LR": hp.lr, "NUM_ENVS": pc.num_envs, "NUM_STEPS": pc.num_steps, "UPDATE_EPOCHS": pc.update_epochs,
        "NUM_MINIBATCHES": pc.num_minibatches, "GAMMA": hp.gamma, "GAE_LAMBDA": hp.gae_lambda,
        "ENT_COEF": hp.ent_coef, "VF_COEF": hp.vf_coef, "MAX_GRAD_NORM": hp.max_grad_norm,
        "ACTIVATION": pc.activation, "ANNEAL_LR": pc.anneal_lr, "HIDDEN": pc.hidden,
        "NORMALIZE_ENV": (pc.normalize_obs, pc.normalize_reward),
    }
    theirs = {**ref, "HIDDEN": (ref.get("HIDDEN", 64),) * 2, "NORMALIZE_ENV": (bool(ref.get("NORMALIZE_ENV")),) * 2}
    differ = {k: (theirs[k], v) for k, v in ours.items() if theirs[k] != v}
    if differ:
        raise SystemExit(f"{env_name}: reference and metadisco hyperparameters differ: {differ}")
    return ref


def build(impl: str, env_name: str, pop: int, timesteps: int):
    """-> (batched function of (per-agent args...), args_for(repeat) -> per-agent args, steps_per_run)."""
    if impl == "reference":
        config = reference_config(env_name, timesteps)
        train = reference_ppo.make_train(config)
        steps_per_run = (timesteps // (config["NUM_STEPS"] * config["NUM_ENVS"])) * config["NUM_STEPS"] * config["NUM_ENVS"]

        def batched(key_data):
            return jax.vmap(lambda kd: train(jax.random.wrap_key_data(kd)))(key_data)

        def args_for(rep):
            return (_keys(rep, pop),)

    elif impl == "metadisco":
        from inner_loops import make_env, make_train, preset_for
        from meta_objectives import Objectives

        env = make_env(env_name)
        cfg = preset_for(env_name).replace(total_timesteps=timesteps)
        objectives = Objectives()
        train = make_train(env, cfg, objectives)
        steps_per_run = cfg.steps_per_run
        meta = objectives.init(jax.random.key(0))
        meta_pop = jax.tree.map(lambda x: jax.numpy.broadcast_to(x, (pop,) + x.shape), meta)

        def batched(meta_params, key_data):
            return jax.vmap(lambda m, kd: train(jax.random.wrap_key_data(kd), m))(meta_params, key_data)

        def args_for(rep):
            return (meta_pop, _keys(rep, pop))

    else:
        raise SystemExit(f"unknown implementation {impl!r}; choose from {IMPLS}")
    return batched, args_for, steps_per_run


def _keys(rep: int, pop: int):
    """Raw key data [pop, 2] for repeat `rep`: different keys every timed call."""
    return jax.random.key_data(jax.random.split(jax.random.fold_in(jax.random.key(0), rep), pop))


def last_update_return(impl: str, out) -> float:
    """Mean return of episodes ended in the last update (a sanity check that both learn alike)."""
    if impl == "metadisco":
        return float(np.mean(np.asarray(out.returns)[:, -1]))
    m = out["metrics"]
    done = np.asarray(m["returned_episode"])[:, -1]
    returns = np.asarray(m["returned_episode_returns"])[:, -1]
    return float(returns[done].mean()) if done.any() else float("nan")


def measure_one(impl: str, env_name: str, pop: int, devices: int, timesteps: int, repeats: int) -> dict:
    """One measurement in this (child) process; see the module docstring."""
    jax.config.update("jax_enable_compilation_cache", False)  # time real compilations
    if jax.device_count() < devices:
        raise SystemExit(f"need {devices} devices, jax sees {jax.devices()} (XLA_FLAGS not set?)")
    if pop % devices:
        raise SystemExit(f"population {pop} does not split over {devices} devices")
    batched, args_for, steps_per_run = build(impl, env_name, pop, timesteps)
    if devices == 1:
        fn, place = batched, (lambda args: jax.device_put(args, jax.devices()[0]))
    else:
        mesh = Mesh(np.array(jax.devices()[:devices]), ("pop",))
        n_args = len(args_for(0))
        fn = jax.shard_map(
            batched, mesh=mesh, in_specs=(P("pop"),) * n_args, out_specs=P("pop"), check_vma=False
        )
        sharding = NamedSharding(mesh, P("pop"))
        place = lambda args: jax.device_put(args, sharding)  # noqa: E731

    args = jax.block_until_ready(place(args_for(0)))
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    times, sanity = [], float("nan")
    for rep in range(repeats):
        if rep:
            args = jax.block_until_ready(place(args_for(rep)))
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
        if rep == 0:
            sanity = last_update_return(impl, out)
        del out
    time_s = _common.median(times)
    return {
        "impl": impl, "env": env_name, "pop": pop, "devices": devices, "timesteps": timesteps,
        "steps_per_run": steps_per_run, "compile_s": compile_s, "first_call_s": compile_s + times[0],
        "times_s": times, "time_s": time_s, "steps_per_s": pop * steps_per_run / time_s,
        "peak_rss_mb": _common.peak_rss_mb(), "jax_devices": [str(d) for d in jax.devices()],
        "last_update_return": sanity,
    }


# ============================================================================ driver and table

def parse_pops(spec: str) -> list[tuple[int, int]]:
    """'1,8,64x2' -> [(1, 1), (8, 1), (64, 2)]: population and number of host devices."""
    out = []
    for item in spec.split(","):
        pop, _, dev = item.strip().partition("x")
        out.append((int(pop), int(dev or 1)))
        if out[-1][0] % out[-1][1]:
            raise SystemExit(f"--pops {item}: the population must split evenly over the devices")
    return out


def timesteps_for(env_name: str, args) -> int:
    return args.timesteps_minatar if "MinAtar" in env_name else args.timesteps_cartpole


def _fmt_rate(x):
    return f"{x / 1e3:,.0f}k" if x >= 1e4 else f"{x / 1e3:,.1f}k"


def render(payload: dict) -> str:
    """Markdown: machine, headline ratios, then one table per env."""
    records = [r for r in payload["records"] if "error" not in r]
    by = {(r["impl"], r["env"], r["pop"], r["devices"]): r for r in records}
    out = ["# Inner-loop throughput: metadisco PPO vs a PureJaxRL-style reference", "",
           _common.machine_markdown(payload["machine"]),
           f"- settings: {json.dumps(payload['settings'])}", ""]
    envs = list(dict.fromkeys(r["env"] for r in records))
    headline = []
    for env in envs:
        ref1, md1 = by.get(("reference", env, 1, 1)), by.get(("metadisco", env, 1, 1))
        if ref1 and md1:
            headline.append(f"- {env}, 1 agent: metadisco/reference = {md1['steps_per_s'] / ref1['steps_per_s']:.2f}")
        multi = [r for r in records if r["impl"] == "metadisco" and r["env"] == env and r["devices"] > 1]
        if multi:
            md = max(multi, key=lambda r: (r["pop"], r["devices"]))
            ref = by.get(("reference", env, md["pop"], 1))
            if ref:
                headline.append(
                    f"- {env}, {md['pop']} agents: metadisco on {md['devices']} devices / reference vmap on 1 "
                    f"device = {md['steps_per_s'] / ref['steps_per_s']:.2f}"
                )
    if headline:
        out += ["Headline (steps/s ratios):", "", *headline, ""]
    for env in envs:
        rows = sorted({(r["pop"], r["devices"]) for r in records if r["env"] == env})
        steps = {r["steps_per_run"] for r in records if r["env"] == env}
        out += [f"## {env} ({'/'.join(map(str, sorted(steps)))} steps per agent)", "",
                "| agents | devices | reference steps/s | metadisco steps/s | metadisco/reference "
                "| compile s ref | compile s md | peak RSS MB ref | peak RSS MB md |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for pop, dev in rows:
            ref, md = by.get(("reference", env, pop, dev)), by.get(("metadisco", env, pop, dev))
            cell = lambda r, k, f: f(r[k]) if r else "-"  # noqa: E731
            ratio = f"{md['steps_per_s'] / ref['steps_per_s']:.2f}" if ref and md else "-"
            out.append(
                f"| {pop} | {dev} | {cell(ref, 'steps_per_s', _fmt_rate)} | {cell(md, 'steps_per_s', _fmt_rate)} "
                f"| {ratio} | {cell(ref, 'compile_s', '{:.1f}'.format)} | {cell(md, 'compile_s', '{:.1f}'.format)} "
                f"| {cell(ref, 'peak_rss_mb', '{:,.0f}'.format)} | {cell(md, 'peak_rss_mb', '{:,.0f}'.format)} |"
            )
        out.append("")
    errors = [r["error"] for r in payload["records"] if "error" in r]
    if errors:
        out += ["Failed measurements:", "", *[f"- {e.splitlines()[0]}" for e in errors], ""]
    out.append("steps/s: median of the timed runs, compile excluded; compile s: trace + lower + compile; "
               "peak RSS: ru_maxrss of the measurement's own process.")
    return "\n".join(out)


def run_all(args) -> dict:
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    pops = parse_pops(args.pops)
    plan = [(env, pop, dev, impl) for env in envs for pop, dev in pops for impl in IMPLS]
    payload = {
        "machine": _common.machine_info(),
        "settings": {"envs": envs, "pops": args.pops, "repeats": args.repeats,
                     "timesteps_cartpole": args.timesteps_cartpole, "timesteps_minatar": args.timesteps_minatar},
        "records": [],
    }
    start = time.perf_counter()
    for i, (env, pop, dev, impl) in enumerate(plan, 1):
        t0 = time.perf_counter()
        child = ["--one", impl, env, str(pop), str(dev), str(timesteps_for(env, args)), "--repeats", str(args.repeats)]
        recs = _common.run_child(__file__, child, dev, timeout=args.child_timeout) or [{"error": "no output"}]
        for r in recs:
            r.setdefault("impl", impl), r.setdefault("env", env), r.setdefault("pop", pop), r.setdefault("devices", dev)
        payload["records"] += recs
        r = recs[-1]
        what = (f"{_fmt_rate(r['steps_per_s'])} steps/s, compile {r['compile_s']:.1f} s, "
                f"{r['peak_rss_mb']:,.0f} MB" if "error" not in r else "FAILED\n" + r["error"])
        print(f"[{i}/{len(plan)}] {impl:9s} {env} {pop}x{dev}: {what} ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)
        if args.out:
            _common.write_json(args.out, payload)  # partial results survive an interruption
    payload["elapsed_s"] = time.perf_counter() - start
    return payload


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default=DEFAULT_ENVS, help=f"comma-separated gymnax ids (default {DEFAULT_ENVS})")
    p.add_argument("--pops", default=None, help=f"populations, NxD = N agents over D host devices (default {DEFAULT_POPS})")
    p.add_argument("--timesteps-cartpole", type=int, default=None,
                   help="env steps per agent for classic-control envs (default 100000)")
    p.add_argument("--timesteps-minatar", type=int, default=None,
                   help="env steps per agent for MinAtar envs (default 32768 = 4 updates of 64x128; 65536 adds ~6 min)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per measurement; the median counts (default 2)")
    p.add_argument("--quick", action="store_true", help=f"tiny budgets for a smoke check: {QUICK}")
    p.add_argument("--out", help="write all records and the machine description to this JSON file")
    p.add_argument("--table", metavar="JSON", help="print the markdown table of a saved --out file and exit")
    p.add_argument("--child-timeout", type=float, default=1800, help="seconds before a measurement is abandoned")
    p.add_argument("--one", nargs=5, metavar=("IMPL", "ENV", "POP", "DEVICES", "TIMESTEPS"),
                   help="(internal) run one measurement in this process and print it as a JSON line")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else {
        "pops": DEFAULT_POPS, "timesteps_cartpole": 100_000, "timesteps_minatar": 32_768, "repeats": 2,
    }
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)

    if args.table:
        print(render(json.loads(Path(args.table).read_text())))
        return
    _common.ensure_repo_on_path()
    if args.one:
        impl, env, pop, devices, timesteps = args.one
        _common.emit(measure_one(impl, env, int(pop), int(devices), int(timesteps), args.repeats))
        return
    payload = run_all(args)
    if args.out:
        _common.write_json(args.out, payload)
    print(render(payload))
    print(f"\n(total {payload['elapsed_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()

"""Meta-training generation time: strategy overhead vs inner training, by population and devices.

At the default demo's scale (`RunConfig()` defaults: LPO drift evolved by Open_ES, CartPole-v1,
32768 env steps per run, 2 seeds per member, fitness = mean return over training), for
population sizes 4, 8, 16, 32 on 1 and 2 host devices. A `MetaTrainer` is built exactly as
`metadisco train` builds it, from `validate(RunConfig(es=ESConfig(population_size=P), devices=D))`.

What is measured, and how (all after one warm-up call that compiles; medians over `--repeats`,
generation and inner training timed alternately so that slow drift hits both alike):

- generation: `trainer.generation(state, baseline, index)` plus fetching its metrics to the host, i.e.
  one iteration of the real host loop (ask, 2 x P PPO runs, fitness, tell, metrics transfer);
- inner training: the engine's members function alone (`trainer.members_fitness`, shard_map'd over
  the mesh as in a generation), jitted, on a population from `es.ask` sharded over the mesh;
- overhead = generation - inner training: everything that is not PPO (ask, tell with its fitness
  shaping, divergence handling, metrics, host dispatch and transfer), reported in ms and as % of
  a generation (target: below 1% at the demo's scale). Being a difference of two ~equal timings it
  is noisy, so it is also measured directly:
- ask+tell: `es.ask` then `es.tell` (which applies the fitness shaping), jitted alone with the
  engine's replicated shardings, median of `--fast-repeats` calls; metrics fetch: the
  device-to-host copy of a generation's metrics after they are ready;
- steps/s = env steps per generation (P x seeds x steps per run) / generation time.

Each device count runs in a child process of its own (`--one DEVICES`, one JSON line per
population), because XLA reads `--xla_force_host_platform_device_count` only at start-up.

Usage (from the repository root):

    .venv/bin/python benchmarks/generation.py --out generation.json     # full run, ~7 min
    .venv/bin/python benchmarks/generation.py --quick                   # smoke check, ~1 min
    .venv/bin/python benchmarks/generation.py --table generation.json   # re-print a saved table

Expected duration of the full default run on 2 idle cores: about 6-8 minutes (per population:
4 generations and 4 inner-training calls, the first of each compiling; 65536 x P env steps per
generation at roughly 200-250k steps/s, what the PureJaxRL-style reference reaches on CartPole on 2
cores (benchmarks/inner_loop.py); estimated, not measured).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import _common

DEFAULT_POPS = "4,8,16,32"
DEFAULT_DEVICES = "1,2"
QUICK = {"pops": "4", "timesteps": 1024, "repeats": 1, "fast_repeats": 3}


def measure(devices: int, pops: list[int], timesteps: int | None, seeds: int, repeats: int, fast_repeats: int):
    """In this (child) process: one JSON line per population size."""
    _common.ensure_repo_on_path()
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from metadisco import strategy as strategies
    from metadisco.config import ESConfig, InnerConfig, RunConfig, validate
    from metadisco.engine import MetaTrainer, fetch

    jax.config.update("jax_enable_compilation_cache", False)  # time real compilations
    if jax.device_count() < devices:
        raise SystemExit(f"need {devices} devices, jax sees {jax.devices()} (XLA_FLAGS not set?)")
    for pop in pops:
        changes = {"es": ESConfig(population_size=pop), "devices": devices, "seeds_per_member": seeds}
        if timesteps:
            changes["inner"] = InnerConfig(total_timesteps=timesteps)
        cfg = validate(RunConfig(**changes))
        trainer = MetaTrainer(cfg)
        mesh = trainer.mesh
        replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("pop"))
        # as metadisco.train does: host copies, then replicated over the mesh
        state = trainer.replicate(fetch(trainer.init()))
        baseline = trainer.replicate(fetch(trainer.baseline()))

        counter = iter(range(10**9))

        def one_generation(state):
            t0 = time.perf_counter()
            state, metrics = trainer.generation(state, baseline, next(counter))
            jax.block_until_ready(metrics)
            t1 = time.perf_counter()
            fetch(metrics)
            t2 = time.perf_counter()
            return state, t2 - t0, t2 - t1

        state, gen_first_s, _ = one_generation(state)  # compiles

        # the inner training alone, built as in MetaTrainer._generation_impl
        draw = trainer.draw_of(0)
        members = jax.jit(lambda pop, seeds, baseline: trainer.members_fitness(pop, draw, seeds, baseline))
        population, _ = jax.jit(trainer.es.ask)(jax.random.key(1), state.es_state, trainer.es_params)
        population = jax.device_put(population, split)

        def seeds_for(rep):
            keys = jax.random.split(jax.random.fold_in(jax.random.key(2), rep), cfg.seeds_per_member)
            return jax.device_put(keys, replicated)

        def one_members(rep):
            seeds = jax.block_until_ready(seeds_for(rep))
            t0 = time.perf_counter()
            jax.block_until_ready(members(population, seeds, baseline))
            return time.perf_counter() - t0

        members_first_s = one_members(0)  # compiles

        gen_s, fetch_s, members_s = [], [], []
        for rep in range(repeats):
            state, t, f = one_generation(state)
            gen_s.append(t), fetch_s.append(f)
            members_s.append(one_members(rep + 1))

        # the strategy alone: ask, tell (with fitness shaping), replicated like the generation
        es, es_params = trainer.es, trainer.es_params

        def ask_tell(es_state, key_data, fitness):
            k_ask, _, k_tell = jax.random.split(jax.random.wrap_key_data(key_data), 3)
            pop_, es_state = es.ask(k_ask, es_state, es_params)
            es_state, _ = es.tell(k_tell, pop_, strategies.to_es_loss(fitness), es_state, es_params)
            return es_state

        ask_tell = jax.jit(ask_tell, in_shardings=replicated, out_shardings=replicated)
        fitness = jax.device_put(jax.random.normal(jax.random.key(3), (pop,)), replicated)
        es_state = state.es_state
        ask_tell_s = []
        for rep in range(fast_repeats + 1):  # the first compiles
            key_data = jax.device_put(jax.random.key_data(jax.random.key(rep)), replicated)
            t0 = time.perf_counter()
            jax.block_until_ready(ask_tell(es_state, key_data, fitness))
            ask_tell_s.append(time.perf_counter() - t0)

        gen, train = _common.median(gen_s), _common.median(members_s)
        ask_tell_med, fetch_med = _common.median(ask_tell_s[1:]), _common.median(fetch_s)
        _common.emit({
            "pop": pop, "devices": devices, "mesh_devices": int(mesh.size), "seeds_per_member": cfg.seeds_per_member,
            "steps_per_run": trainer.envs[0].ppo_config.steps_per_run, "steps_per_generation": trainer.steps_per_generation,
            "num_params": trainer.num_params,
            "generation_s": gen, "members_s": train, "overhead_s": gen - train, "overhead_pct": 100 * (gen - train) / gen,
            "ask_tell_s": ask_tell_med, "fetch_s": fetch_med,
            "direct_overhead_pct": 100 * (ask_tell_med + fetch_med) / gen,
            "steps_per_s": trainer.steps_per_generation / gen,
            "generation_first_s": gen_first_s, "members_first_s": members_first_s, "ask_tell_first_s": ask_tell_s[0],
            "generation_times_s": gen_s, "members_times_s": members_s, "fetch_times_s": fetch_s,
            "peak_rss_mb": _common.peak_rss_mb(), "jax_devices": [str(d) for d in jax.devices()],
        })


def render(payload: dict) -> str:
    """Markdown: machine, headline, one table over device counts and populations."""
    rows = sorted((r for r in payload["records"] if "error" not in r), key=lambda r: (r["devices"], r["pop"]))
    out = ["# Meta-training generation: strategy overhead vs inner training", "",
           _common.machine_markdown(payload["machine"]),
           f"- settings: {json.dumps(payload['settings'])}", ""]
    if rows:
        worst = max(rows, key=lambda r: r["overhead_pct"])
        worst_direct = max(rows, key=lambda r: r["direct_overhead_pct"])
        out += [
            f"Headline: overhead (generation - inner training) is at most {worst['overhead_pct']:.2f}% of a "
            f"generation (population {worst['pop']}, {worst['devices']} device(s)); measured directly "
            f"(ask+tell+metrics fetch) at most {worst_direct['direct_overhead_pct']:.2f}%. Target: below 1%.", "",
        ]
    out += ["| devices | population | env steps / gen | generation s | inner training s | overhead ms "
            "| overhead % | ask+tell ms | metrics fetch ms | direct overhead % | steps/s | compile+first gen s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(
            f"| {r['mesh_devices']} | {r['pop']} | {r['steps_per_generation']:,} | {r['generation_s']:.3f} "
            f"| {r['members_s']:.3f} | {1e3 * r['overhead_s']:.1f} | {r['overhead_pct']:.2f} "
            f"| {1e3 * r['ask_tell_s']:.2f} | {1e3 * r['fetch_s']:.2f} | {r['direct_overhead_pct']:.3f} "
            f"| {r['steps_per_s'] / 1e3:,.0f}k | {r['generation_first_s']:.1f} |"
        )
    errors = [r["error"] for r in payload["records"] if "error" in r]
    if errors:
        out += ["", "Failed measurements:", "", *[f"- {e.splitlines()[0]}" for e in errors]]
    out += ["", "generation: trainer.generation + metrics fetch; inner training: the shard_map'd members "
            "function alone; overhead = their difference (medians; can come out slightly negative "
            "when it is below the run-to-run noise); direct overhead = (ask+tell + fetch) / generation."]
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pops", default=None, help=f"comma-separated population sizes (default {DEFAULT_POPS})")
    p.add_argument("--devices", default=DEFAULT_DEVICES, help=f"comma-separated host-device counts (default {DEFAULT_DEVICES})")
    p.add_argument("--timesteps", type=int, default=None, help="env steps per PPO run (default: RunConfig's, 32768)")
    p.add_argument("--seeds", type=int, default=2, help="seeds per member (default 2, RunConfig's)")
    p.add_argument("--repeats", type=int, default=None, help="timed generations and inner-training calls (default 3)")
    p.add_argument("--fast-repeats", type=int, default=None, help="timed ask+tell calls (default 20)")
    p.add_argument("--quick", action="store_true", help=f"tiny budgets for a smoke check: {QUICK}")
    p.add_argument("--out", help="write all records and the machine description to this JSON file")
    p.add_argument("--table", metavar="JSON", help="print the markdown table of a saved --out file and exit")
    p.add_argument("--child-timeout", type=float, default=3600, help="seconds before a device count is abandoned")
    p.add_argument("--one", type=int, metavar="DEVICES", help="(internal) measure every population on DEVICES devices here")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else {"pops": DEFAULT_POPS, "timesteps": None, "repeats": 3, "fast_repeats": 20}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    pops = [int(x) for x in args.pops.split(",")]

    if args.table:
        print(render(json.loads(Path(args.table).read_text())))
        return
    if args.one:
        measure(args.one, pops, args.timesteps, args.seeds, args.repeats, args.fast_repeats)
        return

    payload = {
        "machine": _common.machine_info(),
        "settings": {"pops": pops, "devices": args.devices, "timesteps": args.timesteps or "RunConfig default",
                     "seeds_per_member": args.seeds, "repeats": args.repeats, "fast_repeats": args.fast_repeats},
        "records": [],
    }
    start = time.perf_counter()
    for dev in (int(x) for x in args.devices.split(",")):
        child = ["--one", str(dev), "--pops", args.pops, "--seeds", str(args.seeds),
                 "--repeats", str(args.repeats), "--fast-repeats", str(args.fast_repeats)]
        if args.timesteps:
            child += ["--timesteps", str(args.timesteps)]
        t0 = time.perf_counter()
        recs = _common.run_child(__file__, child, dev, timeout=args.child_timeout)
        payload["records"] += recs
        for r in recs:
            what = (f"population {r['pop']}: generation {r['generation_s']:.2f} s, training {r['members_s']:.2f} s, "
                    f"overhead {r['overhead_pct']:.2f}% (direct {r['direct_overhead_pct']:.3f}%)"
                    if "error" not in r else "FAILED\n" + r["error"])
            print(f"[{dev} device(s)] {what}", file=sys.stderr, flush=True)
        print(f"[{dev} device(s)] done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        if args.out:
            _common.write_json(args.out, payload)
    payload["elapsed_s"] = time.perf_counter() - start
    if args.out:
        _common.write_json(args.out, payload)
    print(render(payload))
    print(f"\n(total {payload['elapsed_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()

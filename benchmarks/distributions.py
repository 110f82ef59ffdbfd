"""What meta-training over a distribution costs: compile time and time per
generation of each lever against the fixed-point run it replaces, real PPO, one process.

Settings (each a `MetaTrainer` built as `metadisco train` builds it, LPO drift, Open_ES, population
--pop, --seeds seeds per member, --timesteps steps per run, 4 envs x 64 steps per rollout):

- point, 1 env: CartPole-v1, the preset lr, the full length (the reference for the next two);
- lr_range: the same with a log-uniform lr factor in [0.5, 2] per antithetic pair (a traced leaf);
- horizons: the same with horizons [0.5, 1.0] (two programs, one drawn per generation by switch);
- point, 2 envs: CartPole-v1 and Acrobot-v1 both every generation (= "run all and mask" for a subset);
- subset 1 of 2: one of them drawn per generation (lax.map over the slot, switch over the envs).

compile_s: the first generation (trace, compile and run) minus the median of the later ones;
per-generation times (median over --repeats generations) split by what was drawn where it
varies (the horizon, the env), because a half-length generation should take about half.

Usage (from the repository root): .venv/bin/python benchmarks/distributions.py [--quick] [--out F]
"""

from __future__ import annotations

import argparse
import time

import _common

SETTINGS = {
    "point, 1 env": dict(envs=("CartPole-v1",)),
    "lr_range [0.5, 2] per pair": dict(envs=("CartPole-v1",), distribution={"lr_range": (0.5, 2.0)}),
    "horizons [0.5, 1]": dict(envs=("CartPole-v1",), distribution={"horizons": (0.5, 1.0)}),
    "point, 2 envs": dict(envs=("CartPole-v1", "Acrobot-v1"), fitness="final_eval_norm"),
    "subset 1 of 2 envs": dict(envs=("CartPole-v1", "Acrobot-v1"), fitness="final_eval_norm",
                               distribution={"envs_per_generation": 1}),
}


def measure(name: str, change: dict, pop: int, seeds: int, timesteps: int, repeats: int) -> dict:
    import jax

    from metadisco.config import DistributionConfig, ESConfig, InnerConfig, RunConfig, validate
    from metadisco.engine import MetaTrainer, fetch

    change = dict(change)
    dist = DistributionConfig(**change.pop("distribution", {}))
    cfg = validate(RunConfig(es=ESConfig(population_size=pop), seeds_per_member=seeds, eval_every=0,
                             inner=InnerConfig(total_timesteps=timesteps, num_envs=4, num_steps=64),
                             distribution=dist, **change))
    trainer = MetaTrainer(cfg)
    state = trainer.replicate(fetch(trainer.init()))
    baseline = trainer.replicate(fetch(trainer.baseline_template()))  # PPO's baseline is not what is timed
    times, drawn = [], []
    for gen in range(repeats + 1):
        t0 = time.perf_counter()
        state, metrics = trainer.generation(state, baseline, gen)
        metrics = fetch(metrics)
        times.append(time.perf_counter() - t0)
        d = fetch(trainer.draw_of(gen))
        drawn.append(trainer.problems[int(d.envs[0]) * len(trainer.horizons) + int(d.horizon)].name
                     if trainer.env_slots == 1 else "all")
    later = times[1:]
    by_draw = {k: _common.median([t for t, d in zip(later, drawn[1:]) if d == k]) for k in sorted(set(drawn[1:]))}
    jax.clear_caches()
    return {"setting": name, "compile_s": times[0] - _common.median(later), "generation_s": _common.median(later),
            "by_draw_s": by_draw, "generations": len(later)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pop", type=int, default=8)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--timesteps", type=int, default=16384)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="2048 steps, 3 repeats: a smoke check")
    p.add_argument("--out", help="write the records as JSON")
    args = p.parse_args()
    if args.quick:
        args.timesteps, args.repeats = 2048, 3
    _common.ensure_repo_on_path()
    records = []
    for name, change in SETTINGS.items():
        r = measure(name, change, args.pop, args.seeds, args.timesteps, args.repeats)
        records.append(r)
        draws = ", ".join(f"{k} {v:.3f}" for k, v in r["by_draw_s"].items())
        print(f"{name:28s} compile {r['compile_s']:6.1f} s   generation {r['generation_s']:.3f} s   ({draws})", flush=True)
    if args.out:
        _common.write_json(args.out, {"machine": _common.machine_info(), "args": vars(args), "records": records})


if __name__ == "__main__":
    main()

"""Noise controls at equal compute: search health and result per ES setting on one problem.

Each setting is a list of FIELD=VALUE overrides of one experiment (by default the trust-region
rediscovery problem, `rediscover_trust_region`), run for `--generations` generations with the same
number of PPO runs per generation (population x seeds_per_member) in every row. Per setting:

- health: the mean split-half cosine of the ES gradient over the run (analysis.search_health;
  n/a with one seed per member), with its standard error over generations;
- pop. mean first/last 3: the population's mean fitness over its first and last 3 generations;
- vs start: the ES mean after the last generation against the run's start point on the same
  `eval_seeds` fresh seeds (paired difference, 95% t-interval), and the share of the gap from the
  start to PPO it closed;
- wall: seconds for the run (compile included).

The settings differ from the experiment's own in one field each (the 40-weight row: the whole
drift_mix family, progress-dependent, from the same start). Usage (from the repository root;
about 3.5 minutes per setting on 2 cores, 35 in all):

    .venv/bin/python benchmarks/search_settings.py --out docs/benchmark_results/search_settings.md
    .venv/bin/python benchmarks/search_settings.py --generations 2 --only base   # smoke check
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

SETTINGS = {  # name -> overrides of the experiment (every row: 32 PPO runs per generation)
    "base": [],
    "8 x 4 seeds": ["es.population_size=8", "seeds_per_member=4"],
    "32 x 1 seed": ["es.population_size=32", "seeds_per_member=1"],
    "weights start at -0.15 (v1)": ["objectives.drift.ppo_weight=-0.15", "objectives.drift.other_weight=-0.15"],
    "sigma 0.05": ["es.sigma_init=0.05"],
    "sigma 0.2": ["es.sigma_init=0.2"],
    "z-score shaping": ["es.fitness_shaping=z_score"],
    "SNES": ["es.strategy=SNES"],
    "CMA-ES": ["es.strategy=CMA_ES"],
    "40-weight family": ["objectives.drift.terms=", "objectives.drift.schedule=true"],
}


def run_setting(experiment: str, overrides: list[str], generations: int, eval_seeds: int, root: Path) -> dict:
    from metadisco import config as config_lib
    from metadisco.analysis.runs import Run
    from metadisco.train import run

    cfg = config_lib.resolve(experiment, [*overrides, f"generations={generations}", f"eval_every={generations}",
                                          f"eval_seeds={eval_seeds}"])
    t = time.perf_counter()
    path = run(cfg, root, progress=False, log=lambda *a: None)
    wall = time.perf_counter() - t
    rows = Run(path).metrics()
    cos = [r["health/grad_cos"] for r in rows if r.get("health/grad_cos") is not None]
    k = min(3, len(rows))
    last = rows[-1]
    return {
        "health": sum(cos) / len(cos) if cos else None,
        "health_se": (math.sqrt(sum((c - sum(cos) / len(cos)) ** 2 for c in cos) / (len(cos) - 1) / len(cos))
                      if len(cos) > 1 else None),
        "first": sum(r["fitness_mean"] for r in rows[:k]) / k,
        "last": sum(r["fitness_mean"] for r in rows[-k:]) / k,
        **{key: last.get(key) for key in ("eval_mean_fitness", "eval_start_fitness", "eval_ppo_fitness", "eval_vs_start",
                                           "eval_vs_start_low", "eval_vs_start_high", "eval_gap_closed")},
        "wall_s": wall,
    }


def table(results: dict, experiment: str, generations: int) -> str:
    lines = [f"Experiment `{experiment}`, {generations} generations per setting; every row 32 PPO runs per generation; "
             "health: mean split-half gradient cosine over the generations +- its standard error.",
             "", "| setting | health (cos) | pop. mean first 3 -> last 3 | ES mean vs start [95% CI] | gap closed | wall |",
             "|---|---|---|---|---|---|"]
    for name, r in results.items():
        health = "n/a (1 seed)" if r["health"] is None else f"{r['health']:+.2f} +- {r['health_se']:.2f}"
        vs = (f"{r['eval_mean_fitness']:.0f} vs {r['eval_start_fitness']:.0f}: {r['eval_vs_start']:+.0f} "
              f"[{r['eval_vs_start_low']:+.0f}, {r['eval_vs_start_high']:+.0f}]")
        lines.append(f"| {name} | {health} | {r['first']:.0f} -> {r['last']:.0f} | {vs} | "
                     f"{r['eval_gap_closed']:.0%} | {r['wall_s']:.0f} s |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="rediscover_trust_region")
    p.add_argument("--generations", type=int, default=30)
    p.add_argument("--eval-seeds", type=int, default=32, help="fresh seeds of the final check against the start")
    p.add_argument("--only", nargs="*", help="settings to run (default: all)")
    p.add_argument("--base", nargs="*", default=[], help="overrides every setting starts from")
    p.add_argument("--out", help="markdown table to write (and a .json beside it)")
    p.add_argument("--previous", help="JSON lines of settings already run (this script's output), kept in the table")
    args = p.parse_args(argv)
    results = {}
    if args.previous:
        for line in Path(args.previous).read_text().splitlines():
            results |= json.loads(line)
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in SETTINGS.items():
            if (args.only and name not in args.only) or name in results:
                continue
            results[name] = run_setting(args.experiment, [*args.base, *overrides], args.generations, args.eval_seeds,
                                        Path(tmp) / name)
            print(json.dumps({name: results[name]}), flush=True)
    text = table(results, args.experiment, args.generations)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

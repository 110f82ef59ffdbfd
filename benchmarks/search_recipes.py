"""Signal per compute of search recipes on an open two-game problem, at equal CPU time.

    python benchmarks/search_recipes.py --seconds 60 --seeds 3 --out FILE.json [--recipes A,B,...]

The problem (PROBLEM): DiscoBench's search space at CPU size (drift_mix with the learned clipped value
loss, both starting at PPO bit for bit; fitness the final policy's return normalised per game) on a
pair with the character of DiscoBench's split at CPU size: CartPole-v1, whose returns spread widely
between seeds at this budget, and Acrobot-v1, whose returns spread far less once PPO has learnt
(Catch-bsuite, the nearly deterministic game first chosen, is not learnt by PPO at this budget: the
normaliser's guard refuses it). Each recipe (RECIPES: config overrides)
searches for `--seconds` of generations after its first (which compiles), on each of `--seeds` search
seeds, in one process per recipe and seed (the compile cache on, so a recipe's later seeds reuse
its programs). Two figures per run:

    signal/s   the mean split-half gradient cosine (search health) over the run's generations,
               divided by the mean seconds per generation (n/a with one seed per member)
    gain       the ES mean against its start, which is PPO, on 16 fresh seeds per game at 4x the
               budget it searched at (every recipe judged at the same longer budget): per game and
               overall, paired 95% intervals; with horizons, the longest one is the budget

Recipes differ from BASE in one lever each, except `lpo` (LPO's: one seed per member, shared,
z-scored fitness).

How the table chooses a recipe (CHOICE, fixed before seeds 1 and 2 ran): a recipe whose gain interval
lies above 0 in at least 2 of 3 search seeds, the highest median gain among them; where none does (no
recipe measurably improves its start within this compute), the highest median signal/s among the
recipes whose median gain is at least the base's (`every`), since the gradient's quality per second is
then all that was measured. Levers about games (drawn, ranks, worst) apply to multi-game problems only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine_info, write_json

PROBLEM = {
    "envs": "CartPole-v1,Acrobot-v1", "fitness": "final_eval_norm", "eval_every": "0",
    "objectives.evolve": "drift,value_loss", "objectives.drift": "drift_mix",
    "objectives.value_loss": "learned_clipped", "es.strategy": "Open_ES", "es.population_size": "8",
    "es.sigma_init": "0.1", "es.lr": "0.05", "seeds_per_member": "2", "inner.total_timesteps": "16384",
    "inner.num_envs": "16", "inner.num_steps": "32", "baseline_seeds": "16", "generations": "1000",
}  # 16 baseline seeds: with 8, PPO's Acrobot gain at this budget was within 2 standard errors at search seeds 1 and 2
BASE = {"distribution.envs_per_generation": "0"}  # every game each generation, the mean of normalised returns
RECIPES = {
    "drawn": {"distribution.envs_per_generation": "1"},  # one game drawn per generation (the H200 run's)
    "every": {},
    "ranks": {"distribution.env_fitness": "rank"},
    "worst": {"distribution.env_fitness": "worst"},
    "seeds4-pop4": {"seeds_per_member": "4", "es.population_size": "4"},  # the same trainings per generation
    "sigma0.03": {"es.sigma_init": "0.03"},
    "lpo": {"seeds_per_member": "1", "es.fitness_shaping": "z_score"},
    "pairwise": {"es.fitness_shaping": "pairwise"},
    "horizons": {"distribution.horizons": "0.25,0.5,1.0"},
}
JUDGED_AT = 4  # x the searched budget (a recipe's longest horizon is its budget: 1.0 here)
JUDGE_SEEDS = 16
# Every recipe's ES mean judged alike: the problem at 4x the budget, 16 fresh seeds per game, its start
# (PPO) and PPO's normaliser trained once for all (seed 0 of the judge's own streams)
JUDGE = PROBLEM | {"inner.total_timesteps": str(int(PROBLEM["inner.total_timesteps"]) * JUDGED_AT),
                   "eval_seeds": str(JUDGE_SEEDS), "seed": "0"}

CHILD = r"""
import json, sys, time
from pathlib import Path
from metadisco import compile_cache
compile_cache.configure()  # before jax: a recipe's later seeds, and every judge, reuse the programs
import numpy as np
from metadisco.config import resolve, run_plan
from metadisco.engine import MetaTrainer
from metadisco.scoring import fetch
from metadisco.core import streams
overrides, seconds = json.loads(sys.argv[1]), float(sys.argv[2])
cfg = resolve(None, [f"{k}={v}" for k, v in overrides.items()])
trainer = MetaTrainer(run_plan(cfg))
baseline = trainer.replicate(fetch(trainer.baseline()))
state = trainer.replicate(fetch(trainer.init()))
walls, cosines, g = [], [], 0
while True:
    t = time.perf_counter()
    state, metrics = trainer.generation(state, baseline, g)
    record = trainer.record(g, fetch(metrics), time.perf_counter() - t)
    if g:  # the first compiles
        walls.append(record.wall_time_s)
        if record.health is not None and record.health.grad_cos is not None and np.isfinite(record.health.grad_cos):
            cosines.append(record.health.grad_cos)
    g += 1
    if sum(walls) >= seconds:
        break
mean = fetch(trainer.mean_params(fetch(state)))
judge = json.loads(sys.argv[4])  # one judge for every run: the same program, fresh seeds and PPO
judge_cfg = resolve(None, [f"{k}={v}" for k, v in judge.items()])
judge_trainer = MetaTrainer(run_plan(judge_cfg))
stored = Path(sys.argv[3])  # the judge's PPO baseline, computed by the first run that needs it
if stored.exists():
    from metadisco.scoring import Baseline
    judge_baseline = Baseline(**{k: np.asarray(v) for k, v in json.loads(stored.read_text()).items()})
else:
    judge_baseline = fetch(judge_trainer.baseline())
    stored.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in vars(judge_baseline).items()}))
keys = (streams.key(judge_cfg.seed, streams.Stream.COMPARISON, 0), streams.key(judge_cfg.seed, streams.Stream.VALIDATION, 0))
c, _ = judge_trainer.checks.compare(mean, judge_baseline, keys)
print("RESULT " + json.dumps({
    "generations": g, "search_s": sum(walls), "s_per_generation": sum(walls) / len(walls),
    "cosine": float(np.mean(cosines)) if cosines else None,
    "gain": [c.vs_start.value, c.vs_start.low, c.vs_start.high],
    "games": {p.name: [p.vs_start.value, p.vs_start.low, p.vs_start.high] for p in c.problems},
}))
"""


def one(recipe: str, seed: int, seconds: float, judge_baseline: Path) -> dict:
    overrides = PROBLEM | BASE | RECIPES[recipe] | {"seed": str(seed)}
    t = time.perf_counter()
    args = [json.dumps(overrides), str(seconds), str(judge_baseline), json.dumps(JUDGE)]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=REPO, capture_output=True, text=True, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"recipe": recipe, "seed": seed, "error": proc.stderr[-2000:]}
    out = json.loads(lines[-1].removeprefix("RESULT "))
    return {"recipe": recipe, "seed": seed, "wall_s": time.perf_counter() - t, **out}


def _range(xs, fmt="+.3f") -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}, {max(xs):{fmt}}]"


def table(records: list[dict]) -> str:
    games = sorted({g for r in records if "games" in r for g in r["games"]})
    head = ("| recipe | runs | generations | split-half cosine | signal/s (cosine / s per generation) | gain overall "
            "| above 0 | " + " | ".join(f"gain {g}" for g in games) + " |")
    lines = [head, "|" + "---|" * (7 + len(games))]
    for recipe in dict.fromkeys(r["recipe"] for r in records):
        ok = [r for r in records if r["recipe"] == recipe and "error" not in r]
        if not ok:
            lines.append(f"| {recipe} | 0 (failed) |" + " |" * (5 + len(games)))
            continue
        signal = [r["cosine"] / r["s_per_generation"] if r["cosine"] is not None else None for r in ok]
        above = sum(r["gain"][1] > 0 for r in ok)
        lines.append(
            f"| {recipe} | {len(ok)} | {_range([r['generations'] for r in ok], '.0f')} | "
            f"{_range([r['cosine'] for r in ok], '+.2f')} | {_range(signal, '+.3f')} | "
            f"{_range([r['gain'][0] for r in ok])} | {above} of {len(ok)} | "
            + " | ".join(_range([r["games"][g][0] for r in ok]) for g in games) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="search time of each run, after its first generation")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--also", type=Path, help="an earlier --out file whose records join the table")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--out")
    args = parser.parse_args()
    recipes = args.recipes.split(",")
    unknown = sorted(set(recipes) - set(RECIPES))
    if unknown:
        raise SystemExit(f"unknown recipes {unknown}; known: {', '.join(RECIPES)}")
    records = json.loads(args.also.read_text())["records"] if args.also else []
    judge_baseline = Path(tempfile.mkdtemp(prefix="recipes-")) / "judge_baseline.json"
    # seed-major: drift on the machine spreads over every recipe alike
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for recipe in recipes:
            records.append(one(recipe, seed, args.seconds, judge_baseline))
            print(json.dumps(records[-1]), flush=True)
            if args.out:
                write_json(args.out, {"machine": machine_info(), "problem": PROBLEM, "base": BASE, "recipes": RECIPES,
                                      "seconds": args.seconds, "records": records})
    print(f"\n{args.seconds:g} s of search each, judged at {JUDGED_AT}x the budget on {JUDGE_SEEDS} fresh seeds per game "
          "(median [min, max] over search seeds):\n")
    print(table(records))


if __name__ == "__main__":
    main()

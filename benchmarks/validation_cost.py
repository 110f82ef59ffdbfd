"""What meta-validation costs: MetaTrainer.check (the comparison on fresh seeds) with and without a
[validation] section, compiled once and then timed, beside a generation's time (CartPole-v1,
drift_mix, population 8 x 2 seeds, 16,384 steps, 8 fresh seeds; validation on Acrobot-v1, 8 seeds).

    python benchmarks/validation_cost.py
"""
import time

from metadisco.config import resolve, run_plan
from metadisco.engine import MetaTrainer
from metadisco.scoring import fetch

base = ["envs=CartPole-v1", "fitness=final_eval", "inner.total_timesteps=16384", "es.population_size=8", "eval_seeds=8",
        "generations=2", "eval_every=1", "objectives.drift=drift_mix", "objectives.evolve=drift"]
for extra in ([], ["validation.envs=Acrobot-v1", "validation.seeds=8"]):
    t = MetaTrainer(run_plan(resolve(None, base + extra)))
    state, baseline = t.replicate(fetch(t.init())), t.replicate(t.baseline())

    def timed(call):
        t0 = time.perf_counter()
        fetch(call())
        return time.perf_counter() - t0

    first = timed(lambda: t.check(state, baseline, 1))  # compiles
    times = [timed(lambda i=i: t.check(state, baseline, 2 + i)) for i in range(3)]
    timed(lambda: t.generation(state, baseline, 0)[1])  # compiles
    gt = [timed(lambda i=i: t.generation(state, baseline, 1 + i)[1]) for i in range(2)]
    print(extra or "no validation", f"check: first {first:.1f} s, then {min(times):.2f}-{max(times):.2f} s; "
          f"generation: {min(gt):.2f}-{max(gt):.2f} s", flush=True)

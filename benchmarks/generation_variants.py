"""What a PPO setting buys a meta-training generation: a named experiment's generation as
`metadisco train` builds it, against the same generation with its inner loops' PPO configs changed.

    python benchmarks/generation_variants.py EXPERIMENT [FIELD=VALUE ...] --variants eval_greedy=true \
        [--reps 3] [--out FILE.json]

EXPERIMENT and its overrides are what `metadisco train` takes. The run's own trainer is "run";
each variant rebuilds the evolved inner loops (`MetaTrainer(trains=...)`) with PPOConfig field
overrides (ppo_variants.py's syntax). Every trainer starts from the run's initial state and the
same PPO baseline; after one warm-up generation each (which compiles), the timed generations
alternate between trainers, the same generation index for all within a repetition, each timed
to its metrics on the host. Reported: the fastest and the median generation in seconds, and the
run's speed relative to each variant (fastest, and the median of the per-repetition ratios), with
the generation's mean fitness per trainer as a check of what was computed.
"""

from __future__ import annotations

import argparse
import functools
import time

import _common

_common.ensure_repo_on_path()


def main() -> None:
    from ppo_variants import parse_variant

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment")
    parser.add_argument("overrides", nargs="*", help="FIELD=VALUE, as `metadisco train` takes them")
    parser.add_argument("--variants", nargs="+", required=True, help="PPOConfig overrides, one variant each")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import jax

    from inner_loops import make_train
    from metadisco.config import resolve
    from metadisco.engine import MetaTrainer, fetch

    cfg = resolve(args.experiment, args.overrides)
    run = MetaTrainer(cfg)
    trainers = {"run": run}
    for text in args.variants:
        changes = parse_variant(text)
        trains = [make_train(run.envs[e], pc.replace(**changes), run.objectives)
                  for (e, _), pc in zip(run.problems, run.problem_configs)]
        trainers[text] = MetaTrainer(cfg, trains=trains)
    state = run.replicate(fetch(run.init()))
    baseline = run.replicate(fetch(run.baseline()))

    def generation(trainer, index):
        t = time.perf_counter()
        _, metrics = trainer.generation(state, baseline, index)
        metrics = {k: v.item() for k, v in fetch(metrics).items()}
        return time.perf_counter() - t, metrics["fitness_mean"]

    compile_s, fitness = {}, {}
    for label, trainer in trainers.items():
        compile_s[label], fitness[label] = generation(trainer, 0)
    index = {label: 0 for label in trainers}  # each trainer's last generation index: the same for all

    def timed_generation(label):
        index[label] += 1
        return generation(trainers[label], index[label])[0]

    times = _common.alternate({label: functools.partial(timed_generation, label) for label in trainers}, args.reps)
    speeds = {label: _common.speed_vs(t, times["run"]) for label, t in times.items()}  # the run against each
    row = {"experiment": args.experiment, "overrides": args.overrides, "backend": jax.default_backend(),
           "devices": run.mesh.devices.size, "population": cfg.es.population_size,
           "steps_per_generation": run.steps_per_generation, "first_call_s": compile_s, "times": times,
           "fitness_mean_generation_0": fitness,
           "fastest_s": {label: min(t) for label, t in times.items()},
           "median_s": {label: _common.median(t) for label, t in times.items()},
           "run_speedup_fastest": {label: s[0] for label, s in speeds.items()},
           "run_speedup_median_paired": {label: s[1] for label, s in speeds.items()}}
    _common.emit(row)
    _common.save_rows(args.out, args, [row])


if __name__ == "__main__":
    main()

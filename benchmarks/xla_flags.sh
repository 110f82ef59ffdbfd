#!/usr/bin/env bash
# XLA CPU flags a user would not set, each on its own against none, in whole PPO runs
# (benchmarks/ppo_variants.py: 8 agents, half its budgets, 3 timed calls per process; the no-op
# variant eval_greedy=true is the preset again, with no evaluation episodes to play; until issue 39
# it was reset_ratio=1, the label in docs/benchmark_results/xla_flags.jsonl). One process per flag
# set, because XLA reads its flags at start-up; the sets alternate over 2 rounds. One JSON line per
# cell on stdout:
#   bash benchmarks/xla_flags.sh > docs/benchmark_results/xla_flags.jsonl
# Other flag sets as arguments ("" is none):
#   bash benchmarks/xla_flags.sh "" --xla_backend_optimization_level=2 > docs/benchmark_results/xla_opt_level.jsonl
set -u
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  set -- "" "--xla_cpu_multi_thread_eigen=false" "--xla_cpu_use_thunk_runtime=false" \
         "--xla_cpu_enable_concurrency_optimized_scheduler=false"
fi
for round in 1 2; do
  for flags in "$@"; do
    XLA_FLAGS="$flags" .venv/bin/python benchmarks/ppo_variants.py --variants eval_greedy=true \
      --envs CartPole-v1,Breakout-MinAtar --agents 8 --reps 3 --scale 0.5 2>/dev/null |
      sed "s|^|{\"round\": $round, \"flags\": \"$flags\", \"row\": |; s|$|}|"
  done
done

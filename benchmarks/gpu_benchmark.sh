#!/usr/bin/env bash
# The GPU benchmark (docs/benchmarks.md, "On a GPU"), on any CUDA host with jax installed, one
# stage per call, from the repository root:
#
#   benchmarks/gpu_benchmark.sh cartpole     # inner_loop.py: CartPole-v1, 2048 agents, 3 paired reps
#   benchmarks/gpu_benchmark.sh minatar      # inner_loop.py: Breakout-MinAtar, 2048 agents, 3 paired reps
#   benchmarks/gpu_benchmark.sh hopper       # inner_loop.py: brax/hopper (64 envs per agent), POPS agents
#   benchmarks/gpu_benchmark.sh generation   # `metadisco train drift_mix_minatar_gpu`, 2 generations
#
# Arguments after the stage go to inner_loop.py or `metadisco train` (a smoke check on a CPU:
# `PATH=.venv/bin:$PATH benchmarks/gpu_benchmark.sh cartpole --timesteps 2048`). POPS overrides
# the population; OUT is where results go (default ./gpu_out).
# A host without package access: run `make gpu-wheels` where there is access (the locked wheels of
# what a CUDA jax image usually lacks: gymnax, evosax, brax, ...), copy the repository with its
# .whl/ folder over, and benchmarks/gpu_env.sh installs them into /tmp/site before it runs.
set -euo pipefail
source benchmarks/gpu_env.sh
python3 -c 'import jax; print("jax", jax.__version__, jax.devices())'

bench() {  # ENV NAME
  python3 benchmarks/inner_loop.py --envs "$1" --pops "${POPS:-2048}" --devices 1 --reps 3 --calls 2 \
    --mem-limit-gb 1000 --out "$OUT/inner_loop_gpu_$2.json" --markdown "$OUT/inner_loop_gpu_$2.md" "${@:3}"
}

case "${1:-}" in
  cartpole) bench CartPole-v1 cartpole "${@:2}" ;;
  minatar) bench Breakout-MinAtar minatar "${@:2}" ;;
  hopper) bench brax/hopper hopper "${@:2}" ;;
  generation)
    run=/tmp/gpu_run
    rm -rf "$run"
    python3 -c 'from metadisco.cli import entry; entry()' train drift_mix_minatar_gpu \
      generations=2 "${@:2}" --run-dir "$run" --no-progress 2>&1 | tee "$OUT/generation.log"
    cp "$run/metrics.jsonl" "$run/config.json" "$OUT/"
    ;;
  *) echo "usage: $0 cartpole|minatar|hopper|generation" >&2; exit 2 ;;
esac

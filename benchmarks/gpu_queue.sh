#!/usr/bin/env bash
# The GPU queue in one command (benchmarks/gpu_queue.py says what it does), from the repository root:
#
#   OUT=DIR benchmarks/gpu_queue.sh [--budget 9m]   # the next unfinished *_gpu experiment, then its evaluation
#   OUT=DIR benchmarks/gpu_queue.sh --smoke         # every entry on the CPU at a tiny size (state in OUT/state)
#
# The compile cache travels: OUT/compile_cache.tar.gz is restored by a later call with the same OUT;
# on a fresh machine give the last call's, `--cache-from PREVIOUS_OUT/compile_cache.tar.gz`.
#
# On a copy of the project without .git of its own (a lent GPU machine gets one), give the commit it is:
#   METADISCO_COMMIT=<git rev-parse --short HEAD, as the caller computed it> OUT=DIR benchmarks/gpu_queue.sh
# (else its summary says the commit is unknown; it never names an enclosing repository's).
#
# Exit status 0 when every command it ran finished or stopped on time, 1 when one failed.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
export OUT
exec python3 benchmarks/gpu_queue.py --out "$OUT" "$@"

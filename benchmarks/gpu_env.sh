# Sourced by the GPU scripts (gpu_benchmark.sh, gpu_queue.sh) from the repository root: on a host
# without package access, the locked wheels in .whl/ (`make gpu-wheels` where there is access)
# installed into /tmp/site, and metadisco laid out there as installed (scripts/link-layout: links to
# this checkout); the device's name and jax's devices into $OUT/gpu.txt.
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  python3 scripts/link-layout /tmp/site >/dev/null
  # PYTHONSAFEPATH: the working directory's metadisco/ (the checkout's folder, without the
  # subpackages that package-dir places in it) never comes before the laid-out package; the
  # benchmark scripts find their helpers (_common, reference_ppo) through PYTHONPATH instead.
  export PYTHONPATH=/tmp/site:$PWD/benchmarks PYTHONSAFEPATH=1
fi
export PYTHONUNBUFFERED=1
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
fi

"""Test-wide set-up: two CPU host devices (so sharding over devices is exercised), set before
jax is imported anywhere; a compilation cache of the session's own."""

import os

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
os.environ.setdefault("MPLBACKEND", "Agg")
# One compilation cache per test session, not the user's own, shared by the tests (set before jax
# starts, as the CLI does) and their `metadisco` subprocesses: tests that build the same program
# compile it once.
if "METADISCO_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["METADISCO_CACHE_DIR"] = tempfile.mkdtemp(prefix="metadisco-test-cache-")
    atexit.register(shutil.rmtree, os.environ["METADISCO_CACHE_DIR"], True)
from metadisco import compile_cache  # noqa: E402  (jax-free)

compile_cache.configure()  # also stores programs from 0.1 s of compile time: tests build many small ones

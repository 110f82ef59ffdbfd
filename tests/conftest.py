"""Test-wide set-up: two CPU host devices (so sharding over devices is exercised), set before
jax is imported anywhere; a compilation cache of the session's own for CLI subprocesses."""

import os

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
os.environ.setdefault("MPLBACKEND", "Agg")
# `metadisco` subprocesses share one compilation cache per test session, not the user's own.
if "METADISCO_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["METADISCO_CACHE_DIR"] = tempfile.mkdtemp(prefix="metadisco-test-cache-")

"""Test-wide set-up: two CPU host devices (so sharding over devices is exercised), set before
jax is imported anywhere."""

import os

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
os.environ.setdefault("MPLBACKEND", "Agg")

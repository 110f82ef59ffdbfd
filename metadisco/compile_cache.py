"""Warm starts: jax's persistent compilation cache, on for every `metadisco` command.

A second run of the same program (the same experiment, `evaluate --quick` again) loads its
compiled XLA programs from disk instead of compiling them (seconds per program on a CPU).

    METADISCO_CACHE_DIR=DIR   where the cache lives (default $XDG_CACHE_HOME/metadisco/jax,
                              else ~/.cache/metadisco/jax); "off" turns it off
    JAX_COMPILATION_CACHE_DIR, if set, wins: jax's own setting is left alone

The cache is safe to delete at any time. A corrupt entry or a directory that cannot be read or
written is not fatal: jax warns and compiles as if there were no cache. Entries are keyed on the
program, the jax/XLA versions, the devices and XLA_FLAGS, so a cache shared between machines or
device layouts never serves a wrong program. Programs that took at least
JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS to compile are stored: 0.1 s unless set (jax's own
default is 1 s). Warm, `evaluate --quick` compiles for 0.4 s and loads 6 programs in 2.0 s
(docs/benchmarks.md, "Warm starts").
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

OFF = ("", "off", "0", "false", "no", "none")
MIN_COMPILE_TIME_S = "0.1"


def default_dir(environ: MutableMapping[str, str] = os.environ) -> Path:
    home = environ.get("HOME") or os.path.expanduser("~")
    base = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return Path(base) / "metadisco" / "jax"


def configure(environ: MutableMapping[str, str] = os.environ) -> Path | None:
    """Point jax at the cache through its environment variable (so it must run before jax is
    imported, as the CLI's set-up does); returns the directory, or None when the cache is off."""
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return Path(environ["JAX_COMPILATION_CACHE_DIR"])
    value = environ.get("METADISCO_CACHE_DIR")
    if value is not None and value.strip().lower() in OFF:
        return None
    path = Path(value).expanduser() if value else default_dir(environ)
    environ["JAX_COMPILATION_CACHE_DIR"] = str(path)
    environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", MIN_COMPILE_TIME_S)
    return path


def clear_if_over(path: Path, limit_bytes: int) -> bool:
    """Delete the cache at `path` whole when its entries hold more than `limit_bytes` (jax bounds a
    cache itself only with the `filelock` package, which metadisco does not install); True when it
    did. A cache that is not there, or cannot be read, is left alone."""
    import shutil

    try:
        size = sum(entry.stat().st_size for entry in path.iterdir())
    except OSError:
        return False
    if size <= limit_bytes:
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True

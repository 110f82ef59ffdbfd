"""Warm starts: the persistent compilation cache is used across processes and never fatal."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from metadisco import compile_cache

# A small jitted program in a fresh process, set up as the CLI sets up jax; prints the result and
# whether the cache served it. The threshold is lowered so that a program this small is stored.
PROGRAM = """
import os
from metadisco import compile_cache
compile_cache.configure()
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
import jax, jax.numpy as jnp
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
f = jax.jit(lambda x: sum(jnp.tanh(x * i) for i in range(50)).sum())
print(float(f(jnp.ones((8, 8)))), "/jax/compilation_cache/cache_hits" in events)
"""


def run_program(cache_dir) -> tuple[str, bool, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["METADISCO_CACHE_DIR"] = str(cache_dir)
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    value, hit = out.stdout.split()
    return value, hit == "True", out.stderr


def test_configure_sets_jax_s_variable_and_respects_off_and_jax_s_own():
    env = {"HOME": "/home/u"}
    assert compile_cache.configure(env) == Path("/home/u/.cache/metadisco/jax")
    assert env["JAX_COMPILATION_CACHE_DIR"] == "/home/u/.cache/metadisco/jax"
    # sub-second programs are stored too (jax's default of 1 s left warm runs recompiling them)
    assert float(env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]) < 1
    env = {"HOME": "/home/u", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2"}
    compile_cache.configure(env)
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "2"  # the user's own setting wins
    env = {"METADISCO_CACHE_DIR": "off"}
    assert compile_cache.configure(env) is None and "JAX_COMPILATION_CACHE_DIR" not in env
    env = {"METADISCO_CACHE_DIR": "/a", "JAX_COMPILATION_CACHE_DIR": "/b"}
    assert compile_cache.configure(env) == Path("/b") and env["JAX_COMPILATION_CACHE_DIR"] == "/b"
    env = {"XDG_CACHE_HOME": "/x"}
    assert compile_cache.configure(env) == Path("/x/metadisco/jax")


def test_a_second_process_compiling_the_same_program_hits_the_cache(tmp_path):
    cold_value, cold_hit, _ = run_program(tmp_path / "cache")
    warm_value, warm_hit, _ = run_program(tmp_path / "cache")
    assert not cold_hit and warm_hit
    assert warm_value == cold_value
    assert any((tmp_path / "cache").iterdir())


def test_a_corrupt_or_foreign_cache_is_ignored_not_fatal(tmp_path):
    cache = tmp_path / "cache"
    value, _, _ = run_program(cache)
    for entry in cache.iterdir():  # every entry overwritten with garbage
        if entry.is_file():
            entry.write_bytes(b"not an XLA executable")
    again, hit, _ = run_program(cache)
    assert again == value and not hit
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("x")
    assert run_program(not_a_dir)[0] == value


def test_a_cache_past_its_limit_is_cleared_whole_and_one_within_it_kept(tmp_path):
    """The suite's cache is kept between sessions (tests/conftest.py) and bounded this way."""
    cache = tmp_path / "cache"
    assert not compile_cache.clear_if_over(cache, 10)  # not there yet: nothing to do
    cache.mkdir()
    (cache / "a-cache").write_bytes(b"x" * 6)
    (cache / "b-cache").write_bytes(b"x" * 4)
    assert not compile_cache.clear_if_over(cache, 10) and len(list(cache.iterdir())) == 2  # 10 bytes: kept
    (cache / "c-cache").write_bytes(b"x")
    assert compile_cache.clear_if_over(cache, 10) and not cache.exists()  # 11 bytes: cleared whole


@pytest.mark.optimised
def test_a_test_marked_optimised_compiles_in_the_optimised_build_and_so_do_its_processes():
    """tests/conftest.py's optimised_build: jax's switch off in this process and for what it starts."""
    import jax

    assert jax.config.read("jax_disable_most_optimizations") is False
    code = "import jax; print(jax.config.read('jax_disable_most_optimizations'))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split() == ["False"]


def test_the_other_tests_compile_in_the_suites_build():
    import jax

    off = os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"].lower() in ("y", "yes", "t", "true", "on", "1")  # bool_env's
    assert jax.config.read("jax_disable_most_optimizations") is off

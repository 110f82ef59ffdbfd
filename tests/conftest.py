"""Test-wide set-up: two CPU host devices (so sharding over devices is exercised), set before
jax is imported anywhere; the suite's compilation cache, kept between sessions."""

import gc
import os
import sys

import pytest

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
os.environ.setdefault("MPLBACKEND", "Agg")
# The commands metadisco prints name `metadisco` where the PATH finds this environment's (else its path:
# metadisco.core.invocation, tested on its own in tests/test_cli.py): the suite reads them as typed.
_scripts = os.path.dirname(sys.executable)
if _scripts not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join(filter(None, (_scripts, os.environ.get("PATH"))))
# The suite's programs are tiny and run once: XLA's optimisation work costs more than it saves
# (jax's own switch: backend optimisation level 0, no expensive LLVM passes). Subprocesses inherit
# it; JAX_DISABLE_MOST_OPTIMIZATIONS=0 restores the optimised build, as `optimised_build` does for
# the tests marked `optimised`.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
from metadisco import compile_cache  # noqa: E402  (jax-free)

# Every program the suite compiles goes into its cache, however small (the CLI's threshold is 0.1 s):
# the suite compiles thousands of small programs (eager operations, small jitted helpers), once per
# worker and subprocess, and a warm run loads them instead. Measured on tests/test_distributions.py
# alone, warm, one process: 18.9 s at 0 against 43.5 s at 0.1 (docs/developing.md).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# The suite's compilation cache, beside the user's and kept between sessions: shared by the tests
# (set before jax starts, as the CLI does), their workers and their `metadisco` subprocesses, so a
# program is compiled once in a session and, while the code that builds it is unchanged, never
# again (a second `make test`: docs/developing.md). Entries are keyed on the program, jax and
# XLA_FLAGS, so clones and branches share it safely; it is cleared whole when it outgrows
# TEST_CACHE_LIMIT_BYTES (the suite stores about 44 MB per version of the code). METADISCO_CACHE_DIR,
# if set, wins: "off" for none, an empty directory for a cold session.
TEST_CACHE_LIMIT_BYTES = 1 << 30
if "METADISCO_CACHE_DIR" not in os.environ:
    test_cache = compile_cache.default_dir().with_name("jax-tests")
    compile_cache.clear_if_over(test_cache, TEST_CACHE_LIMIT_BYTES)
    try:
        test_cache.mkdir(parents=True, exist_ok=True)
        writable = os.access(test_cache, os.W_OK)
    except OSError:
        writable = False
    if not writable:  # a read-only home: a cache of this session's own, as jax would warn on every write
        import atexit
        import shutil
        import tempfile

        test_cache = tempfile.mkdtemp(prefix="metadisco-test-cache-")
        atexit.register(shutil.rmtree, test_cache, True)
    os.environ["METADISCO_CACHE_DIR"] = str(test_cache)
compile_cache.configure()  # also stores programs from 0.1 s of compile time: tests build many small ones

# Tracing makes many short-lived Python objects, and Python's default first-generation threshold is
# 700 allocations. 100,000 measured 4-7% off a pair of test files
# in one process (tests/test_objectives.py and tests/test_search_spaces.py: 69-70 s against 73-76 s;
# over the whole suite, inside its run-to-run spread).
gc.set_threshold(100_000, 50, 100)

# The end-to-end tests that each took 25 s or more on 2 busy cores (`pytest --durations=40`) carry
# `@pytest.mark.slow` (registered in pyproject.toml): `make test-fast` leaves them out for the edit
# loop; `make test` and CI run everything.


# The files that take longest, longest first (summed test time in a whole-suite run, cold, at 32eed3d):
# `make test` hands whole files to its workers (--dist loadfile) in collection order, each file to
# the first worker that is nearly done (--no-loadscope-reorder: otherwise pytest-xdist orders files
# by their number of tests), so the long ones start first and no worker is left alone with a long
# file at the end. Files not named go last.
LONGEST_FIRST = ("test_engine.py", "test_documented_commands.py", "test_evaluate.py", "test_ppo.py",
                 "test_gpu_queue.py", "test_recurrent.py", "test_cli.py", "test_search_health.py",
                 "test_search_spaces.py", "test_objectives.py", "test_plots.py", "test_notebook.py",
                 "test_distributions.py", "test_validation.py", "test_library.py", "test_multihost.py",
                 "test_next_steps.py", "test_distil_search.py", "test_distil.py", "test_export_discogen.py",
                 "test_rundir.py", "test_distil_shaping.py", "test_zoo.py", "test_learning_probes.py",
                 "test_closed_form.py", "test_layout.py", "test_compile_cache.py", "test_install.py")


def pytest_report_header(config):
    """Which build the session compiles (the tests marked `optimised`: the optimised build)."""
    value = os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"]
    off = value.lower() in ("y", "yes", "t", "true", "on", "1")  # jax's config.bool_env
    return (f"XLA: {'most optimisations off' if off else 'the optimised build'} (JAX_DISABLE_MOST_OPTIMIZATIONS={value}); "
            "tests marked optimised: the optimised build")


@pytest.fixture(autouse=True)
def optimised_build(request, monkeypatch):
    """A test marked `optimised` (resume bit for bit, the device count's bits, PPO solving CartPole)
    compiles in XLA's optimised build, the one users run: its promise is about that build. jax reads
    the switch at each compile, so the test's programs, and the processes it starts, are built so;
    it needs programs of its own (a trainer, a jit made in the test: one compiled in the suite's build
    earlier in this process would be reused). The persistent cache keys on the switch."""
    if request.node.get_closest_marker("optimised") is None:
        yield
        return
    import jax

    before = jax.config.read("jax_disable_most_optimizations")
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", before)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept


# METADISCO_COMPILE_LOG=FILE: one JSON line per test (in this process, setup to teardown) with the
# seconds jax spent tracing, lowering and compiling, the number of backend compiles and the programs
# compiled; the run ends with the log's summary (`compile_log_summary`, docs/developing.md).
PHASES = ("backend_compile_duration", "jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "cache_retrieval_time_sec")


def compile_log_summary(rows: list[dict], durations: dict[str, float], workers: int = 1, large_s: float = 1.0) -> dict:
    """A whole-suite compile log (`rows`) with each test's seconds (setup + call + teardown): the time
    by phase, the distinct and repeated programs, and the floor on `workers` (at least those in the log).

    A key seen in two tests is a program compiled twice (two workers at once, or a small eager op in
    two processes); the first compile of each key is work the suite cannot skip without dropping the
    program, so the floor is the distinct programs' compilation plus tracing and lowering, spread over
    the workers. What the tests' `metadisco` subprocesses compile is not in the log (it is in the
    durations)."""
    phases = dict.fromkeys(PHASES, 0.0)
    first, repeated, large, finished = {}, 0.0, {}, {}  # first: (program, key) -> compile s of its first compile
    for row in rows:
        for phase in PHASES:
            phases[phase] += row.get(phase, 0.0)
        for name, key, seconds in row.get("stored", []):
            if (name, key) in first:
                repeated += seconds
            else:
                first[name, key] = seconds
        if "end" in row:
            finished[row["worker"]] = max(finished.get(row["worker"], 0.0), row["end"])
    for (name, _), s in first.items():
        if s >= large_s:
            n, total = large.get(name, (0, 0.0))
            large[name] = (n + 1, total + s)
    distinct, test_s = sum(first.values(), 0.0), sum(durations.values(), 0.0)
    unavoidable = distinct + phases["jaxpr_trace_duration"] + phases["jaxpr_to_mlir_module_duration"]
    other = test_s - sum(phases.values())  # running programs, Python, subprocesses
    cores, last = max(workers, len(finished)), max(finished.values(), default=0.0)
    return {
        "tests": len(durations), "test_s": round(test_s, 1), "phases_s": {p: round(s, 1) for p, s in phases.items()},
        "distinct_programs": len(first), "distinct_compile_s": round(distinct, 1), "repeated_compile_s": round(repeated, 1),
        "large_programs": {name: {"n": n, "s": round(s, 1)} for name, (n, s) in sorted(large.items(), key=lambda kv: -kv[1][1])},
        "other_s": round(other, 1), "cores": cores, "floor_s": {"compile_trace_lower": round(unavoidable / cores, 1),
                                                                "with_the_rest": round((unavoidable + other) / cores, 1)},
        "idle_at_end_s": {w: round(last - t, 1) for w, t in sorted(finished.items())},  # waiting for the last worker
    }


def compile_log_text(s: dict) -> str:
    lines = [f"{s['tests']} tests timed, {s['test_s']} s of test time (summed over workers)"]
    lines += [f"  {phase}: {sec} s" for phase, sec in s["phases_s"].items()]
    lines.append(f"  everything else (running, Python, subprocesses): {s['other_s']} s")
    lines.append(f"distinct programs: {s['distinct_programs']}, first compiles {s['distinct_compile_s']} s; "
                 f"compiled again: {s['repeated_compile_s']} s")
    lines += [f"  {name}: {row['n']} programs of 1 s or more, {row['s']} s" for name, row in s["large_programs"].items()]
    f = s["floor_s"]
    lines.append(f"floor on {s['cores']} worker{'s' * (s['cores'] != 1)}: {f['compile_trace_lower']} s of wall time "
                 f"compiling, tracing and lowering each distinct program once; {f['with_the_rest']} s with everything else")
    if s["idle_at_end_s"]:
        lines.append("idle at the end, waiting for the last worker: "
                     + ", ".join(f"{w} {t} s" for w, t in s["idle_at_end_s"].items()))
    return "\n".join(lines)


if os.environ.get("METADISCO_COMPILE_LOG"):
    import collections
    import json
    import time

    _compile_seconds: collections.Counter = collections.Counter()

    _programs: list = []

    def _record(event, duration, fun_name=None, **_):
        if event.startswith("/jax/core/compile/") or event == "/jax/compilation_cache/cache_retrieval_time_sec":
            _compile_seconds[event.rsplit("/", 1)[-1]] += duration
            _compile_seconds["count:" + event.rsplit("/", 1)[-1]] += 1
        if event.endswith("backend_compile_duration"):
            size = "large" if duration >= 1 else "medium" if duration >= 0.2 else "small"
            _compile_seconds["compile:" + size] += duration
            if size == "large":
                _programs.append((fun_name, round(duration, 2)))

    import jax
    from jax._src import compiler

    jax.monitoring.register_event_duration_secs_listener(_record)

    # Which programs were compiled (and stored in the cache), by key: the same key in two tests
    # is a program compiled twice; one function under many keys, configs that could converge.
    # jax has no public hook for the key: this wraps its private writer (jax 0.11.2, pinned), in
    # this diagnostic mode only.
    _keys: list = []
    _write = compiler._cache_write

    def _cache_write(cache_key, compile_time_secs, module_name, *args, **kwargs):
        _keys.append((module_name, cache_key[-16:], round(compile_time_secs, 2)))
        return _write(cache_key, compile_time_secs, module_name, *args, **kwargs)

    compiler._cache_write = _cache_write

    def pytest_runtest_setup(item):
        _compile_seconds.clear()
        _programs.clear()
        _keys.clear()

    def pytest_runtest_teardown(item, nextitem):
        with open(os.environ["METADISCO_COMPILE_LOG"], "a") as f:
            f.write(json.dumps({"test": item.nodeid, **_compile_seconds, "large": _programs, "stored": _keys,
                                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                                "end": round(time.time(), 2)}) + "\n")

    def pytest_terminal_summary(terminalreporter):
        """The log summed, where the run reports (xdist's controller; the only process without it)."""
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return
        durations = collections.defaultdict(float)
        for reports in terminalreporter.stats.values():
            for rep in reports:
                if getattr(rep, "when", None) in ("setup", "call", "teardown"):
                    durations[rep.nodeid] += rep.duration
        with open(os.environ["METADISCO_COMPILE_LOG"]) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        terminalreporter.write_sep("-", f"compile log {os.environ['METADISCO_COMPILE_LOG']}")
        workers = terminalreporter.config.getoption("numprocesses", None)  # pytest-xdist's -n
        summary = compile_log_summary(rows, durations, workers if isinstance(workers, int) else 1)
        terminalreporter.write_line(compile_log_text(summary))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def finished_runs(tmp_path_factory, worker_id):
    """The suite's finished runs (tests.helpers.FINISHED_RUNS), each trained once per session however many
    workers ask: they share the session's base folder (each worker's own is a folder inside it)."""
    from tests.helpers import FinishedRuns

    base = tmp_path_factory.getbasetemp()
    return FinishedRuns((base if worker_id == "master" else base.parent) / "finished_runs")


@pytest.fixture
def finished_run(request, finished_runs, tmp_path):
    """A test's own copy of one of the session's finished runs, the kind given by indirect parametrisation
    (`@pytest.mark.parametrize("finished_run", ["gru"], indirect=True)`), built outside the test's timed call:
    (run directory, what `metadisco train` printed making it, with the copy's path in place of the original's)."""
    kind = request.param
    made = finished_runs.built(kind)
    path = finished_runs.copy(kind, tmp_path / kind)
    return path, finished_runs.printed(kind).replace(str(made), str(path))


@pytest.fixture(scope="module")
def tiny_run(finished_runs, tmp_path_factory):
    """A module's own copy of the session's finished LPO run (FINISHED_RUNS["lpo"]: tiny_config(generations=2),
    the second generation compared with PPO on fresh seeds), for the tests that read or extend it (what a
    module writes into it, figures or evaluations, is its own)."""
    return finished_runs.copy("lpo", tmp_path_factory.mktemp("tiny_run_copy") / "run")


@pytest.fixture
def planned_evaluations(monkeypatch):
    """`metadisco evaluate` that resolves its targets, checks them and plans every environment and method
    (`evaluation.run.planned`: where a target that cannot run on an environment is refused) but trains
    nothing: [the plan's jobs, ...]."""
    from types import SimpleNamespace

    from metadisco.analysis.evaluation import render
    from metadisco.analysis.evaluation import run as evaluation

    plans = []

    def planned(targets, **kw):
        plans.append(evaluation.planned(targets, **kw)[1].jobs)
        unsaved = SimpleNamespace(out_dir=None)
        unsaved.saved = lambda out: SimpleNamespace(out_dir=out)
        return unsaved

    monkeypatch.setattr(evaluation, "evaluate", planned)
    monkeypatch.setattr("metadisco.api.refresh_report", lambda run_dir: None)
    monkeypatch.setattr(render, "save", lambda results, out: out)
    monkeypatch.setattr(render, "to_markdown", lambda results: "")
    return plans

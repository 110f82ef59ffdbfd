"""The inner-loop benchmark's harness (benchmarks/inner_loop.py, benchmarks/profiling.py): its
plan, statistics, rendering and profile summary, on fake measurements; and the test suite's compile
log summary (tests/conftest.py), on a fake log. Nothing here is timed."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import _common  # noqa: E402
import inner_loop  # noqa: E402
import profiling  # noqa: E402

from tests.conftest import compile_log_summary, compile_log_text  # noqa: E402


def record(impl, rate, rep, env="CartPole-v1", pop=8, devices=2, **extra):
    return {"impl": impl, "env": env, "pop": pop, "devices": devices, "rep": rep, "steps_per_s": rate,
            "steps_per_run": 1000, "compile_s": 5.0, "peak_rss_mb": 900.0 + pop, **extra}


def test_cells_keep_populations_that_split_over_the_devices_in_growing_order():
    cells = inner_loop.plan_cells(["A", "B"], [64, 1, 8], [1, 2])
    assert cells == [("A", 1, 1), ("A", 8, 1), ("A", 64, 1), ("A", 8, 2), ("A", 64, 2),
                     ("B", 1, 1), ("B", 8, 1), ("B", 64, 1), ("B", 8, 2), ("B", 64, 2)]
    assert inner_loop.parse_ints("1,all,2", all_value=2) == [1, 2]
    with pytest.raises(SystemExit):
        inner_loop.parse_ints("0")


def test_the_ratio_is_taken_per_paired_repetition():
    # Medians alone would give 200/200 = 1.0 either way; the pairs show the spread: 0.5, 2.0, 1.0.
    records = [record("reference", 200, 0), record("metadisco", 100, 0),
               record("reference", 100, 1), record("metadisco", 200, 1),
               record("reference", 300, 2), record("metadisco", 300, 2),
               record("metadisco", 999, 3)]  # unpaired: counts for its implementation, not for the ratio
    [row] = inner_loop.summarize(records)
    assert row["ratio"] == {"median": 1.0, "min": 0.5, "max": 2.0, "n": 3}
    assert row["metadisco"]["steps_per_s"]["n"] == 4
    assert row["reference"]["steps_per_s"] == {"median": 200.0, "min": 100.0, "max": 300.0, "n": 3}


def test_peak_memory_is_extrapolated_from_the_largest_smaller_population():
    records = [record("reference", 1, 0, pop=8), record("metadisco", 1, 0, pop=64, peak_rss_mb=3000.0),
               record("reference", 1, 0, pop=64, peak_rss_mb=2000.0), record("metadisco", 1, 0, pop=64, devices=1)]
    assert inner_loop.predicted_peak_mb(records, "CartPole-v1", 256, 2) == pytest.approx(12000.0)
    assert inner_loop.predicted_peak_mb(records, "CartPole-v1", 8, 2) is None
    assert inner_loop.predicted_peak_mb(records, "Breakout-MinAtar", 256, 2) is None
    # only what the run added above the process's base (libraries, inputs) grows with the population
    based = [record("reference", 1, 0, pop=1, peak_rss_mb=1500.0, base_rss_mb=1400.0),
             record("metadisco", 1, 0, pop=1, peak_rss_mb=1450.0, base_rss_mb=1300.0)]
    assert inner_loop.predicted_peak_mb(based, "CartPole-v1", 8, 2) == pytest.approx(1300.0 + 150.0 * 8)


def test_run_alternates_the_implementations_skips_what_would_not_fit_and_renders(monkeypatch, tmp_path):
    calls = []

    def fake_child(script, args, devices, timeout=None):
        impl, env, pop, dev = args[1], args[2], int(args[3]), int(args[4])
        calls.append((impl, env, pop, dev, devices))
        if len(calls) == 6:  # pop 4, repetition 0, metadisco
            return [{"error": "exit 1: boom\ntraceback"}]
        rate = 100.0 if impl == "reference" else 110.0
        return [{"impl": impl, "steps_per_s": rate * pop, "steps_per_run": 2048, "compile_s": 3.0,
                 "peak_rss_mb": 1000.0 * pop}]

    monkeypatch.setattr(_common, "run_child", fake_child)
    monkeypatch.setattr(_common, "machine_info", lambda: {
        "processor": "x", "cpu_model": "test cpu", "cpu_count": 2, "cpus_usable": 2,
        "load_average_at_start": [0.0, 0.0, 0.0], "python": "3", "jax": "0", "jaxlib": "0",
        "jax_devices": ["cpu:0"], "platform": "test"})
    out = tmp_path / "bench.json"
    markdown = tmp_path / "bench.md"
    inner_loop.main(["--envs", "CartPole-v1", "--pops", "2,4,64", "--devices", "2", "--reps", "2",
                     "--mem-limit-gb", "10", "--out", str(out), "--markdown", str(markdown)])
    # pop 64 is predicted at 4000 MB * 64/4 = 62.5 GB > 10 GB: skipped, never run
    assert [c[0] for c in calls] == ["reference", "metadisco"] * 4
    assert all(c[3] == c[4] == 2 for c in calls) and {c[2] for c in calls} == {2, 4}
    text = markdown.read_text()
    assert text == inner_loop.render(json.loads(out.read_text()))
    assert "| CartPole-v1 | 2 | 1.10 [1.10-1.10] | 1.10 |" in text  # pop 4: one pair left after the failure
    assert "64 agents on 2 devices: predicted peak memory 62.5 GB > --mem-limit-gb 10" in text
    assert "metadisco CartPole-v1 4x2: exit 1: boom" in text


def test_overrides_without_a_reference_setting_are_refused():
    with pytest.raises(SystemExit, match="no reference equivalent"):
        inner_loop.reference_config("CartPole-v1", 4096, (("hidden", (32, 32)),))


@pytest.mark.parametrize("env", list(inner_loop.WORKLOADS))
def test_every_workload_runs_the_same_settings_on_both_sides(env):
    overrides = inner_loop.WORKLOADS[env].overrides
    ref = inner_loop.reference_config(env, 4096, overrides)  # raises if a shared setting differs
    cfg = inner_loop.metadisco_config(env, 4096, overrides)
    assert (ref["NUM_ENVS"], ref["NUM_STEPS"]) == (cfg.num_envs, cfg.num_steps)
    assert cfg.eval_episodes == 0


def test_self_time_excludes_nested_events():
    E = profiling.Event
    events = [E("while.1", 0, 100), E("fusion.a", 10, 20), E("fusion.b", 40, 20), E("copy.2", 45, 5),
              E("after", 100, 7)]
    assert dict(profiling.self_times(events)) == {"while.1": 60, "fusion.a": 20, "fusion.b": 15, "copy.2": 5, "after": 7}


HLO = """HloModule jit_f, is_scheduled=true
FileNames
1 "/repo/inner_loops/ppo.py"
FunctionNames
1 "collect"
FileLocations
1 {file_name_id=1 function_name_id=1 line=365 end_line=365 column=4 end_column=39}
StackFrames
1 {file_location_id=1 parent_frame_id=1}

ENTRY %main.5 (x.1: f32[64,64]) -> f32[64,64] {
  %copy.10 = f32[64,64]{1,0} copy(%x.1)
  ROOT %ynn_fusion.1 = f32[64,64]{1,0} fusion(%copy.10), calls=%c, metadata={op_name="jit(f)/dot_general" stack_frame_id=1}
  %old = f32[] add(%a, %b), metadata={op_name="jit(f)/add" source_file="/repo/x.py" source_line=7}
}
"""


def test_hlo_instructions_are_traced_to_their_jax_op_and_source_line():
    sources = profiling.hlo_sources(HLO)
    assert sources["ynn_fusion.1"] == profiling.OpSource("jit(f)/dot_general", "/repo/inner_loops/ppo.py:365 (collect)")
    assert sources["copy.10"] == profiling.OpSource("", "")
    assert sources["old"].location == "/repo/x.py:7"


def test_summary_ranks_instructions_and_keeps_the_runtime_apart():
    E = profiling.Event
    threads = [[E("ThunkExecutor::Execute (wait for completion)", 0, 500), E("ynn_fusion.1", 0, 300)],
               [E("copy.10", 0, 100), E("ynn_fusion.1", 200, 100), E("$profiler.py stop_trace", 0, 9)]]
    rows = profiling.aggregate(threads, profiling.hlo_sources(HLO))
    assert [(r.name, r.self_ns, r.count) for r in rows if r.source] == [("ynn_fusion.1", 400, 2), ("copy.10", 100, 1)]
    text = profiling.render(rows)
    assert "| `ynn_fusion.1` | 0.00 | 80.0% | 2 | `dot_general` | /repo/inner_loops/ppo.py:365 (collect) |" in text
    assert "| (no source) copy | 0.00 | 20.0% |" in text
    assert "`ThunkExecutor::Execute (wait for completion)` 0.0 ms x 1" in text
    assert "stop_trace" not in text


def test_the_compile_log_floor_counts_each_program_once():
    """tests/conftest.py's compile log summary: a program compiled in two tests (same cache key) is one
    distinct program plus a repeat; the floor is the first compiles, tracing and lowering over the workers."""
    log = [
        {"test": "a", "backend_compile_duration": 7.0, "jaxpr_trace_duration": 1.0, "jaxpr_to_mlir_module_duration": 1.0,
         "stored": [["jit_train", "k1", 5.0], ["jit_add", "k2", 0.05]]},
        {"test": "b", "backend_compile_duration": 6.0, "jaxpr_trace_duration": 1.0, "jaxpr_to_mlir_module_duration": 1.0,
         "stored": [["jit_train", "k1", 4.0], ["jit__generation_impl", "k3", 2.0]]},
    ]
    log[0].update(worker="gw0", end=100.0)
    log[1].update(worker="gw1", end=130.5)
    s = compile_log_summary(log, {"tests/x.py::a": 12.5, "tests/x.py::b": 10.0})
    assert s["distinct_programs"] == 3 and s["distinct_compile_s"] == pytest.approx(7.05, abs=0.05)
    assert s["repeated_compile_s"] == 4.0
    assert s["large_programs"] == {"jit_train": {"n": 1, "s": 5.0}, "jit__generation_impl": {"n": 1, "s": 2.0}}
    assert s["other_s"] == 22.5 - 17.0  # test time less compiling, tracing and lowering
    assert s["floor_s"] == pytest.approx({"compile_trace_lower": (7.05 + 4.0) / 2, "with_the_rest": (11.05 + 5.5) / 2},
                                         abs=0.05)
    assert s["idle_at_end_s"] == {"gw0": 30.5, "gw1": 0.0}  # gw0 finished first and waited
    assert s["cores"] == 2  # one per worker in the log
    assert "floor on 2 workers" in compile_log_text(s) and "gw0 30.5 s" in compile_log_text(s)


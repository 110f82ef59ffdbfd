"""Where the test suite's time goes, and the least time it could take as it stands.

    METADISCO_COMPILE_LOG=/tmp/compile.jsonl .venv/bin/python -m pytest -n 2 --dist loadfile -q \\
        --durations=0 -p no:cacheprovider > /tmp/durations.txt
    python benchmarks/suite_time.py /tmp/compile.jsonl /tmp/durations.txt [--cores 2]

The compile log (tests/conftest.py) has one line per test: seconds of tracing, lowering and XLA
compilation in the test's own process, and every program it compiled under its compile-cache key.
A key seen in two tests is a program compiled twice (two workers at once, or a small eager op in
two processes); the first compile of each key is work the suite cannot skip without dropping the
program, so it gives the floor: distinct programs' compilation plus tracing and lowering, spread
over the cores. What the tests' `metadisco` subprocesses compile is not in the log (it is in the
durations). This module does not import jax.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

PHASES = ("backend_compile_duration", "jaxpr_trace_duration", "jaxpr_to_mlir_module_duration",
          "cache_retrieval_time_sec")
DURATION = re.compile(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+::\S+)")


def read_durations(text: str) -> dict[str, float]:
    """pytest --durations=0 output -> {test id: setup + call + teardown seconds}."""
    seconds: dict[str, float] = collections.defaultdict(float)
    for line in text.splitlines():
        m = DURATION.match(line)
        if m:
            seconds[m.group(2)] += float(m.group(1))
    return dict(seconds)


def summarize(log_lines: list[dict], durations: dict[str, float], cores: int, large_s: float = 1.0) -> dict:
    """The suite's time by phase, its distinct and repeated programs, and the floor on `cores`."""
    phases = collections.Counter()
    first: dict[tuple[str, str], tuple[str, float]] = {}  # (program, key) -> (test, compile s) of its first compile
    repeated = collections.Counter()
    for row in log_lines:
        for phase in PHASES:
            phases[phase] += row.get(phase, 0.0)
        for name, key, seconds in row.get("stored", []):
            if (name, key) in first:
                repeated[name] += seconds
            else:
                first[(name, key)] = (row["test"], seconds)
    distinct = sum(s for _, s in first.values())
    large = [(name, test, s) for (name, _), (test, s) in first.items() if s >= large_s]
    by_program = collections.Counter()
    count = collections.Counter()
    for name, _, s in large:
        by_program[name] += s
        count[name] += 1
    finished = {}  # worker -> when its last test ended
    for row in log_lines:
        if "end" in row:
            finished[row["worker"]] = max(finished.get(row["worker"], 0.0), row["end"])
    last = max(finished.values(), default=0.0)
    test_s = sum(durations.values())
    unavoidable = distinct + phases["jaxpr_trace_duration"] + phases["jaxpr_to_mlir_module_duration"]
    return {
        "tests": len(durations), "test_s": round(test_s, 1),
        "phases_s": {p: round(phases[p], 1) for p in PHASES},
        "distinct_programs": len(first), "distinct_compile_s": round(distinct, 1),
        "repeated_compile_s": round(sum(repeated.values()), 1),
        "large_programs": {name: {"n": count[name], "s": round(s, 1)} for name, s in by_program.most_common()},
        "other_s": round(test_s - sum(phases.values()), 1),  # running programs, Python, subprocesses
        "floor_s": {"compile_trace_lower": round(unavoidable / cores, 1),
                    "with_the_rest": round((unavoidable + test_s - sum(phases.values())) / cores, 1)},
        "cores": cores,
        # seconds each worker sat idle at the end, waiting for the last one (logs with worker and end)
        "idle_at_end_s": {w: round(last - t, 1) for w, t in sorted(finished.items())},
    }


def to_text(s: dict) -> str:
    lines = [f"{s['tests']} tests timed (pytest hides those under 5 ms), {s['test_s']} s of test time (summed over workers)"]
    lines += [f"  {phase}: {sec} s" for phase, sec in s["phases_s"].items()]
    lines.append(f"  everything else (running, Python, subprocesses): {s['other_s']} s")
    lines.append(f"distinct programs: {s['distinct_programs']}, first compiles {s['distinct_compile_s']} s; "
                 f"compiled again: {s['repeated_compile_s']} s")
    for name, row in s["large_programs"].items():
        lines.append(f"  {name}: {row['n']} programs of 1 s or more, {row['s']} s")
    f = s["floor_s"]
    lines.append(f"floor on {s['cores']} cores: {f['compile_trace_lower']} s of wall time compiling, tracing and "
                 f"lowering each distinct program once; {f['with_the_rest']} s with everything else")
    if s["idle_at_end_s"]:
        lines.append("idle at the end, waiting for the last worker: "
                     + ", ".join(f"{w} {t} s" for w, t in s["idle_at_end_s"].items()))
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("compile_log", type=Path, help="the METADISCO_COMPILE_LOG file of a whole-suite run")
    p.add_argument("durations", type=Path, help="that run's pytest --durations=0 output")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--json", action="store_true", help="the summary as JSON")
    args = p.parse_args(argv)
    for path in (args.compile_log, args.durations):
        if not path.is_file():
            p.error(f"no file {path}: see the module's docstring for the run that writes both")
    rows = [json.loads(line) for line in args.compile_log.read_text().splitlines() if line.strip()]
    summary = summarize(rows, read_durations(args.durations.read_text()), args.cores)
    print(json.dumps(summary, indent=1) if args.json else to_text(summary))


if __name__ == "__main__":
    main()

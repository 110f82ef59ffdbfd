"""Where the time of a compiled program goes: a jax.profiler trace summarised by HLO op.

On the CPU, XLA records one trace event per executed HLO instruction (a fusion, a while loop,
a copy) on its client threads; a while loop's event contains the events of its body. This module
turns such a trace into a table of self times (an event's duration minus that of the events
nested in it, so that nothing is counted twice), attributes every instruction to the JAX
operation and source line that produced it (the `metadata` of the optimised HLO text), and adds
them up by source line. It parses; it does not run anything, and imports jax only to read the
trace file (`summarize_trace`).

    python benchmarks/inner_loop.py --profile prof/ --envs CartPole-v1 --pops 64 --devices 2
    # -> prof/<impl>/{trace/, hlo.txt, cost_analysis.json, summary.md}
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

# Events that are not HLO instructions: the profiler's own and the thread pool's bookkeeping.
_NOT_OPS = ("ThreadpoolListener", "$", "end: ")


class Event(NamedTuple):
    name: str
    start_ns: float
    duration_ns: float


class OpSource(NamedTuple):
    op_name: str  # JAX's name path, e.g. "jit(batched)/vmap(while)/body/dot_general"
    location: str  # innermost user source line, "file:line (function)", or ""


def self_times(events: list[Event]) -> list[tuple[str, float]]:
    """[(name, self ns)] of the events of one thread: each duration minus the durations of the
    events directly nested in it (never below zero)."""
    order = sorted(range(len(events)), key=lambda i: (events[i].start_ns, -events[i].duration_ns))
    own = [e.duration_ns for e in events]
    stack: list[tuple[float, int]] = []  # (end, index) of the enclosing events
    for i in order:
        start, end = events[i].start_ns, events[i].start_ns + events[i].duration_ns
        while stack and stack[-1][0] <= start:
            stack.pop()
        if stack:
            own[stack[-1][1]] -= events[i].duration_ns
        stack.append((end, i))
    return [(e.name, max(t, 0.0)) for e, t in zip(events, own)]


_TABLE_ROW = re.compile(r"^(\d+) (.*)$")
_INSTR = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (?:.*?metadata=\{([^}]*)\})?")
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def _fields(text: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in _FIELD.findall(text)}


def hlo_sources(hlo_text: str) -> dict[str, OpSource]:
    """{instruction name: OpSource} from an optimised HLO module's text (`compiled.as_text()`).

    Reads the module's FileNames / FunctionNames / FileLocations / StackFrames tables (jax >= 0.5
    refers to them by `stack_frame_id`) or the older inline `source_file` / `source_line`.
    """
    tables: dict[str, dict[int, str]] = defaultdict(dict)
    section, sources = None, {}
    for line in hlo_text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = line
            continue
        row = _TABLE_ROW.match(line) if section else None
        if row:
            tables[section][int(row.group(1))] = row.group(2)
            continue
        section = None
        m = _INSTR.match(line)
        if m:
            meta = _fields(m.group(2) or "")
            sources[m.group(1)] = (meta.get("op_name", ""), meta)

    def location(meta: dict[str, str]) -> str:
        if "source_file" in meta:
            return f"{meta['source_file']}:{meta.get('source_line', '?')}"
        frame = tables["StackFrames"].get(int(meta.get("stack_frame_id", -1)))
        if frame is None:
            return ""
        loc = _fields(tables["FileLocations"].get(int(_fields(frame).get("file_location_id", -1)), ""))
        if not loc:
            return ""
        file = tables["FileNames"].get(int(loc["file_name_id"]), "?").strip('"')
        func = tables["FunctionNames"].get(int(loc["function_name_id"]), "?").strip('"')
        return f"{file}:{loc['line']} ({func})"

    return {name: OpSource(op_name, location(meta)) for name, (op_name, meta) in sources.items()}


class OpRow(NamedTuple):
    name: str
    self_ns: float
    count: int
    source: OpSource | None  # None: not an HLO instruction (the runtime's own events)


def aggregate(threads: list[list[Event]], sources: dict[str, OpSource]) -> list[OpRow]:
    """Self time and call count per event name over all threads, largest first; names that are
    not instructions of the HLO (the thunk executor's, waits included) have source None."""
    total, count = defaultdict(float), defaultdict(int)
    for events in threads:
        ops = [e for e in events if not e.name.startswith(_NOT_OPS)]
        for name, t in self_times(ops):
            total[name] += t
            count[name] += 1
    rows = [OpRow(n, total[n], count[n], sources.get(n)) for n in total]
    return sorted(rows, key=lambda r: -r.self_ns)


def short_path(location: str) -> str:
    """A source location without its install prefix: the package path for installed packages,
    the path relative to the working directory for the repository's own files."""
    if "site-packages/" in location:
        return location.rsplit("site-packages/", 1)[1]
    cwd = str(Path.cwd()) + "/"
    return location[len(cwd):] if location.startswith(cwd) else location


def render(rows: list[OpRow], top: int = 25, title: str = "") -> str:
    """Markdown: the top HLO instructions by self time, the top source lines (all of their
    instructions added up), and the runtime's own events apart."""
    ops = [r for r in rows if r.source is not None]
    runtime = [r for r in rows if r.source is None]
    whole = sum(r.self_ns for r in ops) or 1.0
    out = [f"## {title or 'Where the time goes'}", "",
           f"Self time of the HLO instructions executed in one call, summed over XLA's threads: "
           f"{whole / 1e6:,.1f} ms in {len(ops)} instructions.", "",
           "| HLO instruction | self ms | share | calls | JAX op | source |", "|---|---:|---:|---:|---|---|"]
    for r in ops[:top]:
        op = r.source.op_name.rsplit("/", 1)[-1] if r.source.op_name else "?"
        out.append(f"| `{r.name}` | {r.self_ns / 1e6:,.2f} | {r.self_ns / whole:.1%} | {r.count:,} "
                   f"| `{op}` | {short_path(r.source.location) or '?'} |")
    by_line = defaultdict(float)
    for r in ops:
        by_line[short_path(r.source.location) or f"(no source) {r.name.split('.')[0]}"] += r.self_ns
    out += ["", "| source line | self ms | share |", "|---|---:|---:|"]
    for loc, t in sorted(by_line.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"| {loc} | {t / 1e6:,.2f} | {t / whole:.1%} |")
    if runtime:
        out += ["", "Not HLO instructions (the runtime's own events, self time; a wait is a thread idle "
                "while another works): " + "; ".join(f"`{r.name}` {r.self_ns / 1e6:,.1f} ms x {r.count:,}"
                                                     for r in runtime[:5]) + "."]
    return "\n".join(out)


def trace_threads(trace_dir: str | Path) -> list[list[Event]]:
    """The events of every XLA thread (the host plane's lines but the Python one) of the newest
    `*.xplane.pb` under `trace_dir`. CPU programs only: a GPU trace's kernels are on device
    planes, which this does not read (open the trace in TensorBoard's profile plugin instead)."""
    from jax.profiler import ProfileData

    files = sorted(Path(trace_dir).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no *.xplane.pb under {trace_dir}")
    data = ProfileData.from_file(str(files[-1]))
    threads = []
    for plane in data.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if line.name != "python":
                threads.append([Event(e.name, e.start_ns, e.duration_ns) for e in line.events])
    return threads


def summarize_trace(trace_dir: str | Path, hlo_text: str, top: int = 25, title: str = "") -> str:
    """`render` of the trace under `trace_dir`, attributed with `hlo_text`."""
    return render(aggregate(trace_threads(trace_dir), hlo_sources(hlo_text)), top=top, title=title)

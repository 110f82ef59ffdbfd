"""A run's comparisons on fresh seeds, in words: the ES mean against PPO and its start, the pass
criterion an experiment states before it runs, and the verdict on it (jax-free).

A comparison is a metrics row's Comparison (metadisco.core.records: the engine's paired
differences with their 95% intervals); a verdict reads the row's GenerationRecord, whose
violations (metadisco.train) are the constraints the ES mean fails at that generation; the
expectation is the run's ExpectConfig. A verdict looks at what was found before it looks at the
score: an ES mean that is not a valid objective of its plug is DEGENERATE, never FOUND.
`metadisco train` prints these lines, and benchmarks/gpu_queue.py reads them back out of a
finished run directory.
"""

from __future__ import annotations

from collections.abc import Sequence

from metadisco.core.records import Comparison, GenerationRecord, Interval, Violation, completed, finite


def _interval(interval: Interval, fmt: str = "+.4g") -> str:
    return f"{interval.value:{fmt}} [{interval.low:{fmt}}, {interval.high:{fmt}}]"


def _bounded(interval: Interval | None) -> bool:
    return interval is not None and interval.bounded


def _reading(interval: Interval, other: str) -> str:
    return (f"better than {other}" if interval.low > 0 else f"worse than {other}" if interval.high < 0
            else "no difference shown")


def es_mean_vs_ppo(comparison: Comparison, subject: str = "ES mean") -> str:
    """The ES mean against PPO (and its start point, where the comparison has it) on the same
    fresh seeds, with the paired differences' 95% intervals. subject: what the run follows, in
    words (metadisco.core.strategies.searched_point: the best member for a population-based strategy)."""
    c = comparison
    text = f"{subject} {c.mean:.4g} vs PPO {c.ppo:.4g} on the same fresh seeds"
    if not _bounded(c.diff):
        return text
    text += f": difference {_interval(c.diff)} (95% t-interval; {_reading(c.diff, 'PPO')})"
    if _bounded(c.vs_start):
        text += f"; vs its start {c.start:.4g}: {_interval(c.vs_start)} ({_reading(c.vs_start, 'its start')})"
    return text


def per_problem(comparison: Comparison, beats: str) -> str | None:
    """Each training problem's comparison (against its start point where beats == "start", else against
    PPO), with its paired 95% interval, for a run of several problems; None for one problem (or a
    row from before per-problem intervals were recorded)."""
    key = "vs_start" if beats == "start" else "diff"
    parts = [(p.name, getattr(p, key)) for p in comparison.problems]
    if len(parts) < 2 or not all(_bounded(i) for _, i in parts):
        return None
    return ", ".join(f"{name} {_interval(i)}" for name, i in parts)


def trade(comparison: Comparison, beats: str) -> str | None:
    """The warning for a search that traded one problem for another: some problem's interval (against
    the start where beats == "start", else PPO) above 0 while another's is below 0; None otherwise."""
    key = "vs_start" if beats == "start" else "diff"
    parts = [(p.name, getattr(p, key)) for p in comparison.problems if _bounded(getattr(p, key))]
    better = [f"{name} {_interval(i)}" for name, i in parts if i.low > 0]
    worse = [f"{name} {_interval(i)}" for name, i in parts if i.high < 0]
    if not (better and worse):
        return None
    return (f"warning: a trade, not a gain: it improves {', '.join(better)} while {', '.join(worse)} gets worse "
            "(paired 95% intervals); the mean over problems hides it")


def degenerate(violations: Sequence[Violation] | None) -> str | None:
    """The DEGENERATE verdict's reason from the ES mean's violations (the Violations of a metrics
    row, as metadisco.train records them), or None when there are none."""
    if not violations:
        return None
    return "; ".join(f"its {v.plug.replace('_', ' ')} fails {v.constraint}: {v.message}" for v in violations)


def pass_criterion(expect, subject: str = "ES mean") -> str:
    """The pass criterion of an ExpectConfig, in words (subject: as `es_mean_vs_ppo`'s)."""
    other = "its start point" if expect.beats == "start" else "PPO"
    text = f"the {subject} beats {other} on fresh seeds (paired 95% interval above 0)"
    if expect.gap_closed:
        text += f" and closes at least {expect.gap_closed:.0%} of the gap from its start to PPO"
    return text


def verdict(record: GenerationRecord, expect, subject: str = "ES mean") -> str | None:
    """The verdict line of a run from its last check on fresh seeds (a generation with a
    comparison): DEGENERATE when the ES mean fails its plug's constraint checks (whether or not
    the run states an expectation); otherwise, with an expectation (ExpectConfig.beats), found or
    not (found but UNCHECKED where the row holds no record of those checks), the comparison that is
    the point of the run with its interval, and the pass criterion; else None. subject: as
    `es_mean_vs_ppo`'s."""
    c = record.comparison
    if c is None:
        return None
    after = f"after generation {completed(record)}"
    reason = degenerate(record.violations.mean if record.violations is not None else None)
    if reason:
        return (f"verdict: DEGENERATE {after}: the {subject} is not a valid objective, whatever it scores: {reason} "
                f"({es_mean_vs_ppo(c, subject)})")
    if not expect.beats:
        return None
    point = c.vs_start if expect.beats == "start" else c.diff
    other = "its start point" if expect.beats == "start" else "PPO"
    found = _bounded(point) and point.low > 0
    text = f"the point of this run is the {subject} against {other} on fresh seeds: {_interval(point)}"
    has_gap = c.gap_closed is not None and finite(c.gap_closed.value)
    if has_gap:
        text += f", closing {_interval(c.gap_closed, '.0%')} of the gap from its start to PPO"
    if expect.gap_closed:
        if not has_gap:
            text += " (no gap to close: its start is not below PPO)"
        found = found and has_gap and c.gap_closed.value >= expect.gap_closed
    games = per_problem(c, expect.beats)
    if games:
        text += f"; per problem: {games}"
    warning = trade(c, expect.beats)
    if warning:
        text += f"; {warning}"
    if found and record.violations is None:  # a score alone never makes a discovery
        return (f"verdict: UNCHECKED {after}: {text}, but no constraint check of what was found was recorded "
                f"with this comparison, so it is not called found (pass: {pass_criterion(expect, subject)}); "
                "`metadisco evaluate RUN` checks it before it trains")
    return f"verdict: {'FOUND' if found else 'NOT FOUND'} {after}: {text} (pass: {pass_criterion(expect, subject)})"

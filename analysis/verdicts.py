"""A run's comparisons on fresh seeds, in words: the ES mean against PPO and its start, the pass
criterion an experiment states before it runs, and the verdict on it (jax-free).

Rows are metrics.jsonl evaluation rows (metadisco.engine writes `eval_*` keys with `_low`/`_high`
95% bounds; metadisco.train adds `eval_mean_violations`, the constraints the ES mean fails at that
generation); the expectation is the run's ExpectConfig. A verdict looks at what was found before
it looks at the score: an ES mean that is not a valid objective of its plug is DEGENERATE, never
FOUND. `metadisco train` prints these lines, and benchmarks/gpu_queue.py reads them back out of a
finished run directory.
"""

from __future__ import annotations

import numpy as np

from metadisco.analysis.runs import completed


def _interval(row: dict, key: str, fmt: str = "+.4g") -> str:
    return f"{row[key]:{fmt}} [{row[key + '_low']:{fmt}}, {row[key + '_high']:{fmt}}]"


def _has_interval(row: dict, key: str) -> bool:
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    return low is not None and high is not None and bool(np.isfinite(low) and np.isfinite(high))


def _reading(row: dict, key: str, other: str) -> str:
    low, high = row[f"{key}_low"], row[f"{key}_high"]
    return f"better than {other}" if low > 0 else f"worse than {other}" if high < 0 else "no difference shown"


def es_mean_vs_ppo(row: dict) -> str:
    """The ES mean against PPO (and its start point, where the row has it) on the same fresh
    seeds, with the paired differences' 95% intervals."""
    text = f"ES mean {row['eval_mean_fitness']:.4g} vs PPO {row['eval_ppo_fitness']:.4g} on the same fresh seeds"
    if not _has_interval(row, "eval_diff"):
        return text
    text += f": difference {_interval(row, 'eval_diff')} (95% t-interval; {_reading(row, 'eval_diff', 'PPO')})"
    if _has_interval(row, "eval_vs_start"):
        text += (f"; vs its start {row['eval_start_fitness']:.4g}: {_interval(row, 'eval_vs_start')} "
                 f"({_reading(row, 'eval_vs_start', 'its start')})")
    return text


def degenerate(violations) -> str | None:
    """The DEGENERATE verdict's reason from the ES mean's violations ("plug/constraint: message"
    strings, as metadisco.train stores them), or None when there are none."""
    if not violations:
        return None
    parts = []
    for v in violations:
        where, _, message = v.partition(": ")
        plug, _, constraint = where.partition("/")
        parts.append(f"its {plug.replace('_', ' ')} fails {constraint}: {message}")
    return "; ".join(parts)


def objectives_signature(objectives) -> str:
    """What an expectation is written for: the objective at each plug point and which evolve
    (an ObjectivesConfig), e.g. "drift=ppo_clip, value_loss=value_loss_mix, shaping=none; evolving value_loss"."""
    from metadisco.core.plugs import PLUGS

    return (", ".join(f"{p}={getattr(objectives, p).name}" for p in PLUGS)
            + f"; evolving {', '.join(objectives.evolve)}")


def pass_criterion(expect) -> str:
    """The pass criterion of an ExpectConfig, in words."""
    other = "its start point" if expect.beats == "start" else "PPO"
    text = f"the ES mean beats {other} on fresh seeds (paired 95% interval above 0)"
    if expect.gap_closed:
        text += f" and closes at least {expect.gap_closed:.0%} of the gap from its start to PPO"
    return text


def verdict(row: dict, expect) -> str | None:
    """The verdict line of a run from its last check on fresh seeds (an evaluation row):
    DEGENERATE when the ES mean fails its plug's constraint checks (whether or not the run states
    an expectation); otherwise, with an expectation (ExpectConfig.beats), found or not, the
    comparison that is the point of the run with its interval, and the pass criterion; else None."""
    if "eval_mean_fitness" not in row:
        return None
    after = f"after generation {completed(row)}"
    reason = degenerate(row.get("eval_mean_violations"))
    if reason:
        return (f"verdict: DEGENERATE {after}: the ES mean is not a valid objective, whatever it scores: {reason} "
                f"({es_mean_vs_ppo(row)})")
    if not expect.beats:
        return None
    key = "eval_vs_start" if expect.beats == "start" else "eval_diff"
    other = "its start point" if expect.beats == "start" else "PPO"
    found = _has_interval(row, key) and row[f"{key}_low"] > 0
    text = f"the point of this run is the ES mean against {other} on fresh seeds: {_interval(row, key)}"
    closed = row.get("eval_gap_closed")
    has_gap = closed is not None and bool(np.isfinite(closed))
    if has_gap:
        text += f", closing {_interval(row, 'eval_gap_closed', '.0%')} of the gap from its start to PPO"
    if expect.gap_closed:
        if not has_gap:
            text += " (no gap to close: its start is not below PPO)"
        found = found and has_gap and closed >= expect.gap_closed
    return f"verdict: {'FOUND' if found else 'NOT FOUND'} {after}: {text} (pass: {pass_criterion(expect)})"

"""A run's comparisons on fresh seeds, in words: the ES mean against PPO and its start, the pass
criterion an experiment states before it runs, and the verdict on it (jax-free).

Rows are metrics.jsonl evaluation rows (metadisco.engine writes `eval_*` keys with `_low`/`_high`
95% bounds); the expectation is the run's ExpectConfig. `metadisco train` prints these lines, and
benchmarks/gpu_queue.py reads them back out of a finished run directory.
"""

from __future__ import annotations

import numpy as np

from analysis.runs import completed


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


def pass_criterion(expect) -> str:
    """The pass criterion of an ExpectConfig, in words."""
    other = "its start point" if expect.beats == "start" else "PPO"
    text = f"the ES mean beats {other} on fresh seeds (paired 95% interval above 0)"
    if expect.gap_closed:
        text += f" and closes at least {expect.gap_closed:.0%} of the gap from its start to PPO"
    return text


def verdict(row: dict, expect) -> str | None:
    """The verdict line of a run with an expectation (ExpectConfig.beats), from its last check on
    fresh seeds (an evaluation row): found or not, the comparison that is the point of the run
    with its interval, and the pass criterion; None without one."""
    if not expect.beats or "eval_mean_fitness" not in row:
        return None
    key = "eval_vs_start" if expect.beats == "start" else "eval_diff"
    other = "its start point" if expect.beats == "start" else "PPO"
    found = _has_interval(row, key) and row[f"{key}_low"] > 0
    text = f"the point of this run is the ES mean against {other} on fresh seeds: {_interval(row, key)}"
    if row.get("eval_gap_closed") is not None and np.isfinite(row["eval_gap_closed"]):
        text += f", closing {_interval(row, 'eval_gap_closed', '.0%')} of the gap from its start to PPO"
    if expect.gap_closed:
        closed = row.get("eval_gap_closed")
        found = found and closed is not None and bool(np.isfinite(closed)) and closed >= expect.gap_closed
    return (f"verdict: {'FOUND' if found else 'NOT FOUND'} after generation {completed(row)}: {text} "
            f"(pass: {pass_criterion(expect)})")

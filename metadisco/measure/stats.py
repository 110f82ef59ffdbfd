"""Statistics for RL evaluation, after Agarwal et al. 2021, "Deep RL at the Edge of the
Statistical Precipice" (the rliable library), in plain numpy/scipy.

Score arrays are shaped [num_runs, num_tasks] (seeds x environments) and are assumed to be
normalised per task by the caller. Confidence intervals come from a stratified percentile
bootstrap: runs are resampled with replacement independently within each task, so resamples
never mix tasks. Everything is deterministic given ``seed``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from metadisco.core.scores import normalise

__all__ = [
    "iqm",
    "mean",
    "median",
    "optimality_gap",
    "stratified_bootstrap_ci",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "performance_profile",
    "performance_profile_ci",
    "t_interval",
    "mean_ci",
    "normalized_ci",
    "summarize",
]

# Upper bound on resampled elements held at once; bootstrap reps are processed in chunks.
_MAX_ELEMENTS = 1 << 22


# ----------------------------------------------------------------------------- validation


def _check_scores(scores, name: str = "scores") -> np.ndarray:
    arr = np.asarray(scores, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [num_runs, num_tasks], got ndim={arr.ndim}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); need at least one run and one task")
    _check_finite(arr, name)
    return arr


def _check_finite(arr: np.ndarray, name: str) -> None:
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN ({int(np.isnan(arr).sum())} entries)")
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains inf ({int(np.isinf(arr).sum())} entries)")


def _check_pair(scores_x, scores_y) -> tuple[np.ndarray, np.ndarray]:
    x, y = _check_scores(scores_x, "scores_x"), _check_scores(scores_y, "scores_y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"scores_x and scores_y must have the same number of tasks, got {x.shape[1]} and {y.shape[1]}"
        )
    return x, y


def _check_ci_args(reps: int, confidence: float) -> None:
    if int(reps) != reps or reps < 1:
        raise ValueError(f"reps must be a positive integer, got {reps!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _check_taus(taus) -> np.ndarray:
    t = np.asarray(taus, dtype=float)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"taus must be a non-empty 1-D array, got shape {t.shape}")
    if np.isnan(t).any():
        raise ValueError("taus contains NaN")
    return t


# ------------------------------------------------- batched kernels on [..., runs, tasks]


def _iqm(x: np.ndarray) -> np.ndarray:
    from scipy import stats  # imported on first use: scipy.stats costs a second at start-up

    return stats.trim_mean(x.reshape(*x.shape[:-2], -1), proportiontocut=0.25, axis=-1)


def _mean(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=-2).mean(axis=-1)


def _median(x: np.ndarray) -> np.ndarray:
    return np.median(x.mean(axis=-2), axis=-1)


def _optimality_gap(x: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    flat = np.minimum(x, gamma).reshape(*x.shape[:-2], -1)
    return gamma - flat.mean(axis=-1)


def _poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # Mann-Whitney U of x over y per task from average ranks (ties count 0.5), / (n*m).
    n, m = x.shape[-2], y.shape[-2]
    from scipy import stats

    ranks = stats.rankdata(np.concatenate([x, y], axis=-2), axis=-2)
    u = ranks[..., :n, :].sum(axis=-2) - n * (n + 1) / 2
    return (u / (n * m)).mean(axis=-1)


def _profile(x: np.ndarray, taus: np.ndarray) -> np.ndarray:
    flat = x.reshape(*x.shape[:-2], -1)
    return np.stack([(flat > t).mean(axis=-1) for t in taus], axis=-1)


# --------------------------------------------------------------------------- aggregates


def iqm(scores) -> float:
    """Interquartile mean of ``scores`` [runs, tasks], all runs and tasks pooled
    (rliable ``aggregate_iqm``: 25% trimmed from each end)."""
    return float(_iqm(_check_scores(scores)))


def mean(scores) -> float:
    """Mean over tasks of the per-task mean score; ``scores`` is [runs, tasks]."""
    return float(_mean(_check_scores(scores)))


def median(scores) -> float:
    """Median over tasks of the per-task mean score; ``scores`` is [runs, tasks]."""
    return float(_median(_check_scores(scores)))


def optimality_gap(scores, gamma: float = 1.0) -> float:
    """Optimality gap ``gamma - mean(min(scores, gamma))`` over [runs, tasks], pooled:
    how far scores fall short of the target ``gamma`` (lower is better)."""
    return float(_optimality_gap(_check_scores(scores), gamma))


_BATCHED = {iqm: _iqm, mean: _mean, median: _median, optimality_gap: _optimality_gap}


def _batched(fn: Callable) -> Callable[[np.ndarray], np.ndarray]:
    """Batched [B, runs, tasks] -> [B] version of an aggregate; loops for unknown callables."""
    if fn in _BATCHED:
        return _BATCHED[fn]
    if isinstance(fn, functools.partial) and fn.func in _BATCHED:
        return functools.partial(_BATCHED[fn.func], *fn.args, **fn.keywords)
    return lambda batch: np.array([fn(s) for s in batch], dtype=float)


# ---------------------------------------------------------------------------- bootstrap


def _bootstrap(stat, samples, reps, confidence, seed) -> tuple[np.ndarray, np.ndarray]:
    """Stratified percentile bootstrap. ``stat`` maps resampled batches, one [B, runs_i,
    tasks] array per entry of ``samples``, to [B] or [B, K]; returns (low, high)."""
    _check_ci_args(reps, confidence)
    rng = np.random.default_rng(seed)
    chunk = max(1, _MAX_ELEMENTS // sum(s.size for s in samples))
    out = []
    for start in range(0, reps, chunk):
        b = min(chunk, reps - start)
        # Row index drawn independently per (rep, run, task): resampling within each task.
        batches = [s[rng.integers(0, s.shape[0], size=(b, *s.shape)), np.arange(s.shape[1])] for s in samples]
        out.append(np.asarray(stat(*batches), dtype=float))
    alpha = 50.0 * (1.0 - confidence)
    low, high = np.percentile(np.concatenate(out), [alpha, 100.0 - alpha], axis=0)
    return low, high


def stratified_bootstrap_ci(
    scores, aggregate_fn: Callable = iqm, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Point estimate and percentile CI of ``aggregate_fn`` ([runs, tasks] -> float) on
    ``scores`` [runs, tasks], resampling runs independently within each task.
    Returns ``(point, low, high)``. The built-in aggregates (and ``functools.partial`` of
    them) are evaluated vectorised over reps; any other callable is called once per rep."""
    s = _check_scores(scores)
    low, high = _bootstrap(_batched(aggregate_fn), [s], reps, confidence, seed)
    return float(aggregate_fn(s)), float(low), float(high)


def probability_of_improvement(scores_x, scores_y) -> float:
    """P(X > Y) averaged over tasks, for ``scores_x`` [runs_x, tasks] and ``scores_y``
    [runs_y, tasks]: per task the Mann-Whitney U statistic / (runs_x * runs_y), ties
    counting 0.5 (rliable's definition). 0.5 means no difference, 1.0 that X always wins."""
    return float(_poi(*_check_pair(scores_x, scores_y)))


def probability_of_improvement_ci(
    scores_x, scores_y, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """``probability_of_improvement`` with a percentile CI from a stratified bootstrap of the
    runs of both methods, resampled independently. Returns ``(point, low, high)``."""
    x, y = _check_pair(scores_x, scores_y)
    low, high = _bootstrap(_poi, [x, y], reps, confidence, seed)
    return float(_poi(x, y)), float(low), float(high)


def performance_profile(scores, taus) -> np.ndarray:
    """Score distribution: for each threshold in ``taus`` [K], the fraction of all runs and
    tasks (pooled) of ``scores`` [runs, tasks] scoring strictly above it. Returns [K]."""
    return _profile(_check_scores(scores), _check_taus(taus))


def performance_profile_ci(
    scores, taus, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``performance_profile`` with a pointwise stratified-bootstrap band.
    Returns ``(profile, low, high)``, each [len(taus)]."""
    s, t = _check_scores(scores), _check_taus(taus)
    low, high = _bootstrap(lambda b: _profile(b, t), [s], reps, confidence, seed)
    return _profile(s, t), low, high


# ------------------------------------------------------------------------------- summaries


def t_interval(x, confidence: float = 0.95, axis: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean of ``x`` along ``axis`` (the seeds) with its Student-t interval: ``(mean, low, high)``,
    each shaped like ``x`` without ``axis`` (e.g. a learning-curve band from [seeds, updates]).
    NaN entries propagate; with a single sample the interval is NaN."""
    a = np.asarray(x, dtype=float)
    n = a.shape[axis]
    m = a.mean(axis=axis)
    if n < 2:
        nan = np.full_like(m, np.nan)
        return m, nan, nan
    from scipy import stats

    half = stats.t.ppf(0.5 + confidence / 2, df=n - 1) * a.std(axis=axis, ddof=1) / np.sqrt(n)
    return m, m - half, m + half


def mean_ci(x, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of a 1-D array of per-seed values with a Student-t interval (``t_interval``):
    ``(mean, low, high)``; with a single value the interval is ``(nan, nan)``."""
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"x must be a non-empty 1-D array, got shape {a.shape}")
    _check_finite(a, "x")
    _check_ci_args(1, confidence)
    return tuple(float(v) for v in t_interval(a, confidence))


def gap_closed_ci(ours, start, target, reps: int = 10_000, seed: int = 0,
                  confidence: float = 0.95) -> tuple[float, float, float]:
    """The share of the gap from `start` to `target` that `ours` closed, mean(ours - start) /
    mean(target - start), with a paired percentile-bootstrap interval over seeds (the three arrays
    are [seeds], paired: the same seeds for all three). 1: level with the target; 0: no better
    than the start. Defined only where the start is below the target (a positive gap): NaN where
    it is not, and bootstrap replicates without a gap are left out. Returns (point, low, high)."""
    o, s, t = (np.asarray(x, dtype=float) for x in (ours, start, target))
    if not (o.ndim == 1 and o.shape == s.shape == t.shape and o.size >= 2):
        raise ValueError(f"ours, start and target must be 1-D of one length >= 2, got {o.shape}, {s.shape}, {t.shape}")
    _check_ci_args(reps, confidence)

    def ratio(gain, gap):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(gap > 0, gain / np.where(gap > 0, gap, 1.0), np.nan)

    if not (t - s).mean() > 0:
        return np.nan, np.nan, np.nan
    idx = np.random.default_rng(seed).integers(0, o.size, size=(reps, o.size))
    boot = ratio((o - s)[idx].mean(1), (t - s)[idx].mean(1))
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(boot, [alpha, 1 - alpha]) if np.isfinite(boot).any() else (np.nan, np.nan)
    return float(ratio((o - s).mean(), (t - s).mean())), float(low), float(high)


def summarize(
    scores_by_method: dict, baseline: str, reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> dict:
    """Per method (each [runs, tasks], same tasks): IQM, mean and probability of improvement
    over ``baseline``, each as ``{"point", "low", "high"}`` plain floats from a stratified
    bootstrap, i.e. ``{method: {"iqm": ..., "mean": ..., "prob_improvement": ...}}``."""
    if baseline not in scores_by_method:
        raise ValueError(f"baseline {baseline!r} not among methods {sorted(scores_by_method)}")
    arrays = {k: _check_scores(v, f"scores_by_method[{k!r}]") for k, v in scores_by_method.items()}
    base = arrays[baseline]
    for k, v in arrays.items():
        if v.shape[1] != base.shape[1]:
            raise ValueError(
                f"method {k!r} has {v.shape[1]} tasks but baseline {baseline!r} has {base.shape[1]}"
            )

    def ci(triple):
        return dict(zip(("point", "low", "high"), map(float, triple)))

    return {
        k: {
            "iqm": ci(stratified_bootstrap_ci(v, iqm, reps, confidence, seed)),
            "mean": ci(stratified_bootstrap_ci(v, mean, reps, confidence, seed)),
            "prob_improvement": ci(probability_of_improvement_ci(v, base, reps, confidence, seed)),
        }
        for k, v in arrays.items()
    }


def normalized_ci(
    scores, ref, zero, aggregate_fn: Callable = iqm, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """``aggregate_fn`` of ``scores`` [runs, tasks] normalised per task by the mean of ``ref``
    [runs_r, tasks] (-> 1) and of ``zero`` [runs_z, tasks] (-> 0), with a stratified percentile
    bootstrap that resamples the normaliser's runs as well as the scored ones, so the interval
    carries the normaliser's noise. A normaliser with one run ([1, tasks]) is treated as exact.
    Returns ``(point, low, high)``."""
    s, r, z = (_check_scores(a, n) for a, n in ((scores, "scores"), (ref, "ref"), (zero, "zero")))
    if not s.shape[1] == r.shape[1] == z.shape[1]:
        raise ValueError(f"scores, ref and zero must have the same tasks, got {s.shape[1]}, {r.shape[1]}, {z.shape[1]}")
    batched = _batched(aggregate_fn)

    def stat(sb, rb, zb):
        return batched(normalise(sb, rb.mean(-2, keepdims=True), zb.mean(-2, keepdims=True)))

    low, high = _bootstrap(stat, [s, r, z], reps, confidence, seed)
    return float(aggregate_fn(normalise(s, r.mean(0), z.mean(0)))), float(low), float(high)


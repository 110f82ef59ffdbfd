import functools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from metadisco.core.scores import normalise
from metadisco.measure import stats

pytestmark = pytest.mark.timeout(120)

REPS = 500  # enough for stable intervals, cheap on a shared CPU


def _rand(runs, tasks, seed=0, loc=0.0):
    return np.random.default_rng(seed).normal(loc, 1.0, size=(runs, tasks))


def _brute_poi(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    per_task = []
    for j in range(x.shape[1]):
        pairs = [1.0 if a > b else 0.5 if a == b else 0.0 for a in x[:, j] for b in y[:, j]]
        per_task.append(sum(pairs) / len(pairs))
    return float(np.mean(per_task))


# ------------------------------------------------------------------------ aggregates


def test_iqm_single_task_is_mean_of_middle_half():
    assert stats.iqm([[1], [2], [3], [4], [5], [6], [7], [8]]) == 4.5
    # skewed, so that another trimmed share gives another number (a 20% cut: 1.0; the mean: 13.25)
    assert stats.iqm([[0], [0], [0], [0], [1], [2], [3], [100]]) == 0.75


def test_iqm_pools_runs_and_tasks():
    # Pooled values 1..8 (plus an outlier pair that gets trimmed): middle half of 8 values.
    scores = [[1, 100], [2, 3], [4, 5], [-50, 6]]
    # sorted pooled: -50, 1, 2, 3, 4, 5, 6, 100 -> middle four 2, 3, 4, 5
    assert stats.iqm(scores) == 3.5


def test_mean_median_optimality_gap_by_hand():
    scores = np.array([[0.0, 1.0, 4.0], [2.0, 3.0, 0.0]])  # per-task means 1, 2, 2
    assert stats.mean(scores) == pytest.approx(5 / 3)
    assert stats.median(scores) == 2.0
    # min(scores, 1) = [[0,1,1],[1,1,0]] -> mean 4/6
    assert stats.optimality_gap(scores) == pytest.approx(1 - 4 / 6)
    # min(scores, 3) = [[0,1,3],[2,3,0]] -> mean 9/6
    assert stats.optimality_gap(scores, gamma=3.0) == pytest.approx(3 - 9 / 6)


def test_aggregates_return_python_floats():
    s = _rand(4, 3)
    for fn in (stats.iqm, stats.mean, stats.median, stats.optimality_gap):
        assert type(fn(s)) is float


# ------------------------------------------------------------ probability of improvement


def test_poi_hand_counted_pairs_with_ties():
    # pairs: 1<2, 1<2 -> 0, 0; 2==2 twice -> 0.5, 0.5; 3>2 twice -> 1, 1
    assert stats.probability_of_improvement([[1], [2], [3]], [[2], [2]]) == 0.5


def test_poi_averages_over_tasks():
    x = [[1, 5], [2, 5], [3, 5]]
    y = [[2, 0], [2, 0]]
    assert stats.probability_of_improvement(x, y) == pytest.approx((0.5 + 1.0) / 2)


def test_poi_matches_brute_force():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 4, size=(7, 3)), rng.integers(0, 4, size=(5, 3))  # many ties
    assert stats.probability_of_improvement(x, y) == pytest.approx(_brute_poi(x, y))


def test_poi_self_is_half_and_domination_is_one():
    s = _rand(6, 4)
    assert stats.probability_of_improvement(s, s) == 0.5
    assert stats.probability_of_improvement(s + 100, s) == 1.0
    assert stats.probability_of_improvement(s, s + 100) == 0.0


def test_poi_ci_contains_point_and_is_deterministic():
    x, y = _rand(10, 5, seed=1, loc=0.3), _rand(8, 5, seed=2)
    point, low, high = stats.probability_of_improvement_ci(x, y, reps=REPS, seed=7)
    assert point == stats.probability_of_improvement(x, y)
    assert 0.0 <= low <= point <= high <= 1.0
    assert stats.probability_of_improvement_ci(x, y, reps=REPS, seed=7) == (point, low, high)


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci_contains_point_and_is_deterministic():
    s = _rand(10, 5)
    res = stats.stratified_bootstrap_ci(s, stats.iqm, reps=REPS, seed=3)
    point, low, high = res
    assert point == stats.iqm(s)
    assert low < point < high
    assert stats.stratified_bootstrap_ci(s, stats.iqm, reps=REPS, seed=3) == res
    assert stats.stratified_bootstrap_ci(s, stats.iqm, reps=REPS, seed=4) != res


@pytest.mark.parametrize(
    "fn",
    [stats.iqm, stats.mean, stats.median, stats.optimality_gap, functools.partial(stats.optimality_gap, gamma=0.5)],
)
def test_vectorised_aggregates_match_per_rep_loop(fn):
    s = _rand(6, 4)
    fast = stats.stratified_bootstrap_ci(s, fn, reps=200, seed=5)
    slow = stats.stratified_bootstrap_ci(s, lambda a: fn(a), reps=200, seed=5)
    assert fast == pytest.approx(slow, rel=1e-12, abs=1e-12)


def test_ci_shrinks_with_more_runs():
    def width(runs):
        _, low, high = stats.stratified_bootstrap_ci(_rand(runs, 3, seed=runs), stats.iqm, reps=REPS)
        return high - low

    assert width(100) < width(20) < width(4)
    _, lo_s, hi_s = stats.probability_of_improvement_ci(_rand(5, 3, 1), _rand(5, 3, 2), reps=REPS)
    _, lo_l, hi_l = stats.probability_of_improvement_ci(_rand(80, 3, 1), _rand(80, 3, 2), reps=REPS)
    assert hi_l - lo_l < hi_s - lo_s


def test_bootstrap_is_stratified_by_task():
    s = _rand(10, 3)
    s[:, 1] = 2.5  # constant task
    point, low, high = stats.stratified_bootstrap_ci(s, lambda a: float(a[:, 1].mean()), reps=REPS)
    assert point == low == high == 2.5

    # Each resampled column only ever holds values from the same original column.
    def check(a):
        for j in range(s.shape[1]):
            assert np.isin(a[:, j], s[:, j]).all()
        return 0.0

    stats.stratified_bootstrap_ci(s, check, reps=50)

    # Runs are drawn independently per task (not whole rows): pairing across tasks breaks.
    paired = np.repeat(np.arange(10.0)[:, None], 2, axis=1)
    _, low, high = stats.stratified_bootstrap_ci(paired, lambda a: float(np.mean(a[:, 0] == a[:, 1])), reps=REPS)
    assert low < 1.0


def test_bootstrap_chunking_does_not_change_semantics(monkeypatch):
    s = _rand(8, 4)
    monkeypatch.setattr(stats, "_MAX_ELEMENTS", 100)  # forces many small chunks
    point, low, high = stats.stratified_bootstrap_ci(s, stats.iqm, reps=300)
    assert low <= point <= high


# -------------------------------------------------------------------- performance profile


def test_performance_profile_by_hand():
    scores = [[0.0, 1.0], [2.0, 3.0]]
    np.testing.assert_allclose(stats.performance_profile(scores, [-1, 0, 1.5, 3]), [1.0, 0.75, 0.5, 0.0])


def test_performance_profile_ci_band():
    s = _rand(10, 5)
    taus = np.linspace(-2, 2, 9)
    prof, low, high = stats.performance_profile_ci(s, taus, reps=REPS)
    assert prof.shape == low.shape == high.shape == (9,)
    np.testing.assert_array_equal(prof, stats.performance_profile(s, taus))
    assert np.all(low <= prof) and np.all(prof <= high)
    assert np.all(np.diff(prof) <= 0)


# ---------------------------------------------------------------------------- mean_ci


def test_mean_ci_hand_computed_t_interval():
    # mean 3, sd sqrt(2.5), se sqrt(0.5); t_{0.975, df=4} = 2.7764451051977987
    half = 2.7764451051977987 * math.sqrt(0.5)
    m, low, high = stats.mean_ci([1, 2, 3, 4, 5])
    assert m == 3.0
    assert low == pytest.approx(3 - half) and high == pytest.approx(3 + half)
    # 90% interval: t_{0.95, df=4} = 2.1318467863266504
    _, low90, _ = stats.mean_ci([1, 2, 3, 4, 5], confidence=0.9)
    assert low90 == pytest.approx(3 - 2.1318467863266504 * math.sqrt(0.5))


def test_mean_ci_single_value():
    m, low, high = stats.mean_ci([4.0])
    assert m == 4.0 and math.isnan(low) and math.isnan(high)


def test_t_interval_over_seeds_is_mean_ci_per_column():
    """A learning-curve band ([seeds, updates] -> per update) is the same interval as mean_ci."""
    curves = np.array([[1.0, 10.0, 0.0], [2.0, 30.0, 0.0], [4.0, 20.0, 0.0]])
    mean, low, high = stats.t_interval(curves)
    assert mean.shape == low.shape == high.shape == (3,)
    for u in range(3):
        assert (mean[u], low[u], high[u]) == pytest.approx(stats.mean_ci(curves[:, u]))
    assert low[2] == high[2] == 0.0  # no spread, no width
    one = stats.t_interval(curves[:1])
    assert np.all(np.isnan(one[1])) and np.all(np.isnan(one[2])) and np.array_equal(one[0], curves[0])


# --------------------------------------------------------------------------- summarize


def test_summarize():
    methods = {"base": _rand(6, 3, 1), "better": _rand(6, 3, 2, loc=5.0)}
    out = stats.summarize(methods, baseline="base", reps=200, seed=0)
    json.dumps(out)  # plain floats only
    assert set(out) == {"base", "better"}
    for res in out.values():
        assert set(res) == {"iqm", "mean", "prob_improvement"}
        for ci in res.values():
            assert set(ci) == {"point", "low", "high"}
            assert all(type(v) is float for v in ci.values())
    assert out["base"]["prob_improvement"]["point"] == 0.5
    assert out["better"]["prob_improvement"]["point"] == 1.0
    assert out["better"]["iqm"]["point"] == stats.iqm(methods["better"])
    assert out["better"]["mean"]["point"] == pytest.approx(stats.mean(methods["better"]))


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "bad, match",
    [
        ([1.0, 2.0], "2-D"),
        (np.zeros((2, 2, 2)), "ndim=3"),
        (np.zeros((0, 3)), "empty"),
        ([[1.0, np.nan]], "NaN"),
        ([[1.0, np.inf]], "inf"),
    ],
)
def test_bad_scores_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        stats.iqm(bad)
    with pytest.raises(ValueError, match=match):
        stats.stratified_bootstrap_ci(bad, stats.mean, reps=10)


def test_bad_inputs_name_the_culprit():
    good = _rand(3, 2)
    with pytest.raises(ValueError, match="same number of tasks"):
        stats.probability_of_improvement(good, _rand(3, 3))
    with pytest.raises(ValueError, match="scores_y contains NaN"):
        stats.probability_of_improvement_ci(good, [[np.nan, 1.0]], reps=10)
    with pytest.raises(ValueError, match="reps"):
        stats.stratified_bootstrap_ci(good, stats.iqm, reps=0)
    with pytest.raises(ValueError, match="confidence"):
        stats.stratified_bootstrap_ci(good, stats.iqm, confidence=1.5)
    with pytest.raises(ValueError, match="taus"):
        stats.performance_profile(good, [[0.0]])
    with pytest.raises(ValueError, match="1-D"):
        stats.mean_ci([[1.0, 2.0]])
    with pytest.raises(ValueError, match="x contains NaN"):
        stats.mean_ci([1.0, np.nan])
    with pytest.raises(ValueError, match="baseline"):
        stats.summarize({"a": good}, baseline="b", reps=10)
    with pytest.raises(ValueError, match="'c' has 3 tasks"):
        stats.summarize({"a": good, "c": _rand(3, 3)}, baseline="a", reps=10)


# --------------------------------------------------------------------------- properties

_scores = st.integers(1, 6).flatmap(
    lambda tasks: st.tuples(
        *[
            arrays(float, st.tuples(st.integers(1, 8), st.just(tasks)), elements=st.floats(-1e6, 1e6))
            for _ in range(2)
        ]
    )
)


@settings(max_examples=60, deadline=None)
@given(_scores)
def test_property_iqm_within_range(pair):
    s = pair[0]
    value = stats.iqm(s)
    tol = 1e-9 * max(1.0, np.abs(s).max())
    assert s.min() - tol <= value <= s.max() + tol


@settings(max_examples=60, deadline=None)
@given(_scores)
def test_property_poi_antisymmetric(pair):
    x, y = pair
    assert stats.probability_of_improvement(x, y) + stats.probability_of_improvement(y, x) == pytest.approx(1.0)
    assert stats.probability_of_improvement(x, y) == pytest.approx(_brute_poi(x, y))


def test_normalise_maps_initial_policy_to_0_and_ppo_to_1():
    # a negative-return environment (Acrobot-like): init -500, PPO -100
    assert normalise(-500.0, -100.0, -500.0) == 0.0
    assert normalise(-100.0, -100.0, -500.0) == 1.0
    assert normalise(-80.0, -100.0, -500.0) > 1.0
    np.testing.assert_allclose(normalise(np.array([20.0, 260.0]), 260.0, 20.0), [0.0, 1.0])


# ------------------------------------------------------------- the normaliser's uncertainty


def test_normalised_intervals_carry_the_normalisers_noise():
    rng = np.random.default_rng(3)
    raw = rng.normal(150.0, 10.0, size=(8, 3))
    zero = rng.normal(20.0, 1.0, size=(8, 3))
    noisy_ppo = rng.normal(120.0, 40.0, size=(8, 3))  # a noisy normaliser ...
    exact_ppo = noisy_ppo.mean(0, keepdims=True)  # ... and the same means treated as exact
    for agg in (stats.iqm, stats.mean):
        p_noisy, lo_noisy, hi_noisy = stats.normalized_ci(raw, noisy_ppo, zero, agg, REPS, seed=0)
        p_exact, lo_exact, hi_exact = stats.normalized_ci(raw, exact_ppo, zero, agg, REPS, seed=0)
        assert p_noisy == pytest.approx(p_exact)  # same point estimate
        assert hi_noisy - lo_noisy > 1.5 * (hi_exact - lo_exact)  # a wider interval
        assert p_exact == pytest.approx(agg(normalise(raw, exact_ppo, zero.mean(0))))


def test_normalised_interval_with_exact_normaliser_is_the_plain_bootstrap_of_normalised_scores():
    raw, ppo, zero = _rand(6, 2, seed=1, loc=5.0), np.array([[3.0, 4.0]]), np.array([[1.0, 0.5]])
    norm = normalise(raw, ppo, zero)
    assert stats.normalized_ci(raw, ppo, zero, stats.mean, REPS, seed=4) == pytest.approx(
        stats.stratified_bootstrap_ci(norm, stats.mean, REPS, seed=4))


def test_default_bootstrap_bounds_are_stable_to_the_two_decimals_printed():
    """At the default replicates, two bootstrap seeds give bounds within half a unit of the last
    printed digit (evaluation prints bootstrap estimates with two decimals)."""
    from metadisco.analysis.evaluation.protocol import BOOTSTRAP_REPS

    rng = np.random.default_rng(7)
    raw, ppo, zero = rng.normal(1.2, 0.3, (4, 2)), rng.normal(1.0, 0.2, (4, 2)), rng.normal(0.0, 0.1, (4, 2))
    for agg in (stats.iqm, stats.mean):
        a = stats.normalized_ci(raw, ppo, zero, agg, BOOTSTRAP_REPS, seed=0)
        b = stats.normalized_ci(raw, ppo, zero, agg, BOOTSTRAP_REPS, seed=1)
        assert max(abs(a[1] - b[1]), abs(a[2] - b[2])) < 0.005, (a, b)
    a = stats.probability_of_improvement_ci(raw, ppo, BOOTSTRAP_REPS, seed=0)
    b = stats.probability_of_improvement_ci(raw, ppo, BOOTSTRAP_REPS, seed=1)
    # a probability of improvement takes values k / (n m tasks): its bounds may differ by one such step
    assert max(abs(a[1] - b[1]), abs(a[2] - b[2])) <= 1 / (4 * 4 * 2) + 1e-12, (a, b)


@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_bootstrap_intervals_are_as_wide_as_their_confidence_says(confidence):
    """On 400 draws of N(0, 1) the mean's interval is 2 z sigma / sqrt(n) wide (z the normal
    quantile of the confidence): an interval built at another confidence would be narrower or wider
    than that by more than the bootstrap's noise (10%). Both percentile bootstraps: the stratified
    one over [runs, tasks] and the paired gap-closed one over seeds."""
    from statistics import NormalDist

    rng = np.random.default_rng(0)
    x = rng.standard_normal(400)
    expected = 2 * NormalDist().inv_cdf(0.5 + confidence / 2) * x.std() / math.sqrt(x.size)
    _, low, high = stats.stratified_bootstrap_ci(x[:, None], stats.mean, reps=4000, confidence=confidence)
    assert high - low == pytest.approx(expected, rel=0.1)
    # start 0 and target 1 on every seed: the share of the gap closed is mean(x + 0.5)
    _, low, high = stats.gap_closed_ci(x + 0.5, np.zeros_like(x), np.ones_like(x), reps=4000, confidence=confidence)
    assert high - low == pytest.approx(expected, rel=0.1)

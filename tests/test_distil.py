"""Distillation of a drift into a closed form (as LPO into DPO, Lu et al. 2022) and its export."""

import importlib.util
import json

import jax
import numpy as np
import pytest

import metadisco.meta_objectives as mo
from metadisco.analysis.distillation import data as D
from metadisco.analysis.distillation.fit import distil_drift, distil_over_progress, distil_value_loss
from metadisco.analysis.distillation.methods import drift_library, fit_dpo, fit_sparse, fit_symbolic
from metadisco.analysis.distillation.report import DistillationReport, read_report, write_report
from metadisco.analysis.export import export_closed_form
from metadisco.meta_objectives.closed_form import ClosedFormDrift
from metadisco.meta_objectives.constraints import check_drift_constraints
from metadisco.meta_objectives.formulas import dpo_expression


def _dpo_fn(alpha, beta):
    objective = mo.DPO(alpha, beta)
    params = objective.init(jax.random.key(0))
    return lambda r, a, p: objective.drift(params, r, a, p)


def rng_normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_the_committed_report_reads_as_a_record_and_writes_back_byte_for_byte(tmp_path):
    """A stored report (the earlier demo's value loss) reads through the records, chosen and front
    among its candidates, and writes back as it was; a file that is not a report is refused."""
    from pathlib import Path

    from metadisco.measure.run_files import RunDirError

    path = Path(__file__).resolve().parents[1] / "docs/results/value_loss_demo/run/distil/value_loss.json"
    report = read_report(path)
    assert json.dumps(report.to_json(), indent=1) == path.read_text()
    assert report.chosen in report.front and all(c.valid for c in report.front)
    assert report.source.plug == "value_loss" and report.closed_form_base == {"base": "none"}
    (tmp_path / "bad.json").write_text('{"chosen": {"expression": "e**2/2"}}')
    with pytest.raises(RunDirError, match="bad.json is corrupt .*not a distillation report"):
        read_report(tmp_path / "bad.json")


def test_visitation_samples_and_weights():
    r, a = D.visitation_samples(None, n=5000, seed=3)
    assert r.shape == a.shape == (5000,) and (r > 0).all()
    assert abs(np.std(np.log(r)) - 0.2) < 0.01 and abs(np.std(a) - 1.0) < 0.05
    w = D.visitation_weights(r, a)
    assert w.shape == r.shape and np.isclose(w.sum(), 1.0) and (w >= 0).all()
    # caller-provided points in three layouts; invalid ones dropped; subsampled to n
    pts = np.stack([np.r_[r, -1.0, np.nan], np.r_[a, 0.0, 0.0]], axis=1)
    for given in (pts, (pts[:, 0], pts[:, 1]), {"ratio": pts[:, 0], "advantage": pts[:, 1]}):
        rr, aa = D.visitation_samples(given, n=1000, seed=0)
        assert rr.shape == (1000,) and np.isfinite(rr).all() and (rr > 0).all()
    recorded = np.stack([np.exp(0.1 * rng_normal((4, 50))), rng_normal((4, 50))], axis=-1)  # [U, S, 2]
    rr, aa = D.visitation_samples(recorded)
    assert rr.shape == (200,) and np.array_equal(rr, recorded[..., 0].ravel())
    with pytest.raises(ValueError):
        D.visitation_samples(np.ones((5, 3)))


@pytest.mark.parametrize("samples", [None, "given"])
def test_fit_dpo_recovers_constants(samples):
    alpha, beta = 1.3, 0.9
    if samples == "given":
        rng = np.random.default_rng(7)
        samples = (np.exp(rng.normal(0, 0.3, 3000)), rng.standard_normal(3000))
    fit = fit_dpo(D.prepare_drift(_dpo_fn(alpha, beta), samples, seed=1))
    assert abs(fit.alpha - alpha) / alpha < 0.05 and abs(fit.beta - beta) / beta < 0.05
    assert fit.r2 > 0.999 and fit.grid.r2 > 0.999
    assert fit.expression == dpo_expression(fit.alpha, fit.beta)
    assert check_drift_constraints(fit.expression) == []


def test_library_terms_satisfy_constraints_by_construction():
    for name, term in drift_library():
        assert check_drift_constraints(term, progresses=(0.0,), num=25) == [], name


def test_sparse_regression_recovers_a_two_term_drift():
    lib = dict(drift_library())
    t1, t2 = "(r-1)^2|A|[A<0]", "relu((r-1)A - 1.0tanh(x/1.0))[A>=0]"
    target = ClosedFormDrift(f"0.7*{lib[t1]} + 1.5*{lib[t2]}")
    candidates = fit_sparse(D.prepare_drift(lambda r, a, p: target.drift({}, r, a, p)), max_terms=3)
    best = max(candidates, key=lambda c: c.r2)
    assert best.r2 > 0.999 and best.n_terms <= 2 and set(best.terms) == {t1, t2}
    for c in candidates:
        assert c.method.startswith("sparse") and None not in (c.r2, c.max_abs_error, c.rmse, c.grid.rmse)
        ClosedFormDrift(c.expression)  # usable as an objective


def test_symbolic_regression_considers_mostly_valid_drifts_and_keeps_only_valid_ones():
    candidates, counts = fit_symbolic(D.prepare_drift(_dpo_fn(2.0, 0.6), n_points=512), generations=3,
                                      population_size=60)
    assert counts.n_considered > 60 and counts.valid_share >= 0.5
    assert counts.n_valid == round(counts.valid_share * counts.n_considered)
    assert candidates
    for c in candidates:
        assert check_drift_constraints(c.expression) == []
        assert c.method == "symbolic" and c.r2 is not None and c.slope.grid.rmse is not None


def test_distil_chooses_from_the_pareto_front_and_is_json(tmp_path):
    result = distil_drift(
        _dpo_fn(1.3, 0.9), seed=0, symbolic=True,
        symbolic_kwargs={"generations": 2, "population_size": 50}, n_points=1024,
    )
    write_report(result, tmp_path / "drift.json")  # strict JSON, read back as the same record
    assert read_report(tmp_path / "drift.json") == result
    chosen = result.chosen
    assert chosen.violations == () and chosen.valid and chosen.method == "dpo"
    assert chosen.r2 > 0.999 and chosen.slope.grid.r2 > 0.99
    errors = [c.error for c in result.candidates]
    assert errors == sorted(errors)
    front = result.front
    assert chosen in front and all(c.valid for c in front)
    sizes, front_errors = [c.complexity for c in front], [c.error for c in front]
    assert sizes == sorted(sizes) and front_errors == sorted(front_errors, reverse=True)
    for c in result.candidates:  # every valid candidate is matched or beaten on both counts by the front
        if c.valid:
            assert any(f.complexity <= c.complexity and f.error <= c.error for f in front)
    (counts,) = result.symbolic
    assert counts.n_considered >= counts.n_valid > 0
    assert result.dpo_fit.method == "dpo" and result.dpo_fit in result.candidates


def test_slope_fit_matches_dD_dr():
    """fit="slope" ranks by the error of dD/dr; a DPO target is recovered in slope as in value."""
    result = distil_drift(_dpo_fn(1.3, 0.9), symbolic=False, fit="slope", n_points=1024)
    chosen = result.chosen
    assert result.fit == "slope" and chosen.error == chosen.slope.rmse
    assert chosen.slope.r2 > 0.999 and chosen.grid.r2 > 0.999


def test_export_roundtrip(tmp_path):
    expr = dpo_expression(1.3, 0.9)
    paths = export_closed_form(expr, tmp_path, name="my_drift", metadata={"source": "test"})
    assert set(paths) == {"tex", "json", "py"}
    assert "\\tanh" in open(paths["tex"]).read()
    rng = np.random.default_rng(0)
    r = np.exp(rng.normal(0, 0.4, 500)).astype(np.float32)
    a = rng.normal(0, 1.5, 500).astype(np.float32)
    want = np.asarray(ClosedFormDrift(expr).drift({}, r, a, 0.0))

    spec = importlib.util.spec_from_file_location("my_drift_exported", paths["py"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    np.testing.assert_allclose(module.drift(r, a), want, rtol=1e-6, atol=1e-7)
    assert module.EXPRESSION == expr

    objectives, params, extra = mo.load_objectives(paths["json"])
    assert objectives.drift == ClosedFormDrift(expr) and extra == {"source": "test"}
    np.testing.assert_allclose(objectives.drift.drift(params["drift"], r, a, 0.0), want, rtol=0, atol=0)


@pytest.mark.parametrize(
    "expr, fragment", [("(r-1)*A", "D < 0"), ("(r-1)*A", "dD/dr"), ("(r-1)**2 + 0.1", "D(1, A)")]
)
def test_export_refuses_invalid_drifts(tmp_path, expr, fragment):
    with pytest.raises(ValueError, match="refusing to export") as info:
        export_closed_form(expr, tmp_path)
    assert fragment in str(info.value)
    assert not list(tmp_path.iterdir())


def test_export_refuses_bad_names_and_unsafe_expressions(tmp_path):
    with pytest.raises(ValueError):
        export_closed_form("(r-1)**2", tmp_path, name="../evil")
    with pytest.raises(ValueError):
        export_closed_form("__import__('os').system('true')", tmp_path)


def test_value_loss_distillation_recovers_a_known_loss():
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    errors, targets = 2.0 * rng.standard_normal(3000), 5.0 * rng.standard_normal(3000)
    # L2 plus an asymmetry and a small bias (LearnedValueLoss can learn both): the fit is to the
    # departure from L2, so small terms are not swamped by e^2.
    c = D.round_sig(float(np.std(errors)))

    def learned(v, t):
        e = v - t
        return e**2 / 2 + 0.3 * jnp.where(e < 0, e**2 / 2, 0.0) - 0.2 * c * jnp.tanh(e / c)

    report = distil_value_loss(learned, errors, targets)
    chosen = report.chosen
    assert chosen.r2 > 0.9999 and chosen.valid, chosen
    assert sorted(chosen.terms) == sorted(["e^2/2[e<0]", f"-{c}tanh(e/{c})"])
    assert chosen.expression == f"e**2/2 + {chosen.departure}"
    l2 = next(c for c in report.candidates if c.method == "l2")
    assert l2.expression == "e**2/2" and l2.departure == "0" and l2.r2 < 0.5  # plain L2 misses the departure
    assert DistillationReport.from_json(json.loads(json.dumps(report.to_json(), allow_nan=False))) == report


def test_export_writes_drift_and_value_loss_together(tmp_path):
    drift, loss = dpo_expression(1.3, 0.9), "Piecewise((e**2/2, e >= 0), (0.3*e**2, True))"
    paths = export_closed_form(drift, tmp_path, name="both", value_loss=loss)
    objectives, params, _ = mo.load_objectives(paths["json"])
    assert objectives.drift.expression == drift and objectives.value_loss.expression == loss
    spec = importlib.util.spec_from_file_location("both_exported", paths["py"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    v, t = np.float32([1.0, -2.0]), np.float32([0.0, 0.0])
    np.testing.assert_allclose(module.value_loss(v, t), [0.5, 1.2], rtol=1e-6)
    assert module.DRIFT_EXPRESSION == drift and module.VALUE_LOSS_EXPRESSION == loss
    with pytest.raises(ValueError, match="not a valid value loss"):
        export_closed_form(None, tmp_path / "bad", value_loss="e**2/2 - 3*e")
    assert not (tmp_path / "bad").exists()


def test_a_progress_dependent_drift_is_distilled_at_both_ends_and_interpolated():
    """TA-LPO drifts change over training; one static fit cannot keep that. A drift that moves
    from DPO at the start to PPO-clip at the end is recovered exactly at every progress."""
    from metadisco.meta_objectives.closed_form import PPO_CLIP_EXPRESSION
    from metadisco.meta_objectives.expressions import evaluate_numpy

    target = ClosedFormDrift(f"(1 - p)*({dpo_expression(2.0, 0.6)}) + p*({PPO_CLIP_EXPRESSION})")
    report = distil_over_progress(target, seed=0, symbolic=False)
    chosen = report.chosen
    assert chosen.method == "interpolated" and chosen.valid and chosen.r2 > 0.999
    assert [e.progress for e in report.ends] == [0.0, 1.0] and chosen.progresses == (0.0, 1.0)
    r, a = D.evaluation_grid(21)
    for p in (0.0, 0.25, 0.9):
        want = np.asarray(target.drift({}, r.astype(np.float32), a.astype(np.float32), p), np.float64)
        np.testing.assert_allclose(evaluate_numpy(chosen.expression, r, a, p), want, atol=2e-3)
    assert DistillationReport.from_json(json.loads(json.dumps(report.to_json(), allow_nan=False))) == report


def test_a_value_loss_on_the_clipped_base_is_exported_with_its_clipping(tmp_path):
    """learned_clipped is PPO's clipped value loss plus a learned residual. Distillation samples it
    at v_old = v (where the clipping does nothing), so its expressions are over e, t alone; the
    report carries the base, and the export applies PPO's value clipping to the chosen expression
    again, in the objectives file and in the module, instead of silently dropping it."""
    from metadisco.analysis.distillation.run import distil_run_value_loss
    from metadisco.meta_objectives.closed_form import ClosedFormValueLoss

    learned = mo.LearnedClippedValueLoss()
    keys = jax.random.split(jax.random.key(4), 4)
    init = learned.init(keys[0])
    rand = {**init, "w2": 0.05 * jax.random.normal(keys[1], init["w2"].shape)}  # a residual to fit
    value, target, old_value = (2.0 * jax.random.normal(k, (4096,)) for k in jax.random.split(keys[2], 3))
    clipping_active = np.abs(np.asarray(value - old_value)) > learned.clip_eps
    for i, params in enumerate((init, rand)):
        objectives = mo.Objectives(value_loss=learned)
        report = distil_run_value_loss(tmp_path / f"d{i}", np.asarray(value), np.asarray(target), objectives,
                                   {"value_loss": params}, seed=0, symbolic=False)
        assert report.closed_form_base == {"base": "clipped_l2", "clip_eps": learned.clip_eps}
        expression = report.chosen.expression
        paths = export_closed_form(None, tmp_path / f"e{i}", name="vl", value_loss=expression,
                                   value_loss_base=report.closed_form_base)
        exported = mo.load_objectives(paths["json"])[0].value_loss
        assert exported == ClosedFormValueLoss(expression, base="clipped_l2", clip_eps=learned.clip_eps)
        ours = np.asarray(exported.value_loss({}, value, target, old_value))
        bare = np.asarray(ClosedFormValueLoss(expression).value_loss({}, value, target, old_value))
        want = np.asarray(learned.value_loss(params, value, target, old_value))
        assert np.abs(ours - bare)[clipping_active].max() > 0.1  # the clipping is there
        np.testing.assert_allclose(ours[~clipping_active], bare[~clipping_active], rtol=1e-5, atol=1e-5)
        # exactly what the learned loss adds with its clipping, whatever the fit's error at v_old = v
        at_v = np.asarray(exported.value_loss({}, value, target, value))
        np.testing.assert_allclose(ours - at_v, want - np.asarray(learned.value_loss(params, value, target, value)),
                                   rtol=1e-4, atol=1e-4)
        if i == 0:  # the initial parameters are PPO's clipped loss: fitted exactly, so equal everywhere
            assert expression == "e**2/2"
            np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)
        else:
            assert expression != "e**2/2"  # a residual was fitted
        spec = importlib.util.spec_from_file_location(f"vl_exported_{i}", paths["py"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        np.testing.assert_allclose(module.value_loss(value, target, old_value), ours, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(module.value_loss_expression(value, target), at_v, rtol=1e-6, atol=1e-6)
        tex = open(paths["tex"]).read()
        assert "clip" in tex and "v_{\\mathrm{old}}" in tex


def test_a_fit_is_scored_by_the_variance_it_explains_around_the_targets_mean():
    """R² = 1 - SS_res / SS_tot with SS_tot around the target's mean: predicting the mean scores 0, the
    target itself 1, on targets far from 0 (where SS_tot around 0 would call the mean a good fit)."""
    target = np.array([10.0, 11.0, 12.0, 13.0])
    assert D.fit_metrics(np.full(4, target.mean()), target).r2 == pytest.approx(0.0)
    assert D.fit_metrics(target.copy(), target).r2 == 1.0
    half = D.fit_metrics(target.mean() + 0.5 * (target - target.mean()), target)
    assert half.r2 == pytest.approx(0.75) and half.max_abs_error == pytest.approx(0.75)

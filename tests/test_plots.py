"""metadisco.analysis.plots: the figures' content (axes, labels, shared colour scales, lines), plot_run on run
directories (a real tiny one and a synthetic one with every learned plug point), and `metadisco plot`."""

import base64
import json
import re

import jax
import jax.numpy as jnp
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import QuadMesh

import metadisco.meta_objectives as mo
from metadisco.analysis import plots
from metadisco.analysis.figures.drift import (
    GRAD_LABEL,
    SLICE_ADVANTAGES,
    default_drift_comparison,
    drift_slices_figure,
    drift_surface_figure,
    progress_surfaces_figure,
)
from metadisco.analysis.figures.shaping import observation_bounds, shaping_figure
from metadisco.analysis.figures.style import A_LABEL, D_LABEL, R_LABEL
from metadisco.analysis.figures.training import training_curves_figure
from metadisco.analysis.figures.value_loss import value_loss_figure
from metadisco.core.errors import MetadiscoError
from metadisco.core.records import GenerationRecord, Interval, Violations
from metadisco.meta_objectives import save_objectives
from metadisco.meta_objectives.objectives import Objectives

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def perturb_output(params, scale, seed=1):
    """An MLP's params with a random (nonzero) output layer: a drift that differs from PPO."""
    out = dict(params)
    out["w2"] = scale * jax.random.normal(jax.random.key(seed), params["w2"].shape)
    return out


@pytest.fixture(scope="module")
def lpo():
    obj = mo.LPO(hidden=16)
    return obj, perturb_output(obj.init(jax.random.key(0)), 0.3)


@pytest.fixture(scope="module")
def drifts(lpo):
    return default_drift_comparison(*lpo, label="learned (LPO)")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def panels(fig, prefix):
    return [ax for ax in fig.axes if ax.get_label().startswith(prefix)]


def meshes(ax):
    return [c for c in ax.collections if isinstance(c, QuadMesh)]


def r1_lines(ax):
    return [ln for ln in ax.lines if ln.get_gid() == "r=1" and np.allclose(ln.get_xdata(), 1.0)]


def data_lines(ax):
    return [ln for ln in ax.lines if not ln.get_label().startswith("_") and ln.get_gid() != "r=1"]


def colorbars(fig):
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


# ---------------------------------------------------------------------------------------------
# figures from objects
# ---------------------------------------------------------------------------------------------


def test_drawing_leaves_the_users_matplotlib_settings_alone(drifts):
    """The seaborn theme is scoped to each builder: a notebook's own rcParams survive every figure."""
    before = dict(matplotlib.rcParams)
    drift_slices_figure(drifts, num=11)
    training_curves_figure(records(metrics_rows(2)))
    after = dict(matplotlib.rcParams)
    assert {k for k in before if str(before[k]) != str(after[k])} == set()


@pytest.mark.parametrize("which", ["lpo", "drift_mix(eps=0.3)"])
def test_drift_comparison_draws_what_its_titles_say(lpo, which):
    """The given drift at its own parameters first, then PPO-clip at the epsilon its title gives (the
    given drift's own) and DPO at the constants its title gives, each checked against its formula
    written out here (Schulman et al. 2017; Lu et al. 2022, DPO)."""
    objective, params = lpo if which == "lpo" else (mo.DriftMix(clip_eps=0.3), None)
    comparison = default_drift_comparison(objective, params)
    (title, (drawn, drawn_params)), (ppo_title, (ppo, ppo_params)), (dpo_title, (dpo, dpo_params)) = comparison.items()
    r, a = np.meshgrid(np.linspace(0.3, 3.0, 41, dtype=np.float32), np.linspace(-3.0, 3.0, 41, dtype=np.float32))
    assert title == objective.title
    want = objective.drift(params if params is not None else objective.default_params(), r, a, 0.0)
    np.testing.assert_array_equal(drawn.drift(drawn_params, r, a, 0.0), want)
    eps = float(re.fullmatch(r"PPO-clip \(ε = ([0-9.]+)\)", ppo_title).group(1))
    assert eps == getattr(objective, "clip_eps", 0.2)
    np.testing.assert_allclose(ppo.drift(ppo_params, r, a, 0.0), np.maximum((r - np.clip(r, 1 - eps, 1 + eps)) * a, 0.0),
                               atol=1e-6)
    alpha, beta = map(float, re.fullmatch(r"DPO \(α = ([0-9.]+), β = ([0-9.]+)\)", dpo_title).groups())
    x = np.where(a >= 0, (r - 1) * a, np.log(r) * a)
    scale = np.where(a >= 0, alpha, beta)
    np.testing.assert_allclose(dpo.drift(dpo_params, r, a, 0.0), np.maximum(x - scale * np.tanh(x / scale), 0.0),
                               rtol=1e-5, atol=1e-6)


def test_drift_surface_figure(drifts):
    fig = drift_surface_figure(drifts, num=41)
    surf, grad = panels(fig, "surface/"), panels(fig, "gradient/")
    assert [ax.get_label() for ax in surf] == [f"surface/{t}" for t in drifts]
    assert len(grad) == 3 and len(colorbars(fig)) == 2
    assert len(fig.axes) == 3 + 3 + 2
    assert [ax.get_title() for ax in surf] == list(drifts)
    # labels on the outer panels
    assert all(ax.get_xlabel() == R_LABEL for ax in grad)
    assert surf[0].get_ylabel() == grad[0].get_ylabel() == A_LABEL
    # one colour scale per row: the same (vmin, vmax) on every heatmap of the row
    for row, (lo_expected, symmetric) in ((surf, (0.0, False)), (grad, (None, True))):
        clims = {m.get_clim() for ax in row for m in meshes(ax)}
        assert sum(len(meshes(ax)) for ax in row) == 3 and len(clims) == 1
        (vmin, vmax), = clims
        assert vmax > vmin
        if symmetric:
            assert vmin == pytest.approx(-vmax)
        else:
            assert vmin == lo_expected
    # the r = 1 line on every heatmap
    assert all(len(r1_lines(ax)) == 1 for ax in surf + grad)
    # the heatmap holds D itself: PPO-clip's panel equals the closed form on its grid
    ppo_mesh = meshes(surf[1])[0]
    values = np.asarray(ppo_mesh.get_array()).reshape(41, 41)
    r = np.linspace(0.5, 2.0, 41, dtype=np.float32)
    r[np.argmin(np.abs(r - 1))] = 1.0
    R, A = np.meshgrid(r, np.linspace(-3, 3, 41, dtype=np.float32))
    expected = np.maximum((R - np.clip(R, 0.8, 1.2)) * A, 0.0)
    np.testing.assert_allclose(values, expected, atol=1e-6)
    # colour bars are labelled
    labels = {cb.get_ylabel() for cb in colorbars(fig)}
    assert D_LABEL in labels and GRAD_LABEL in labels


def test_surrogate_gradient_of_ppo_clip_is_a_or_zero():
    """d(rA - D)/dr for PPO-clip: A inside the trust region, 0 where the update is clipped."""
    fig = drift_surface_figure({"PPO": (mo.PPOClip(), {})}, num=31)
    (ax,) = panels(fig, "gradient/")
    g = np.asarray(meshes(ax)[0].get_array()).reshape(31, 31)
    r = np.linspace(0.5, 2.0, 31)
    a = np.linspace(-3, 3, 31)
    R, A = np.meshgrid(r, a)
    inside = (np.abs(R - 1) < 0.19)
    np.testing.assert_allclose(g[inside], A[inside], atol=1e-5)
    clipped = ((R > 1.21) & (A > 0.1)) | ((R < 0.79) & (A < -0.1))
    np.testing.assert_allclose(g[clipped], 0.0, atol=1e-6)


def test_difference_column_is_zero_for_identical_drifts(lpo):
    """The learned - distilled column (`metadisco distil`): two identical drifts draw 0 in both rows,
    the gradient row included (the difference of the two weights, not the weight A - d(0)/dr = A)."""
    from metadisco.analysis.figures.drift import DriftDifference

    obj, params = lpo
    fig = drift_surface_figure({"learned − learned": (DriftDifference(obj, params, obj, params), {})}, num=21)
    for prefix in ("surface/", "gradient/"):
        (ax,) = panels(fig, prefix)
        np.testing.assert_array_equal(np.asarray(meshes(ax)[0].get_array()), 0.0)


def test_difference_column_draws_the_difference_of_the_weights(lpo):
    """For two different drifts the gradient panel is weight(a) - weight(b), panel for panel."""
    from metadisco.analysis.figures.drift import DriftDifference

    obj, params = lpo
    ppo = mo.PPOClip()
    fig = drift_surface_figure({"a": (obj, params), "b": (ppo, {}),
                                      "a − b": (DriftDifference(obj, params, ppo, {}), {})}, num=21)
    (sa, sb, sd), (ga, gb, gd) = ([np.asarray(meshes(ax)[0].get_array()) for ax in panels(fig, prefix)]
                                  for prefix in ("surface/", "gradient/"))
    np.testing.assert_allclose(sd, sa - sb, atol=1e-5)
    np.testing.assert_allclose(gd, ga - gb, atol=1e-4)
    assert np.abs(gd).max() > 0.1  # the two differ: a panel of zeros would not pass


def test_difference_column_has_colour_bars_and_scales_of_its_own(lpo):
    """The difference is signed and of another size than the drifts: in both rows the difference
    column has its own symmetric scale and a colour bar labelled as a difference; the drifts'
    scales are set by the drifts alone."""
    from metadisco.analysis.figures.drift import DIFF_GRAD_LABEL, DIFF_LABEL, GRAD_LABEL, DriftDifference

    obj, params = lpo
    ppo = mo.PPOClip()
    fig = drift_surface_figure({"a": (obj, params), "b": (ppo, {}),
                                "a − b": (DriftDifference(obj, params, ppo, {}), {})}, num=21)
    assert sorted(cb.get_ylabel() for cb in colorbars(fig)) == sorted([D_LABEL, GRAD_LABEL, DIFF_LABEL, DIFF_GRAD_LABEL])
    for prefix in ("surface/", "gradient/"):
        (ma,), (mb,), (md,) = (meshes(ax) for ax in panels(fig, prefix))
        assert ma.get_clim() == mb.get_clim() != md.get_clim()
        low, high = md.get_clim()
        assert low == pytest.approx(-high) and high > 0
        values = np.asarray(md.get_array())
        assert values.min() < 0 < values.max()  # the difference takes both signs (a drift never does) ...
        assert high == pytest.approx(np.percentile(np.abs(values), 99.0))  # ... and sets its own scale
    surface_a, surface_b = (np.asarray(meshes(ax)[0].get_array()) for ax in panels(fig, "surface/")[:2])
    assert panels(fig, "surface/")[0].collections[0].get_clim() == (0.0, pytest.approx(
        np.percentile(np.concatenate([surface_a.ravel(), surface_b.ravel()]), 99.5)))


def test_closed_form_drift_surface_matches_its_objective():
    """A closed-form drift (the exported representation) draws the same surface as the objective."""
    from metadisco.meta_objectives.formulas import dpo_expression

    dpo = mo.DPO()
    fig = drift_surface_figure({"closed form": (mo.ClosedFormDrift(dpo_expression()), None),
                                      "DPO": (dpo, dpo.init(jax.random.key(0)))}, num=31)
    a, b = (meshes(ax)[0] for ax in panels(fig, "surface/"))
    np.testing.assert_allclose(np.asarray(a.get_array()), np.asarray(b.get_array()), atol=1e-5)
    ga, gb = (meshes(ax)[0] for ax in panels(fig, "gradient/"))
    np.testing.assert_allclose(np.asarray(ga.get_array()), np.asarray(gb.get_array()), atol=1e-4)


def test_drift_slices_figure(drifts):
    fig = drift_slices_figure(drifts, num=51)
    slices = panels(fig, "slice/")
    assert [ax.get_label() for ax in slices] == [f"slice/A={a:g}" for a in SLICE_ADVANTAGES]
    assert [ax.get_title() for ax in slices] == [f"A = {a:g}" for a in SLICE_ADVANTAGES]
    for ax in slices:
        lines = data_lines(ax)
        assert [ln.get_label() for ln in lines] == list(drifts)
        assert all(len(ln.get_xdata()) == 51 for ln in lines)
        assert len(r1_lines(ax)) == 1
    assert all(ax.get_xlabel() == R_LABEL for ax in slices[3:])
    assert slices[0].get_ylabel() == D_LABEL
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend_texts == list(drifts)
    # D(r) at A = 2 for PPO-clip is relu((r - 1.2) * 2)
    ppo = data_lines(slices[-1])[1]
    np.testing.assert_allclose(ppo.get_ydata(), np.maximum((ppo.get_xdata() - np.clip(ppo.get_xdata(), 0.8, 1.2)) * 2, 0),
                               atol=1e-6)


def test_progress_surfaces_figure():
    obj = mo.TALPO(hidden=16)
    params = perturb_output(obj.init(jax.random.key(2)), 0.5)
    progresses = (0.0, 0.5, 1.0)
    fig = progress_surfaces_figure(obj, params, progresses=progresses, num=31)
    top, change = panels(fig, "progress/"), panels(fig, "progress_change/")
    assert len(top) == len(change) == 3 and len(colorbars(fig)) == 2
    assert [ax.get_title() for ax in top] == ["n/N = 0", "n/N = 0.5", "n/N = 1"]
    assert len({m.get_clim() for ax in top for m in meshes(ax)}) == 1
    assert len({m.get_clim() for ax in change for m in meshes(ax)}) == 1
    assert all(len(r1_lines(ax)) == 1 for ax in top)
    # the surfaces really change with progress (the progress features are used), and not at p = 0
    first = np.asarray(meshes(change[0])[0].get_array())
    last = np.asarray(meshes(change[-1])[0].get_array())
    assert np.abs(first).max() == 0.0 and np.abs(last).max() > 1e-3


@pytest.mark.parametrize("use_target", [False, True])
def test_value_loss_figure(use_target):
    obj = mo.LearnedValueLoss(hidden=8, use_target=use_target)
    params = perturb_output(obj.init(jax.random.key(0)), 0.5)
    fig = value_loss_figure(obj, params, num=101)
    loss, diff, grad = (panels(fig, f"value_loss/{k}")[0] for k in ("loss", "difference", "gradient"))
    assert len(fig.axes) == 3
    n_targets = 3 if use_target else 1
    # learned lines (one per target) plus the L2 reference on each panel
    for ax in (loss, diff, grad):
        lines = [ln for ln in ax.lines if not ln.get_label().startswith("_")]
        assert len(lines) == n_targets + 1
        assert all(len(ln.get_xdata()) in (101, 2) for ln in lines)
        assert ax.get_xlabel() == "prediction error e = v − t"
    assert loss.get_ylabel() == "value loss L" and grad.get_ylabel() == "gradient ∂L/∂v"
    l2 = [ln for ln in loss.lines if ln.get_label() == "L2 = e²/2"][0]
    np.testing.assert_allclose(l2.get_ydata(), 0.5 * l2.get_xdata().astype(float) ** 2, rtol=1e-6)
    # the difference panel is L - L2 of the learned line, and zero error costs zero
    learned, learned_diff = loss.lines[0], diff.lines[0]
    np.testing.assert_allclose(learned_diff.get_ydata(), learned.get_ydata() - l2.get_ydata(), atol=1e-6)
    assert abs(np.interp(0.0, learned.get_xdata(), learned.get_ydata())) < 1e-3
    assert np.abs(learned_diff.get_ydata()).max() > 1e-3  # the perturbation shows


def test_value_loss_figure_at_init_is_l2():
    obj = mo.LearnedValueLoss()
    fig = value_loss_figure(obj, None, num=41)
    diff = panels(fig, "value_loss/difference")[0]
    np.testing.assert_allclose(diff.lines[0].get_ydata(), 0.0, atol=1e-6)


def test_shaping_figure():
    obj = mo.PotentialShaping(obs_shape=(4,))
    params = obj.init(jax.random.key(0))
    params = {"potential": perturb_output(params["potential"], 0.5)}
    low, high = -np.arange(1, 5, dtype=np.float32), np.arange(1, 5, dtype=np.float32)
    names = ("x", "ẋ", "θ", "θ̇")
    fig = shaping_figure(obj, params, low, high, max_pairs=6, num=21, dim_names=names)
    maps = panels(fig, "shaping/")
    assert [ax.get_label() for ax in maps] == [f"shaping/{i},{j}" for i, j in
                                               [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]]
    assert len(colorbars(fig)) == 1 and colorbars(fig)[0].get_ylabel() == "potential Φ(s)"
    assert (maps[0].get_xlabel(), maps[0].get_ylabel()) == ("x", "ẋ")
    assert (maps[-1].get_xlabel(), maps[-1].get_ylabel()) == ("θ", "θ̇")
    clims = {m.get_clim() for ax in maps for m in meshes(ax)}
    assert len(clims) == 1 and next(iter(clims))[0] == pytest.approx(-next(iter(clims))[1])
    # axes span the bounds; the heatmap is the potential with other dims at the midpoint (0)
    assert maps[0].get_xlim() == pytest.approx((-1 - 0.05, 1 + 0.05)) and maps[0].get_ylim() == pytest.approx((-2 - 0.1, 2 + 0.1))
    phi = np.asarray(meshes(maps[0])[0].get_array()).reshape(21, 21)
    x0, x1 = np.meshgrid(np.linspace(-1, 1, 21), np.linspace(-2, 2, 21))
    obs = np.stack([x0, x1, np.zeros_like(x0), np.zeros_like(x0)], -1).astype(np.float32)
    np.testing.assert_allclose(phi, np.asarray(obj.potential(params, jnp.asarray(obs))), atol=1e-5)
    # fewer pairs on request
    fig2 = shaping_figure(obj, params, low, high, max_pairs=2, num=11)
    assert len(panels(fig2, "shaping/")) == 2 and panels(fig2, "shaping/")[0].get_xlabel() == "obs[0]"


def test_shaping_figure_rejects_empty_box():
    obj = mo.PotentialShaping(obs_shape=(2,))
    with pytest.raises(ValueError, match="obs_high > obs_low"):
        shaping_figure(obj, None, np.zeros(2), np.array([1.0, 0.0]))


def metrics_rows(n=6, eval_at=(2, 5)):
    """Synthetic metrics rows as metrics.jsonl stores them, comparisons at the generations `eval_at`."""
    rows = []
    for g in range(n):
        row = {"generation": g, "fitness_mean": 10.0 + g, "fitness_min": 8.0 + g, "fitness_max": 12.0 + g,
               "fitness_std": 1.0, "best_fitness": [12, 13, 13, 15, 14, 17][g % 6], "sigma": 0.01 * 0.9 ** g,
               "num_diverged": 0, "wall_time_s": 0.1, "env_steps_per_s": 1e5}
        if g in eval_at:
            row.update({"eval_mean_fitness": 11.0 + g, "eval_ppo_fitness": 10.5, "eval/CartPole-v1/mean": 11.0 + g,
                        "eval/CartPole-v1/ppo": 10.5})
        rows.append(row)
    return rows


def records(rows):
    return [GenerationRecord.from_row(r) for r in rows]


def test_training_curves_figure():
    rows = records(metrics_rows())
    fig = training_curves_figure(rows, "fitness (auc)")
    (fit,), (sig,) = panels(fig, "curves/fitness"), panels(fig, "curves/sigma")
    lines = {ln.get_label(): ln for ln in fit.lines}
    best = "max member so far (selected on noise)"  # named for what it is: a maximum over noisy scores
    assert set(lines) == {"population mean", best, "ES mean (fresh seeds)", "PPO (same seeds)"}
    np.testing.assert_array_equal(lines["population mean"].get_xdata(), [1, 2, 3, 4, 5, 6])  # generations done
    np.testing.assert_array_equal(lines[best].get_ydata(), [12, 13, 13, 15, 15, 17])  # running max
    np.testing.assert_array_equal(lines["ES mean (fresh seeds)"].get_xdata(), [3, 6])
    assert not panels(fig, "curves/health")  # rows without search health: no panel
    np.testing.assert_array_equal(lines["PPO (same seeds)"].get_ydata(), [10.5, 10.5])
    assert len(fit.collections) == 1  # the min-max band
    assert fit.get_ylabel() == "fitness (auc)" and sig.get_xlabel() == "generation"
    assert sig.get_ylabel() == "ES step size σ" and sig.get_yscale() == "log"
    assert len(sig.lines[0].get_xdata()) == 6
    # without evaluation rows and with a non-positive sigma: two lines, linear scale
    rows = records(dict(r, sigma=0.0) for r in metrics_rows(eval_at=()))
    fig = training_curves_figure(rows)
    (fit,), (sig,) = panels(fig, "curves/fitness"), panels(fig, "curves/sigma")
    assert len(fit.lines) == 2 and sig.get_yscale() == "linear"
    with pytest.raises(ValueError):
        training_curves_figure([])


def test_the_figure_the_console_and_the_report_number_a_generation_alike(tmp_path):
    """A metrics row stores its generation 0-based; every human-facing place says how many are done."""
    from metadisco.analysis.report import write_report
    from metadisco.console import update_bar
    from metadisco.core.run_config import RunConfig

    rows = records(metrics_rows(3, eval_at=(2,)))
    console = []
    update_bar(None, rows[-1], console.append, total=4)
    (fit,) = panels(training_curves_figure(rows), "curves/fitness")
    lines = {ln.get_label(): ln for ln in fit.lines}
    assert console[0].startswith("gen 3/4:") and "gen 3: ES mean" in console[1]
    assert lines["population mean"].get_xdata()[-1] == 3 == lines["ES mean (fresh seeds)"].get_xdata()[-1]
    page = write_report(tmp_path / "report.html", tmp_path, RunConfig(), rows, {}, {}, [], "mean", {}).read_text()
    assert "Last generation (3)" in page and "after generation 3:" in page


def test_training_curves_show_search_health_and_the_start_point():
    """Rows with search health get a panel of the split-half cosine (per generation and its
    running mean, with the noise line); rows with the start point's check get its markers."""
    rows = metrics_rows()
    cos = [0.9, -0.1, 0.5, float("nan"), 0.2, 0.4]
    for r, c in zip(rows, cos):
        r["health/grad_cos"] = c
        if "eval_mean_fitness" in r:
            r["eval_start_fitness"] = 9.0
    fig = training_curves_figure(records(rows))
    (health,) = panels(fig, "curves/health")
    points, running = health.lines[0], health.lines[1]
    np.testing.assert_array_equal(points.get_ydata(), cos)
    np.testing.assert_allclose(running.get_ydata()[:3], [0.9, 0.4, 1.3 / 3])  # mean of the finite ones so far
    assert 0.2 in [ln.get_ydata()[0] for ln in health.lines[2:]]  # the line below which it is noise
    (fit,) = panels(fig, "curves/fitness")
    start = {ln.get_label(): ln for ln in fit.lines}["its start (same seeds)"]
    np.testing.assert_array_equal(start.get_ydata(), [9.0, 9.0])


# ---------------------------------------------------------------------------------------------
# plot_run on run directories
# ---------------------------------------------------------------------------------------------


def embedded_images(html_text):
    return re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html_text)


@pytest.mark.slow
def test_plot_run_on_a_trained_run(tiny_run):
    written = plots.plot_run(tiny_run)
    assert list(written) == ["training_curves", "drift_surface", "drift_slices", "report"]
    figures = tiny_run / "figures"
    for name in ("training_curves", "drift_surface", "drift_slices"):
        assert written[name] == [figures / f"{name}.png", figures / f"{name}.pdf"]
        png, pdf = written[name]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pdf.read_bytes()[:5] == b"%PDF-"
    report = tiny_run / "report.html"
    assert written["report"] == [report]
    text = report.read_text()
    images = embedded_images(text)
    assert len(images) == 3
    assert all(base64.b64decode(img)[:4] == b"\x89PNG" for img in images)
    config = json.loads((tiny_run / "config.json").read_text())
    last = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()][-1]
    assert config["name"] in text and "CartPole-v1" in text and "Open_ES" in text
    assert "lpo (hidden=8) / " in text and "&#x27;name&#x27;" not in text  # objectives by name, not as raw sections
    assert f"Last generation ({last['generation'] + 1})" in text and "fitness_mean" in text and "eval_mean_fitness" in text
    assert "<img" in text and "src='figures/" not in text  # self-contained: no image files referenced
    assert len(plt.get_fignums()) == 0  # every figure closed


def test_plot_run_which_best_out_dir_and_formats(tiny_run, tmp_path):
    notes = []
    written = plots.plot_run(tiny_run, out_dir=tmp_path / "figs", formats=("svg",), which="best", notes=notes)
    assert written["drift_surface"] == [tmp_path / "figs" / "drift_surface.svg"]
    assert written["report"] == [tmp_path / "figs" / "report.html"]
    assert "learned (LPO) [best]" in (tmp_path / "figs" / "drift_surface.svg").read_text()
    assert len(embedded_images(written["report"][0].read_text())) == 3  # PNGs rendered for the report anyway
    assert not list((tmp_path / "figs").glob("*.png"))  # ... but not left beside the SVGs asked for
    assert notes == []
    with pytest.raises(plots.PlotError, match="format"):
        plots.plot_run(tiny_run, formats=("gif",))
    with pytest.raises(plots.PlotError, match="which"):
        plots.plot_run(tiny_run, which="last")


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    """A run directory written by hand, with every plug point learned (TA-LPO, value loss, shaping)."""
    path = tmp_path_factory.mktemp("plots") / "synthetic"
    objectives = Objectives(mo.TALPO(hidden=8), mo.LearnedValueLoss(hidden=8, use_target=True),
                            mo.PotentialShaping(obs_shape=(4,), hidden=8))
    params = objectives.init(jax.random.key(0))
    params["drift"] = perturb_output(params["drift"], 0.3)
    params["value_loss"] = perturb_output(params["value_loss"], 0.3)
    params["shaping"] = {"potential": perturb_output(params["shaping"]["potential"], 0.3)}
    (path / "objectives").mkdir(parents=True)
    save_objectives(path / "objectives" / "mean.json", objectives, params, {"generation": 3})
    config = {"name": "synthetic", "envs": ["CartPole-v1"], "fitness": "auc",
              "objectives": {"drift": "talpo", "value_loss": "learned", "shaping": "potential",
                             "evolve": ["drift", "value_loss", "shaping"]},
              "es": {"strategy": "Open_ES", "population_size": 4}, "generations": 3}
    (path / "config.json").write_text(json.dumps(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics_rows(3, eval_at=(2,))))
    return path


def test_plot_run_draws_every_applicable_figure(synthetic_run):
    notes = []
    written = plots.plot_run(synthetic_run, formats=("png",), notes=notes)
    assert list(written) == ["training_curves", "drift_surface", "drift_slices", "progress_surfaces",
                             "value_loss", "shaping", "report"]
    assert notes == []  # the shaping bounds came from CartPole-v1 observations
    text = written["report"][0].read_text()
    assert len(embedded_images(text)) == 6 and "synthetic" in text
    assert "Last evaluation" not in text  # the last row is itself evaluated
    # what the run lacks, the report says how to make
    assert f"Not evaluated yet: <code>metadisco evaluate {synthetic_run}</code>" in text
    assert f"drift: not distilled yet: metadisco distil {synthetic_run}" in text
    assert "No verdict: the config states no expectation" in text


def test_the_report_carries_the_verdict_the_held_out_results_and_the_distillation(synthetic_run, tmp_path):
    import dataclasses
    import shutil

    from metadisco.analysis.distillation.report import Candidate, DistillationReport, Errors, FitPoints, Source
    from metadisco.analysis.distillation.report import write_report as write_distillation
    from metadisco.analysis.distillation.run import params_digest
    from metadisco.analysis.report import write_report
    from metadisco.analysis.runs import Run
    from metadisco.core.run_config import ExpectConfig

    run = Run(shutil.copytree(synthetic_run, tmp_path / "run"))
    for stamp, text in (("20240101-000000", "an older table"), ("20240202-000000", "| CartPole-v1 | 1.5 |")):
        (run.evaluation_dir / stamp).mkdir(parents=True)
        (run.evaluation_dir / stamp / "results.md").write_text(text)
    run.distil_dir.mkdir()
    chosen = Candidate("sparse", "(r - 1)**2*Abs(A)", 5, 1, 1.0, 0.0, 0.0, Errors(1.0, 0.0, 0.0), None, 0.0,
                       violations=(), score=0.005)
    objectives, params, _ = run.objectives("mean")  # a report names the objective it was fitted to
    source = Source(str(run.path), "mean", "drift", objectives.drift.spec(), 8, params_digest=params_digest(params["drift"]))
    write_distillation(DistillationReport((chosen,), (0,), chosen, "value", FitPoints("prior", 8, {}, 1.0), 1e-3,
                                          source=source), run.distil_dir / "drift.json")
    config = dataclasses.replace(run.config(), expect=ExpectConfig(beats="ppo"))
    rows = run.metrics()
    rows[-1] = dataclasses.replace(rows[-1], comparison=dataclasses.replace(rows[-1].comparison,
                                                                            diff=Interval(2.5, 0.5, 4.5)),
                                   violations=Violations((), ()))  # checked, and nothing failed
    page = write_report(tmp_path / "report.html", run.path, config, rows, {}, {}, [], "mean", {},
                        evaluation=plots.newest_evaluation(run), distillation=plots._distillation(run, config, "mean"))
    text = page.read_text()
    assert "verdict: FOUND after generation 3" in text
    assert "| CartPole-v1 | 1.5 |" in text and "an older table" not in text  # the newest evaluation
    assert "drift: (r - 1)**2*Abs(A) (export it: metadisco export" in text
    assert f"value_loss: not distilled yet: metadisco distil {run.path}" in text


def test_a_figure_that_fails_is_shown_and_fails_the_run_after_the_others(synthetic_run, tmp_path, monkeypatch,
                                                                          capsys):
    """A broken figure does not cost the others, nor does it pass unseen: its traceback goes to
    stderr, the report notes it, and plot_run raises FigureError (`metadisco plot` exits 1)."""
    from metadisco.core.errors import EXIT_FAILED

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the slices")

    monkeypatch.setattr(plots, "drift_slices_figure", broken)
    notes = []
    with pytest.raises(plots.FigureError, match="1 figure.s. failed to draw: drift_slices") as info:
        plots.plot_run(synthetic_run, out_dir=tmp_path / "lib", formats=("png",), notes=notes)
    assert info.value.failed == ["drift_slices"] and info.value.exit_code == EXIT_FAILED == 1
    assert list(info.value.written) == ["training_curves", "drift_surface", "progress_surfaces", "value_loss",
                                        "shaping", "report"]
    assert all(p.is_file() for paths in info.value.written.values() for p in paths)
    assert "drift_slices: not drawn (RuntimeError: a bug in the slices)" in notes
    assert "drift_slices: not drawn" in info.value.written["report"][0].read_text()
    err = capsys.readouterr().err
    assert "figure 'drift_slices' failed" in err and "Traceback" in err and "a bug in the slices" in err

    out = tmp_path / "cli"
    assert run_cli(["plot", str(synthetic_run), "--out", str(out), "--formats", "png"]) == EXIT_FAILED
    captured = capsys.readouterr()
    assert "Traceback" in captured.err and "metadisco: error: 1 figure(s) failed to draw: drift_slices" in captured.err
    assert str(out / "drift_surface.png") in captured.out.split() and (out / "report.html").is_file()


def test_observation_bounds_cover_cartpole():
    low, high = observation_bounds("CartPole-v1", num_envs=4, num_steps=32)
    assert low.shape == high.shape == (4,) and np.all(high > low)
    assert -0.25 < low[2] < 0 < high[2] < 0.25  # the pole angle stays within the termination limit


def test_plot_run_errors(tmp_path, synthetic_run):
    with pytest.raises(MetadiscoError, match="no run directory"):  # RunDirError, from metadisco.analysis.runs
        plots.plot_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MetadiscoError, match="config.json is missing"):
        plots.plot_run(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(plots.PlotError, match="incomplete"):
        plots.plot_run(tmp_path / "empty")
    # metrics but no objectives yet: the curves, and a note saying why the rest is missing
    (tmp_path / "empty" / "metrics.jsonl").write_text(json.dumps(metrics_rows(1)[0]) + "\n{cut")
    notes = []
    written = plots.plot_run(tmp_path / "empty", formats=("png",), notes=notes)
    assert list(written) == ["training_curves", "report"]
    assert notes and "objectives/mean.json" in notes[0]
    assert "objectives/mean.json" in written["report"][0].read_text()


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------


def run_cli(argv):
    from metadisco.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
        raise SystemExit(0)
    return exc.value.code


def test_cli_plot_missing_directory(tmp_path, capsys):
    code = run_cli(["plot", str(tmp_path / "nope")])
    assert code not in (0, None)
    err = capsys.readouterr().err
    assert "no run directory" in err and "metadisco train" in err


def test_cli_plot_incomplete_directory(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    code = run_cli(["plot", str(tmp_path / "run")])
    assert code not in (0, None) and "config.json is missing" in capsys.readouterr().err


def test_cli_plot_writes_and_prints_paths(synthetic_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(["plot", str(synthetic_run), "--out", str(out), "--formats", "png", "--which", "mean"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed[-1] == str(out / "report.html")
    assert str(out / "drift_surface.png") in printed and all((tmp_path / p).exists() for p in printed)


def test_cli_registers_plot_without_importing_jax():
    import subprocess
    import sys

    code = ("import sys; from metadisco.cli import build_parser; p = build_parser(); "
            "p.parse_args(['plot', 'x']); assert 'jax' not in sys.modules and 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_potential_is_drawn_over_the_declared_box_where_the_environment_has_one():
    """MountainCar declares a bounded observation box, and a random policy never leaves the
    start's neighbourhood (where a potential for reaching the flag matters least): the figure
    spans the whole box. CartPole's speeds are unbounded: the box a random policy visits."""
    from metadisco.analysis.figures.shaping import observation_bounds

    low, high = observation_bounds("MountainCar-v0")
    np.testing.assert_allclose(low, [-1.2, -0.07], rtol=1e-6)
    np.testing.assert_allclose(high, [0.6, 0.07], rtol=1e-6)
    low, high = observation_bounds("CartPole-v1")
    assert np.all(np.isfinite(low)) and np.all(high - low < 10.0) and high[0] - low[0] < 4.8

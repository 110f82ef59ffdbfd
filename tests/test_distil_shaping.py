"""Distilling a learned shaping potential Phi(s): closed forms over the observation's numbers s0, s1, ...
recovered from known potentials, and distil -> export -> the exported forms on a tiny trained run."""

import json

import numpy as np
import pytest

from metadisco.analysis.distillation.fit import REFERENCE_POTENTIALS, distil_shaping
from metadisco.meta_objectives import ClosedFormShaping, check_objective
from metadisco.meta_objectives.expressions import evaluate_shaping_numpy, to_latex

ENERGY = REFERENCE_POTENTIALS["MountainCar-v0"][1]  # v^2/2 + 0.0025 sin(3x)/3, x = s0, v = s1
SMALL_SEARCH = {"generations": 3, "population_size": 60}


def mountain_car_box(n=1500, seed=0):
    """Observations [n, 2] over MountainCar's box: positions in [-1.2, 0.6], velocities in [-0.07, 0.07]."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.uniform(-1.2, 0.6, n), rng.uniform(-0.07, 0.07, n)], axis=1)


@pytest.mark.parametrize("target", [f"3 - 400*({ENERGY})", "1.5 + 2*s0 - 30*s1"], ids=["energy", "plane"])
def test_a_known_potential_is_recovered_up_to_scale_and_offset(target):
    obs = mountain_car_box()
    report = distil_shaping(lambda o: evaluate_shaping_numpy(target, o), obs, symbolic_kwargs=SMALL_SEARCH,
                            env="MountainCar-v0")
    assert report.chosen.r2 > 0.99999 and report.chosen.grid.r2 > 0.99999
    assert report.chosen in report.front and report.front[-1].r2 >= report.front[0].r2
    np.testing.assert_allclose(evaluate_shaping_numpy(report.chosen.expression, obs),
                               evaluate_shaping_numpy(target, obs), atol=1e-4)
    energy = report.reference.correlation
    assert report.reference.name == "mechanical energy"
    if target.startswith("1.5"):
        assert report.plane_fit.r2 > 0.99999 and abs(energy) < 0.9
    else:
        assert energy == pytest.approx(-1.0, abs=1e-9) and report.plane_fit.r2 < 0.5


def test_the_grammar_writes_the_energy_and_a_closed_form_potential_is_a_valid_shaping():
    obs = mountain_car_box(50)
    shaping = ClosedFormShaping(ENERGY).for_env((2,))
    phi = np.asarray(shaping.potential({}, obs.astype(np.float32)), np.float64)
    np.testing.assert_allclose(phi, obs[:, 1] ** 2 / 2 + 0.0025 * np.sin(3 * obs[:, 0]) / 3, atol=1e-7)
    assert r"\sin" in to_latex(ENERGY, variables=("s0", "s1"))
    assert check_objective(shaping) == []  # potential-based at any expression; nothing to start from
    assert "shape (2,)" in shaping.incompatibility((4,), "CartPole-v1")
    with pytest.raises(ValueError, match="reads s2"):
        ClosedFormShaping("s2", obs_shape=(2,))


@pytest.mark.slow
@pytest.mark.parametrize("finished_run", ["shaping"], indirect=True)
def test_distil_and_export_a_trained_shaping_run(capsys, finished_run):
    """A run that evolved only the shaping (the suite's finished "shaping" run: the demo at a tiny size) is
    distilled (it was refused before), exported as LaTeX, JSON and a JAX module that compute one potential,
    and plotted without the drift it never evolved."""
    import jax.numpy as jnp

    from metadisco.analysis.plots import plot_run
    from metadisco.analysis.targets import require_valid_target, resolve_target
    from metadisco.cli import main
    from metadisco.meta_objectives import load_objectives

    path, _ = finished_run
    main(["distil", str(path), "--seed", "1"])
    out = capsys.readouterr().out
    assert "shaping: Pareto front" in out and "correlation with the mechanical energy" in out
    report = json.loads((path / "distil" / "shaping.json").read_text())
    assert report["pareto"] and report["chosen"] is not None and report["data"]["n_points"] >= 20
    assert report["plane_fit"]["method"] == "plane" and report["reference"]["name"] == "mechanical energy"
    assert (path / "distil" / "shaping_learned_vs_distilled.png").is_file()

    main(["export", str(path)])
    files = {kind: path / "export" / f"discovered_shaping.{kind}" for kind in ("tex", "json", "py")}
    assert all(f.is_file() for f in files.values())
    expression = report["chosen"]["expression"]
    objectives, params, _ = load_objectives(files["json"])
    assert isinstance(objectives.shaping, ClosedFormShaping) and objectives.shaping.expression == expression
    assert r"\Phi(s) = " in files["tex"].read_text()
    namespace: dict = {}
    exec(compile(files["py"].read_text(), str(files["py"]), "exec"), namespace)
    obs = mountain_car_box(64).astype(np.float32)
    module = np.asarray(namespace["potential"](obs))
    np.testing.assert_allclose(module, np.asarray(objectives.shaping.potential({}, jnp.asarray(obs))), rtol=1e-6)
    np.testing.assert_allclose(module, evaluate_shaping_numpy(expression, obs), rtol=1e-4, atol=1e-4)
    require_valid_target(resolve_target(str(files["json"])))  # evaluate takes it as it takes an exported drift
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(path), "--format", "discogen"])
    assert exit_info.value.code == 2 and "no place for a reward shaping" in capsys.readouterr().err

    written = plot_run(path, formats=("png",))
    assert "shaping" in written and "drift_surface" not in written  # the fixed LPO is PPO-clip: not drawn

    # A distillation belongs to the objective it was fitted to: once the run's objective changes (a resume, an
    # extension, `distil --which` of another), export does not write the old closed form beside the new plugs.
    import jax

    from metadisco.analysis.distillation.run import stored_report
    from metadisco.analysis.runs import Run
    from metadisco.meta_objectives import save_objectives

    assert stored_report(Run(path), "shaping") is not None
    assert stored_report(Run(path), "shaping", "best") is None  # fitted to mean.json, not best.json
    objectives, params, extra = load_objectives(path / "objectives" / "mean.json")
    moved = {**params, "shaping": jax.tree.map(lambda x: x + 0.5, params["shaping"])}
    save_objectives(path / "objectives" / "mean.json", objectives, moved, extra)
    assert stored_report(Run(path), "shaping") is None
    main(["export", str(path)])
    refitted = json.loads((path / "distil" / "shaping.json").read_text())
    assert refitted["source"]["params_digest"] != report["source"]["params_digest"]

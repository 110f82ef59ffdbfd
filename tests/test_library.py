"""metadisco as a library: the user's own objective and environment in files of their
own, named `module:attr` or by an installed entry point, checked like built-ins; the check
command; the Python API; plug-ins recorded by name and never executed from a run directory."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from metadisco import api, meta_objectives
from metadisco.cli import main
from metadisco.core.errors import MetadiscoError
from metadisco.core.plugins import PluginError
from metadisco.meta_objectives import load_objectives, save_objectives
from tests.helpers import LPO, TINY
from tests.helpers import metadisco_in_process as _main_code

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
USER_FILES = ("my_drifts.py", "my_envs.py")
USER_MODULES = ("my_drifts", "my_envs")


def metadisco_in(cwd, *args, timeout=300):
    """`metadisco ARGS...` run from `cwd`, as a user in their own project folder."""
    return subprocess.run([sys.executable, "-m", "metadisco.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def project(tmp_path):
    """A user's folder holding copies of the two example files (and nothing of metadisco)."""
    for name in USER_FILES:
        shutil.copy(EXAMPLES / name, tmp_path / name)
    return tmp_path


@pytest.mark.slow
def test_the_examples_train_evaluate_and_plot_from_their_own_folder(project, monkeypatch, capsys):
    """Train, evaluate and plot as `metadisco` run in the user's folder: the command's `main` in this
    process, working directory the project (what `main` makes importable, as the console command
    does), the example modules imported afresh from there; then a real process elsewhere."""
    run_dir = project / "run"
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main puts the working directory on it: undone after
    for name in USER_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)  # imported from the project, not from elsewhere
    try:
        code, _, err = _main_code(["train", *LPO, "objectives.drift=my_drifts:ScaledSquare", "envs=my_envs:Corridor",
                                   "generations=2", *TINY, "--run-dir", str(run_dir), "--no-progress"], capsys)
        assert code == 0, err[-3000:]
        assert all(Path(sys.modules[name].__file__).resolve().parent == project.resolve() for name in USER_MODULES)
        config = json.loads((run_dir / "config.json").read_text())
        assert config["objectives"]["drift"]["name"] == "my_drifts:ScaledSquare" and config["envs"] == ["my_envs:Corridor"]
        stored = json.loads((run_dir / "objectives" / "mean.json").read_text())
        assert stored["spec"]["drift"]["name"] == "my_drifts:ScaledSquare"  # the import path, no code

        code, _, err = _main_code(["evaluate", str(run_dir), "--envs", "my_envs:Corridor", "--seeds", "1",
                                   "--timesteps", "2048", "--inner", "num_envs=4", "--inner", "num_steps=64",
                                   "--inner", "hidden=16,16", "--no-progress", "--out", str(project / "eval")], capsys)
        assert code == 0, err[-3000:]
        results = json.loads((project / "eval" / "results.json").read_text())
        assert "my_envs:Corridor" in json.dumps(results)

        code, _, err = _main_code(["plot", str(run_dir), "--formats", "png"], capsys)
        assert code == 0, err[-3000:]
        assert (run_dir / "report.html").is_file()
    finally:
        for name in USER_MODULES:
            sys.modules.pop(name, None)

    # Elsewhere the user's modules are not importable: one line naming the module, exit 2 (a fresh
    # process: this one has imported them).
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    out = metadisco_in(elsewhere, "plot", str(run_dir), "--formats", "png", timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "my_drifts" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


BROKEN = textwrap.dedent("""
    from dataclasses import dataclass
    import jax.numpy as jnp
    from metadisco.meta_objectives import MetaObjective

    @dataclass(frozen=True)
    class Linear(MetaObjective):   # D = c A (r - 1): negative half the time, sloped at r = 1
        plug = "drift"
        name = "linear"
        title = "linear"
        def init(self, key):
            return {"c": jnp.float32(0.5)}
        def drift(self, params, ratio, advantage, progress):
            return params["c"] * advantage * (ratio - 1.0)

    @dataclass
    class NotFrozen(MetaObjective):   # says it is a mutable dataclass: every objective is frozen
        plug = "drift"
        name = "not_frozen"
        def init(self, key):
            return {}
        def drift(self, params, ratio, advantage, progress):
            return 0.0 * ratio

    @dataclass(frozen=True)
    class Misspelled(MetaObjective):
        plug = "drift"
        name = "misspelled"
        title = "misspelled"
        def init(self, key):
            return {}
        def drfit(self, params, ratio, advantage, progress):
            return 0.0 * ratio

    not_a_class = 3
""")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_objectives.py").write_text(BROKEN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_objectives"
    sys.modules.pop("user_objectives", None)


def _main_exit(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    return e.value.code, out, err


def test_train_refuses_an_objective_that_is_invalid_at_its_start_before_any_compute(user_module, tmp_path, capsys):
    code, _, err = _main_exit(["train", *LPO, "objectives.drift=user_objectives:Linear", "--run-dir",
                               str(tmp_path / "run")], capsys)
    assert code == 2, err
    assert "refusing to start this run: objectives.drift=user_objectives:Linear is not a valid drift" in err
    assert "flat_at_one" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing written, nothing trained


def test_check_names_each_violated_constraint_of_a_broken_drift(user_module, capsys):
    code, out, err = _main_exit(["check", "user_objectives:Linear"], capsys)
    assert code == 2
    # the refusal `export` and `evaluate` give: every constraint by name, each with a counterexample
    assert "user_objectives:Linear is not a valid drift" in err and "(nonnegative, flat_at_one)" in err, err
    assert "D < 0" in err and "r=" in err and not out


@pytest.mark.parametrize("plug", [None, "drift"])
def test_check_of_an_unknown_name_says_what_to_do_in_one_line(capsys, plug):
    code, _, err = _main_exit(["check", "run/objectives/mean.json", *(["--plug", plug] if plug else [])], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "objective" in err and ("--plug" in err if plug is None else "metadisco export RUN_DIR" in err), err


def test_check_passes_the_example_drift_and_the_function_says_the_same(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    main(["check", "my_drifts:ScaledSquare", "--samples", "1"])
    assert "every drift constraint holds" in capsys.readouterr().out
    assert meta_objectives.check_objective(meta_objectives.make_objective("drift", "dpo"), samples=1) == []


@pytest.mark.parametrize(("name", "fragment"), [
    ("no_such_module:Thing", "no module named 'no_such_module'"),
    ("user_objectives:Lineer", "has no attribute 'Lineer'. Did you mean Linear?"),
    ("user_objectives:not_a_class", "not an objective"),
    ("metadisco.meta_objectives.value_loss:L2", "not a drift objective"),
    ("user_objectives:NotFrozen", "not frozen"),
    ("user_objectives:Misspelled", "has no method 'drift' (found 'drfit')"),
])
def test_a_bad_plugin_is_one_line_and_exit_2_before_compute(user_module, capsys, name, fragment):
    code, _, err = _main_exit(["train", *LPO, f"objectives.drift={name}", "generations=1", *TINY], capsys)
    assert code == 2 and fragment in err, err
    assert len(err.strip().splitlines()) == 1 and not Path("runs").exists()


def test_a_bad_plugin_environment_is_reported_before_compute(user_module, capsys):
    for name, fragment in (("no_such_module:Env", "no module named"), ("user_objectives:Linear", "not an environment")):
        code, _, err = _main_exit(["train", *LPO, f"envs={name}", "generations=1", *TINY], capsys)
        assert code == 2 and fragment in err, err


EIGHT_LINES = textwrap.dedent("""
    import jax.numpy as jnp
    from metadisco.meta_objectives import MetaObjective

    class Tiny(MetaObjective):
        plug = "drift"
        name = "tiny_square"
        def init(self, key):
            return {"c": jnp.float32(0.5)}
        def drift(self, params, ratio, advantage, progress):
            return params["c"] * jnp.abs(advantage) * (ratio - 1.0) ** 2
""")


def test_the_smallest_drift_that_says_what_it_is_checks_and_trains(tmp_path, monkeypatch, capsys):
    """Plug, name, init and drift, no decorator and no title: the base class supplies the rest."""
    (tmp_path / "tiny_drift.py").write_text(EIGHT_LINES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        cls = meta_objectives.objective_class("drift", "tiny_drift:Tiny")
        assert cls.title == "tiny square" and cls().spec()["name"] == "tiny_drift:Tiny"
        main(["check", "tiny_drift:Tiny", "--samples", "1"])
        assert "every drift constraint holds" in capsys.readouterr().out
        run_dir = api.train("lpo_cartpole_cpu", tmp_path / "run", generations=1, **dict(a.split("=", 1) for a in TINY),
                            **{"objectives.drift": "tiny_drift:Tiny"})
    finally:
        sys.modules.pop("tiny_drift", None)
    stored = json.loads((run_dir / "objectives" / "mean.json").read_text())
    assert stored["spec"]["drift"]["name"] == "tiny_drift:Tiny" and set(stored["params"]["drift"]) == {"c"}
    (generation,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert generation["fitness_mean"] > 0 and generation["num_diverged"] == 0, generation


def test_an_objectives_file_records_the_import_path_and_reimports_it(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    drift = meta_objectives.make_objective("drift", "my_drifts:ScaledSquare", c0=2.0)
    objectives = meta_objectives.Objectives(drift=drift)
    path = tmp_path / "mine.json"
    save_objectives(path, objectives, objectives.default_params(("drift",)))
    assert json.loads(path.read_text())["spec"]["drift"] == {"plug": "drift", "name": "my_drifts:ScaledSquare",
                                                             "config": {"c0": 2.0}}
    loaded, params, _ = load_objectives(path)
    assert loaded.drift == drift and float(params["drift"]["c"]) == 2.0
    spec = json.loads(path.read_text())
    spec["spec"]["drift"]["name"] = "not_installed_here:ScaledSquare"
    path.write_text(json.dumps(spec))
    with pytest.raises(MetadiscoError, match="no module named 'not_installed_here'"):
        load_objectives(path)


def test_installed_entry_points_are_resolved_and_listed(tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    dist = site / "lab_objectives-1.2.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-objectives\nVersion: 1.2\n")
    (dist / "entry_points.txt").write_text("[metadisco.objectives]\nscaled_square = lab_drifts:ScaledSquare\n\n"
                                           "[metadisco.envs]\ncorridor = lab_envs:Corridor\n")
    shutil.copy(EXAMPLES / "my_drifts.py", site / "lab_drifts.py")
    shutil.copy(EXAMPLES / "my_envs.py", site / "lab_envs.py")
    monkeypatch.syspath_prepend(str(site))
    cls = meta_objectives.objective_class("drift", "scaled_square")
    assert cls.__module__ == "lab_drifts" and cls().spec()["name"] == "lab_drifts:ScaledSquare"
    main(["objectives"])
    assert any("scaled_square" in line and "entry point (lab-objectives 1.2" in line
               for line in capsys.readouterr().out.splitlines())
    main(["envs"])
    assert any(line.startswith("corridor") and "lab_envs:Corridor" in line for line in capsys.readouterr().out.splitlines())
    from metadisco.inner_loops import make_env

    env = make_env("corridor")
    assert env.name == "corridor" and env.obs_shape == (8,) and env.discrete


def test_the_api_raises_metadisco_errors_not_system_exit(tmp_path):
    with pytest.raises(PluginError, match="no_such_module"):
        api.train(None, tmp_path / "run", envs="no_such_module:Corridor", generations=1)
    with pytest.raises(MetadiscoError, match="population_size"):
        api.train("lpo_cartpole_cpu", tmp_path / "run", es={"population_size": 1})
    with pytest.raises(MetadiscoError):
        api.plot(tmp_path / "missing")
    assert not (tmp_path / "run").exists()


def test_the_readme_drift_is_the_example_and_holds_its_constraints():
    import re

    readme = (EXAMPLES.parent / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "class ScaledSquare" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    drift = namespace["ScaledSquare"]()
    assert meta_objectives.check_objective(drift, samples=1) == []
    assert "no edit" not in block and "meta_objectives/" not in block  # nobody is asked to edit the package


@pytest.mark.timeout(60)
def test_the_api_evaluates_a_run_on_the_held_out_set_it_declared(tmp_path, monkeypatch):
    from metadisco.analysis.evaluation import render
    from metadisco.analysis.evaluation import run as evaluation

    run = tmp_path / "run"
    (run / "objectives").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({
        "envs": ["CartPole-v1"], "heldout": {"envs": ["Acrobot-v1", "Catch-bsuite"], "timesteps": 4096, "seeds": 3}}))
    shutil.copy(Path(__file__).parents[1] / "docs" / "results" / "l2_value_loss.json", run / "objectives" / "mean.json")
    calls = []
    monkeypatch.setattr(evaluation, "evaluate", lambda targets, **kw: calls.append(kw) or SimpleNamespace(saved=str))
    monkeypatch.setattr(render, "save", lambda results, out: out)

    api.evaluate(run, out=tmp_path / "out")
    assert calls[-1]["envs"] == ["Acrobot-v1", "Catch-bsuite"]
    assert calls[-1]["budget"] == 4096 and calls[-1]["seeds"] == 3
    api.evaluate(run, "Pendulum-v1", seeds=2, out=tmp_path / "out2")  # given envs win, and so do given options
    assert calls[-1]["envs"] == "Pendulum-v1" and calls[-1]["seeds"] == 2 and calls[-1].get("budget") is None


def test_the_api_applies_typed_overrides_and_checks_them_before_anything_runs(tmp_path, monkeypatch):
    """api.train's keyword overrides reach the RunConfig as typed values; a bad one is the
    ConfigError the command line gives, raised before the run starts."""
    import metadisco.train
    from metadisco.config import RunConfig, resolve
    from metadisco.core.errors import ConfigError

    started = []
    monkeypatch.setattr(metadisco.train, "run", lambda cfg, run_dir, **kw: started.append(cfg) or Path(run_dir))
    api.train("lpo_cartpole_cpu", tmp_path / "a", generations=3, tensorboard=True, es={"population_size": 4},
              inner={"hidden": (64, 64), "lr": 1e-3}, **{"inner.num_envs": 8})
    cfg = started.pop()
    assert cfg.generations == 3 and cfg.tensorboard is True and cfg.es.population_size == 4
    assert cfg.inner.hidden == (64, 64) and cfg.inner.lr == 1e-3 and cfg.inner.num_envs == 8
    api.train(resolve("lpo_cartpole_cpu"), tmp_path / "b", seed=5, distribution={"horizons": (0.5, 1.0)})
    assert isinstance(started[-1], RunConfig) and started[-1].seed == 5 and started[-1].distribution.horizons == (0.5, 1.0)
    with pytest.raises(ConfigError, match="config field inner.lr: cannot read 'fast' as float"):
        api.train("lpo_cartpole_cpu", tmp_path / "c", inner={"lr": "fast"})
    with pytest.raises(ConfigError, match="unknown config field 'es.populaton_size'"):
        api.train(None, tmp_path / "c", es={"populaton_size": 4})
    assert len(started) == 1 and not (tmp_path / "c").exists()


def test_the_api_reads_typed_inner_settings_for_evaluate():
    assert api._inner_settings({"num_envs": 2, "hidden": (8,), "lr": 0.01}, ()) == {"num_envs": 2, "hidden": (8,),
                                                                                      "lr": 0.01}
    assert api._inner_settings(["num_envs=2", "hidden=8"], ()) == {"num_envs": 2, "hidden": (8,)}
    with pytest.raises(MetadiscoError, match="inner.num_envs: cannot read 'x' as int"):
        api._inner_settings({"num_envs": "x"}, ())

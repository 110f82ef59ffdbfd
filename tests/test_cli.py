"""The `metadisco` command end to end, as a user runs it (subprocesses, tiny scale)."""

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from metadisco.config import list_experiments, resolve, run_plan
from tests import helpers
from tests.helpers import LPO, metadisco_in_process

TINY = [*helpers.TINY, "generations=3", "objectives.drift.hidden=8", "checkpoint_every=1"]  # tiny_config()'s programs


def cli(*argv, capsys) -> tuple[int, str, str]:
    """`metadisco ARGV` in this process: a real process is kept where the process is what is
    tested (Ctrl-C, and the checks that must finish before jax is imported)."""
    return metadisco_in_process(argv, capsys)


@pytest.mark.parametrize("name", list_experiments())
def test_every_named_experiment_resolves(name):
    cfg = resolve(name)
    assert cfg.generations >= 1 and cfg.envs


def test_help_lists_experiments_and_overrides(capsys):
    code, out, _ = cli("train", "--help", capsys=capsys)
    assert code == 0
    assert "lpo_cartpole_cpu" in out and "es.population_size" in out


def test_experiments_says_what_each_named_experiment_is_for(capsys):
    """One line each, from its file's first comment line: what it is, not its version or history."""
    from metadisco.config import experiment_purpose

    code, out, _ = cli("experiments", capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    for name in list_experiments():
        purpose = experiment_purpose(name)
        assert purpose and len(purpose) <= 110 and not re.match(r"v\d|.*\bissue\b", purpose, re.I), (name, purpose)
        assert any(line.split()[:1] == [name] and line.endswith(purpose) for line in lines), name


def test_the_cli_docstring_names_every_verb():
    import metadisco.cli
    from metadisco.commands import VERBS

    first_line = metadisco.cli.__doc__.splitlines()[0]
    named = first_line.split(":", 1)[1].rstrip(".").replace(" ", "").split(",")
    assert named == [verb.__name__.rsplit(".", 1)[1] for verb in VERBS]


@pytest.mark.slow
def test_train_stop_resume_and_bad_input(tmp_path, capsys):
    run_dir = tmp_path / "run"
    # a time limit shorter than one generation: the first one runs (nothing is measured before it),
    # then the run stops on time with a checkpoint and the status a job script requeues on
    code, out, err = cli("train", *LPO, *TINY, "--run-dir", str(run_dir), "--time-limit", "1", "--no-progress",
                         capsys=capsys)
    assert code == 75, err[-2000:]
    assert "evolving drift=lpo(hidden=8) (72 meta-parameters)" in out  # the banner, as a user writes it
    assert "time limit 1 s: stopped at generation 1/3 with a checkpoint" in err
    assert f"metadisco train --resume {run_dir}" in err
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1
    assert (run_dir / "checkpoints" / "gen_000001.msgpack").exists()
    code, out, err = cli("train", "--resume", str(run_dir), "--stop-after", "2", "--time-limit", "1h",
                         "--no-progress", capsys=capsys)
    assert code == 0, err[-2000:]
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    assert "gen 2/3:" in out  # --no-progress logs one line per generation
    assert f"metadisco train --resume {run_dir}" in out  # and says how to continue
    # resuming with a changed field is refused, showing the difference
    code, out, err = cli("train", *LPO, *TINY, "es.sigma_init=0.5", "--resume", str(run_dir), capsys=capsys)
    assert code == 2 and "es.sigma_init: 0.01 -> 0.5" in err
    code, out, err = cli("train", "--resume", str(run_dir), "--no-progress", capsys=capsys)
    assert code == 0, err[-2000:]
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 3
    assert "run directory:" in out and "metadisco plot" in out
    # an existing run directory is not overwritten
    code, out, err = cli("train", *LPO, *TINY, "--run-dir", str(run_dir), capsys=capsys)
    assert code == 2 and "--resume" in err
    # bad input fails at once with a message that says what to do, and creates nothing
    for bad, message in [("es.population_size=7", "odd"), ("envs=Cartpole-v1", "CartPole-v1"),
                         ("es.strategy=CMAES", "CMA_ES"), ("es.popsize=8", "population_size"),
                         ("objectives.evolve=value_loss", "objectives.value_loss=learned"),
                         ("--time-limit=ten minutes", "1h30m")]:
        code, out, err = cli("train", *LPO, bad, "--run-dir", str(tmp_path / "bad"), capsys=capsys)
        assert code == 2 and message in err, (bad, err)
        assert "Traceback" not in err
        assert not (tmp_path / "bad").exists()
    code, out, err = cli("train", "--resume", str(tmp_path / "missing"), capsys=capsys)
    assert code == 2 and "no run directory" in err


def test_ctrl_c_writes_a_checkpoint_and_says_how_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "metadisco.cli", "train", *LPO, *TINY, "generations=1000", "--run-dir", str(run_dir),
            "--no-progress"]
    # Ctrl-C as a terminal delivers it: SIGINT at its default disposition in the child, even when this
    # test runs under a launcher that ignores it (a background job of a non-interactive shell does)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            metrics = run_dir / "metrics.jsonl"
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
                break
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert f"metadisco train --resume {run_dir}" in err  # main prints RunInterrupted to stderr
    done = len((run_dir / "metrics.jsonl").read_text().splitlines())
    checkpoints = sorted((run_dir / "checkpoints").glob("gen_*.msgpack"))
    # the checkpoint covers every generation logged (the line of a generation that completed just
    # as Ctrl-C arrived may be missing: resume re-runs it)
    assert checkpoints and int(checkpoints[-1].stem.split("_")[1]) in (done, done + 1)


def test_metrics_are_mirrored_to_tensorboard_and_mlflow(tmp_path):
    import mlflow
    from tensorboardX import SummaryWriter  # noqa: F401  (the real libraries, not mocks)

    from metadisco.config import ESConfig, RunConfig, validate
    from metadisco.engine import MetaTrainer
    from metadisco.train import run
    from tests.helpers import quadratic_train

    cfg = validate(RunConfig(generations=3, es=ESConfig(population_size=4), eval_every=0,
                             tensorboard=True, mlflow=True))
    path = tmp_path / "run"
    run(cfg, path, progress=False, trainer=MetaTrainer(run_plan(cfg), trains=[quadratic_train]), log=lambda *a: None)
    assert list((path / "tensorboard").glob("events.out.tfevents.*"))
    mlflow.set_tracking_uri(f"sqlite:///{(path / 'mlflow.db').resolve()}")
    runs = mlflow.search_runs(experiment_names=[cfg.name])
    assert len(runs) == 1
    history = mlflow.tracking.MlflowClient().get_metric_history(runs.iloc[0].run_id, "fitness_mean")
    assert [m.step for m in history] == [0, 1, 2]


@pytest.fixture(scope="module")
def distilled(finished_runs, tmp_path_factory):
    """A copy of the suite's finished "drift_value" run (a drift and a value loss trained together), plotted
    and distilled as a user does, with what each command printed: (run directory, {command: stderr})."""
    import contextlib
    import io

    from metadisco.cli import main

    path = finished_runs.copy("drift_value", tmp_path_factory.mktemp("distilled") / "run")
    said = {}
    for command in (["plot", str(path), "--formats", "png"], ["page"], ["distil", str(path), "--no-symbolic"]):
        if command == ["page"]:  # the report before distil, as plot wrote it
            said["page"] = (path / "report.html").read_text()
            continue
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main(command)
        said[command[0]] = err.getvalue()
    return path, said


@pytest.mark.slow
def test_plot_and_distil_a_drift_and_a_value_loss_trained_together(distilled, finished_runs, tmp_path, capsys):
    """The analysis chain a user runs after training a drift and a value loss together: bad distil options are
    refused before any fitting; plot, then distil (both closed forms, each drawn against what was learned)."""
    from metadisco.cli import main

    path, said = distilled
    fresh = finished_runs.copy("drift_value", tmp_path / "fresh")
    for bad, message in (["--progress", "2"], "share of training"), (["--prior-fraction", "1"], "[0, 1)"):
        with pytest.raises(SystemExit) as exit_info:  # out of range: refused before any fitting
            main(["distil", str(fresh), *bad])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (fresh / "distil").exists()
    assert "value loss is drawn over the errors its critic makes: |v - target| <= " in said["plot"]
    page = path / "report.html"
    assert "not distilled yet" in said["page"]
    assert "What was found (mean)" in said["page"] and "drift: a learned network" in said["page"]
    report = json.loads((path / "distil" / "drift.json").read_text())
    # each command that adds to a run redraws the report plot wrote: what it added shows at once
    assert "not distilled yet" not in page.read_text() and "export it: metadisco export" in page.read_text()
    assert report["chosen"] is not None and report["data"]["n_points"] > 0
    loss_report = json.loads((path / "distil" / "value_loss.json").read_text())
    assert loss_report["chosen"] is not None and not loss_report["chosen"]["violations"]
    l2 = next(c for c in loss_report["candidates"] if c["method"] == "l2")
    assert loss_report["chosen"]["expression"].startswith("e**2/2")  # L2 plus the fitted departure
    assert loss_report["chosen"]["rmse"] <= l2["rmse"]  # at least as close to the learned loss as L2
    assert (path / "distil" / "drift_learned_vs_distilled.png").is_file()
    assert (path / "distil" / "value_loss_learned_vs_distilled.png").is_file()


@pytest.mark.slow
def test_export_both_closed_forms_and_evaluate_the_export(distilled, tmp_path, capsys):
    """distil -> export (both closed forms in one objectives file, one refused where it breaks its plug's
    constraints) -> evaluate the export."""
    from metadisco.cli import main
    from metadisco.meta_objectives import ClosedFormDrift, ClosedFormValueLoss, load_objectives

    path, _ = distilled
    page = path / "report.html"
    report = json.loads((path / "distil" / "drift.json").read_text())
    loss_report = json.loads((path / "distil" / "value_loss.json").read_text())
    main(["export", str(path)])
    exported = path / "export" / "discovered_drift_and_value_loss.json"
    objectives, params, extra = load_objectives(exported)
    assert isinstance(objectives.drift, ClosedFormDrift)
    assert objectives.drift.expression == report["chosen"]["expression"]
    assert isinstance(objectives.value_loss, ClosedFormValueLoss)
    assert objectives.value_loss.expression == loss_report["chosen"]["expression"]
    assert "export it" not in page.read_text() and "Exported: " in page.read_text()
    tex = (path / "export" / "discovered_drift_and_value_loss.tex").read_text()
    assert tex.count("begin{equation}") == 2
    with pytest.raises(SystemExit) as exit_info:  # a drift that violates the constraints is refused
        main(["export", str(path), "--expression", "(r - 1)*A"])
    assert exit_info.value.code == 2 and "not a valid drift" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # so is a value loss that pushes v away from t
        main(["export", str(path), "--value-loss", "e**2/2 - 3*e"])
    assert exit_info.value.code == 2 and "not a valid value loss" in capsys.readouterr().err
    # tests/test_evaluate.py's size (2 seeds, 4096 steps): PPO's and DPO's programs are its baseline's
    main(["evaluate", str(exported), "--envs", "CartPole-v1", "--seeds", "2", "--timesteps", "4096",
          "--no-progress", "--out", str(tmp_path / "eval")])
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert "CartPole-v1" in results["envs"]


@pytest.mark.slow
def test_the_readme_python_example_runs():
    """The README's inner-loop example is code a user will paste: it must run as written."""
    import pathlib
    import re

    readme = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "make_train" in b]
    assert blocks, "README lost its inner-loop example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["result"].returns.shape[0] == 4


@pytest.mark.parametrize(
    ("override", "message"),
    [("envs=CartPol-v1", "Did you mean: CartPole-v1"), ("es.population_size=7", "is odd"),
     ("es.strategy=CMAES", "CMA_ES"), ("heldout.envs=CartPole-v1", "meta-trains on")],
)
def test_config_errors_are_reported_before_jax_starts(override, message):
    """A typo costs the user no jax start-up (seconds): the jax-free checks run first, and the
    error is one line with exit code 2."""
    code = ("import sys\nfrom metadisco.cli import main\n"
            f"try:\n    main(['train', 'lpo_cartpole_cpu', {override!r}])\nexcept SystemExit as e:\n"
            "    print(e.code, 'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["2", "False"], out.stderr
    assert message in out.stderr and out.stderr.startswith("metadisco: error: ")
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("overrides", "message"), [
    (["inner.total_timesteps=-5"], "inner settings on CartPole-v1: PPO config: total_timesteps must be a positive"),
    (["inner.num_minibatches=3"], "does not split into num_minibatches = 3"),
    # a learned potential is sized for CartPole's 4 numbers: a held-out Acrobot (6) could never be evaluated
    (["objectives.shaping=potential", "objectives.evolve=shaping", "heldout.envs=Acrobot-v1"],
     "heldout.envs: Acrobot-v1 cannot evaluate what this run evolves: its learned shaping potential"),
])
def test_bad_settings_that_need_the_environment_are_a_one_line_error(overrides, message, capsys, tmp_path,
                                                                    monkeypatch):
    """The checks that need the environments (so jax: PPO's shapes, what a declared held-out
    environment can run) end in the same one-line error and exit code 2 as the jax-free ones,
    before any compute, not a traceback. (In this process: jax is imported either way.)"""
    monkeypatch.chdir(tmp_path)  # where a run that was not refused would be written (runs/...)
    code, out, err = cli("train", *LPO, *overrides, capsys=capsys)
    assert code == 2, err[-2000:]
    assert message in err and "Traceback" not in err
    assert err.startswith("metadisco: error: ") and len(err.strip().splitlines()) == 1


def test_a_multi_host_flag_without_its_partners_is_a_one_line_error(capsys):
    code, _, err = cli("train", "--coordinator", "127.0.0.1:1", "generations=1", capsys=capsys)
    assert code == 2 and "--num-processes" in err and "Traceback" not in err


def test_a_refused_resume_lists_what_its_overrides_change_in_the_stored_config(tmp_path, capsys):
    from metadisco.rundir import RunDir

    path = tmp_path / "run"
    stored = resolve(None, ["generations=2", "es.population_size=4", "inner.total_timesteps=2048"])
    RunDir(path).create(stored)  # refused before any checkpoint is read or anything compiles
    code, _, err = metadisco_in_process(["train", "--resume", str(path), "es.lr=0.2", "--no-progress"], capsys)
    assert code == 2, err
    listed = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    assert listed == [f"es.lr: {stored.es.lr!r} -> 0.2"], err


def test_objectives_name_shows_what_an_objective_computes_its_options_and_parameters(capsys):
    from metadisco import meta_objectives

    code, out, _ = metadisco_in_process(["objectives", "value_loss_mix"], capsys)
    assert code == 0
    assert "w = u / sum(u),  u = [1, relu(s_1), ..., relu(s_K), sum_k relu(-s_k)]" in out and "version = 3  (int)" in out
    assert "['scores']: shape (2,)" in out and "(valid_for_every_member)" in out
    for plug in meta_objectives.PLUGS:  # every registered objective shows, at its plug point
        for name in meta_objectives.names(plug):
            code, out, err = metadisco_in_process(["objectives", name, "--plug", plug], capsys)
            assert code == 0 and out.startswith(f"{name} ({plug}):"), err
    code, _, err = metadisco_in_process(["objectives", "value_los_mix"], capsys)
    assert code == 2 and "metadisco objectives" in err


def test_a_resume_given_a_run_dir_says_it_does_not_apply_and_does_nothing(tmp_path, capsys):
    code, _, err = cli("train", "--resume", str(tmp_path / "run"), "--run-dir", str(tmp_path / "elsewhere"),
                       capsys=capsys)
    assert code == 2 and "--run-dir does not apply to a resume" in err and "Traceback" not in err
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "run").exists()


def test_printed_commands_name_metadisco_as_the_user_can_type_it(tmp_path, monkeypatch):
    """`metadisco` where the PATH finds this environment's command; its path otherwise (`.venv/bin/metadisco`
    from the clone after `make demo`, absolute from elsewhere); the path again where the PATH finds another's."""
    import os
    from pathlib import Path

    from metadisco.core.invocation import command

    scripts = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{scripts}{os.pathsep}/usr/bin")
    assert command() == "metadisco"
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.chdir(scripts.parent.parent)  # the folder holding .venv
    assert command() == f"{scripts.parent.name}/{scripts.name}/metadisco"  # .venv/bin/metadisco
    monkeypatch.chdir(tmp_path)
    assert command() == str(scripts.absolute() / "metadisco")
    other = tmp_path / "bin"
    other.mkdir()
    (other / "metadisco").write_text("#!/bin/sh\n")
    (other / "metadisco").chmod(0o755)
    monkeypatch.setenv("PATH", str(other))
    assert command() == str(scripts.absolute() / "metadisco")


@pytest.mark.parametrize("verb", ["distil", "export"])
def test_a_reader_on_a_folder_that_is_no_run_says_only_that(verb, tmp_path, capsys):
    code, out, err = metadisco_in_process([verb, str(tmp_path)], capsys)
    assert code == 2 and "config.json is missing" in err and "ES mean" not in out + err, err


def test_the_value_loss_figures_error_span_is_measured_once_per_objective(finished_runs, tmp_path, monkeypatch):
    """Before distil, plot measures the critic's error span by training PPO: once, stored in figures/ for
    those objectives and that config, so the report's redraws after evaluate or export do not train again;
    another objective (RUN:best) is measured for itself, and a plot into another folder stores nothing."""
    from metadisco import api
    from metadisco.analysis.distillation import run as distil_run
    from metadisco.analysis.runs import Run

    path = finished_runs.copy("drift_value", tmp_path / "run")
    trained, visited = [], distil_run.visited_samples  # one training run per meta-training environment
    monkeypatch.setattr(distil_run, "visited_samples", lambda *a, **k: trained.append(1) or visited(*a, **k))
    run, envs = Run(path), len(Run(path).config().envs)
    elsewhere = api.visited_error_span(run, "mean", store=False)
    assert len(trained) == envs and not run.error_span_path.exists()
    span = api.visited_error_span(run, "mean")
    assert api.visited_error_span(run, "mean") == span == elsewhere and len(trained) == 2 * envs
    assert run.error_span_path.is_file()
    api.visited_error_span(run, "best")
    assert len(trained) == 3 * envs

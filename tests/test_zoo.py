"""The zoo: discovered objectives shipped with metadisco, listed by `metadisco zoo`, evaluable as zoo:NAME.

What a user relies on: every entry loads into objectives that are valid and train, says where it
comes from (config, commit, budget, held-out record and under which yardstick), and a mistyped
name fails with the close matches, before any compute. (The wheel carries the entries: see
tests/test_install.py.)
"""

import subprocess
from pathlib import Path

import jax
import numpy as np
import pytest

from metadisco.analysis.suites import EvaluationError
from metadisco.analysis.targets import resolve_target
from metadisco.core.catalog import check_env_name
from metadisco.inner_loops import PPOConfig, make_env, make_train
from metadisco.meta_objectives import Objectives, discovered
from metadisco.meta_objectives.constraints import check_objective
from tests.helpers import metadisco

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent
NAMES = discovered.names()
PROVENANCE = ("summary", "plugs", "experiment", "config", "commit", "budget", "how", "heldout", "yardstick", "verdict")


def test_the_zoo_holds_the_best_objective_each_reported_experiment_found():
    assert {"value_loss_cartpole", "drift_and_value_loss", "talpo_transfer_lr_mixture", "lpo_minatar_walls",
            "value_loss_long", "lpo_distribution", "drift_mix_distribution", "value_loss_distribution",
            "drift_mix_minatar_gpu_seed0", "drift_mix_minatar_gpu_seed1", "drift_mix_minatar_gpu_seed2"} <= set(NAMES)
    assert NAMES == sorted(p.stem for p in (ROOT / "zoo").glob("*.json"))


@pytest.mark.parametrize("name", NAMES)
def test_every_entry_loads_is_valid_and_says_where_it_comes_from(name):
    objectives, params, extra = discovered.load(name)
    entry = discovered.entry(name)
    prov = entry.provenance
    assert set(PROVENANCE) <= set(prov), sorted(set(PROVENANCE) - set(prov))
    assert {"envs", "budget", "table", "rows"} <= set(prov["heldout"]) and prov["heldout"]["rows"]
    assert entry.envs and tuple(extra["envs"]) == entry.envs  # evaluate flags them as meta-training envs
    assert "\n" not in entry.summary  # `metadisco zoo` lists one line per entry
    # the held-out record: real environments, none of them meta-trained on, in tables the repository holds
    heldout = prov["heldout"]["envs"]
    for env in heldout:
        check_env_name(env)
    assert heldout and not set(heldout) & set(entry.envs), (heldout, entry.envs)
    tables = [t.strip() for t in prov["heldout"]["table"].split(",")]
    assert all((ROOT / t).is_file() for t in tables), tables
    # the plug points it lists are exactly those that differ from PPO's
    ppo = Objectives().spec()
    assert set(entry.plugs) == {plug for plug, spec in objectives.spec().items() if spec != ppo[plug]}
    for plug in entry.plugs:
        objective = getattr(objectives, plug)
        # a formula a user can read and export (a value loss on PPO's clipped base reads v_old: it describes itself)
        assert objective.closed_form(params[plug]) is not None or objective.describe()
        assert check_objective(objective, params[plug]) == [], (name, plug)


@pytest.mark.parametrize("name", NAMES)
def test_the_commit_an_entry_names_is_in_this_repositorys_history(name):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    prov = discovered.entry(name).provenance
    commit = prov["commit"]
    proc = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"{name}: commit {commit} is not an ancestor of HEAD ({proc.stderr.strip()})"
    # ... and the experiment file it names ("PATH at commit COMMIT") is there at that commit
    path, at, config_commit = prov["config"].partition(" at commit ")
    assert at and config_commit == commit, prov["config"]
    proc = subprocess.run(["git", "cat-file", "-e", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"{name}: {path} is not in commit {commit}"
    assert Path(path).stem == prov["experiment"], (prov["experiment"], path)  # the experiment it says it ran


def test_zoo_targets_resolve_to_objectives_and_unknown_names_fail_with_close_matches():
    target = resolve_target("zoo:lpo_minatar_walls")
    assert (target.label, target.source) == ("zoo:lpo_minatar_walls", "zoo")
    assert target.meta_train_envs == ("Breakout-MinAtar", "SpaceInvaders-MinAtar")
    assert target.objectives.drift.name == "closed_form" and set(target.params) == {"drift", "value_loss", "shaping"}
    with pytest.raises(EvaluationError, match="Did you mean zoo:lpo_minatar, zoo:lpo_minatar_walls") as err:
        resolve_target("zoo:lpo_minatr")
    assert err.value.exit_code == 2


def test_a_zoo_entry_trains_without_meta_training():
    target = resolve_target("zoo:drift_and_value_loss")
    config = PPOConfig(num_envs=4, num_steps=32, total_timesteps=2048, hidden=(16,), num_minibatches=2)
    result = jax.jit(make_train(make_env("CartPole-v1"), config, target.objectives))(jax.random.key(0), target.params)
    assert not bool(result.diverged) and np.isfinite(np.asarray(result.eval_return))


def test_metadisco_zoo_lists_every_entry_and_explains_one():
    proc = metadisco("zoo", timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines()[:-1]]
    assert listed == NAMES
    assert "drift+value_loss" in proc.stdout  # the plug points it discovered
    proc = metadisco("zoo", "zoo:value_loss_long", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "L(e, t) = e**2/2 + 1.88*5.39*tanh(e/5.39)" in proc.stdout and "old yardstick" in proc.stdout
    assert "metadisco evaluate zoo:value_loss_long" in proc.stdout


@pytest.mark.parametrize("verb", [("zoo", "value_los_long"), ("evaluate", "zoo:value_los_long")])
def test_an_unknown_zoo_name_exits_2_with_close_matches(verb, capsys):
    if verb[0] == "zoo":  # a real process (jax-free, fast): its exit code and stderr
        proc = metadisco(*verb, timeout=120)
        code, stderr = proc.returncode, proc.stderr
    else:  # `evaluate` in-process (a process would spend ~2 s importing jax): the CLI's own exit
        from metadisco.cli import main

        with pytest.raises(SystemExit) as exit_:  # any other exception (a traceback) fails here
            main(list(verb))
        code, stderr = exit_.value.code, capsys.readouterr().err
    assert code == 2, stderr
    assert "Did you mean zoo:value_loss_long" in stderr and "Traceback" not in stderr

"""The zoo: discovered objectives shipped with metadisco, listed by `metadisco zoo`, evaluable as zoo:NAME.

What a user relies on: every entry loads into objectives that are valid and train, says where it
comes from (config, commit, budget, held-out record and under which yardstick), meets the zoo's rule
(zoo/__init__.py: a held-out result, its kind derived from it, and any stricter rule its experiment
pre-registered), and a mistyped name fails with the close matches, before any compute. (The wheel carries the entries: see
tests/test_install.py.)
"""

import copy
import json
import subprocess
import tomllib
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

ROOT = Path(__file__).resolve().parent.parent
NAMES = discovered.names()
PROVENANCE = ("summary", "plugs", "experiment", "config", "commit", "budget", "how", "heldout", "yardstick", "verdict")


def test_the_zoo_holds_the_best_objective_each_reported_experiment_found():
    assert {"value_loss_cartpole", "drift_and_value_loss", "talpo_transfer_lr_mixture", "lpo_minatar_walls",
            "value_loss_long", "lpo_distribution", "drift_mix_distribution", "value_loss_distribution"} <= set(NAMES)
    assert NAMES == sorted(p.stem for p in (ROOT / "zoo").glob("*.json"))


@pytest.mark.parametrize(("against", "p", "ci", "declared", "kind"), [
    ("tuned PPO", 0.62, [0.51, 0.73], True, "beats"),
    ("tuned PPO", 0.62, [0.50, 0.73], True, "lead"),  # the interval contains 0.5
    ("PPO", 0.63, [0.52, 0.73], True, "lead"),  # better only than untuned PPO
    ("tuned PPO", 0.63, [0.52, 0.73], False, "lead"),  # on a held-out set not declared before the run
    ("tuned PPO", 0.90, None, True, "lead"),  # no interval: never "beats"
    ("tuned PPO", 0.43, [0.32, 0.55], True, "lead"),
    ("tuned PPO", 0.23, [0.08, 0.41], True, "negative"),
    ("PPO", 0.16, None, False, "negative"),
])
def test_an_entrys_kind_follows_from_its_held_out_result(against, p, ci, declared, kind):
    result = {"against": against, "p_improvement": p, "ci": ci, "row": "r", "declared": declared}
    assert discovered.kind(result) == kind


def _broken(provenance: dict) -> list[str]:
    return discovered.problems(provenance, ("CartPole-v1", "Acrobot-v1"))


def test_the_rule_refuses_an_entry_that_does_not_meet_it():
    good = discovered.entry("drift_mix_distribution").provenance
    assert _broken(good) == []
    # the three GPU MinAtar drifts, as they entered in 9fe3655: their experiment pre-registered "beats"
    gpu = copy.deepcopy(good)
    gpu["experiment"] = "drift_mix_minatar_gpu"
    gpu["heldout"]["rows"]["this formula (ES mean)"] = "IQM 1.13 [1.03, 1.29], P(> tuned PPO) 0.62 [0.50, 0.73]"
    gpu["heldout"]["result"].update(p_improvement=0.62, ci=[0.50, 0.73])
    assert discovered.kind(gpu["heldout"]["result"]) == "lead"
    assert any("pre-registered that only a 'beats' entry" in p for p in _broken(gpu)), _broken(gpu)
    gpu["heldout"]["result"]["ci"] = [0.51, 0.73]  # ... which one that beats meets
    gpu["heldout"]["rows"]["this formula (ES mean)"] = "P(> tuned PPO) 0.62 [0.51, 0.73]"
    assert _broken(gpu) == []
    for change, says in [
        (lambda p: p["heldout"].pop("result"), "no held-out result"),
        (lambda p: p["heldout"]["result"].update(p_improvement=0.24), "not what its row says"),  # its row says 0.23
        (lambda p: p["heldout"]["result"].update(against="DPO"), "not one of tuned PPO, PPO"),
        (lambda p: p["heldout"]["result"].update(ci=[0.3, 0.2]), "not null or an interval"),
        (lambda p: p["heldout"].update(envs=["CartPole-v1"]), "not meta-trained on"),
        (lambda p: p.update(summary="held out not better than tuned PPO (1.29])"), "is cut"),
    ]:
        bad = copy.deepcopy(good)
        change(bad)
        assert any(says in p for p in _broken(bad)), (says, _broken(bad))


def test_reading_an_entry_that_breaks_the_rule_fails(tmp_path, monkeypatch):
    doc = json.loads((ROOT / "zoo" / "drift_mix_distribution.json").read_text())
    doc["extra"]["provenance"]["experiment"] = "drift_mix_minatar_cpu"  # pre-registered "beats"; this is negative
    (tmp_path / "refused.json").write_text(json.dumps(doc))
    monkeypatch.setattr(discovered, "folder", lambda: tmp_path)
    with pytest.raises(discovered.ZooError, match="refused.*breaks the zoo's rule.*pre-registered"):
        discovered.entry("refused")


@pytest.mark.parametrize("name", NAMES)
def test_every_entry_loads_is_valid_and_says_where_it_comes_from(name):
    objectives, params, extra = discovered.load(name)
    entry = discovered.entry(name)
    prov = entry.provenance
    assert set(PROVENANCE) <= set(prov), sorted(set(PROVENANCE) - set(prov))
    assert {"envs", "budget", "table", "rows"} <= set(prov["heldout"]) and prov["heldout"]["rows"]
    assert entry.envs and tuple(extra["envs"]) == entry.envs  # evaluate flags them as meta-training envs
    assert discovered.problems(prov, entry.envs) == []  # the zoo's rule
    assert entry.kind == discovered.kind(prov["heldout"]["result"]) and entry.kind in discovered.KINDS
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
    # held out where its config, before the run, said it would be: "declared" only where it names every env
    text = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True).stdout
    heldout = prov["heldout"]["envs"]
    declared = tomllib.loads(text).get("heldout", {}).get("envs")
    assert declared is None or set(declared) == set(heldout), (declared, heldout)
    assert prov["heldout"]["result"]["declared"] == all(env in text for env in heldout), (path, heldout)


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


def test_metadisco_zoo_lists_every_entry_under_its_kind_and_explains_one():
    proc = metadisco("zoo", timeout=60)
    assert proc.returncode == 0, proc.stderr
    groups, group = {}, None
    for line in proc.stdout.splitlines()[:-1]:
        if not line.startswith("  "):
            group = groups.setdefault(line, [])
        else:
            group.append(line.split()[0])
    headings = [f"{heading} ({meaning}):" for heading, meaning in discovered.KINDS.values()]
    assert list(groups) == headings  # beats, leads, negative results: apart, in that order
    for (kind, heading) in zip(discovered.KINDS, headings):
        members = [name for name in NAMES if discovered.entry(name).kind == kind]
        assert groups[heading] == (members or ["none"]), kind
    assert groups[headings[0]] == ["none"] and "lpo_minatar_walls" in groups[headings[2]]
    assert "drift+value_loss" in proc.stdout  # the plug points it discovered
    proc = metadisco("zoo", "zoo:value_loss_long", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "L(e, t) = e**2/2 + 1.88*5.39*tanh(e/5.39)" in proc.stdout and "old yardstick" in proc.stdout
    assert "held-out result: P(> tuned PPO) 0.48 [0.38, 0.59]" in proc.stdout and "kind: lead (" in proc.stdout
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

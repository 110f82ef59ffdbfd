"""metadisco.core.run_config: the one schema of a run's config (jax-free), checked by
metadisco.core.run_checks wherever a config is read; InnerConfig is PPO's own settings."""

import dataclasses
import json
import pathlib
import subprocess
import sys
import types
import typing

import pytest

from metadisco.analysis.runs import Run
from metadisco.config import override, ppo_config, resolve
from metadisco.core.errors import ConfigError
from metadisco.core.plugs import VERSIONED
from metadisco.core.run_config import FIXED_PPO_FIELDS, InnerConfig, RunConfig, config_digest
from metadisco.inner_loops import PRESETS, PPOConfig, PPOHyperparams, preset_for
from metadisco.measure.run_files import RunDirError
from tests.helpers import metadisco_in_process


def _without_none(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
    return tp


def test_the_schema_and_the_config_checks_import_no_jax():
    code = ("import sys, metadisco.core.run_config as r, metadisco.config as c; c.check_static(c.RunConfig()); "
            "r.RunConfig.from_stored(r.RunConfig().to_dict()); "
            "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_fixed_ppo_fields_are_ppo_fields():
    assert set(FIXED_PPO_FIELDS) <= {f.name for f in dataclasses.fields(PPOConfig)}


@pytest.mark.parametrize("env", ["CartPole-v1", "brax/hopper"])
def test_every_inner_field_reaches_the_ppo_config(env):
    preset = preset_for(env)

    def changed(name, tp):
        old = getattr(preset.hparams if name in PPOHyperparams._fields else preset, name)
        tp = _without_none(tp)
        if tp is bool:
            return not old
        if typing.get_origin(tp) is tuple:
            return (*old, 7)
        if old is None:  # unset in the preset (eval_max_steps: the env's time limit)
            return 50
        if tp is str:  # a choice: another one (network: gru for the presets' mlp)
            return {"network": "gru"}[name]
        return old + (1 if tp is int else 0.125)

    given = {n: changed(n, tp) for n, tp in typing.get_type_hints(InnerConfig).items()}
    assert set(given) >= set(PPOHyperparams._fields) | {"total_timesteps", "num_envs", "hidden", "eval_episodes"}
    config = ppo_config(RunConfig(envs=(env,), inner=InnerConfig(**given)), env)
    got = {n: getattr(config.hparams if n in PPOHyperparams._fields else config, n) for n in given}
    assert got == given


ROOT = pathlib.Path(__file__).parents[1]
COMMITTED_RUNS = sorted(p.parent for p in (ROOT / "docs" / "results").rglob("config.json"))


@pytest.mark.parametrize("run_dir", COMMITTED_RUNS, ids=lambda p: p.relative_to(ROOT / "docs" / "results").as_posix())
def test_every_committed_run_directory_is_stored_as_todays_code_writes_it(run_dir):
    """Each committed run reads under today's code with nothing read specially: its config.json
    names every field that a default would not give as it ran (member_batch, a versioned family's
    version), and its config.digest, where it keeps one, is its config.json's, so `--resume` continues it
    (whatever fields the schema gained since: they read at their defaults)."""
    stored = json.loads((run_dir / "config.json").read_text())
    cfg = Run(run_dir).config()
    assert cfg == RunConfig.from_dict(stored)  # from_stored adds nothing to what the file says
    assert "member_batch" in stored
    for plug, choice in stored["objectives"].items():
        if isinstance(choice, dict) and (plug, choice["name"]) in VERSIONED:
            assert VERSIONED[plug, choice["name"]][0] in choice, (plug, choice)
    digest = run_dir / "config.digest"
    assert not digest.is_file() or digest.read_text().strip() == config_digest(stored)


def test_a_setting_added_to_ppo_config_is_an_override_stored_and_read_back(tmp_path, monkeypatch):
    """A new PPO setting is one edit: a field, with its default, on PPOConfig (here a subclass that
    stands for that edit) is inner.NAME=VALUE, stored in config.json, read back and given to PPO."""
    import metadisco.core.ppo_config
    from metadisco.core import run_config

    @dataclasses.dataclass(frozen=True)
    class WithKnob(PPOConfig):
        knob: float = 0.5

    monkeypatch.setattr(run_config, "InnerConfig", run_config.inner_config_class(WithKnob))
    monkeypatch.setattr(metadisco.core.ppo_config, "PRESETS", {
        family: WithKnob(**{f.name: getattr(p, f.name) for f in dataclasses.fields(p)}) for family, p in PRESETS.items()})
    cfg = resolve(None, ["inner.knob=0.25"])
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    stored = Run(tmp_path).config()
    assert stored == cfg and stored.inner.knob == 0.25
    assert ppo_config(stored, "CartPole-v1").knob == 0.25
    assert ppo_config(resolve(None, []), "CartPole-v1").knob == 0.5  # not set: the preset's


@pytest.mark.parametrize(("override", "section", "value"), [
    ("fitness=bogus", None, "bogus"), ("es.population_size=-4", "es", -4), ("distribution.lr_draw=each", "distribution", "each"),
])
def test_a_hand_edited_config_json_is_refused_with_trains_message(tmp_path, capsys, monkeypatch, override, section, value):
    """Run.config(), and so `metadisco plot RUN` / `evaluate RUN`, refuse a value `metadisco train`
    refuses, with its ConfigError's text (after the file's name), exit code 2, before any compute."""
    monkeypatch.chdir(tmp_path)  # where a train that was not refused would write
    code, _, err = metadisco_in_process(["train", override], capsys)
    assert code == 2 and err.startswith("metadisco: error: ") and len(err.strip().splitlines()) == 1
    trains = err.removeprefix("metadisco: error: ").strip()

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config, name = RunConfig().to_dict(), override.split("=")[0].split(".")[-1]
    (config[section] if section else config)[name] = value
    (run_dir / "config.json").write_text(json.dumps(config))
    expected = f"{run_dir / 'config.json'} is not a run config this metadisco reads: {trains}"
    with pytest.raises(RunDirError) as refused:
        Run(run_dir).config()
    assert str(refused.value) == expected
    for verb in ("plot", "evaluate"):
        code, _, err = metadisco_in_process([verb, str(run_dir)], capsys)
        assert code == 2 and "Traceback" not in err, err[-2000:]
        assert err.startswith("metadisco: error: ") and err.strip().endswith(expected) and len(err.strip().splitlines()) == 1


def test_typed_overrides_reach_the_config_as_the_command_line_strings_do():
    """A mapping of typed values (the Python API's form) and FIELD=VALUE strings (the command
    line's) build the same config, each value read as its field's type."""
    typed = resolve("lpo_cartpole_cpu", {
        "generations": 3, "tensorboard": True, "es": {"population_size": 4, "sigma_init": 0.05},
        "inner": {"hidden": (64, 64), "lr": 1e-3}, "inner.num_envs": 8, "objectives": {"drift": {"name": "lpo", "hidden": 8}},
        "distribution": {"horizons": [0.5, 1.0]},
    })
    strings = resolve("lpo_cartpole_cpu", [
        "generations=3", "tensorboard=true", "es.population_size=4", "es.sigma_init=0.05", "inner.hidden=64,64",
        "inner.lr=0.001", "inner.num_envs=8", "objectives.drift=lpo", "objectives.drift.hidden=8",
        "distribution.horizons=0.5,1",
    ])
    assert typed == strings
    assert typed.inner.hidden == (64, 64) and typed.inner.lr == 1e-3 and typed.inner.num_envs == 8
    assert typed.tensorboard is True and typed.generations == 3 and typed.es.sigma_init == 0.05
    assert typed.distribution.horizons == (0.5, 1.0) and dict(typed.objectives.drift.options)["hidden"] == 8
    assert override(typed, {"es": {"population_size": 8}}).es == dataclasses.replace(typed.es, population_size=8)
    assert resolve(None, {"inner": {"hidden": 16}}).inner.hidden == (16,)  # one item: as inner.hidden=16


@pytest.mark.parametrize(("given", "named"), [
    ({"es": {"populaton_size": 4}}, "unknown config field 'es.populaton_size'. Did you mean es.population_size?"),
    ({"generations": 2.5}, "config field generations: cannot read 2.5 as int"),
    ({"generations": True}, "config field generations: cannot read True as int"),
    ({"tensorboard": "maybe"}, "config field tensorboard: cannot read 'maybe' as bool"),
    ({"tensorboard": 2}, "config field tensorboard: cannot read 2 as bool"),
    ({"inner": {"hidden": ("a", 64)}}, "config field inner.hidden: cannot read 'a' as int"),
    ({"es": 4}, "config field es is a section"),
])
def test_a_bad_typed_override_is_a_config_error_naming_its_field(given, named):
    with pytest.raises(ConfigError) as e:
        resolve("lpo_cartpole_cpu", given)
    assert named in str(e.value)


def test_a_typed_override_the_checks_refuse_gets_the_command_lines_message():
    with pytest.raises(ConfigError) as typed:
        resolve("lpo_cartpole_cpu", {"es": {"population_size": 1}})
    with pytest.raises(ConfigError) as strings:
        resolve("lpo_cartpole_cpu", ["es.population_size=1"])
    assert str(typed.value) == str(strings.value) and "population_size" in str(typed.value)


def test_an_objective_named_with_parameters_evolves_unless_evolve_is_given(monkeypatch):
    from metadisco.config import DEMO_EXPERIMENT

    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parents[1] / "examples"))
    # the README's plug-in example on the demo: the user's drift is searched, not frozen at its start
    assert resolve(DEMO_EXPERIMENT, ["objectives.drift=my_drifts:ScaledSquare"]).objectives.evolve == ("drift", "shaping")
    assert resolve("lpo_cartpole_cpu", ["objectives.value_loss=learned_clipped"]).objectives.evolve == (
        "drift", "value_loss")
    assert resolve("lpo_cartpole_cpu", ["objectives.value_loss=l2"]).objectives.evolve == ("drift",)  # nothing to search
    assert resolve("lpo_cartpole_cpu", ["objectives.drift.hidden=8"]).objectives.evolve == ("drift",)  # an option only
    said = resolve(DEMO_EXPERIMENT, ["objectives.drift=my_drifts:ScaledSquare", "objectives.evolve=shaping"])
    assert said.objectives.evolve == ("shaping",)  # said otherwise


def test_the_demo_on_other_environments_runs_without_what_is_mountaincars():
    """`metadisco train envs=MemoryChain-bsuite inner.network=gru`: the demo's search on the user's
    environment, without the potential's 2-number observation scale (which refused a 3-number
    observation), the MountainCar held-out set or the energy expectation, and saying so."""
    from metadisco.config import DEMO_EXPERIMENT, demo

    cfg = demo(["envs=MemoryChain-bsuite", "inner.network=gru"])
    assert cfg.envs == ("MemoryChain-bsuite",) and cfg.inner.network == "gru"
    assert "obs_scale" not in dict(cfg.objectives.shaping.options) and cfg.heldout.envs == ()
    assert not cfg.expect.answer and "MemoryChain-bsuite" in cfg.expect.not_applied
    assert demo(["generations=3"]) == resolve(DEMO_EXPERIMENT, ["generations=3"])  # MountainCar: the demo whole
    own = demo(["envs=CartPole-v1", "heldout.envs=CartPole-v1[gravity=12.0]", "objectives.shaping.obs_scale=1,1,1,1"])
    assert own.heldout.envs == ("CartPole-v1[gravity=12.0]",) and len(dict(own.objectives.shaping.options)["obs_scale"]) == 4


def test_an_experiment_in_the_working_folders_experiments_is_found_by_name(tmp_path, monkeypatch):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "my_exp.toml").write_text('name = "mine"\ngenerations = 3\n')
    monkeypatch.chdir(tmp_path)
    assert resolve("my_exp").name == "mine" and resolve("my_exp").generations == 3
    assert resolve("experiments/my_exp.toml").name == "mine"
    with pytest.raises(ConfigError, match=r"no file experiments/nope.toml here .* A path to a TOML file works too"):
        resolve("nope")


def test_every_experiment_is_registered_with_the_pass_rule_and_held_out_set_it_declares():
    """experiments/registered.json freezes each experiment's pass rule and held-out set by a digest: a change
    to either is an edit of the register too, made before a run (an experiment that has run gets a new name)."""
    from metadisco.config import list_experiments
    from metadisco.measure.registration import registered, rule_digest

    register = registered()
    assert sorted(register) == list_experiments()
    for name in list_experiments():
        cfg = resolve(name)
        assert register[name] == {"name": cfg.name, "rule": rule_digest(cfg)}, (
            f"experiments/{name}.toml's pass rule or held-out set is not the one it registered: give it a new "
            "version (a new name) if it has run, else update experiments/registered.json")
    assert len({entry["name"] for entry in register.values()}) == len(register)  # a run names its experiment


def test_a_run_under_another_rule_than_its_experiment_registered_says_so():
    from metadisco.measure.registration import changed_rule_note

    assert changed_rule_note(resolve("rediscover_shaping")) is None
    note = changed_rule_note(resolve("rediscover_shaping", ["heldout.seeds=4"]))
    assert note and "experiments/rediscover_shaping.toml registered before its first run" in note
    assert "changed rule" in changed_rule_note(resolve("rediscover_shaping", ["expect.beats=start"]))


DEMO_RECORD = sorted((ROOT / "docs" / "results" / "demo").glob("seed*"))


def test_the_demo_record_is_what_metadisco_train_builds_today_at_one_commit():
    """scripts/demo-record's runs: each seed's config.json is what `metadisco train seed=S` builds now (a
    change to the demo's defaults cannot leave the record behind unseen), every seed and its control ran at
    the one commit it names, and the README quotes its summary."""
    from metadisco.config import demo

    assert len(DEMO_RECORD) == 5
    commits = {(d / "commit").read_text().strip() for d in DEMO_RECORD}
    assert len(commits) == 1, commits
    def built(*overrides):  # as config.json holds it
        return json.loads(json.dumps(demo(list(overrides)).to_dict()))

    for d in DEMO_RECORD:
        seed = int(d.name[4:])
        assert json.loads((d / "run" / "config.json").read_text()) == built(f"seed={seed}"), d
        assert json.loads((d / "control" / "config.json").read_text()) == built(
            f"seed={seed}", "objectives.shaping.obs_scale=1e9,1e9"), d

"""analysis.run_config: the one schema of a run's config (jax-free), and InnerConfig, which mirrors
PPO's own fields and is held to them here (deriving it from PPOConfig would import jax before the
config checks, which run first)."""

import dataclasses
import subprocess
import sys
import types
import typing

import pytest

from analysis.run_config import InnerConfig, RunConfig
from inner_loops import PPOConfig, PPOHyperparams, preset_for
from metadisco.config import ppo_config

# PPO's fields a run does not override: fixed by the inner loop's caller (record_samples: distil;
# eval_points, eval_max_steps: evaluate) or by the preset alone (activation, anneal_lr).
NOT_OVERRIDDEN = {"activation", "anneal_lr", "record_samples", "eval_points", "eval_max_steps", "eval_greedy"}


def _ppo_fields() -> dict:
    """{name: type} of PPOConfig's fields and its hyperparameters' (hparams unfolded)."""
    hints = typing.get_type_hints(PPOConfig) | typing.get_type_hints(PPOHyperparams)
    names = [f.name for f in dataclasses.fields(PPOConfig) if f.name != "hparams"]
    return {n: hints[n] for n in names + list(PPOHyperparams._fields)}


def _without_none(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
    return tp


def test_the_schema_and_the_config_checks_import_no_jax():
    code = ("import sys, analysis.run_config, metadisco.config as c; c.check_static(c.RunConfig()); "
            "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_inner_config_is_ppo_fields_of_the_same_types():
    ppo, inner = _ppo_fields(), typing.get_type_hints(InnerConfig)
    strays = [n for n in inner if n not in ppo]
    assert not strays, f"InnerConfig fields PPO does not have: {strays}"
    for name, tp in inner.items():
        assert _without_none(tp) == _without_none(ppo[name]), name
        assert InnerConfig.__dataclass_fields__[name].default is None, f"{name}: None keeps the preset's value"
    # a new PPO field is a decision: overridable by a run (add it to InnerConfig) or not (list it)
    assert set(ppo) - set(inner) == NOT_OVERRIDDEN


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
        return old + (1 if tp is int else 0.125)

    given = {n: changed(n, tp) for n, tp in typing.get_type_hints(InnerConfig).items()}
    config = ppo_config(RunConfig(envs=(env,), inner=InnerConfig(**given)), env)
    got = {n: getattr(config.hparams if n in PPOHyperparams._fields else config, n) for n in given}
    assert got == given


def _stored_run(tmp_path, **inner):
    """A run directory whose config.json is today's default config with `inner` added."""
    import json

    config = RunConfig().to_dict()
    config["inner"] = {**config["inner"], **inner}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("removed", [dict(reset_ratio=None, scan_unroll=None), dict(reset_ratio=1, scan_unroll=1)])
def test_a_stored_config_with_removed_fields_at_values_that_change_nothing_still_reads(tmp_path, removed):
    from analysis.runs import Run

    assert Run(_stored_run(tmp_path, **removed)).config() == RunConfig()


def test_the_committed_gpu_runs_configs_with_removed_fields_still_read():
    import json
    import pathlib

    from analysis.runs import Run

    path = pathlib.Path(__file__).parents[1] / "docs/results/gpu_runs/drift_mix_minatar_gpu_seed0"
    assert "reset_ratio" in json.loads((path / "config.json").read_text())["inner"]  # written before issue 39
    assert Run(path).config().envs == ("Breakout-MinAtar", "SpaceInvaders-MinAtar", "Asterix-MinAtar")


def test_a_removed_field_that_changed_the_run_or_is_set_anew_is_refused(tmp_path):
    from analysis.runs import Run, RunDirError
    from metadisco.config import resolve
    from metadisco_common.errors import ConfigError

    with pytest.raises(RunDirError, match=r"inner.reset_ratio = 4: this run used optimistic resets, removed in issue 39"):
        Run(_stored_run(tmp_path, reset_ratio=4)).config()
    for item in ("inner.reset_ratio=0.5", "inner.scan_unroll=1"):  # on the command line: a field like any unknown one
        with pytest.raises(ConfigError, match=rf"unknown config field '{item.split('=')[0]}'"):
            resolve(None, [item])

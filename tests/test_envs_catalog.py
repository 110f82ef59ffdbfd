"""The jax-free environment catalogue equals the libraries' own registries."""

import subprocess
import sys

import pytest

from metadisco.core import catalog


@pytest.mark.timeout(120)
def test_catalog_equals_gymnax_and_brax_registries():
    import gymnax

    from metadisco.inner_loops.envs import registered_brax_names

    assert list(catalog.GYMNAX_ENVS) == list(gymnax.registered_envs)
    assert sorted(catalog.BRAX_ENVS) == sorted(registered_brax_names())


@pytest.mark.parametrize("name", ["CartPole-v1", "brax/ant", "brax/hopper:positional", "SpaceInvaders-MinAtar"])
def test_known_names_pass(name):
    catalog.check_env_name(name)


@pytest.mark.parametrize(
    ("name", "hint"),
    [("CartPol-v1", "CartPole-v1"), ("brax/hoper", "brax/hopper"), ("brax/ant:warp", "backend"), ("CartPole-v1:spring", "")],
)
def test_unknown_names_name_close_matches(name, hint):
    with pytest.raises(ValueError, match="unknown") as err:
        catalog.check_env_name(name)
    assert hint in str(err.value)


def test_catalog_is_jax_free():
    code = "import sys; import metadisco.core.catalog; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_a_variant_names_other_environment_parameters():
    """NAME[param=value,...]: a gymnax environment with other EnvParams (a held-out variant), its
    parameters checked by name and type, everything else unchanged."""
    from metadisco.core.errors import ConfigError

    assert catalog.env_variant("MountainCar-v0[gravity=0.003, max_steps_in_episode=300]") == (
        "MountainCar-v0", {"gravity": 0.003, "max_steps_in_episode": 300})
    assert catalog.env_variant("CartPole-v1") == ("CartPole-v1", {})
    catalog.check_env_name("MountainCar-v0[gravity=0.003]")
    assert catalog.is_builtin_env("MountainCar-v0[gravity=0.003]")
    for bad, message in [("MountainCar-v0[gravity]", "key=value"), ("MountainCar-v0[gravity=x]", "not a number"),
                         ("brax/ant[x=1]", "gymnax"), ("MountainCar-v0[", r"NAME\[key=value"),
                         ("MountainCr-v0[gravity=0.003]", "Did you mean: MountainCar-v0")]:
        with pytest.raises(ConfigError, match=message):
            catalog.check_env_name(bad)

    from metadisco.inner_loops import make_env

    plain, heavy = make_env("MountainCar-v0"), make_env("MountainCar-v0[gravity=0.003,max_steps_in_episode=300]")
    assert heavy.default_params.gravity == 0.003 and heavy.max_episode_steps == 300
    assert heavy.default_params.force == plain.default_params.force and heavy.obs_shape == plain.obs_shape
    for bad, message in [("MountainCar-v0[gravty=0.1]", "its parameters: .*gravity"),
                         ("MountainCar-v0[max_steps_in_episode=2.5]", "takes an int")]:
        with pytest.raises(ConfigError, match=message):
            make_env(bad)

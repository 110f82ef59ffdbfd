"""The jax-free environment catalogue equals the libraries' own registries."""

import subprocess
import sys

import pytest

from inner_loops import catalog


@pytest.mark.timeout(120)
def test_catalog_equals_gymnax_and_brax_registries():
    import gymnax

    from inner_loops.envs import registered_brax_names

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
    code = "import sys; import inner_loops.catalog; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"

"""The foundation: a jaxlib that does not deadlock, a Python >= 3.12, the pinned set."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from metadisco.core import jaxlib_guard

ROOT = Path(__file__).resolve().parents[1]


# jaxlib 0.10.2 hung forever on the second of several large jitted programs in one process on a
# 2-core CPU. Every worker of this suite runs dozens of such programs in one process under a per-test
# timeout, so a jaxlib that hangs so fails the suite; this test checks the guard that refuses it.
def test_check_jaxlib_refuses_the_deadlocking_release_and_says_what_it_guards():
    # On Python 3.12 a jaxlib 0.10 can only come from around pyproject's bounds: say so, and how to fix it.
    with pytest.raises(RuntimeError, match=r"jaxlib < 0\.11 deadlocks") as err:
        jaxlib_guard.check_jaxlib("0.10.2", python=(3, 12, 1))
    message = str(err.value)
    assert "0.10.2" in message and "jaxlib >= 0.11.2 (pyproject.toml)" in message
    assert "requirements.lock" in message and "Python >=" not in message
    # On Python 3.11 the fix is a newer Python: jaxlib 0.11 has no wheels for it.
    with pytest.raises(RuntimeError, match=r"no wheels for Python 3\.11\.9: install Python >= 3\.12"):
        jaxlib_guard.check_jaxlib("0.10.2", python=(3, 11, 9))
    jaxlib_guard.check_jaxlib("0.11.2")
    jaxlib_guard.check_jaxlib("0.11.3rc1")
    jaxlib_guard.check_jaxlib()  # the installed one (importing meta_objectives already checked it)


def test_the_guard_refuses_nothing_that_pyproject_allows():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (jaxlib_spec,) = [d for d in deps if re.split(r"[<>=!~ ]", d, maxsplit=1)[0] == "jaxlib"]
    floor = _version(re.search(r">=\s*([\d.]+)", jaxlib_spec).group(1))
    assert floor[:2] >= jaxlib_guard.MIN_JAXLIB, (jaxlib_spec, jaxlib_guard.MIN_JAXLIB)


def test_find_python_prints_an_interpreter_of_at_least_3_12():
    proc = subprocess.run([str(ROOT / "scripts" / "find-python")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    interpreter = proc.stdout.strip()
    assert interpreter and Path(interpreter).exists(), proc.stdout
    version = subprocess.run(
        [interpreter, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert tuple(map(int, version)) >= (3, 12), f"{interpreter} is Python {'.'.join(version)}"


def _lock_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def test_lock_pins_the_working_set():
    pins = _lock_pins()
    assert pins["jax"].startswith("0.11."), pins["jax"]
    assert pins["jaxlib"].startswith("0.11."), pins["jaxlib"]
    assert (1, 0, 1) <= _version(pins["gymnax"]) < (2,), pins["gymnax"]
    assert "six" in pins  # gymnax imports it without declaring it
    # The installed set is the locked one.
    for name in ("jax", "jaxlib", "gymnax", "evosax", "brax"):
        assert metadata.version(name) == pins[name], f"{name}: installed {metadata.version(name)}, locked {pins[name]}"


def test_pyproject_bounds_keep_the_new_gymnax_api():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = {re.split(r"[<>=!~ ]", d, maxsplit=1)[0]: d for d in deps}
    assert spec["gymnax"].replace(" ", "") == "gymnax>=1.0.1,<2"
    assert "<0.12" in spec["jax"]


def test_installed_gymnax_step_returns_the_new_six_tuple():
    import gymnax
    import jax

    env, params = gymnax.make("CartPole-v1")
    obs, state = env.reset(jax.random.key(0), params)
    out = env.step(jax.random.key(1), state, 0, params)
    assert len(out) == 6  # obs, state, reward, terminated, truncated, info
    info = out[5]
    assert {"final_observation", "terminated", "truncated"} <= set(info)


# The repository's package folders and where the wheel installs each (pyproject.toml's package-dir).
PACKAGES = {"metadisco": "metadisco", "inner_loops": "metadisco/inner_loops",
            "meta_objectives": "metadisco/meta_objectives", "analysis": "metadisco/analysis"}


def _build_wheel(out: Path) -> Path:
    """Build metadisco's wheel offline from a copy of the source (the checkout stays clean)."""
    src = out / "src"
    for name in (*PACKAGES, "experiments", "zoo"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    if importlib.util.find_spec("uv"):  # scripts/setup-venv installs it; its cache holds setuptools
        command = [sys.executable, "-m", "uv", "build", "--wheel", "--offline", "--out-dir", str(out), str(src)]
    elif importlib.util.find_spec("setuptools"):
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)]
    else:
        pytest.skip("neither uv nor setuptools in this environment: cannot build a wheel offline")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("metadisco-*.whl")
    return wheel


def test_wheel_ships_every_experiment_and_the_zoo_and_lists_them_from_anywhere(tmp_path):
    # The experiments and the zoo are package data: a wheel carries them, not the folders beside the source.
    wheel = _build_wheel(tmp_path)
    experiments = sorted(p.stem for p in (ROOT / "experiments").glob("*.toml"))
    assert experiments
    members = set(zipfile.ZipFile(wheel).namelist())
    assert {f"metadisco/experiments/{e}.toml" for e in experiments} <= members
    assert not any(m.startswith("experiments/") for m in members)  # no top-level package `experiments`
    zoo = sorted(p.stem for p in (ROOT / "zoo").glob("*.json"))
    assert zoo and {f"metadisco/meta_objectives/zoo/{z}.json" for z in zoo} <= members
    assert {m.split("/")[0] for m in members} == {"metadisco", wheel.name.split("-")[0] + "-0.1.0.dist-info"}, \
        "only metadisco is installed at the top of site-packages"
    subpackages = {(Path(installed) / p.parent.relative_to(ROOT / folder)).as_posix()
                   for folder, installed in PACKAGES.items() for p in (ROOT / folder).rglob("__init__.py")}
    assert {f"{s}/__init__.py" for s in subpackages} <= members, "a subpackage is missing from pyproject's packages"

    target = tmp_path / "installed"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                           str(target), str(wheel)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # -S: no .pth files, so the checkout's editable install is out of reach; dependencies come
    # from the venv's site-packages, metadisco only from the installed wheel.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])}
    script = ("import metadisco, metadisco.config as c, metadisco.analysis as a; print(metadisco.__file__, a.__file__); "
              "print(*c.list_experiments()); "
              "[c.load_experiment(e) for e in c.list_experiments()]; "
              "from metadisco.meta_objectives import discovered as z; print(*z.names()); "
              "from metadisco.analysis.targets import resolve_target; [resolve_target('zoo:' + n) for n in z.names()]")
    proc = subprocess.run([sys.executable, "-S", "-c", script], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, listed, listed_zoo = proc.stdout.splitlines()
    assert all(Path(w).is_relative_to(target) for w in where.split()), where
    assert listed.split() == experiments
    assert listed_zoo.split() == zoo  # the zoo from the installed wheel: every entry resolves as zoo:NAME
    proc = subprocess.run([sys.executable, "-S", "-m", "metadisco.cli", "train", "--help"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    help_text = " ".join(proc.stdout.split())
    assert all(e in help_text for e in experiments), proc.stdout

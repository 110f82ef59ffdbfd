"""The design's layering holds: dependencies point one way, no module reads another's private
names, and no library file grows into a grab-bag (README "Design in one screen")."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each package may import itself and the packages after it, never those before it.
LAYERS = ("metadisco", "analysis", "inner_loops", "meta_objectives")
MAX_LINES = 500  # analysis/ and meta_objectives/: a file this long mixes concerns


def modules(package):
    return sorted((ROOT / package).rglob("*.py"))


def imported(path):
    """(module imported, names imported from it) for every import in the file."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, tuple(a.name for a in node.names)


@pytest.mark.parametrize("package", LAYERS)
def test_dependencies_point_one_way(package):
    allowed = set(LAYERS[LAYERS.index(package):])
    bad = [f"{path.relative_to(ROOT)} imports {module}"
           for path in modules(package) for module, _ in imported(path)
           if module.split(".")[0] in LAYERS and module.split(".")[0] not in allowed]
    assert not bad, bad


@pytest.mark.parametrize("package", LAYERS)
def test_no_module_imports_another_modules_private_names(package):
    bad = []
    for path in modules(package):
        for module, names in imported(path):
            if module.split(".")[0] not in LAYERS:
                continue
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            # a package's own private helper modules (_nets, _compat) are its business
            private = [n for n in private if not (ROOT / module.replace(".", "/") / f"{n}.py").exists()]
            if private:
                bad.append(f"{path.relative_to(ROOT)}: from {module} import {', '.join(private)}")
    assert not bad, bad


@pytest.mark.parametrize("package", ["analysis", "meta_objectives"])
def test_no_library_file_is_a_grab_bag(package):
    long = {str(p.relative_to(ROOT)): n for p in modules(package) if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long

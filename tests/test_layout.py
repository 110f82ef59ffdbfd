"""The design's layering holds: dependencies point one way, no import circle anywhere, no module
reads another's private names, and one package is installed (docs/design.md, "Design in one screen")."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The one installed package's layers, top to bottom, by module name, with the folder of each in the
# repository (pyproject.toml's package-dir). Each layer may import itself and the layers after it.
FOLDERS = {
    "metadisco": "metadisco",
    "metadisco.analysis": "analysis",
    "metadisco.measure": "metadisco/measure",
    "metadisco.inner_loops": "inner_loops",
    "metadisco.meta_objectives": "meta_objectives",
    "metadisco.core": "metadisco/core",
}
LAYERS = tuple(FOLDERS)


def layer_of(module: str) -> str | None:
    """The layer `module` belongs to (the longest layer name it starts with), or None outside the package."""
    found = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return max(found, key=len, default=None)


def modules(layer):
    """The .py files of `layer`, without those of a deeper layer inside its folder."""
    inner = [ROOT / FOLDERS[other] for other in LAYERS if other != layer and other.startswith(layer + ".")]
    return sorted(p for p in (ROOT / FOLDERS[layer]).rglob("*.py") if not any(p.is_relative_to(d) for d in inner))


def module_folder(module: str) -> Path:
    """The repository folder of package `module` (metadisco.inner_loops -> inner_loops/)."""
    layer = layer_of(module)
    return ROOT / FOLDERS[layer] / module.removeprefix(layer).lstrip(".").replace(".", "/")


def module_name(path: str) -> str:
    """The installed module name of repository file `path` (inner_loops/ppo.py -> metadisco.inner_loops.ppo)."""
    parts = path.removesuffix(".py").split("/")
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    for layer, folder in sorted(FOLDERS.items(), key=lambda kv: -len(kv[1])):
        if parts[:len(folder.split("/"))] == folder.split("/"):
            return ".".join([layer, *parts[len(folder.split("/")):]])
    return ".".join(parts)


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
           if layer_of(module) not in (None, *allowed)]
    assert not bad, bad


# The engine measures a run while it runs and writes it; analysis reads it after. What the engine
# needs (search health, intervals, verdicts, the run directory's files) is metadisco.measure's.
ENGINE = ("metadisco.engine", "metadisco.train", "metadisco.rundir", "metadisco.measure")


def test_the_engine_imports_nothing_of_analysis():
    """No import that the engine's modules or metadisco.measure's make, directly or through others,
    inside functions too, reaches metadisco.analysis."""
    graph = import_graph(project_sources())
    roots = [m for m in graph if any(m == e or m.startswith(e + ".") for e in ENGINE)]
    assert {"metadisco.engine", "metadisco.train", "metadisco.rundir", "metadisco.measure.health"} <= set(roots)
    reached, path = set(), {m: [m] for m in roots}
    todo = list(roots)
    while todo:
        module = todo.pop()
        for other in graph.get(module, ()):
            if other not in reached and other not in roots:
                reached.add(other)
                path[other] = [*path[module], other]
                todo.append(other)
    bad = [" -> ".join(path[m]) for m in sorted(reached) if layer_of(m) == "metadisco.analysis"]
    assert not bad, bad


# What computes a run reads its plan (metadisco.config.run_plan, built once from the config) and never
# calls back into config's rules: the config decides, the engine builds (docs/design.md).
PLANNED = ("engine.py", "es_step.py", "checks.py", "scoring.py", "strategy.py")


def config_imports(source: str) -> list[int]:
    """The lines of `source` that import metadisco.config, inside functions too, outside `if TYPE_CHECKING:`
    (an annotation's import: nothing runs)."""
    tree, typing_only = ast.parse(source), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            typing_only |= {id(n) for child in node.body for n in ast.walk(child)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module in ("metadisco.config", "metadisco") and (
                node.module == "metadisco.config" or any(a.name == "config" for a in node.names)):
            found.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name == "metadisco.config" for a in node.names):
            found.append(node.lineno)
    return found


def test_the_engine_reads_its_plan_and_never_calls_back_into_config():
    bad = {name: lines for name in PLANNED if (lines := config_imports((ROOT / "metadisco" / name).read_text()))}
    assert not bad, f"import of metadisco.config (lines) in {bad}: hand what it needs over in RunPlan"
    assert config_imports("def f():\n    from metadisco.config import ppo_config\n") == [2]
    assert config_imports("from metadisco import config as c\n") == [1]
    assert config_imports("if TYPE_CHECKING:\n    from metadisco.config import RunPlan\n") == []


def test_one_package_is_installed():
    """Nothing but metadisco lands at the top of site-packages: every package the build lists is
    metadisco or beneath it, and every layer's folder is mapped there."""
    import tomllib
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in setuptools["packages"]} == {"metadisco"}
    assert set(LAYERS) <= set(setuptools["packages"])
    assert {layer: folder for layer, folder in FOLDERS.items() if "/" not in folder and layer != "metadisco"} \
        == {k: v for k, v in setuptools["package-dir"].items() if k in LAYERS}


# The command line sits on the library, never under it: what a verb and the API both need lives below both.
COMMAND_LINE = ("metadisco/cli.py", "metadisco/commands/")
LIBRARY = ("metadisco", "analysis", "inner_loops", "meta_objectives", "benchmarks", "examples")


def commands_imported(source: str, package: tuple[str, ...]) -> list[str]:
    """What `source`, a file of `package` (e.g. ("metadisco",)), imports of metadisco.commands,
    relative imports and imports inside functions included."""
    def is_commands(name):
        return name == "metadisco.commands" or name.startswith("metadisco.commands.")

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if is_commands(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else ()
            module = ".".join((*base, *([node.module] if node.module else [])))
            found += [module] if is_commands(module) else [n for a in node.names if is_commands(n := f"{module}.{a.name}")]
    return found


def test_only_the_command_line_imports_the_commands():
    bad = [f"{rel} imports {', '.join(found)}"
           for package in LIBRARY for path in sorted((ROOT / package).rglob("*.py"))
           if not (rel := path.relative_to(ROOT).as_posix()).startswith(COMMAND_LINE)
           and (found := commands_imported(path.read_text(), path.relative_to(ROOT).parent.parts))]
    assert not bad, bad


@pytest.mark.parametrize("source", [
    "def distil():\n    from metadisco.commands.distil import distil_for_run\n",  # inside a function
    "import metadisco.commands.evaluate\n",
    "from metadisco import commands\n",
    "from .commands.evaluate import declared_heldout\n",
])
def test_the_commands_check_sees_every_form_of_the_import(source):
    assert commands_imported(source, ("metadisco",)), source
    assert not commands_imported(source.replace("commands", "config"), ("metadisco",))


@pytest.mark.parametrize("package", LAYERS)
def test_no_module_imports_another_modules_private_names(package):
    bad = []
    for path in modules(package):
        for module, names in imported(path):
            if layer_of(module) is None:
                continue
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            # a package's own private helper modules (_nets, _compat) are its business
            private = [n for n in private if not (module_folder(module) / f"{n}.py").exists()]
            if private:
                bad.append(f"{path.relative_to(ROOT)}: from {module} import {', '.join(private)}")
    assert not bad, bad


# No import circles anywhere: a module never imports, directly or through others, one that imports it.
SKIPPED = {".venv", "build", "dist", "runs", "__pycache__"}


def project_sources(root: Path = ROOT) -> dict[str, str]:
    """{path relative to root, posix: source} of every .py file of the project (not .venv, build
    outputs, runs or hidden folders)."""
    return {rel.as_posix(): path.read_text() for path in sorted(root.rglob("*.py"))
            if not ((rel := path.relative_to(root)).parts[0].startswith(".") or set(rel.parts) & SKIPPED)}


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """{module: the project modules it imports}, from `project_sources`: every import statement
    anywhere in a file (inside functions too), relative imports resolved. `from P import n` is an
    edge to P.n where that is a module, else to the module P's lazy `_EXPORTS` table names for n
    (the packages' PEP 562 re-exports), else to P."""
    names = {module_name(p): p for p in sources}

    def exports(package):
        path = names.get(package, "")
        for node in ast.parse(sources[path]).body if path.endswith("__init__.py") else ():
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
                return ast.literal_eval(node.value)
        return {}

    def deepest(module):  # the innermost project module an `import a.b.c` runs
        parts = module.split(".")
        return next((m for i in range(len(parts), 0, -1) if (m := ".".join(parts[:i])) in names), None)

    graph = {}
    for module, path in names.items():
        package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(sources[path])):
            if isinstance(node, ast.Import):
                edges |= {deepest(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    table = exports(source)
                    exported = table.get(alias.name, "")
                    exported = exported if "." in exported else f"{source}.{exported}"  # absolute, or in the package
                    edges.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in names
                              else exported if alias.name in table else deepest(source))
        graph[module] = edges - {None, module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of `graph` with more than one module, each sorted
    (Tarjan 1972, "Depth-first search and linear graph algorithms")."""
    index, low, stack, circles = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle_anywhere_in_the_project():
    graph = import_graph(project_sources())
    assert {"metadisco.cli", "metadisco.inner_loops.envs", "tests.test_layout"} <= set(graph)
    assert "metadisco.core.errors" in graph["metadisco.cli"]
    assert not import_circles(graph), import_circles(graph)


@pytest.mark.parametrize("sources", [
    {"a/__init__.py": "", "a/x.py": "from a.y import f\n", "a/y.py": "def f():\n    from a import x\n"},  # in a function
    {"a/__init__.py": "", "a/x.py": "from . import y\n", "a/y.py": "from .x import g\n"},  # relative
    {"a/__init__.py": "_EXPORTS = {'F': 'y'}\n", "a/x.py": "from a import F\n", "a/y.py": "import a.x\n"},  # lazy export
    {"a/__init__.py": "", "a/x.py": "import a.y\n", "a/y.py": "import a.z\n", "a/z.py": "from a.x import h\n"},  # 3 long
])
def test_the_circle_check_sees_every_form_of_the_import(sources):
    assert import_circles(import_graph(sources)), sources
    chain = {**sources, "a/x.py": "import os\n"}  # the same files with the circle cut
    assert not import_circles(import_graph(chain)), chain


def test_nothing_imports_a_package_by_a_top_level_name_it_is_not_installed_under():
    """From the repository root, `import analysis` finds the folder and works; installed, only
    metadisco exists. Every import in the project uses the installed name."""
    top_level = {folder for layer, folder in FOLDERS.items() if layer != "metadisco"} | {"metadisco_common"}
    bad = [f"{path}: {module}" for path, source in project_sources().items()
           for module, _ in imported_from_source(source) if module.split(".")[0] in top_level]
    assert not bad, bad


def imported_from_source(source: str):
    """(module, names) for every absolute import in `source`, and for each `import` statement in its
    string constants (the code a test hands to a subprocess)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, tuple(a.name for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "import " in node.value:
            try:
                yield from imported_from_source(node.value)
            except SyntaxError:
                continue


def test_the_package_is_what_the_install_maps_and_nothing_beside_it():
    """metadisco is imported as installed (pyproject.toml's package-dir; an editable install maps the
    same folders), never by adding the checkout to its path: the repository's other folders are not
    subpackages, the zoo and the experiments resolve through the mapping, and each class is defined
    once. Run from the repository root, where the checkout's metadisco/ is the first on sys.path."""
    script = (
        "import importlib.util, json, metadisco, metadisco.config, metadisco.core.errors as e\n"
        "import metadisco.experiments, metadisco.meta_objectives as m, metadisco.meta_objectives.zoo as z\n"
        "print(json.dumps({'path': list(metadisco.__path__), 'zoo': z.__file__, 'experiments': metadisco.experiments.__file__,\n"
        "  'meta_path': list(m.__path__), 'one_error': metadisco.config.ConfigError is e.ConfigError,\n"
        "  'missing': [n for n in ('metadisco.metadisco', 'metadisco.tests', 'metadisco.benchmarks', 'metadisco.docs',\n"
        "                          'metadisco.scripts', 'metadisco.zoo') if importlib.util.find_spec(n) is None]}))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout)
    assert found["path"] == [str(ROOT / "metadisco")]
    assert found["missing"] == ["metadisco.metadisco", "metadisco.tests", "metadisco.benchmarks", "metadisco.docs",
                                "metadisco.scripts", "metadisco.zoo"]
    assert found["zoo"] == str(ROOT / "zoo" / "__init__.py") and found["experiments"] == str(ROOT / "experiments" / "__init__.py")
    assert found["meta_path"] == [str(ROOT / "meta_objectives")]  # the zoo is mapped, not found beside it
    assert found["one_error"]


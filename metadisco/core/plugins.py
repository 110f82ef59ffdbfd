"""Plug-ins: objectives and environments from the user's own code, without editing metadisco.

jax-free (the command line checks names before jax starts). Two ways to name one:

- an import path `module:attr` (`my_drifts:ScaledSquare`, `lab.envs:Corridor`): `attr` (dotted for
  a nested attribute) in a module importable from the user's environment (the command line adds
  the working directory to the import path, as `python -m` does);
- an entry-point name an installed package registers under `metadisco.objectives` or
  `metadisco.envs` (pyproject.toml: `[project.entry-points."metadisco.objectives"]`
  `scaled_square = "my_package.drifts:ScaledSquare"`).

Safety: a plug-in is only ever imported by module name from the user's environment. Run
directories and objectives files record the `module:attr` string, never code, and nothing read
from them is executed. Every failure (module missing, attribute missing, the module raising on
import) is a `PluginError`: one line that names the module and what to install or fix.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
from typing import Any, NamedTuple

from metadisco.core.errors import ConfigError

OBJECTIVES_GROUP = "metadisco.objectives"
ENVS_GROUP = "metadisco.envs"


class PluginError(ConfigError):
    """A plug-in that cannot be imported or does not fit its plug point (exit code 2)."""


class Source(NamedTuple):
    """Where a plug-in name comes from, for listings: ("entry point", "my-package 1.0", "pkg.mod:Attr")."""

    kind: str  # "built-in" | "entry point" | "module"
    origin: str  # the library or distribution that provides it
    target: str  # module:attr (entry points and modules), or the built-in's own module


def is_import_path(name: str) -> bool:
    """Whether `name` reads `module:attr` (dotted identifiers on both sides). Built-in names never
    do: brax's `brax/ant:positional` has a slash, experiment names and run-dir suffixes no colon
    after a module path that Python could import."""
    module, sep, attr = str(name).partition(":")
    parts = module.split(".") + attr.split(".")
    return bool(sep) and all(p.isidentifier() for p in parts)


def load(path: str, what: str) -> Any:
    """The object `module:attr` names, imported from the user's environment (`what` names the
    kind of plug-in in messages, e.g. "drift objective"). PluginError says what to do."""
    if not is_import_path(path):
        raise PluginError(f"{what} {path!r} is not an import path: write module:attr, e.g. my_drifts:ScaledSquare")
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise PluginError(
                f"{what} {path!r}: no module named {module_name!r} is importable; install the package that "
                f"provides it, or run from the directory that holds {module_name.replace('.', '/')}.py"
            ) from None
        raise PluginError(f"{what} {path!r}: module {module_name!r} imports {e.name!r}, which is not installed; "
                          f"install it (pip install {e.name.partition('.')[0]})") from None
    except Exception as e:  # the user's module itself failed: say where, keep one line
        raise PluginError(f"{what} {path!r}: importing module {module_name!r} raised "
                          f"{type(e).__name__}: {e}".replace("\n", " ")) from None
    obj = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            owner = ".".join([module_name, *attr.split(".")[:i]])
            public = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, public, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise PluginError(f"{what} {path!r}: {owner} has no attribute {part!r}.{hint}")
        obj = getattr(obj, part)
    return obj


def entry_points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points installed packages register under `group`, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}


def load_entry_point(group: str, name: str, what: str) -> Any:
    """The object entry point `name` of `group` names (PluginError if it cannot be imported)."""
    ep = entry_points(group)[name]
    dist = ep.dist.name if ep.dist is not None else "its package"
    try:
        return load(ep.value, what)
    except PluginError as e:
        raise PluginError(f"{e} (entry point {name!r} of {dist}, group {group})") from None


def source(group: str, name: str) -> Source:
    """Where plug-in `name` comes from: an entry point of `group` or an import path."""
    ep = entry_points(group).get(name)
    if ep is not None:
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "?"
        return Source("entry point", dist, ep.value)
    return Source("module", name.partition(":")[0], name)

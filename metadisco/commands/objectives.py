"""`metadisco objectives [NAME]`: every objective a config can name, per plug point, with where it
comes from; with a NAME, that objective: what it computes, its options, its parameters."""

from __future__ import annotations

import math
from typing import Any, NamedTuple


def run(args) -> None:
    if args.name:
        _show(args.name, args.plug)
        return
    from metadisco.meta_objectives.base import listing

    for plug, name, source in listing():
        print(f"{plug:10s} {name:24s} {source.kind} ({source.origin}: {source.target})")
    print("and any class of your own as module:attr, e.g. objectives.drift=my_drifts:ScaledSquare "
          "(`metadisco check module:attr` checks its constraints; `metadisco objectives NAME` shows one)")


def _show(name: str, plug: str | None) -> None:
    """Print each objective called `name` (at `plug`, or at every plug point that has one)."""
    print("\n\n".join(d.text() for d in describe(name, plug)))


class Description(NamedTuple):
    """What `metadisco objectives NAME` shows of one objective; the documentation site's objectives
    reference renders the same fields (docs/hooks.py)."""

    name: str
    plug: str
    title: str
    doc: str  # the class docstring: what it computes, with its formula
    options: tuple[tuple[str, str, Any], ...]  # (option, type name, default)
    parameters: tuple[tuple[str, tuple[int, ...]], ...]  # (path, shape) of each leaf at the start
    closed_form: str | None  # the start as one expression, where it has one
    valid_for_every_member: bool

    @property
    def size(self) -> int:
        """Parameters at the start."""
        return sum(math.prod(shape) for _, shape in self.parameters)

    def text(self) -> str:
        lines = [f"{self.name} ({self.plug}): {self.title}", "  " + "\n  ".join(self.doc.splitlines())]
        lines.append(f"options (objectives.{self.plug}.OPTION=VALUE):"
                     + ("".join(f"\n  {k} = {default!r}  ({tp})" for k, tp, default in self.options) or " none"))
        lines.append(f"parameters at the start: {self.size}"
                     + "".join(f"\n  {path}: shape {shape}" for path, shape in self.parameters))
        if self.closed_form is not None:
            lines.append(f"at the start, as one expression: {self.closed_form}")
        lines.append("every member is a valid objective of its plug point (valid_for_every_member)"
                     if self.valid_for_every_member else
                     "members away from the start may break their plug's constraints (`metadisco check` says which)")
        return "\n".join(lines)


def describe(name: str, plug: str | None = None) -> list[Description]:
    """Each objective called `name` (at `plug`, or at every plug point that has one), built with its
    default options; ConfigError if there is none."""
    import inspect

    import jax
    import numpy as np

    from metadisco.core.errors import ConfigError
    from metadisco.meta_objectives import PLUGS, make_objective, objective_class

    found = []
    for p in (plug,) if plug else PLUGS:
        try:
            found.append(objective_class(p, name))
        except ValueError as e:
            if plug:
                raise ConfigError(str(e)) from None
    if not found:
        raise ConfigError(f"no objective named {name!r} at any plug point; `metadisco objectives` lists them")
    out = []
    for cls in found:
        objective = make_objective(cls.plug, name)
        if cls.plug == "shaping":
            objective = objective.for_env(objective.observation_shape() or (4,))
        params = objective.default_params()
        leaves = jax.tree_util.tree_leaves_with_path(params)
        out.append(Description(
            name=name, plug=cls.plug, title=objective.title, doc=inspect.cleandoc(cls.__doc__ or "(no docstring)"),
            options=tuple((k, getattr(tp, "__name__", str(tp)), default) for k, (tp, default) in cls.options().items()),
            parameters=tuple((jax.tree_util.keystr(path), tuple(np.shape(x))) for path, x in leaves),
            closed_form=None if (form := objective.closed_form(params)) is None else str(form),
            valid_for_every_member=bool(objective.valid_for_every_member)))
    return out


def add(subparsers) -> None:
    p = subparsers.add_parser("objectives", help="list the objectives (built-in and installed plug-ins), or show one")
    p.add_argument("name", nargs="?", help="show this objective: its formula, options and parameters")
    p.add_argument("--plug", choices=("drift", "value_loss", "shaping"),
                   help="the plug point, where NAME names objectives at several")
    p.set_defaults(func=run)

"""`metadisco objectives [NAME]`: every objective a config can name, per plug point, with where it
comes from; with a NAME, that objective: what it computes, its options, its parameters."""

from __future__ import annotations


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
    for cls in found:
        objective = make_objective(cls.plug, name)
        if cls.plug == "shaping":
            objective = objective.for_env(objective.observation_shape() or (4,))
        params = objective.default_params()
        leaves = jax.tree_util.tree_leaves_with_path(params)
        print(f"{name} ({cls.plug}): {objective.title}")
        print("  " + "\n  ".join(inspect.cleandoc(cls.__doc__ or "(no docstring)").splitlines()))
        options = cls.options()
        print(f"options (objectives.{cls.plug}.OPTION=VALUE):"
              + ("".join(f"\n  {k} = {default!r}  ({getattr(tp, '__name__', str(tp))})"
                         for k, (tp, default) in options.items()) or " none"))
        size = sum(int(np.size(x)) for _, x in leaves)
        print(f"parameters at the start: {size}"
              + "".join(f"\n  {jax.tree_util.keystr(path)}: shape {tuple(np.shape(x))}" for path, x in leaves))
        form = objective.closed_form(params)
        if form is not None:
            print(f"at the start, as one expression: {form}")
        print("every member is a valid objective of its plug point (valid_for_every_member)"
              if objective.valid_for_every_member else
              "members away from the start may break their plug's constraints (`metadisco check` says which)")
        if cls is not found[-1]:
            print()


def add(subparsers) -> None:
    p = subparsers.add_parser("objectives", help="list the objectives (built-in and installed plug-ins), or show one")
    p.add_argument("name", nargs="?", help="show this objective: its formula, options and parameters")
    p.add_argument("--plug", choices=("drift", "value_loss", "shaping"),
                   help="the plug point, where NAME names objectives at several")
    p.set_defaults(func=run)

"""`metadisco check NAME`: run the built-in property checks of its plug point on an objective.

NAME is a built-in name (with --plug when it names more than one), an installed entry point or
`module:attr` (a class of the user's own). Each violated constraint is named with a
counterexample, in the refusal `export` and `evaluate` give too (ConstraintsViolated); the exit
code is 0 when every constraint holds, 2 otherwise.
"""

from __future__ import annotations

from metadisco.core.errors import ConfigError
from metadisco.core.plugs import PLUGS


def objective_class_named(name: str, plug: str | None = None):
    """The objective class NAME names, at `plug` or at the one plug point where it is found."""
    from metadisco.core.plugins import PluginError, is_import_path, load
    from metadisco.meta_objectives import objective_class

    if plug is None and is_import_path(name):
        plug = getattr(load(name, "objective"), "plug", None)
        if plug not in PLUGS:
            raise PluginError(f"objective {name!r} sets no plug point (plug = one of {', '.join(PLUGS)}): "
                              "is it a meta_objectives.MetaObjective?")
    if plug is not None:
        try:
            return objective_class(plug, name)
        except PluginError:
            raise
        except ValueError as e:
            raise ConfigError(f"{e} A run's objectives (RUN_DIR/objectives/*.json) are checked by `metadisco "
                              "export RUN_DIR` and `metadisco evaluate RUN_DIR`, which refuse invalid ones") from None
    found = []
    for p in PLUGS:
        try:
            found.append(objective_class(p, name))
        except PluginError:
            raise
        except ValueError:
            continue
    if len(found) != 1:
        raise ConfigError(f"{name!r} names {'no' if not found else 'more than one'} objective; "
                          f"give --plug ({', '.join(PLUGS)}) or module:attr (see `metadisco objectives`)")
    return found[0]


def run(args) -> None:
    from metadisco.meta_objectives import ConstraintsViolated, check_objective

    cls = objective_class_named(args.name, args.plug)
    try:
        objective = cls()
    except Exception as e:
        raise ConfigError(f"{args.name}: building it with its default options raised {type(e).__name__}: {e}") from None
    violations = check_objective(objective, samples=args.samples, seed=args.seed)
    if violations:
        raise ConstraintsViolated(args.name, cls.plug, violations)
    print(f"{args.name} ({cls.plug}): every {cls.plug} constraint holds "
          f"(at its initial parameters and {args.samples} perturbed ones)")


def add(subparsers) -> None:
    p = subparsers.add_parser(
        "check", help="check an objective (yours as module:attr) against its plug point's constraints",
        description="Drift: finite, >= 0, finite gradients, zero and flat at r = 1, no kink there. Value loss: "
                    "finite, zero at the target, finite gradients, pulls v toward its target. Shaping: finite, the "
                    "identity at init, potential-based. Exit 0 when every constraint holds, 2 otherwise.")
    p.add_argument("name", metavar="NAME", help="module:attr (your own class), an installed entry point, or a built-in")
    p.add_argument("--plug", choices=PLUGS, help="the plug point of a built-in name")
    p.add_argument("--samples", type=int, default=3, help="perturbed parameter sets besides the initial one")
    p.add_argument("--seed", type=int, default=0, help="seed of the perturbed parameters drawn (default 0)")
    p.set_defaults(func=run)

"""`metadisco export RUN_DIR`: write a run's closed forms as LaTeX, JSON and a standalone JAX module.

Exports distil's chosen closed forms (or ones given with --expression / --value-loss); the JSON is
a loadable objectives file that keeps the run's other plug points.
"""

from __future__ import annotations

import sys

from meta_objectives.errors import MetadiscoError


def run(args) -> None:
    from analysis.distil_run import DISTILLABLE, distillable, stored_report
    from analysis.export import export_closed_form
    from analysis.runs import Run
    from metadisco.commands.distil import distil_for_run

    run = Run(args.run_dir)
    cfg = run.config()
    given = {"drift": args.expression, "value_loss": args.value_loss}
    plugs = tuple(p for p in DISTILLABLE if given[p] is not None) or distillable(cfg)
    objectives, params, _ = run.objectives(args.which)
    expressions, sources = {}, {}
    for plug in plugs:
        if given[plug] is not None:
            expressions[plug], sources[plug] = given[plug], "given on the command line"
            continue
        report = stored_report(run, plug)
        if report is None:
            print(f"no {plug} distillation yet: running `metadisco distil` first", file=sys.stderr)
            report = distil_for_run(run, cfg, objectives, params, args.which, (plug,))[plug]
        if args.candidate is not None:
            candidates = report["candidates"]
            if not -len(candidates) <= args.candidate < len(candidates):
                raise MetadiscoError(f"--candidate {args.candidate}: the {plug} distillation has {len(candidates)} "
                                     f"candidates, numbered 0 to {len(candidates) - 1} (see {run.distil_dir})")
            expressions[plug] = candidates[args.candidate]["expression"]
            sources[plug] = f"distil candidate {args.candidate}"
        elif report.get("chosen"):
            expressions[plug], sources[plug] = report["chosen"]["expression"], "distil's chosen candidate"
        else:
            flag = "--expression" if plug == "drift" else "--value-loss"
            raise MetadiscoError(
                f"distillation found no {plug} candidate that satisfies the constraints; pass one with {flag}")
    name = args.name or "discovered_" + "_and_".join(expressions)
    # Plug points not exported as closed forms keep the run's own (fixed) objectives.
    paths = export_closed_form(expressions.get("drift"), run.export_dir, name=name,
                               value_loss=expressions.get("value_loss"), fixed=(objectives, params),
                               metadata={"run_dir": str(run.path), "source": sources, "envs": cfg.get("envs")})
    for plug, expression in expressions.items():
        print(f"exported {plug} ({sources[plug]}): {expression}")
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    print(f"evaluate it: metadisco evaluate {paths['json']} --quick")


def add(subparsers) -> None:
    e = subparsers.add_parser("export", help="export the closed-form drift and/or value loss as LaTeX, JSON "
                                             "and a JAX module")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--expression", help="a sympy expression over r, A, p (default: distil's chosen one)")
    e.add_argument("--value-loss", help="a sympy expression over e = v - target and t = target (default: "
                                        "distil's chosen one, when the run evolved the value loss)")
    e.add_argument("--candidate", type=int, help="export distil candidate number N instead of the chosen one")
    e.add_argument("--which", choices=("mean", "best"), default="mean")
    e.add_argument("--name", default=None, help="file and module name (default discovered_<what was exported>)")
    e.set_defaults(func=run)

"""`metadisco export RUN_DIR`: write a run's closed forms as LaTeX, JSON and a standalone JAX module,
or (--format discogen) as a `loss.py` for DiscoGen's on-policy RL domain.

Exports distil's chosen closed forms, another row of its Pareto front (--candidate N, numbered as
`metadisco distil` prints them) or ones given with --expression / --value-loss; the JSON is a
loadable objectives file that keeps the run's other plug points. A value loss distilled from one
on PPO's clipped base (learned_clipped) is exported with that clipping applied (distil's
report["closed_form_base"]); a --value-loss given here is the whole loss.
"""

from __future__ import annotations

import sys

from metadisco_common.errors import MetadiscoError


def run(args) -> None:
    from analysis.distillation.run import DISTILLABLE, distillable, pareto_rows, stored_report
    from analysis.export import DISCOGEN_PROGRESS_LINES, drift_uses_progress, export_closed_form, export_discogen
    from analysis.runs import Run
    from meta_objectives.closed_form import closed_form_base
    from metadisco import api

    run = Run(args.run_dir)
    cfg = run.config()
    given = {"drift": args.expression, "value_loss": args.value_loss}
    plugs = tuple(p for p in DISTILLABLE if given[p] is not None) or distillable(cfg)
    objectives, params, _ = run.objectives(args.which)
    expressions, sources = {}, {}
    value_loss_base = None  # the expression is the whole loss, unless distilled from a clipped base
    for plug in plugs:
        if given[plug] is not None:
            expressions[plug], sources[plug] = given[plug], "given on the command line"
            continue
        own = getattr(objectives, plug).closed_form(params.get(plug, {})) if args.candidate is None else None
        if own is not None:  # a closed-form family (drift_mix, dpo_schedule): the member is its formula
            expressions[plug], sources[plug] = own, "the evolved member's own closed form, no fit"
            continue
        report = stored_report(run, plug)
        if report is None:
            print(f"no {plug} distillation yet: running `metadisco distil` first", file=sys.stderr)
            report = api.distil(run.path, args.which, plugs=(plug,))[plug]
        if plug == "value_loss":  # a report from before closed_form_base: the run's own loss says it
            value_loss_base = report.get("closed_form_base") or closed_form_base(objectives.value_loss)
        if args.candidate is not None:
            rows = pareto_rows(report)
            if not 0 <= args.candidate < len(rows):
                raise MetadiscoError(f"--candidate {args.candidate}: the {plug} distillation's Pareto front has "
                                     f"{len(rows)} rows, numbered 0 to {len(rows) - 1} as `metadisco distil` prints "
                                     f"them (see {run.distil_dir})")
            expressions[plug] = rows[args.candidate]["expression"]
            sources[plug] = f"Pareto front row {args.candidate}"
        elif report.get("chosen"):
            expressions[plug], sources[plug] = report["chosen"]["expression"], "distil's chosen candidate"
        else:
            flag = "--expression" if plug == "drift" else "--value-loss"
            raise MetadiscoError(
                f"distillation found no {plug} candidate that satisfies the constraints; pass one with {flag}")
    if args.format == "discogen":
        if "drift" not in expressions:
            raise MetadiscoError("a DiscoGen loss needs a drift: this run evolved no drift; pass one with --expression")
        path = export_discogen(expressions["drift"], run.export_dir / "discogen", value_loss=expressions.get("value_loss"),
                               value_loss_base=value_loss_base)
        _print_exported(expressions, sources, value_loss_base)
        if "value_loss" not in expressions:
            print("value loss: PPO's clipped one")
        print(f"  loss.py: {path}\nuse it: copy it over the loss.py of DiscoGen's on-policy RL task")
        if drift_uses_progress(expressions["drift"]):
            print("the drift depends on training progress p: DiscoGen's template does not pass it, so the loss "
                  "refuses to run until train.py does; before its grad_fn(...) call add:\n    "
                  + "\n    ".join(DISCOGEN_PROGRESS_LINES))
        return
    name = args.name or "discovered_" + "_and_".join(expressions)
    # Plug points not exported as closed forms keep the run's own (fixed) objectives.
    paths = export_closed_form(expressions.get("drift"), run.export_dir, name=name,
                               value_loss=expressions.get("value_loss"), fixed=(objectives, params),
                               metadata={"run_dir": str(run.path), "source": sources, "envs": list(cfg.envs)},
                               value_loss_base=value_loss_base)
    _print_exported(expressions, sources, value_loss_base)
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    print(f"evaluate it: metadisco evaluate {paths['json']} --quick")


def _print_exported(expressions: dict, sources: dict, value_loss_base: dict | None) -> None:
    from meta_objectives.closed_form import ClosedFormValueLoss

    for plug, expression in expressions.items():
        if plug == "value_loss":
            expression = ClosedFormValueLoss(expression, **(value_loss_base or {})).describe()
        print(f"exported {plug} ({sources[plug]}): {expression}")


def add(subparsers) -> None:
    e = subparsers.add_parser("export", help="export the closed-form drift and/or value loss as LaTeX, JSON "
                                             "and a JAX module")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--expression", help="a sympy expression over r, A, p (default: distil's chosen one)")
    e.add_argument("--value-loss", help="a sympy expression over e = v - target and t = target, the whole loss "
                                        "(default: distil's chosen one, when the run evolved the value loss, with "
                                        "PPO's value clipping applied when the run's loss is on the clipped base)")
    e.add_argument("--candidate", type=int, metavar="N",
                   help="export row N of distil's Pareto front (as `metadisco distil` prints it) instead of the "
                        "chosen one")
    e.add_argument("--format", choices=("metadisco", "discogen"), default="metadisco",
                   help="metadisco: LaTeX, an objectives JSON and a JAX module (default); discogen: a loss.py "
                        "for DiscoGen's on-policy RL domain (depends only on jax)")
    e.add_argument("--which", choices=("mean", "best"), default="mean")
    e.add_argument("--name", default=None, help="file and module name (default discovered_<what was exported>)")
    e.set_defaults(func=run)

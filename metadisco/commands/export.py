"""`metadisco export RUN_DIR`: write a run's closed forms as LaTeX, JSON and a standalone JAX module,
or (--format discogen) as a `loss.py` for DiscoGen's on-policy RL domain: metadisco.api.export does
the work, this verb parses and prints.

Exports distil's chosen closed forms, another row of its Pareto front (--candidate N, numbered as
`metadisco distil` prints them) or ones given with --expression / --value-loss; the JSON is a
loadable objectives file that keeps the run's other plug points. A value loss distilled from one
on PPO's clipped base (learned_clipped) is exported with that clipping applied (distil's
report["closed_form_base"]); a --value-loss given here is the whole loss.
"""

from __future__ import annotations

import sys


def run(args) -> None:
    from metadisco import api
    from metadisco.analysis.export import DISCOGEN_PROGRESS_LINES, drift_uses_progress
    from metadisco.measure.run_files import RunFiles

    which, what = api.chosen_objective(args.run_dir, args.which)
    print(f"metadisco export: {args.run_dir}: {what} (objectives/{which}.json)", file=sys.stderr)
    exported = api.export(args.run_dir, which, expression=args.expression, value_loss=args.value_loss,
                          potential=args.potential, candidate=args.candidate, format=args.format, name=args.name)
    for plug in exported.distilled:
        print(f"no {plug} distillation of objectives/{which}.json as it is now: ran `metadisco distil` first",
              file=sys.stderr)
    sources = {plug: "given on the command line" if source == "given" else source
               for plug, source in exported.sources.items()}
    _print_exported(exported.expressions, sources, exported.value_loss_base)
    if args.format == "discogen":
        if "value_loss" not in exported.expressions:
            print("value loss: PPO's clipped one")
        print(f"  loss.py: {exported.paths['loss.py']}\nuse it: copy it over the loss.py of DiscoGen's on-policy RL task")
        for note in exported.notes:
            print(note)
        if drift_uses_progress(exported.expressions["drift"]):
            print("the drift depends on training progress p: DiscoGen's template does not pass it, so the loss "
                  "refuses to run until train.py does; before its grad_fn(...) call add:\n    "
                  + "\n    ".join(DISCOGEN_PROGRESS_LINES))
        return
    for kind, path in exported.paths.items():
        print(f"  {kind}: {path}")
    print(f"evaluate it beside the network: {RunFiles(args.run_dir).evaluate_command(exported.paths['json'])}")


def _print_exported(expressions: dict, sources: dict, value_loss_base: dict | None) -> None:
    from metadisco.meta_objectives.closed_form import ClosedFormValueLoss

    for plug, expression in expressions.items():
        if plug == "value_loss":
            expression = ClosedFormValueLoss(expression, **(value_loss_base or {})).describe()
        print(f"exported {plug} ({sources[plug]}): {expression}")


def add(subparsers) -> None:
    e = subparsers.add_parser("export", help="export the closed-form drift, value loss and/or shaping potential as "
                                             "LaTeX, JSON and a JAX module")
    e.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `metadisco train`")
    e.add_argument("--expression", help="a sympy expression over r, A, p (default: distil's chosen one)")
    e.add_argument("--value-loss", help="a sympy expression over e = v - target and t = target, the whole loss "
                                        "(default: distil's chosen one, when the run evolved the value loss, with "
                                        "PPO's value clipping applied when the run's loss is on the clipped base)")
    e.add_argument("--potential", help="a sympy expression over the observation's numbers s0, s1, ... (raw), the "
                                       "shaping potential (default: distil's chosen one, when the run evolved the "
                                       "shaping)")
    e.add_argument("--candidate", type=int, metavar="N",
                   help="export row N of distil's Pareto front (as `metadisco distil` prints it) instead of the "
                        "chosen one")
    e.add_argument("--format", choices=("metadisco", "discogen"), default="metadisco",
                   help="metadisco: LaTeX, an objectives JSON and a JAX module (default); discogen: a loss.py "
                        "for DiscoGen's on-policy RL domain (depends only on jax)")
    e.add_argument("--which", choices=("selected", "mean", "best"), default=None,
                   help="the run's objectives: selected (the ES mean of the generation with the best validation "
                        "score, or the start where none scored higher), mean (the last ES mean) or best (the "
                        "best member seen); default: selected where the run kept one, else mean")
    e.add_argument("--name", default=None, help="file and module name (default discovered_<what was exported>)")
    e.set_defaults(func=run)

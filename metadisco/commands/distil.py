"""`metadisco distil RUN_DIR`: fit closed forms to what the run evolved (its drift, value loss
and/or shaping potential).

The fit runs on the points that PPO training with the discovered objectives visits on every
meta-training environment (metadisco.analysis.distillation.run writes RUN_DIR/distil/drift.json,
value_loss.json, shaping.json and the figures) through `metadisco.api.distil`; this module maps the command line onto it and
prints the Pareto fronts.
"""

from __future__ import annotations

import shlex
import sys

from metadisco.core.invocation import command


def print_report(plug: str, report) -> None:
    """The Pareto front of a DistillationReport as a numbered table (the numbers `export
    --candidate` takes) and the choice."""
    for s in report.symbolic:
        print(f"{plug}: symbolic search considered {s.n_considered} formulas, {s.valid_share:.0%} valid, "
              f"in {s.seconds:.1f} s")
    slopes = plug != "shaping"  # a potential is fitted to its values alone
    print(f"{plug}: Pareto front of complexity against {'value' if report.fit == 'value' else 'slope'} error "
          f"(R^2 of values{'; slope rmse on the visited points / the grid' if slopes else ''}):")
    chosen = report.chosen
    for i, c in enumerate(report.front):
        mark = "*" if chosen and c.expression == chosen.expression else " "
        print(f" {mark}[{i}] {c.method:<12} complexity={c.complexity:>3} R^2={c.r2:.4f} "
              f"grid R^2={c.grid.r2:.4f}{_slope(c) if slopes else ''}  {c.expression}")
    if chosen:
        print(f"{plug} chosen (*): R^2={chosen.r2:.4f}, grid R^2={chosen.grid.r2:.4f}"
              + (f", slope rmse {chosen.slope.rmse:.3g} visited / {chosen.slope.grid.rmse:.3g} grid"
                 if slopes and chosen.slope else ""))
    else:
        print(f"{plug}: no candidate satisfies the constraints")
    if report.plane_fit is not None:
        print(f"{plug}: best plane R^2={report.plane_fit.r2:.4f}  {report.plane_fit.expression}")
    if report.reference is not None:
        ref = report.reference
        corr = "n/a (constant)" if ref.correlation is None else f"{ref.correlation:+.4f} (R^2 {ref.r2:.4f})"
        print(f"{plug}: correlation with the {ref.name} {ref.expression} (from {ref.source}): {corr}")


def _slope(c) -> str:
    nan = float("nan")
    slope, slope_grid = (nan, nan) if c.slope is None else (c.slope.rmse, c.slope.grid.rmse)
    return f" slope rmse={slope:.3g}/{slope_grid:.3g}"


def run(args) -> None:
    from metadisco import api
    from metadisco.analysis.distillation.run import REPORT_FILES
    from metadisco.analysis.runs import Run

    which, what = api.chosen_objective(args.run_dir, args.which)
    print(f"metadisco distil: {args.run_dir}: {what} (objectives/{which}.json)", file=sys.stderr)
    reports = api.distil(args.run_dir, which, symbolic=not args.no_symbolic, progress=args.progress,
                         seed=args.seed, prior_fraction=args.prior_fraction, fit=args.fit)
    run = Run(args.run_dir)
    if "drift" in reports:
        report = reports["drift"]
        dpo = report.dpo_fit
        print(f"drift: DPO family fit alpha={dpo.alpha:.4g} beta={dpo.beta:.4g} R^2={dpo.r2:.4f} "
              f"max|err|={dpo.max_abs_error:.3g} (on {report.data.n_points} points, "
              f"{args.prior_fraction:.0%} from the prior, the rest visited in training on "
              f"{', '.join(run.config().envs)})")
    for plug, report in reports.items():
        print_report(plug, report)
    files = ", ".join(REPORT_FILES[p] for p in reports)
    discogen = "" if "shaping" in reports else " [--format discogen]"
    print(f"written: {run.distil_dir}/{{{files}}} and figures; next: {command()} export {shlex.quote(str(run.path))} "
          f"[--candidate N]{discogen}")


def add(subparsers) -> None:
    d = subparsers.add_parser("distil", help="fit closed forms (DPO family, sparse regression, a symbolic search "
                                             "valid by construction) to a run's learned drift, value loss or "
                                             "shaping potential")
    d.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `metadisco train`")
    d.add_argument("--which", choices=("selected", "mean", "best"), default=None,
                   help="the run's objectives: selected (the ES mean of the generation with the best validation "
                        "score, or the start where none scored higher), mean (the last ES mean) or best (the "
                        "best member seen); default: selected where the run kept one, else mean")
    d.add_argument("--progress", type=float, default=None,
                   help="distil a TA-LPO drift at this one training progress; by default it is distilled at "
                        "the start and the end of training and interpolated, (1 - p) D_0 + p D_1")
    d.add_argument("--fit", choices=("value", "slope"), default="value",
                   help="match the learned values (default) or their slopes dD/dr, which set the policy-gradient "
                        "weight A - dD/dr; both errors are reported either way (a potential: values only)")
    d.add_argument("--no-symbolic", action="store_true", help="skip the symbolic search")
    d.add_argument("--prior-fraction", type=float, default=0.5,
                   help="share of fit points from a prior over (r, A) rather than from training, so that the "
                        "fit also sees the trust region's walls, which training rarely visits (default 0.5)")
    d.add_argument("--seed", type=int, default=0, help="seed of the fits' random draws (default 0)")
    d.set_defaults(func=run)

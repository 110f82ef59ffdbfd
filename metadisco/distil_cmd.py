"""`metadisco distil RUN_DIR` and `metadisco export RUN_DIR`.

distil: fit closed forms to what the run evolved, its drift and/or its value loss, on the points
that PPO training with the discovered objectives visits (analysis.distil_run, which writes
RUN_DIR/distil/distil.json and value_loss.json and the figures). This file only maps the command
line onto it and prints the summary.
export: write the chosen closed forms (or ones given with --expression / --value-loss) as LaTeX,
JSON (a loadable objectives file that keeps the run's other plug points) and a standalone JAX
module. No jax import at module level (the CLI sets XLA_FLAGS after building its parser).
"""

from __future__ import annotations

import sys

from metadisco import commands


def _visited(cfg: dict, objectives, params):
    """The (ratio, advantage, value, target) rows PPO visits on the run's first environment."""
    import jax

    from analysis.distil_run import visited_samples
    from inner_loops import make_env
    from metadisco.config import RunConfig, ppo_config

    config = RunConfig.from_dict(cfg)
    env = config.envs[0]
    return visited_samples(jax.random.key(config.seed + 7), make_env(env), ppo_config(config, env), objectives, params)


def _distil(run, cfg, objectives, params, which, plugs, **options) -> dict:
    from analysis.distil_run import check_options, distil_run

    check_options(options.get("progress"), options.get("prior_fraction", 0.5))
    rows = _visited(cfg, objectives, params)
    return distil_run(run, rows, objectives, params, which, plugs=plugs, **options)


def cmd_distil(args) -> None:
    from analysis.distil_run import REPORT_FILES, distillable
    from analysis.runs import Run
    from metadisco.cli import _fail

    run = Run(args.run_dir)
    try:
        cfg = run.config()
        plugs = distillable(cfg)
        objectives, params, _ = run.objectives(args.which)
        reports = _distil(run, cfg, objectives, params, args.which, plugs, symbolic=not args.no_symbolic,
                          progress=args.progress, seed=args.seed, prior_fraction=args.prior_fraction)
    except ValueError as e:
        _fail(str(e))
    if "drift" in reports:
        report = reports["drift"]
        dpo = report["dpo_fit"]
        print(f"drift: DPO family fit alpha={dpo['alpha']:.4g} beta={dpo['beta']:.4g} R^2={dpo['r2']:.4f} "
              f"max|err|={dpo['max_abs_error']:.3g} (on {report['data']['n_points']} points, "
              f"{args.prior_fraction:.0%} from the prior, the rest visited in training)")
    for plug, report in reports.items():
        print(f"{plug} candidates (best 5 by error):")
        for c in report["candidates"][:5]:
            flag = "" if not c["violations"] else "  [violates constraints]"
            print(f"  R^2={c['r2']:.4f} complexity={c['complexity']:>3} {c['expression']}{flag}")
        chosen = report["chosen"]
        print(f"{plug} chosen: {chosen['expression']}  (R^2={chosen['r2']:.4f})" if chosen
              else f"{plug}: no candidate satisfies the constraints")
    files = ", ".join(REPORT_FILES[p] for p in reports)
    print(f"written: {run.distil_dir}/{{{files}}} and figures; next: metadisco export {run.path}")


def cmd_export(args) -> None:
    from analysis.distil_run import DISTILLABLE, distillable, stored_report
    from analysis.export import export_closed_form
    from analysis.runs import Run
    from metadisco.cli import _fail

    run = Run(args.run_dir)
    try:
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
                report = _distil(run, cfg, objectives, params, args.which, (plug,))[plug]
            if args.candidate is not None:
                expressions[plug] = report["candidates"][args.candidate]["expression"]
                sources[plug] = f"distil candidate {args.candidate}"
            elif report.get("chosen"):
                expressions[plug], sources[plug] = report["chosen"]["expression"], "distil's chosen candidate"
            else:
                flag = "--expression" if plug == "drift" else "--value-loss"
                _fail(f"distillation found no {plug} candidate that satisfies the constraints; pass one with {flag}")
        name = args.name or "discovered_" + "_and_".join(expressions)
        # Plug points not exported as closed forms keep the run's own (fixed) objectives.
        paths = export_closed_form(expressions.get("drift"), run.export_dir, name=name,
                                   value_loss=expressions.get("value_loss"), fixed=(objectives, params),
                                   metadata={"run_dir": str(run.path), "source": sources, "envs": cfg.get("envs")})
    except (ValueError, IndexError) as e:
        _fail(str(e))
    for plug, expression in expressions.items():
        print(f"exported {plug} ({sources[plug]}): {expression}")
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    print(f"evaluate it: metadisco evaluate {paths['json']} --quick")


def add(subparsers) -> None:
    d = subparsers.add_parser("distil", help="fit closed forms (DPO family, sparse and symbolic regression) "
                                             "to a run's learned drift and value loss")
    d.add_argument("run_dir", metavar="RUN_DIR")
    d.add_argument("--which", choices=("mean", "best"), default="mean")
    d.add_argument("--progress", type=float, default=None,
                   help="distil a TA-LPO drift at this one training progress; by default it is distilled at "
                        "the start and the end of training and interpolated, (1 - p) D_0 + p D_1")
    d.add_argument("--no-symbolic", action="store_true", help="skip gplearn symbolic regression")
    d.add_argument("--prior-fraction", type=float, default=0.5,
                   help="share of fit points from a prior over (r, A) rather than from training, so that the "
                        "fit also sees the trust region's walls, which training rarely visits (default 0.5)")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_distil)
    e = subparsers.add_parser("export", help="export the closed-form drift and/or value loss as LaTeX, JSON "
                                             "and a JAX module")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--expression", help="a sympy expression over r, A, p (default: distil's chosen one)")
    e.add_argument("--value-loss", help="a sympy expression over e = v - target and t = target (default: "
                                        "distil's chosen one, when the run evolved the value loss)")
    e.add_argument("--candidate", type=int, help="export distil candidate number N instead of the chosen one")
    e.add_argument("--which", choices=("mean", "best"), default="mean")
    e.add_argument("--name", default=None, help="file and module name (default discovered_<what was exported>)")
    e.set_defaults(func=cmd_export)


commands.REGISTRY.append(add)

"""`metadisco distil RUN_DIR`: fit closed forms to what the run evolved (its drift and/or value loss).

The fit runs on the points that PPO training with the discovered objectives visits
(analysis.distil_run writes RUN_DIR/distil/distil.json, value_loss.json and the figures); this
module maps the command line onto it and prints the summary.
"""

from __future__ import annotations


def _visited(cfg: dict, objectives, params):
    """The (ratio, advantage, value, target) rows PPO visits on the run's first environment."""
    import jax

    from analysis.distil_run import visited_samples
    from inner_loops import make_env
    from metadisco.config import RunConfig, ppo_config

    config = RunConfig.from_dict(cfg)
    env = config.envs[0]
    return visited_samples(jax.random.key(config.seed + 7), make_env(env), ppo_config(config, env), objectives, params)


def distil_for_run(run, cfg, objectives, params, which, plugs, **options) -> dict:
    """Distil `plugs` of a run on the points PPO visits with its objectives -> {plug: report}."""
    from analysis.distil_run import check_options, distil_run

    check_options(options.get("progress"), options.get("prior_fraction", 0.5))
    rows = _visited(cfg, objectives, params)
    return distil_run(run, rows, objectives, params, which, plugs=plugs, **options)


def run(args) -> None:
    from analysis.distil_run import REPORT_FILES, distillable
    from analysis.runs import Run

    run = Run(args.run_dir)
    cfg = run.config()
    plugs = distillable(cfg)
    objectives, params, _ = run.objectives(args.which)
    reports = distil_for_run(run, cfg, objectives, params, args.which, plugs, symbolic=not args.no_symbolic,
                             progress=args.progress, seed=args.seed, prior_fraction=args.prior_fraction)
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
    d.set_defaults(func=run)

"""`metadisco distil RUN_DIR` and `metadisco export RUN_DIR`.

distil: fit closed forms to what the run evolved: its drift (analysis.distil.distil) and/or its
value loss (analysis.distil.distil_value_loss), weighted toward the points that PPO training
with the discovered objectives actually visits (recorded by the inner loop), and plot learned vs
distilled. Reports: RUN_DIR/distil/distil.json (drift) and value_loss.json.
export: write the chosen closed forms (or ones given with --expression / --value-loss) as LaTeX,
JSON (a loadable objectives file that keeps the run's other plug points) and a standalone JAX
module. No jax import at module level (the CLI sets XLA_FLAGS after building its parser).
"""

from __future__ import annotations

import json
import sys

from metadisco import commands

DISTILLABLE = ("drift", "value_loss")
REPORT_FILES = {"drift": "distil.json", "value_loss": "value_loss.json"}


def _load_objectives(run, which: str):
    from meta_objectives import ObjectiveFileError, load_objectives
    from metadisco.rundir import RunDirError

    path = run.objectives_dir / f"{which}.json"
    if not path.is_file():
        raise RunDirError(f"{path} is missing: the run has not written its objectives yet (it writes them at its "
                          "first checkpoint); train it first or pass another RUN_DIR")
    try:
        objectives, params, _ = load_objectives(path)
    except ObjectiveFileError as e:
        raise RunDirError(str(e)) from e
    return objectives, params


def _distillable(cfg: dict) -> tuple[str, ...]:
    """The run's evolved plug points that have closed forms; a clear error when there are none."""
    from metadisco.rundir import RunDirError

    evolved = tuple(cfg.get("objectives", {}).get("evolve", ("drift",)))
    plugs = tuple(p for p in DISTILLABLE if p in evolved)
    if not plugs:
        raise RunDirError(
            f"this run evolved {', '.join(evolved)}; metadisco distils drifts and value losses into closed "
            "forms. A learned reward shaping is a potential over the environment's observations, with no "
            "closed form to fit here: evaluate it as it is (metadisco evaluate RUN_DIR --envs ITS_ENV)")
    return plugs


def visited_samples(cfg_dict: dict, objectives, params, seeds: int = 2, per_update: int = 64):
    """(ratio, advantage, value, target) rows [n, 4] visited by PPO trained with `objectives` on
    the run's first environment."""
    import jax

    from inner_loops import make_env, make_train
    from metadisco.config import RunConfig, ppo_config

    cfg = RunConfig.from_dict(cfg_dict)
    env = make_env(cfg.envs[0])
    pc = ppo_config(cfg, cfg.envs[0]).replace(record_samples=per_update)
    train = jax.jit(jax.vmap(make_train(env, pc, objectives), in_axes=(None, 0)))
    result = train(params, jax.random.split(jax.random.key(cfg.seed + 7), seeds))
    return jax.device_get(result.visited).reshape(-1, 4)


class _Difference:
    """A drift-like view of learned - distilled, for the difference panel."""

    def __init__(self, a, pa, b, pb):
        self.a, self.pa, self.b, self.pb = a, pa, b, pb

    def drift(self, params, ratio, advantage, progress):
        return self.a.drift(self.pa, ratio, advantage, progress) - self.b.drift(self.pb, ratio, advantage, progress)


def cmd_distil(args) -> None:
    from metadisco.cli import _fail
    from metadisco.rundir import RunDir, RunDirError

    run = RunDir(args.run_dir)
    try:
        cfg = run.read_config()
        plugs = _distillable(cfg)
        objectives, params = _load_objectives(run, args.which)
    except RunDirError as e:
        _fail(str(e))
    try:
        reports = distil_run(run, cfg, objectives, params, args.which, symbolic=not args.no_symbolic,
                             progress=args.progress, seed=args.seed, prior_fraction=args.prior_fraction,
                             plugs=plugs)
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
    print(f"written: {run.path / 'distil'}/{{{files}}} and figures; next: metadisco export {run.path}")


def distil_run(run, cfg, objectives, params, which="mean", symbolic=True, progress=None, seed=0,
               prior_fraction=0.5, plugs=("drift",)) -> dict:
    """Distil each plug in `plugs` -> {plug: report}; writes RUN_DIR/distil/ (json and figures).

    prior_fraction: share of drift fit points drawn from the default prior over (r, A) instead
    of from training. Visited points alone almost never reach the walls of a trust region (that
    is what the walls are for), so a purely visitation-weighted fit drops them."""
    if not 0.0 <= prior_fraction < 1.0:
        raise ValueError(f"--prior-fraction must be in [0, 1), got {prior_fraction}")
    if progress is not None and not 0.0 <= progress <= 1.0:
        raise ValueError(f"--progress is the share of training done, in [0, 1]; got {progress}")
    rows = visited_samples(cfg, objectives, params)
    out = run.path / "distil"
    out.mkdir(parents=True, exist_ok=True)
    reports = {}
    if "drift" in plugs:
        reports["drift"] = _distil_drift(out, rows[:, :2], objectives, params, symbolic, progress, seed,
                                         prior_fraction)
    if "value_loss" in plugs:
        reports["value_loss"] = _distil_value_loss(out, rows[:, 2], rows[:, 3], objectives, params, seed)
    from meta_objectives.fileio import atomic_write_text

    for plug, report in reports.items():
        report["source"] = {"run_dir": str(run.path), "which": which, plug: getattr(objectives, plug).spec(),
                            **({"prior_fraction": prior_fraction} if plug == "drift" else {})}
        atomic_write_text(out / REPORT_FILES[plug], json.dumps(report, indent=1))
    return reports


def _save(fig, path_stem) -> None:
    import matplotlib.pyplot as plt

    for ext in ("png", "pdf"):
        fig.savefig(f"{path_stem}.{ext}", dpi=150, bbox_inches="tight")
    plt.close(fig)


def _distil_drift(out, samples, objectives, params, symbolic, progress, seed, prior_fraction) -> dict:
    import jax
    import numpy as np

    from analysis.distil import distil, distil_over_progress, sample_prior
    from analysis.plots import drift_surface_figure
    from meta_objectives import ClosedFormDrift

    drift, dparams = objectives.drift, params["drift"]
    over_progress = progress is None and getattr(drift, "progress_features", False)
    if progress is None:
        progress = 0.5 if over_progress else 0.0
    if prior_fraction > 0:
        k = int(round(len(samples) * prior_fraction / (1.0 - prior_fraction)))
        ratio, advantage = sample_prior(k, seed)
        samples = np.concatenate([samples, np.stack([ratio, advantage], -1)])

    def drift_fn(r, a, p):
        return drift.drift(dparams, r, a, p)

    if over_progress:  # TA-LPO: interpolate closed forms fitted at the start and the end of training
        report = distil_over_progress(jax.jit(drift_fn), samples=samples, seed=seed, symbolic=symbolic)
    else:
        report = distil(jax.jit(drift_fn), samples=samples, seed=seed, symbolic=symbolic, progress=progress)
    if report["chosen"]:
        closed = ClosedFormDrift(report["chosen"]["expression"])
        _save(drift_surface_figure({
            "learned": (drift, dparams),
            "distilled": (closed, {}),
            "learned − distilled": (_Difference(drift, dparams, closed, {}), {}),
        }, progress=progress), out / "learned_vs_distilled")
    return report


def _distil_value_loss(out, values, targets, objectives, params, seed) -> dict:
    import jax

    from analysis.distil import distil_value_loss
    from analysis.plots import value_loss_figure
    from meta_objectives import ClosedFormValueLoss

    loss, lparams = objectives.value_loss, params["value_loss"]
    loss_fn = jax.jit(lambda v, t: loss.value_loss(lparams, v, t, v))
    report = distil_value_loss(loss_fn, values - targets, targets, seed=seed)
    if report["chosen"]:
        span = 3 * report["data"]["error_std"]
        t = report["data"]["grid"]["t"]
        _save(value_loss_figure(loss, lparams, e_range=(-span, span), targets=(t,),
                                compare={"distilled": (ClosedFormValueLoss(report["chosen"]["expression"]), {})}),
              out / "value_loss_learned_vs_distilled")
    return report


def cmd_export(args) -> None:
    from analysis.export import export_closed_form
    from metadisco.cli import _fail
    from metadisco.rundir import RunDir, RunDirError

    run = RunDir(args.run_dir)
    try:
        cfg = run.read_config()
        given = {"drift": args.expression, "value_loss": args.value_loss}
        plugs = tuple(p for p in DISTILLABLE if given[p] is not None) or _distillable(cfg)
        objectives, params = _load_objectives(run, args.which)
        expressions, sources = {}, {}
        for plug in plugs:
            if given[plug] is not None:
                expressions[plug], sources[plug] = given[plug], "given on the command line"
                continue
            report = _report(run, cfg, objectives, params, args.which, plug)
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
        paths = export_closed_form(expressions.get("drift"), run.path / "export", name=name,
                                   value_loss=expressions.get("value_loss"), fixed=(objectives, params),
                                   metadata={"run_dir": str(run.path), "source": sources, "envs": cfg.get("envs")})
    except (RunDirError, ValueError, IndexError) as e:
        _fail(str(e))
    for plug, expression in expressions.items():
        print(f"exported {plug} ({sources[plug]}): {expression}")
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    print(f"evaluate it: metadisco evaluate {paths['json']} --quick")


def _report(run, cfg, objectives, params, which, plug) -> dict:
    path = run.path / "distil" / REPORT_FILES[plug]
    if path.is_file():
        return json.loads(path.read_text())
    print(f"no {plug} distillation yet: running `metadisco distil` first", file=sys.stderr)
    return distil_run(run, cfg, objectives, params, which, plugs=(plug,))[plug]


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

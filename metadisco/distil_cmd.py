"""`metadisco distil RUN_DIR` and `metadisco export RUN_DIR`.

distil: fit closed forms to the run's learned drift (analysis.distil), weighted toward the
(r, A) points that PPO training with that drift actually visits (recorded by the inner loop),
and plot learned vs distilled surfaces. export: write the chosen closed form (or one given with
--expression) as LaTeX, JSON (a loadable objectives file) and a standalone JAX module.
No jax import at module level (the CLI sets XLA_FLAGS after building its parser).
"""

from __future__ import annotations

import json
import sys

from metadisco import commands


def _load_drift(run, which: str):
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


def visited_samples(cfg_dict: dict, objectives, params, seeds: int = 2, per_update: int = 64):
    """(ratio, advantage) pairs visited by PPO trained with `objectives` on the run's first env."""
    import jax

    from inner_loops import make_env, make_train
    from metadisco.config import RunConfig, ppo_config

    cfg = RunConfig.from_dict(cfg_dict)
    env = make_env(cfg.envs[0])
    pc = ppo_config(cfg, cfg.envs[0]).replace(record_samples=per_update)
    train = jax.jit(jax.vmap(make_train(env, pc, objectives), in_axes=(None, 0)))
    result = train(params, jax.random.split(jax.random.key(cfg.seed + 7), seeds))
    return jax.device_get(result.drift_samples).reshape(-1, 2)


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
        objectives, params = _load_drift(run, args.which)
    except RunDirError as e:
        _fail(str(e))
    try:
        report = distil_run(run, cfg, objectives, params, args.which, symbolic=not args.no_symbolic,
                            progress=args.progress, seed=args.seed, prior_fraction=args.prior_fraction)
    except ValueError as e:
        _fail(str(e))
    chosen = report["chosen"]
    dpo = report["dpo_fit"]
    print(f"DPO family fit: alpha={dpo['alpha']:.4g} beta={dpo['beta']:.4g} R^2={dpo['r2']:.4f} "
          f"max|err|={dpo['max_abs_error']:.3g} (on {report['data']['n_points']} points, "
          f"{args.prior_fraction:.0%} from the prior, the rest visited in training)")
    print("candidates (best 5 by error):")
    for c in report["candidates"][:5]:
        flag = "" if not c["violations"] else "  [violates constraints]"
        print(f"  R^2={c['r2']:.4f} complexity={c['complexity']:>3} {c['expression']}{flag}")
    if chosen:
        print(f"chosen: {chosen['expression']}  (R^2={chosen['r2']:.4f})")
    print(f"written: {run.path / 'distil'}/distil.json and figures; next: metadisco export {run.path}")


def distil_run(run, cfg, objectives, params, which="mean", symbolic=True, progress=None, seed=0,
               prior_fraction=0.5) -> dict:
    """prior_fraction: share of fit points drawn from the default prior over (r, A) instead of
    from training. Visited points alone almost never reach the walls of a trust region (that is
    what the walls are for), so a purely visitation-weighted fit drops them."""
    import jax
    import matplotlib.pyplot as plt
    import numpy as np

    from analysis.distil import distil, sample_prior
    from analysis.plots import drift_surface_figure
    from meta_objectives import ClosedFormDrift
    from meta_objectives.io import atomic_write_text

    drift, dparams = objectives.drift, params["drift"]
    if progress is None:
        progress = 0.5 if getattr(drift, "progress_features", False) else 0.0
    samples = visited_samples(cfg, objectives, params)
    if not 0.0 <= prior_fraction < 1.0:
        raise ValueError(f"--prior-fraction must be in [0, 1), got {prior_fraction}")
    if prior_fraction > 0:
        k = int(round(len(samples) * prior_fraction / (1.0 - prior_fraction)))
        ratio, advantage = sample_prior(k, seed)
        samples = np.concatenate([samples, np.stack([ratio, advantage], -1)])

    def drift_fn(r, a, p):
        return drift.drift(dparams, r, a, p)

    report = distil(jax.jit(drift_fn), samples=samples, seed=seed, symbolic=symbolic, progress=progress)
    report["source"] = {"run_dir": str(run.path), "which": which, "drift": drift.spec(),
                        "prior_fraction": prior_fraction}
    out = run.path / "distil"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "distil.json", json.dumps(report, indent=1))
    if report["chosen"]:
        closed = ClosedFormDrift(report["chosen"]["expression"])
        fig = drift_surface_figure({
            "learned": (drift, dparams),
            "distilled": (closed, {}),
            "learned − distilled": (_Difference(drift, dparams, closed, {}), {}),
        }, progress=progress)
        for ext in ("png", "pdf"):
            fig.savefig(out / f"learned_vs_distilled.{ext}", dpi=150, bbox_inches="tight")
        plt.close(fig)
    return report


def cmd_export(args) -> None:
    from analysis.export import export_closed_form
    from metadisco.cli import _fail
    from metadisco.rundir import RunDir, RunDirError

    run = RunDir(args.run_dir)
    try:
        cfg = run.read_config()
        expression = args.expression
        source = "given on the command line"
        if expression is None:
            distil_path = run.path / "distil" / "distil.json"
            if not distil_path.is_file():
                print("no distillation yet: running `metadisco distil` first", file=sys.stderr)
                objectives, params = _load_drift(run, args.which)
                report = distil_run(run, cfg, objectives, params, args.which)
            else:
                report = json.loads(distil_path.read_text())
            if args.candidate is not None:
                expression = report["candidates"][args.candidate]["expression"]
                source = f"distil candidate {args.candidate}"
            elif report.get("chosen"):
                expression = report["chosen"]["expression"]
                source = "distil's chosen candidate"
            else:
                _fail("distillation found no candidate that satisfies the drift constraints; "
                      "pass one with --expression")
        paths = export_closed_form(expression, run.path / "export", name=args.name,
                                   metadata={"run_dir": str(run.path), "source": source, "envs": cfg.get("envs")})
    except (RunDirError, ValueError, IndexError) as e:
        _fail(str(e))
    print(f"exported ({source}): {expression}")
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    print(f"evaluate it: metadisco evaluate {paths['json']} --quick")


def add(subparsers) -> None:
    d = subparsers.add_parser("distil", help="fit closed forms (DPO family, sparse and symbolic regression) "
                                             "to a run's learned drift")
    d.add_argument("run_dir", metavar="RUN_DIR")
    d.add_argument("--which", choices=("mean", "best"), default="mean")
    d.add_argument("--progress", type=float, default=None,
                   help="training progress at which to distil a TA-LPO drift (default 0.5; 0 for LPO)")
    d.add_argument("--no-symbolic", action="store_true", help="skip gplearn symbolic regression")
    d.add_argument("--prior-fraction", type=float, default=0.5,
                   help="share of fit points from a prior over (r, A) rather than from training, so that the "
                        "fit also sees the trust region's walls, which training rarely visits (default 0.5)")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_distil)
    e = subparsers.add_parser("export", help="export a closed-form drift as LaTeX, JSON and a JAX module")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--expression", help="a sympy expression over r, A, p (default: distil's chosen one)")
    e.add_argument("--candidate", type=int, help="export distil candidate number N instead of the chosen one")
    e.add_argument("--which", choices=("mean", "best"), default="mean")
    e.add_argument("--name", default="discovered_drift", help="file and module name")
    e.set_defaults(func=cmd_export)


commands.REGISTRY.append(add)

"""`metadisco evaluate TARGET [TARGET...]`: held-out evaluation against PPO and DPO (metadisco.api.evaluate)."""

from __future__ import annotations

import argparse
import sys

from metadisco.analysis import suites
from metadisco.analysis.evaluation import protocol
from metadisco.analysis.evaluation.protocol import BOOTSTRAP_REPS
from metadisco.core.errors import ConfigError


def provisional_selections(targets) -> list[str]:
    """The warnings of the run targets that read a provisional selected.json (RUN, RUN:selected)."""
    from pathlib import Path

    from metadisco.measure.run_files import RunFiles

    warnings = []
    for spec in targets:
        run = RunFiles(spec.removesuffix(":selected"))
        if Path(run.path).is_dir() and run.is_run() and run.default_which() == "selected" and run.provisional_warning():
            warnings.append(run.provisional_warning())
    return warnings


def run(args) -> None:
    if args.envs is not None and args.suite is not None:
        raise ConfigError("give --envs or --suite, not both")
    if args.seeds is not None and args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    if args.timesteps is not None and args.timesteps < 1:
        raise ConfigError(f"--timesteps must be >= 1, got {args.timesteps}")
    if args.bootstrap < 1:
        raise ConfigError(f"--bootstrap must be >= 1, got {args.bootstrap}")

    from metadisco import api
    from metadisco.analysis.evaluation import render

    for warning in provisional_selections(args.targets):
        print(warning, file=sys.stderr)
    results = api.evaluate(
        args.targets, envs=args.envs, out=args.out, inner=args.inner or [], inner_from_run=args.inner_from_run,
        suite=args.suite, seeds=args.seeds, budget=args.timesteps, tune_lr=args.tune_lr, quick=args.quick,
        progress=not args.no_progress, seed=args.seed, lr=args.lr, protocol=args.protocol,
        bootstrap_reps=args.bootstrap, allow_invalid=args.allow_invalid,
        log=(lambda line: print(line, file=sys.stderr, flush=True)) if args.no_progress else None,
    )
    path = results.out_dir
    print(render.to_markdown(results))
    print(f"results written to {path}/ (results.json, results.csv, results.md, curves.png, curves.pdf)",
          file=sys.stderr)
    print(path)


def add(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate", help="held-out evaluation of discovered objectives against PPO and DPO",
        description="Train PPO with each TARGET's objectives (and PPO and DPO as references) on the same "
                    "environments, budgets and seeds; report per-environment returns with 95% intervals, "
                    "PPO-normalised scores, IQM and probability of improvement across environments.",
        epilog=suites.help_text() + "\n" + protocol.help_text(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("targets", nargs="+", metavar="TARGET",
                   help="ppo, dpo (ppo[clip_eps=0.3]: with other options), an objectives JSON file, "
                        "RUN_DIR[:best|:mean|:init], zoo:NAME or module:attr")
    p.add_argument("--envs", help="comma-separated environments (see `metadisco envs`); default: the held-out set "
                                  "a RUN_DIR target declared (config heldout.envs), else the suite's")
    p.add_argument("--suite", choices=tuple(suites.SUITES), help="a named set of environments and budgets")
    p.add_argument("--quick", action="store_true",
                   help="CPU-sized: the quick suite (or quick budgets for --envs)")
    p.add_argument("--seeds", type=int, help="evaluation seeds per method and environment (default 8)")
    p.add_argument("--timesteps", type=int, help="environment steps per training run, for every environment")
    p.add_argument("--tune-lr", action="store_true",
                   help="tune every method's learning rate (x0.25..x4 the base, on tuning seeds disjoint from the "
                        "evaluation seeds) and score each at its own best rate")
    p.add_argument("--protocol", choices=tuple(protocol.PROTOCOLS), default="default",
                   help="how methods are scored (see below); discogen: scored as in DiscoGen")
    p.add_argument("--lr", type=float, help="the base learning rate for every method (default: each preset's); "
                                            "use the run's inner.lr to compare where the objective was found")
    p.add_argument("--bootstrap", type=int, default=BOOTSTRAP_REPS, metavar="N",
                   help=f"bootstrap replicates of every interval (default {BOOTSTRAP_REPS:,})")
    p.add_argument("--inner", action="append", metavar="FIELD=VALUE",
                   help="a PPO setting for every environment, as in a run's inner section; repeat it, e.g. "
                        "--inner num_envs=64 --inner num_steps=16 --inner hidden=64,64 for CPU-sized Brax")
    p.add_argument("--inner-from-run", action="store_true",
                   help="use the first RUN_DIR target's inner settings (except its budget; --inner overrides)")
    p.add_argument("--allow-invalid", action="store_true",
                   help="evaluate a target whose objectives break their plug point's constraints (`metadisco "
                        "check`'s: a drift < 0 somewhere, not flat at r = 1, ...) with a warning, instead of "
                        "refusing it")
    p.add_argument("--out", help="output folder (default RUN_DIR/evaluation/TIMESTAMP or ./evaluations/TIMESTAMP)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar: a line on stderr per method and environment")
    p.add_argument("--host-devices", type=int, help="CPU devices of this process (default: the cores, at least 2); on the CPU "
                                                     "an evaluation trains on one of them (docs/evaluate.md)")
    p.set_defaults(func=run)

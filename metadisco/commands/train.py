"""`metadisco train [EXPERIMENT] [FIELD=VALUE ...]`: launch or resume a meta-training run."""

from __future__ import annotations

import argparse
import textwrap


def run(args) -> None:
    from metadisco import config as config_lib
    from metadisco.time_limit import TimeLimit, parse_duration

    time_limit = TimeLimit(parse_duration(args.time_limit)) if args.time_limit else None  # counts from here

    if args.resume and (args.run_dir or args.overwrite):  # a resume writes where the run is: say so, do nothing
        from metadisco.core.errors import ConfigError

        given = "--run-dir" if args.run_dir else "--overwrite"
        raise ConfigError(f"--resume {args.resume} continues that run in its own directory; {given} does not apply "
                          "to a resume. Drop it, or start a new run with --run-dir and no --resume")
    overrides = list(args.overrides)
    experiment = args.experiment
    if experiment and "=" in experiment:  # `metadisco train es.population_size=8`: an override, not a name
        experiment, overrides = None, [experiment, *overrides]
    if not (experiment or args.resume):  # `metadisco train [overrides]`: the demo, with the overrides
        cfg = config_lib.demo(overrides)
    elif args.resume and not experiment:  # overrides apply to the run's own config: a refusal lists what they change
        from metadisco.rundir import RunDir

        cfg = config_lib.override(RunDir(args.resume).config(), overrides) if overrides else None
    else:  # resolve() runs the jax-free checks first: a typo is reported before jax starts
        cfg = config_lib.resolve(experiment, overrides)

    if args.resume:  # a second writer is refused before jax starts (jax-free check)
        from metadisco.rundir import RunDir

        RunDir(args.resume).check_unlocked()

    from metadisco.train import default_run_dir
    from metadisco.train import run as train_run

    options = {"progress": not args.no_progress, "stop_after": args.stop_after, "time_limit": time_limit}
    if args.resume:
        train_run(cfg, args.resume, resume=True, allow_layout_change=args.allow_layout_change, **options)
    else:
        train_run(cfg, args.run_dir or default_run_dir(cfg), overwrite=args.overwrite, **options)


def _epilog() -> str:
    from metadisco.config import DEMO_EXPERIMENT, list_experiments

    return textwrap.dedent(f"""\
        experiments (`metadisco experiments` says what each is for): {', '.join(list_experiments()) or '(none)'}
        with no experiment: the demo, {DEMO_EXPERIMENT} (a learned shaping potential for MountainCar's sparse reward);
        overrides without an experiment apply to the demo; on other envs, without what is MountainCar's
        (its potential's observation scale, held-out set and expectation): name the experiment an
        override is for
        overrides (FIELD=VALUE, sections with dots), for example:
          metadisco train lpo_cartpole_cpu envs=CartPole-v1,Acrobot-v1 fitness=auc_norm generations=100
          metadisco train lpo_cartpole_cpu es.strategy=SNES es.population_size=32 es.sigma_init=0.01 es.lr=0.01
          metadisco train lpo_cartpole_cpu objectives.drift=talpo objectives.value_loss=learned
          metadisco train lpo_cartpole_cpu inner.total_timesteps=50000 inner.lr=0.001 devices=2 tensorboard=true
          metadisco train lpo_cartpole_cpu heldout.envs=Catch-bsuite,Pendulum-v1   # fixed now: `evaluate RUN` uses it
        every field, its default and its meaning: the documentation site's configuration reference
        (`make docs`, then site/config/index.html)""")


def add(subparsers) -> None:
    p = subparsers.add_parser("train", help="launch or resume a meta-training run", epilog=_epilog(),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", nargs="?", help="a named experiment from experiments/ or a TOML file "
                                                 "(none and no overrides: the demo)")
    p.add_argument("overrides", nargs="*", help="FIELD=VALUE overrides")
    p.add_argument("--run-dir", help="where to write the run (default runs/NAME-TIMESTAMP)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a stopped run, or extend a finished one with generations=N (the one override a "
                        "resume accepts; never fewer than it has done). The extended run equals one started with N "
                        "generations bit for bit, except that the old last generation keeps its comparison on fresh "
                        "seeds where eval_every does not divide it")
    p.add_argument("--overwrite", action="store_true", help="reuse a non-empty run directory")
    p.add_argument("--stop-after", type=int, help="stop (with a checkpoint) after this many generations")
    p.add_argument("--time-limit", metavar="DURATION",
                   help="stop with a checkpoint at the last generation boundary that ends inside DURATION (600, "
                        "9m, 1h30m, 01:30:00), predicted from this process's measured generation and comparison "
                        "times; exit status 75 then, so a job script can requeue with --resume")
    p.add_argument("--allow-layout-change", action="store_true",
                   help="resume on a device layout that changes the run's last bits (another platform, one device "
                        "against several, or another device count with member_batch=0), which --resume refuses otherwise")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--host-devices", type=int, help="CPU devices to split the population over (default: the cores, at least 2; "
                   "from 2 on, the count does not change the results)")
    p.add_argument("--coordinator", help="HOST:PORT of process 0 in a multi-host job")
    p.add_argument("--num-processes", type=int, help="processes in the multi-host job (with --coordinator)")
    p.add_argument("--process-id", type=int, help="this process's index in the job, 0 to N-1 (with --coordinator)")
    p.set_defaults(func=run)

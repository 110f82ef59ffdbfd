"""The `metadisco` command: train, evaluate, plot, distil, export, envs.

Device layout is decided here, before jax is imported: on a CPU-only machine the population is
split over one host device per core (XLA reads --xla_force_host_platform_device_count only at
start-up). `--coordinator/--num-processes/--process-id` (or METADISCO_COORDINATOR, ...) make this
process one host of a `jax.distributed` job.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap


def _setup_devices(args) -> None:
    """Must run before `import jax`."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        count = getattr(args, "host_devices", None) or os.cpu_count() or 1
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    coordinator = getattr(args, "coordinator", None) or os.environ.get("METADISCO_COORDINATOR")
    if coordinator:
        import jax

        num = int(getattr(args, "num_processes", None) or os.environ["METADISCO_NUM_PROCESSES"])
        pid = int(getattr(args, "process_id", None) if getattr(args, "process_id", None) is not None
                  else os.environ["METADISCO_PROCESS_ID"])
        if jax.config.jax_platforms in (None, "", "cpu"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num, process_id=pid)


def _fail(message: str, code: int = 2):
    print(f"metadisco: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def cmd_train(args) -> None:
    from metadisco import config as config_lib
    from metadisco.rundir import RunDirError
    from metadisco.train import default_run_dir, run

    try:
        if args.resume:
            cfg = config_lib.resolve(args.experiment, args.overrides) if (args.overrides or args.experiment) else None
            run(cfg, args.resume, resume=True, progress=not args.no_progress, stop_after=args.stop_after)
        else:
            cfg = config_lib.resolve(args.experiment, args.overrides)
            run_dir = args.run_dir or default_run_dir(cfg)
            run(cfg, run_dir, overwrite=args.overwrite, progress=not args.no_progress, stop_after=args.stop_after)
    except (ValueError, RunDirError) as e:
        _fail(str(e))


def cmd_envs(args) -> None:
    from inner_loops import available_envs, preset_name

    for name in available_envs():
        print(f"{name:32s} preset={preset_name(name)}")


def _train_help() -> str:
    from metadisco.config import list_experiments

    return textwrap.dedent(f"""\
        experiments: {', '.join(list_experiments()) or '(none)'}
        overrides (FIELD=VALUE, sections with dots), for example:
          envs=CartPole-v1,Acrobot-v1 fitness=auc_norm generations=100 seeds_per_member=2
          es.strategy=SNES es.population_size=32 es.sigma_init=0.01 es.lr=0.01
          objectives.drift=talpo objectives.evolve=drift,value_loss objectives.value_loss=learned
          inner.total_timesteps=50000 inner.lr=0.001 devices=2 tensorboard=true mlflow=true
          heldout.envs=Catch-bsuite,Pendulum-v1 heldout.timesteps=50000   (fixed now, used by `evaluate RUN`)
        every field: see metadisco/config.py (RunConfig, ESConfig, InnerConfig, ObjectivesConfig, HeldoutConfig)""")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metadisco", description="Discover RL objectives by evolution (JAX).")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="launch or resume a meta-training run", epilog=_train_help(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("experiment", nargs="?", help="a named experiment from experiments/ or a TOML file")
    t.add_argument("overrides", nargs="*", help="FIELD=VALUE overrides")
    t.add_argument("--run-dir", help="where to write the run (default runs/NAME-TIMESTAMP)")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run")
    t.add_argument("--overwrite", action="store_true", help="reuse a non-empty run directory")
    t.add_argument("--stop-after", type=int, help="stop (with a checkpoint) after this many generations")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--host-devices", type=int, help="CPU devices to split the population over (default: cores)")
    t.add_argument("--coordinator", help="HOST:PORT of process 0 in a multi-host job")
    t.add_argument("--num-processes", type=int)
    t.add_argument("--process-id", type=int)
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("envs", help="list the environments metadisco can train on")
    e.set_defaults(func=cmd_envs)

    for extra in _extra_commands():
        extra(sub)
    return parser


def _extra_commands():
    from metadisco import commands

    return commands.REGISTRY


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "train" and args.experiment and "=" in args.experiment:
        args.overrides = [args.experiment] + list(args.overrides)
        args.experiment = None
    _setup_devices(args)
    args.func(args)


def entry() -> None:
    """The `metadisco` console command: `main`, then leave without interpreter teardown.

    Every command has written and closed its outputs (atomic files, fsynced metrics, closed
    mirrors) when `main` returns. XLA's CPU runtime can segfault while Python finalises its
    objects after a long run (seen once here: exit code 139 after a MinAtar meta-training run had
    printed its summary), which would turn a finished run into a failed command for any script
    that checks the exit code. Tests call `main` in-process and are unaffected.
    """
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()

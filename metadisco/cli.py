"""The `metadisco` command: train, evaluate, plot, distil, export, experiments, envs, objectives, check, zoo.

Device layout is decided here, before jax is imported: on a CPU-only machine the population is
split over one host device per core (XLA reads --xla_force_host_platform_device_count only at
start-up). `--coordinator/--num-processes/--process-id` (or METADISCO_COORDINATOR, ...) make this
process one host of a `jax.distributed` job. Compiled programs are cached on disk between runs
(metadisco.compile_cache; METADISCO_CACHE_DIR=off turns it off).
"""

from __future__ import annotations

import argparse
import os
import sys

from metadisco import compile_cache
from metadisco.core.errors import ConfigError, MetadiscoError, RunInterrupted


def _setup_jax(args) -> None:
    """Device layout, compilation cache and multi-host set-up. Must run before `import jax`."""
    compile_cache.configure()
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        # at least two: jax compiles a population on one device without shard_map's manual region, and
        # XLA then simplifies the inner loop otherwise (other last bits); from two devices on, every
        # count gives the same bits (docs/guide.md, "What is bit for bit")
        count = getattr(args, "host_devices", None) or max(2, os.cpu_count() or 1)
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    coordinator = getattr(args, "coordinator", None) or os.environ.get("METADISCO_COORDINATOR")
    if coordinator:
        import jax

        try:
            num = int(getattr(args, "num_processes", None) or os.environ["METADISCO_NUM_PROCESSES"])
            pid = int(getattr(args, "process_id", None) if getattr(args, "process_id", None) is not None
                      else os.environ["METADISCO_PROCESS_ID"])
        except (KeyError, ValueError):
            raise ConfigError(
                f"--coordinator {coordinator} makes this process one host of a multi-host job: give "
                "--num-processes N and --process-id I as well (or METADISCO_NUM_PROCESSES, METADISCO_PROCESS_ID)"
            ) from None
        if jax.config.jax_platforms in (None, "", "cpu"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num, process_id=pid)


def _import_from_cwd() -> None:
    """Make the working directory importable, as `python -m` does, so that plug-ins named
    `module:attr` (objectives.drift=my_drifts:ScaledSquare) are found in the user's own files."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def build_parser() -> argparse.ArgumentParser:
    from metadisco.commands import VERBS

    parser = argparse.ArgumentParser(prog="metadisco", description="Discover RL objectives by evolution (JAX).")
    sub = parser.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.add(sub)
    return parser


def main(argv=None) -> None:
    """Parse, choose the device layout, run the verb. A `MetadiscoError` (anything the user can
    fix) becomes one line on stderr and its exit code, here and nowhere else; other exceptions are
    bugs and keep their traceback."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    _import_from_cwd()
    try:
        _setup_jax(args)
        args.func(args)
    except RunInterrupted as e:  # a checkpoint is written; the message says how to resume
        print(str(e), file=sys.stderr)
        raise SystemExit(e.exit_code) from None
    except MetadiscoError as e:
        print(f"metadisco: error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None


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
    except BrokenPipeError:  # `metadisco envs | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()

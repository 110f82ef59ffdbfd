"""`metadisco plot RUN_DIR`: figures and a self-contained HTML report of a run (analysis.plots).

Importing this module must not import jax (the CLI builds its parser before it sets XLA_FLAGS):
everything heavy is imported inside `cmd_plot`.
"""

from __future__ import annotations

import argparse
import sys

from metadisco import commands


def cmd_plot(args) -> None:
    from metadisco.cli import _fail
    from metadisco.rundir import RunDir, RunDirError

    run = RunDir(args.run_dir)
    try:
        run.read_config()  # RunDirError: missing directory or config.json, with what to do
    except RunDirError as e:
        _fail(str(e))
    formats = [f for f in args.formats.split(",") if f.strip()]

    from analysis.plots import plot_run

    notes: list[str] = []
    try:
        written = plot_run(run.path, out_dir=args.out, formats=formats, which=args.which, notes=notes)
    except ValueError as e:  # PlotError, ObjectiveFileError, RunDirError are ValueErrors
        _fail(str(e))
    for note in notes:
        print(f"metadisco plot: note: {note}", file=sys.stderr)
    for name, paths in written.items():
        if name != "report":
            for path in paths:
                print(path)
    for path in written.get("report", []):
        print(path)


def add(subparsers) -> None:
    p = subparsers.add_parser(
        "plot", help="draw a run's figures and write RUN_DIR/report.html",
        description="Draw every figure that applies to a run (training curves; drift surfaces and slices "
                    "beside PPO-clip and DPO; TA-LPO over training progress; learned value loss; learned "
                    "potential) and write a self-contained HTML report.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `metadisco train`")
    p.add_argument("--which", choices=("mean", "best"), default="mean",
                   help="objectives to plot: the ES mean or the best member seen")
    p.add_argument("--out", metavar="DIR", help="figure folder (default RUN_DIR/figures; the report goes "
                                                 "there too when given, else to RUN_DIR/report.html)")
    p.add_argument("--formats", default="png,pdf", help="comma-separated figure formats (png, pdf, svg)")
    p.set_defaults(func=cmd_plot)


commands.REGISTRY.append(add)

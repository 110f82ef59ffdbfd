"""`metadisco plot RUN_DIR`: figures and a self-contained HTML report of a run (metadisco.analysis.plots)."""

from __future__ import annotations

import argparse
import sys


def run(args) -> None:
    from metadisco.analysis.runs import Run

    Run(args.run_dir).config()  # RunDirError before anything heavy: missing directory or config.json
    formats = [f for f in args.formats.split(",") if f.strip()]

    from metadisco import api
    from metadisco.analysis.plots import FigureError

    which, what = api.chosen_objective(args.run_dir, args.which)
    drawn = f"drawn: {what} (objectives/{which}.json)"  # said once it loaded: a load error is the one line
    try:
        written = api.plot(args.run_dir, out_dir=args.out, formats=formats, which=which)
    except FigureError as e:  # the other figures were written: say where, then fail (EXIT_FAILED)
        _print([drawn], e.written)
        raise
    notes = written.pop("notes")
    _print([drawn, *notes], written)


def _print(notes: list[str], written: dict) -> None:
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
    p.add_argument("--which", choices=("selected", "mean", "best"), default=None,
                   help="the run's objectives: selected (the ES mean of the generation with the best validation "
                        "score, or the start where none scored higher), mean (the last ES mean) or best (the "
                        "best member seen); default: selected where the run kept one, else mean")
    p.add_argument("--out", metavar="DIR", help="figure folder (default RUN_DIR/figures; the report goes "
                                                 "there too when given, else to RUN_DIR/report.html)")
    p.add_argument("--formats", default="png,pdf", help="comma-separated figure formats (png, pdf, svg)")
    p.set_defaults(func=run)

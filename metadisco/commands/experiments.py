"""`metadisco experiments`: the named experiments that ship with metadisco, each with what it is for."""

from __future__ import annotations


def run(args) -> None:
    from metadisco.config import DEMO_EXPERIMENT, experiment_purpose, list_experiments

    names = list_experiments()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name:{width}s}  {experiment_purpose(name)}")
    print(f"run one with `metadisco train NAME` (no NAME: {DEMO_EXPERIMENT}); FIELD=VALUE overrides any field; "
          "its file, with why it is set as it is: experiments/NAME.toml")


def add(subparsers) -> None:
    p = subparsers.add_parser("experiments", help="list the named experiments `metadisco train NAME` runs, with "
                                                  "what each is for")
    p.set_defaults(func=run)

"""`metadisco objectives`: every objective a config can name, per plug point, with where it comes from."""

from __future__ import annotations


def run(args) -> None:
    from meta_objectives.base import listing

    for plug, name, source in listing():
        print(f"{plug:10s} {name:24s} {source.kind} ({source.origin}: {source.target})")
    print("and any class of your own as module:attr, e.g. objectives.drift=my_drifts:ScaledSquare "
          "(`metadisco check module:attr` checks its constraints)")


def add(subparsers) -> None:
    p = subparsers.add_parser("objectives", help="list the objectives (built-in and installed plug-ins)")
    p.set_defaults(func=run)

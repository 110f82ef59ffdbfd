"""`metadisco envs`: every environment metadisco can train on, with its PPO preset family."""

from __future__ import annotations


def run(args) -> None:
    from inner_loops.catalog import available_envs, preset_name

    for name in available_envs():
        print(f"{name:32s} preset={preset_name(name)}")


def add(subparsers) -> None:
    p = subparsers.add_parser("envs", help="list the environments metadisco can train on")
    p.set_defaults(func=run)

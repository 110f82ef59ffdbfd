"""`metadisco envs`: every environment metadisco can train on, with its PPO preset family and origin."""

from __future__ import annotations


def run(args) -> None:
    from metadisco.core.catalog import ENVS_GROUP, available_envs, preset_name
    from metadisco.core.plugins import entry_points, source

    for name in available_envs():
        print(f"{name:32s} preset={preset_name(name):8s} built-in ({'brax' if name.startswith('brax/') else 'gymnax'})")
    for name in sorted(entry_points(ENVS_GROUP)):
        src = source(ENVS_GROUP, name)
        print(f"{name:32s} preset={preset_name(name):8s} {src.kind} ({src.origin}: {src.target})")
    print("and any environment of your own as module:attr, e.g. envs=my_envs:Corridor (a gymnax-style class)")


def add(subparsers) -> None:
    p = subparsers.add_parser("envs", help="list the environments metadisco can train on")
    p.set_defaults(func=run)

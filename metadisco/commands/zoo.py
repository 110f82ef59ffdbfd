"""`metadisco zoo [NAME]`: the discovered objectives shipped with metadisco, grouped by their held-out
result (the zoo's rule, zoo/__init__.py), and one entry's provenance."""

from __future__ import annotations

PLUG_EXPRESSION = {"drift": "D(r, A, p)", "value_loss": "L(e, t)"}


def run(args) -> None:
    from metadisco.meta_objectives import discovered

    if args.name is None:
        entries = [discovered.entry(name) for name in discovered.names()]
        for kind, (heading, meaning) in discovered.KINDS.items():
            print(f"{heading} ({meaning}):")
            group = [entry for entry in entries if entry.kind == kind]
            for entry in group:
                print(f"  {entry.name:28s} {'+'.join(entry.plugs):18s} {entry.summary}")
            if not group:
                print("  none")
        print("evaluate one with `metadisco evaluate zoo:NAME`; `metadisco zoo NAME` shows where it comes from")
        return
    name = discovered.split_target(args.name) or args.name
    entry = discovered.entry(name)  # ZooError with close matches for an unknown name
    prov = entry.provenance
    print(f"{name}: {entry.summary}")
    for plug in entry.plugs:
        expression = entry.spec[plug].get("config", {}).get("expression")
        shown = expression if expression is not None else f"{entry.spec[plug]['name']} (parameters in the file)"
        print(f"  {PLUG_EXPRESSION.get(plug, plug)} = {shown}")
    print(f"  meta-trained on: {', '.join(entry.envs) or '(not recorded)'}")
    for key in ("experiment", "config", "budget", "how"):
        print(f"  {key}: {prov[key]}")
    held = prov["heldout"]
    print(f"  held out: {', '.join(held['envs'])} ({held['budget']}); table: {held['table']}")
    for row, value in held["rows"].items():
        print(f"    {row}: {value}")
    result = held["result"]
    interval = "no interval" if result["ci"] is None else "[{:.2f}, {:.2f}]".format(*result["ci"])
    declared = "declared" if result["declared"] else "not declared"
    print(f"  held-out result: P(> {result['against']}) {result['p_improvement']:.2f} {interval} "
          f"(row {result['row']!r}; held-out set {declared} before the run)")
    print(f"  kind: {entry.kind} ({discovered.KINDS[entry.kind][1]})")
    print(f"  yardstick: {prov['yardstick']}")
    print(f"  verdict: {prov['verdict']}")
    print(f"evaluate it: metadisco evaluate zoo:{name} [--envs ...]")


def add(subparsers) -> None:
    p = subparsers.add_parser("zoo", help="list the discovered objectives shipped with metadisco (evaluate zoo:NAME)")
    p.add_argument("name", nargs="?", help="an entry (NAME or zoo:NAME): show its closed form and provenance")
    p.set_defaults(func=run)

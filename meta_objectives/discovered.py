"""The zoo: discovered objectives shipped with metadisco, each an objectives file with its provenance.

The entries live in the repository's top-level zoo/ folder, installed as package data of
meta_objectives (pyproject.toml maps `metadisco.meta_objectives.zoo` onto zoo/), so that every layer can
read them: `metadisco zoo` lists them and `metadisco evaluate zoo:NAME` (metadisco.analysis.targets)
evaluates one, and nothing below metadisco imports metadisco. An entry is a file written by
`metadisco.meta_objectives.io.save_objectives` whose "extra" holds

    envs         the environments it was meta-trained on (evaluate flags them, never held out)
    provenance   summary (one line), plugs (what was discovered), experiment, config, commit,
                 budget, how (where the closed form or parameters come from), heldout (envs,
                 budget, table, rows, result), yardstick (how the held-out record was measured),
                 verdict

An entry's kind (beats, lead, negative) follows from its held-out result by the zoo's rule, stated in
zoo/__init__.py: `kind` derives it, `problems` checks an entry against the rule. jax-free except `load`.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from metadisco.core.errors import MetadiscoError

PACKAGE = "metadisco.meta_objectives.zoo"
PREFIX = "zoo:"  # how a command line names an entry: zoo:NAME
# the kinds, best first: each one's heading in `metadisco zoo` and what it means (the zoo's rule, zoo/__init__.py)
KINDS = {
    "beats": ("Beat tuned PPO held out", "95% interval of P(> tuned PPO) above 0.5, on a held-out set declared before the run"),
    "lead": ("Leads", "held out not shown better than PPO: the interval contains 0.5, or PPO was untuned, or the held-out "
                      "set was not declared before the run"),
    "negative": ("Negative results", "held out worse than PPO: the interval below 0.5 (with no interval, P below 0.5)"),
}
AGAINST = ("tuned PPO", "PPO")  # every method at its own tuned learning rate; one shared learning rate
RESULT = ("against", "p_improvement", "ci", "row", "declared")


class ZooError(MetadiscoError):
    """An unknown zoo entry (the message lists close matches and every name), an unreadable one, or one that
    breaks the zoo's rule."""


@dataclass(frozen=True)
class Entry:
    """One zoo entry, read without jax: its name, the plug points it discovered and its provenance."""

    name: str
    plugs: tuple[str, ...]
    summary: str
    envs: tuple[str, ...]
    provenance: dict
    spec: dict
    kind: str  # beats, lead or negative: from the held-out result, by the zoo's rule


def kind(result: dict) -> str:
    """The kind a held-out result (provenance.heldout.result) gives its entry, by the zoo's rule."""
    p, ci = result["p_improvement"], result["ci"]
    if ci is None:
        return "negative" if p < 0.5 else "lead"
    low, high = ci
    if high < 0.5:
        return "negative"
    if low > 0.5 and result["against"] == "tuned PPO" and result["declared"]:
        return "beats"
    return "lead"


def _balanced(text: str) -> bool:
    return text.count("(") == text.count(")") and text.count("[") == text.count("]")


def problems(provenance: dict, envs) -> list[str]:
    """Where an entry (its provenance and meta-training envs) breaks the zoo's rule; empty when it may enter."""
    from metadisco.meta_objectives.zoo import PREREGISTERED

    found = [f"the {key} is not one line, or is cut (unbalanced brackets)" for key in ("summary", "verdict")
             if "\n" in provenance.get(key, "") or not _balanced(provenance.get(key, ""))]
    heldout = provenance.get("heldout", {})
    if not heldout.get("envs") or set(heldout["envs"]) & set(envs):
        found.append(f"held out on {heldout.get('envs')}, which must be environments it was not meta-trained on ({list(envs)})")
    result = heldout.get("result")
    if not isinstance(result, dict) or set(result) != set(RESULT):
        return [*found, f"no held-out result: heldout.result must have exactly {', '.join(RESULT)}"]
    p, ci, row = result["p_improvement"], result["ci"], result["row"]
    if result["against"] not in AGAINST:
        found.append(f"heldout.result.against is {result['against']!r}, not one of {', '.join(AGAINST)}")
    if not isinstance(p, float) or not 0 <= p <= 1:
        return [*found, f"heldout.result.p_improvement is {p!r}, not a probability"]
    if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and 0 <= ci[0] <= p <= ci[1] <= 1):
        return [*found, f"heldout.result.ci is {ci!r}, not null or an interval [low, high] around {p}"]
    quoted = f"P(> {result['against']}) {p:.2f}" + ("" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]")
    if quoted not in heldout.get("rows", {}).get(row, ""):
        found.append(f"heldout.result is not what its row says: row {row!r} does not read {quoted!r}")
    required, got = PREREGISTERED.get(provenance.get("experiment")), kind(result)
    if required is not None and list(KINDS).index(got) > list(KINDS).index(required):
        found.append(f"experiment {provenance.get('experiment')} pre-registered that only a {required!r} entry "
                     f"enters the zoo; this one is a {got!r}")
    return found


def folder() -> Traversable:
    """The installed zoo folder (package metadisco.meta_objectives.zoo)."""
    return importlib.resources.files(PACKAGE)


def names() -> list[str]:
    """Every entry's name, sorted."""
    root = folder()
    if not root.is_dir():
        return []
    return sorted(f.name[:-5] for f in root.iterdir() if f.is_file() and f.name.endswith(".json"))


def _file(name: str) -> Traversable:
    known = names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
        raise ZooError(f"no zoo entry {name!r}.{hint} The zoo holds: {', '.join(known) or '(nothing)'} "
                       "(`metadisco zoo` lists them).")
    return folder() / f"{name}.json"


def entry(name: str) -> Entry:
    """The entry `name` (ZooError with close matches for an unknown one)."""
    try:
        doc = json.loads(_file(name).read_text(encoding="utf-8"))
        extra = doc.get("extra", {})
        provenance = extra["provenance"]
        envs = tuple(extra.get("envs", ()))
        broken = problems(provenance, envs)
        if not broken:
            return Entry(name, tuple(provenance["plugs"]), provenance["summary"], envs, provenance, doc["spec"],
                         kind(provenance["heldout"]["result"]))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise ZooError(f"zoo entry {name!r} is not a readable objectives file with provenance ({e!r})") from None
    raise ZooError(f"zoo entry {name!r} breaks the zoo's rule (zoo/__init__.py): {'; '.join(broken)}")


def load(name: str):
    """Entry `name` as (objectives, params, extra), through metadisco.meta_objectives.io.load_objectives."""
    from metadisco.meta_objectives.io import load_objectives

    with importlib.resources.as_file(_file(name)) as path:  # a real file even where the package is zipped
        return load_objectives(path)


def split_target(spec: str) -> str | None:
    """"zoo:NAME" -> NAME; anything else -> None."""
    return spec[len(PREFIX):] if spec.startswith(PREFIX) else None

"""The zoo: discovered objectives shipped with metadisco, each an objectives file with its provenance.

The entries live in the repository's top-level zoo/ folder, installed as package data of
meta_objectives (pyproject.toml maps `metadisco.meta_objectives.zoo` onto zoo/), so that every layer can
read them: `metadisco zoo` lists them and `metadisco evaluate zoo:NAME` (metadisco.analysis.targets)
evaluates one, and nothing below metadisco imports metadisco. An entry is a file written by
`metadisco.meta_objectives.io.save_objectives` whose "extra" holds

    envs         the environments it was meta-trained on (evaluate flags them, never held out)
    provenance   summary (one line), plugs (what was discovered), experiment, config, commit,
                 budget, how (where the closed form or parameters come from), heldout (envs,
                 budget, table, rows), yardstick (how the held-out record was measured), verdict

jax-free except `load`.
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


class ZooError(MetadiscoError):
    """An unknown zoo entry (the message lists close matches and every name) or an unreadable one."""


@dataclass(frozen=True)
class Entry:
    """One zoo entry, read without jax: its name, the plug points it discovered and its provenance."""

    name: str
    plugs: tuple[str, ...]
    summary: str
    envs: tuple[str, ...]
    provenance: dict
    spec: dict


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
        return Entry(name, tuple(provenance["plugs"]), provenance["summary"], tuple(extra.get("envs", ())),
                     provenance, doc["spec"])
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise ZooError(f"zoo entry {name!r} is not a readable objectives file with provenance ({e!r})") from None


def load(name: str):
    """Entry `name` as (objectives, params, extra), through metadisco.meta_objectives.io.load_objectives."""
    from metadisco.meta_objectives.io import load_objectives

    with importlib.resources.as_file(_file(name)) as path:  # a real file even where the package is zipped
        return load_objectives(path)


def split_target(spec: str) -> str | None:
    """"zoo:NAME" -> NAME; anything else -> None."""
    return spec[len(PREFIX):] if spec.startswith(PREFIX) else None

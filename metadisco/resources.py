"""The named experiments that ship with metadisco (experiments/*.toml), read through
importlib.resources: the same names from an editable install or a wheel. (The zoo of
discovered objectives is read by metadisco.meta_objectives.discovered.)

jax-free. Each data folder keeps its place at the top of the repository (experiments/) and is
installed as a subpackage of metadisco (pyproject.toml maps `metadisco.experiments` onto
experiments/, with its files as package data), so nothing named `experiments` is installed at the
top level, where it would shadow a user's own module of that name.

    names("experiments", ".toml")            -> ["drift_and_value_loss_cpu", ...]
    read_text("experiments", "lpo_cartpole_cpu.toml")
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable


def folder(name: str) -> Traversable:
    """The installed data folder `name` (package metadisco.<name>)."""
    return importlib.resources.files(f"metadisco.{name}")


def names(name: str, suffix: str) -> list[str]:
    """The stems of the files in data folder `name` that end with `suffix`, sorted."""
    root = folder(name)
    if not root.is_dir():
        return []
    return sorted(f.name[: -len(suffix)] for f in root.iterdir() if f.is_file() and f.name.endswith(suffix))


def read_text(name: str, filename: str) -> str:
    """The text of `filename` in data folder `name` (FileNotFoundError if there is none)."""
    entry = folder(name) / filename
    if not entry.is_file():
        raise FileNotFoundError(f"metadisco.{name}/{filename}")
    return entry.read_text(encoding="utf-8")

"""Save and load objectives with their parameters as plain JSON (nothing executes on load).

File layout: {"format": "metadisco.objectives", "version": 1, "spec": Objectives.spec(),
"params": {plug: nested dict of {"shape": [...], "dtype": "float32", "data": [...]}}}.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from metadisco.core.errors import MetadiscoError
from metadisco.core.fileio import atomic_write_text
from metadisco.meta_objectives.objectives import Objectives

FORMAT = "metadisco.objectives"
VERSION = 1


class ObjectiveFileError(MetadiscoError):
    """A file that is not a valid, matching objectives file."""


def params_to_json(params):
    """Nested dict of arrays -> nested dict of {"shape", "dtype", "data"} (exact for float32)."""
    if isinstance(params, dict):
        return {str(k): params_to_json(v) for k, v in params.items()}
    arr = np.asarray(params)
    return {"shape": list(arr.shape), "dtype": str(arr.dtype), "data": arr.ravel().tolist()}


def params_from_json(tree):
    if isinstance(tree, dict) and set(tree) == {"shape", "dtype", "data"}:
        if tree["dtype"] not in ("float32", "float64", "int32"):
            raise ObjectiveFileError(f"unsupported dtype {tree['dtype']!r}")
        arr = np.asarray(tree["data"], dtype=tree["dtype"]).reshape(tree["shape"])
        return jnp.asarray(arr)
    if isinstance(tree, dict):
        return {k: params_from_json(v) for k, v in tree.items()}
    raise ObjectiveFileError(f"malformed parameter entry: {str(tree)[:80]}")


def save_objectives(path, objectives: Objectives, params: dict, extra: dict | None = None) -> None:
    """Write `objectives` (structure) and `params` (full or partial dict keyed by plug)."""
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "spec": objectives.spec(),
        "params": params_to_json(jax.device_get(params)),
    }
    if extra:
        doc["extra"] = extra
    atomic_write_text(path, json.dumps(doc, indent=1))


def load_objectives(path) -> tuple[Objectives, dict, dict]:
    """Read a file written by `save_objectives` -> (objectives, params, extra).

    Raises ObjectiveFileError with what is wrong and what to do for a missing, corrupt or
    mismatched file (parameters whose structure does not fit the stored spec).
    """
    path = Path(path)
    if not path.is_file():
        raise ObjectiveFileError(f"no objectives file at {path}")
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ObjectiveFileError(f"{path} is not valid JSON ({e}); the file is corrupt or not an objectives file") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ObjectiveFileError(f"{path} is not a metadisco objectives file (format != {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise ObjectiveFileError(f"{path} has version {doc.get('version')}, this metadisco reads version {VERSION}")
    try:
        objectives = Objectives.from_spec(doc["spec"])
        params = params_from_json(doc["params"])
    except (KeyError, TypeError, ValueError) as e:
        raise ObjectiveFileError(f"{path}: invalid spec or parameters ({e})") from e
    template = objectives.default_params(plugs=tuple(params))
    want = jax.tree.map(lambda x: jnp.shape(x), template)
    got = jax.tree.map(lambda x: jnp.shape(x), params)
    if jax.tree.structure(template) != jax.tree.structure(params) or want != got:
        raise ObjectiveFileError(
            f"{path}: parameters do not match the stored objectives spec (expected shapes {want}, found {got})"
        )
    return objectives, params, doc.get("extra", {})

"""The run directory: the source of truth for a meta-training run.

    RUN_DIR/config.json          resolved RunConfig (re-creates and resumes the run)
    RUN_DIR/metrics.jsonl        one JSON line per generation
    RUN_DIR/baseline.json        PPO's returns used to normalise fitness
    RUN_DIR/checkpoints/*.msgpack  strategy state, key, generation, best and mean (flax msgpack:
                                   plain arrays, nothing executes on load), written atomically
    RUN_DIR/objectives/{best,mean}.json   meta_objectives files, loadable anywhere
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
from flax import serialization

from meta_objectives.fileio import atomic_write_text

CKPT_RE = re.compile(r"^gen_(\d{6})\.msgpack$")
KEEP_CHECKPOINTS = 3


class RunDirError(ValueError):
    """A run directory that is missing, incomplete or corrupt (message says what to do)."""


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    return x


class RunDir:
    def __init__(self, path):
        self.path = Path(path)

    # layout
    @property
    def config_path(self):
        return self.path / "config.json"

    @property
    def metrics_path(self):
        return self.path / "metrics.jsonl"

    @property
    def checkpoint_dir(self):
        return self.path / "checkpoints"

    @property
    def objectives_dir(self):
        return self.path / "objectives"

    @property
    def figures_dir(self):
        return self.path / "figures"

    def create(self, config: dict, overwrite: bool = False) -> RunDir:
        if self.path.exists() and any(self.path.iterdir()):
            if not overwrite:
                raise RunDirError(
                    f"run directory {self.path} already exists and is not empty. Resume it with "
                    f"`metadisco train --resume {self.path}`, choose another --run-dir, or pass --overwrite."
                )
            for child in ("metrics.jsonl", "baseline.json", "config.json"):
                (self.path / child).unlink(missing_ok=True)
            for ckpt in self.checkpoints():
                ckpt.unlink()
        self.path.mkdir(parents=True, exist_ok=True)
        self.write_json("config.json", config)
        return self

    def write_json(self, name: str, obj) -> None:
        atomic_write_text(self.path / name, json.dumps(_jsonable(obj), indent=2))

    def read_json(self, name: str):
        p = self.path / name
        if not p.is_file():
            raise RunDirError(f"{p} is missing: {self.path} is not a complete metadisco run directory")
        try:
            return json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise RunDirError(f"{p} is corrupt ({e})") from e

    def read_config(self) -> dict:
        if not self.path.is_dir():
            raise RunDirError(f"no run directory at {self.path}; `metadisco train` creates one")
        return self.read_json("config.json")

    # metrics
    def append_metrics(self, row: dict) -> None:
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(_jsonable(row)) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read_metrics(self) -> list[dict]:
        if not self.metrics_path.is_file():
            return []
        rows = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a crash: everything after it is dropped on resume
        return rows

    def truncate_metrics(self, generation: int) -> None:
        """Keep only rows of generations < `generation` (those covered by the checkpoint)."""
        rows = [r for r in self.read_metrics() if r["generation"] < generation]
        atomic_write_text(self.metrics_path, "".join(json.dumps(r) + "\n" for r in rows))

    # checkpoints
    def checkpoints(self) -> list[Path]:
        if not self.checkpoint_dir.is_dir():
            return []
        return sorted(p for p in self.checkpoint_dir.iterdir() if CKPT_RE.match(p.name))

    def save_checkpoint(self, generation: int, tree: dict) -> Path:
        """Atomically write `tree` (a pytree of arrays and numbers) for `generation` completed
        generations, and keep the newest KEEP_CHECKPOINTS files."""
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path = self.checkpoint_dir / f"gen_{generation:06d}.msgpack"
        data = serialization.msgpack_serialize(serialization.to_state_dict(tree))
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for old in self.checkpoints()[:-KEEP_CHECKPOINTS]:
            old.unlink()
        return path

    def load_checkpoint(self, template: dict) -> tuple[dict, Path, list[str]]:
        """Newest readable checkpoint restored into `template`'s structure.

        Returns (tree, path, warnings); a corrupt newest file is reported and the previous one used.
        """
        warnings = []
        for path in reversed(self.checkpoints()):
            try:
                raw = serialization.msgpack_restore(path.read_bytes())
                return serialization.from_state_dict(template, raw), path, warnings
            except Exception as e:  # noqa: BLE001  (any decode/structure error means unusable)
                warnings.append(f"checkpoint {path.name} is unreadable ({type(e).__name__}: {e}); trying an older one")
        raise RunDirError(
            f"no usable checkpoint in {self.checkpoint_dir}"
            + (f" ({'; '.join(warnings)})" if warnings else "")
            + ": the run stopped before its first checkpoint; start it again with `metadisco train`."
        )

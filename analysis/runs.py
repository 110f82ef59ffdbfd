"""The reader of a finished (or running) run directory (jax-free: `import metadisco.analysis.runs`
starts no jax).

A Run is the run's own files (metadisco.measure.run_files.RunFiles: config.json, metrics.jsonl,
baseline.json, checkpoints, objectives, the errors of reading them) with what only analysis needs:

    RUN_DIR/figures/ evaluation/ distil/ export/   what the analysis commands write

    run = Run(path)
    run.config(), run.metrics(), run.baseline(), run.checkpoints()   as RunFiles reads them
    run.heldout()              HeldoutConfig the run declared before it ran, or None
    run.objectives(which)      (objectives, params, extra): imports jax, on demand
    run_containing(file)       the Run a file inside RUN_DIR/objectives or RUN_DIR/export belongs to

The writing side is metadisco.rundir.RunDir, built on the same RunFiles.
"""

from __future__ import annotations

import os
from pathlib import Path

from metadisco.core.run_config import HeldoutConfig
from metadisco.measure.run_files import RunDirError, RunFiles


class Run(RunFiles):
    """A run directory, read-only. Paths are properties; reading methods raise RunDirError."""

    # what the analysis commands write into it
    @property
    def figures_dir(self) -> Path:
        return self.path / "figures"

    @property
    def error_span_path(self) -> Path:
        """The value-loss figure's error span as plot measured it (where distil has not): figures/."""
        return self.figures_dir / "error_span.json"

    @property
    def evaluation_dir(self) -> Path:
        return self.path / "evaluation"

    @property
    def distil_dir(self) -> Path:
        return self.path / "distil"

    @property
    def export_dir(self) -> Path:
        return self.path / "export"

    def heldout(self) -> HeldoutConfig | None:
        """The held-out set the run declared before it ran (config `heldout`), or None when its
        `heldout.envs` is empty."""
        heldout = self.config().heldout
        return heldout if heldout.envs else None

    def objectives(self, which: str = "mean"):
        """(objectives, params, extra) from RUN_DIR/objectives/{which}.json. Imports jax.

        RunDirError when the run has not written it yet (it does at its first checkpoint) or
        when the file is not a usable objectives file.
        """
        from metadisco.meta_objectives.io import ObjectiveFileError, load_objectives

        path = self.objectives_path(which)
        if not path.is_file():
            every = self._checkpoint_every()
            raise RunDirError(
                f"{path} is missing: the run has not written its objectives yet (it writes them with each "
                f"checkpoint{f', every {every} generations' if every else ''}). Wait for it, resume it with "
                f"`metadisco train --resume {self.path}`, or pass another run directory.")
        try:
            return load_objectives(path)
        except ObjectiveFileError as e:
            raise RunDirError(str(e)) from None

    def _checkpoint_every(self) -> int | None:
        try:
            return self.config().checkpoint_every
        except RunDirError:
            return None


def run_containing(file: str | os.PathLike) -> Run | None:
    """The run a file written inside it belongs to (RUN_DIR/objectives/*.json, RUN_DIR/export/*),
    or None for a file anywhere else."""
    file = Path(file)
    if file.parent.name not in ("objectives", "export"):
        return None
    run = Run(file.parent.parent)
    return run if run.is_run() else None

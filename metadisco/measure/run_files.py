"""A run directory's own files: their names, the readers of each, and the errors of reading and
writing them (jax-free: `import metadisco.measure.run_files` starts no jax).

    RUN_DIR/config.json             the resolved RunConfig (metadisco.core.run_config), as RunConfig.to_dict
    RUN_DIR/config.digest           RunConfig.digest of the config the run started with (`--resume` compares)
    RUN_DIR/metrics.jsonl           one JSON line per generation (metadisco.core.records.GenerationRecord)
    RUN_DIR/baseline.json           PPO's returns used to normalise fitness (normalised fitness only)
    RUN_DIR/layout.json             every device layout it ran under (devices, platform, processes, members per
                                    batch): a resume says what differs, and refuses where the bits would change
    RUN_DIR/checkpoints/gen_NNNNNN.msgpack   the newest few checkpoints
    RUN_DIR/objectives/{best,mean}.json      meta_objectives files, loadable anywhere
    RUN_DIR/objectives/selected.json         a validated run's choice (metadisco.measure.selection)
    RUN_DIR/objectives/candidates/gen_NNNNNN.json   the ES mean at each validation check (its finalists)
    RUN_DIR/.lock                   held by the one process that writes the run (metadisco train)

`RunFiles` is the schema both sides build on: the writer, metadisco.rundir.RunDir, which a run
writes through while it runs, and the reader of a finished run, metadisco.analysis.runs.Run (with
what only analysis needs: its outputs RUN_DIR/figures/ evaluation/ distil/ export/, the objectives
loaded, the held-out set).

    files = RunFiles(path)
    files.config()             RunConfig, the one typed reading of config.json; RunDirError when
                               missing, corrupt, not a run config, or holding a value that the
                               schema's checks refuse (`metadisco train`'s message, after the file)
    files.metrics()            [GenerationRecord, ...] (metadisco.core.records), one per complete line
                               (a run may be writing the next one)
    files.baseline()           dict, or None when the run has none
    files.checkpoints()        [Path, ...] oldest first; temporary files ignored
    files.objectives_path(which)  RUN_DIR/objectives/{which}.json ("mean" or "best")
    with writing(path): ...    an OSError while writing `path` -> RunWriteError naming it and the cause

Everything a run writes is written atomically (a reader sees the old file or the new one) except
metrics.jsonl, which grows a line at a time; `metrics()` keeps complete lines only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from pathlib import Path

from metadisco.core.errors import ConfigError, MetadiscoError
from metadisco.core.invocation import command
from metadisco.core.records import GenerationRecord
from metadisco.core.run_config import RunConfig
from metadisco.measure.selection import selected_words

CHECKPOINT_RE = re.compile(r"^gen_(\d{6})\.msgpack$")


DISTILLED = {"drift", "value_loss", "shaping"}  # the plug points `metadisco distil` fits closed forms to
WHICH = ("mean", "best", "selected")  # objectives/<which>.json: the ES mean, the best member, the validated choice


class RunDirError(MetadiscoError):
    """A run directory that is missing, incomplete, corrupt or busy (the message says what to do)."""


class RunWriteError(RunDirError):
    """A file could not be written (no space, read-only, permission, a removed folder)."""


@contextlib.contextmanager
def writing(path: str | os.PathLike):
    """Turn an OSError while writing `path` (a run's file or an analysis output) into a
    RunWriteError that names the file and the cause."""
    try:
        yield
    except OSError as e:
        cause = f"[Errno {e.errno}] {e.strerror}" if e.errno else str(e)
        raise RunWriteError(f"could not write {path}: {cause}") from e


def parse_metrics(text: str) -> list[dict]:
    """The rows of a metrics.jsonl text, up to the first line that is not complete JSON.

    A line cut by a crash (or still being written by the run) ends the rows: resume drops it and
    everything after it; a reader simply does not see it yet.
    """
    rows = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # the line being written right now
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut by a crash
        if not isinstance(row, dict):
            break
        rows.append(row)
    return rows


class RunFiles:
    """A run directory's own files, read-only. Paths are properties; reading methods raise RunDirError."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    # layout
    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def baseline_path(self) -> Path:
        return self.path / "baseline.json"

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def objectives_dir(self) -> Path:
        return self.path / "objectives"

    @property
    def lock_path(self) -> Path:
        return self.path / ".lock"

    def objectives_path(self, which: str = "mean") -> Path:
        if which not in WHICH:
            raise RunDirError(f"which must be one of {', '.join(WHICH)}, got {which!r}")
        return self.objectives_dir / f"{which}.json"

    @property
    def layout_path(self) -> Path:
        return self.path / "layout.json"

    def layouts(self) -> list[dict]:
        """Every device layout the run ran under, oldest first (layout.json: devices, platform, processes,
        members per batch), each with the generation its leg began at (`from_generation`); [] for a run
        from before layout.json. A file of one layout (before legs were kept) is its start's."""
        if not self.layout_path.is_file():
            return []
        stored = self.read_json("layout.json")
        return stored["legs"] if "legs" in stored else [{"from_generation": 0, **stored}]

    def layout(self) -> dict | None:
        """The layout the run last ran under (`layouts`' last, without its generation), or None."""
        legs = self.layouts()
        return {k: v for k, v in legs[-1].items() if k != "from_generation"} if legs else None

    def candidate_path(self, generation: int) -> Path:
        """RUN_DIR/objectives/candidates/gen_NNNNNN.json: the ES mean after `generation` generations, kept at
        each validation check for the re-scoring of finalists at the end (metadisco.measure.selection)."""
        return self.objectives_dir / "candidates" / f"gen_{generation:06d}.json"

    def default_which(self) -> str:
        """The objectives a reader takes from this run when not told which: "selected" (the ES mean of the
        generation with the best validation score, or the start where none scored higher: RunConfig.validation)
        where the run has kept one, else "mean" (the last ES mean)."""
        return "selected" if self.objectives_path("selected").is_file() else "mean"

    def selection_final(self) -> bool | None:
        """Whether objectives/selected.json is the run's final selection, re-scored with the other finalists at
        the run's end (`final` in its extra; a file from before that flag: whether it lists its finalists),
        not the checks' provisional pick; None where the run kept none."""
        try:
            extra = json.loads(self.objectives_path("selected").read_text()).get("extra", {})
        except (OSError, ValueError, AttributeError):
            return None
        return bool(extra.get("final", "finalists" in extra))

    def provisional_warning(self) -> str | None:
        """What a reader of the selected objective says where it is provisional (the run stopped before its
        selection's end: resume it to finish), else None."""
        if self.selection_final() is not False:
            return None
        return (f"warning: {self.objectives_path('selected')} is provisional: the checks' pick on noisy scores, not yet "
                f"re-scored against the other finalists at the run's end. `{command()} train --resume "
                f"{shlex.quote(str(self.path))}` finishes the selection (its generations done, it re-scores only)")

    def selected_the_start(self) -> bool:
        """Whether the run's selection (objectives/selected.json) kept the start point."""
        try:
            return json.loads(self.objectives_path("selected").read_text()).get("extra", {}).get("candidate") == "start"
        except (OSError, ValueError, AttributeError):
            return False

    def which_text(self, which: str) -> str:
        """In words, what objectives/<which>.json of this run is (for the readers' output)."""
        if which == "selected":
            try:
                extra = json.loads(self.objectives_path("selected").read_text()).get("extra", {})
                v = extra.get("validation", {})
                final = "" if self.selection_final() else " (provisional: not yet re-scored at the run's end)"
                return (f"the selected objective{final}: "
                        f"{selected_words(extra.get('candidate') == 'start', extra.get('generation'))}"
                        f", the best validation score ({v.get('score', float('nan')):.4g} on {', '.join(v.get('envs', []))})")
            except (OSError, ValueError, AttributeError, TypeError):
                return "the selected objective (by validation score)"
        return {"mean": "the ES mean of the last generation", "best": "the best single member seen"}[which]

    def next_steps(self) -> str:
        """The line a finished run ends with: commands that work on this run as it is (a test runs each)."""
        cfg, where = self.config(), shlex.quote(str(self.path))
        steps = [f"{command()} plot {where}", self.evaluate_command()]
        if set(cfg.objectives.evolve) & DISTILLED:
            steps.append(f"{command()} distil {where}")
        return "next: " + "   |   ".join(steps)

    def evaluate_command(self, *targets) -> str:
        """`metadisco evaluate` of this run (and `targets`, e.g. its exported closed forms) as it works on
        this run: on the held-out set it declared; without one, a shaping on the run's own environments
        (its potential is sized to their observations, so the quick suite's other shapes cannot run it),
        anything else on the quick suite."""
        cfg = self.config()
        # a selection that kept the start (PPO where it starts at PPO) would be compared with itself: the last
        # ES mean is what the search found
        run = f"{self.path}:mean" if self.selected_the_start() else self.path
        words = [f"{command()} evaluate", *(shlex.quote(str(t)) for t in (run, *targets))]
        if not cfg.heldout.envs:
            words += ["--envs", shlex.quote(",".join(cfg.envs))] if "shaping" in cfg.objectives.evolve else ["--quick"]
        return " ".join(words)

    def is_run(self) -> bool:
        """A directory with a config.json: written by `metadisco train` (possibly still running)."""
        return self.config_path.is_file()

    # reading
    def read_json(self, name: str):
        """RUN_DIR/name parsed; RunDirError naming the file when it is missing or not JSON."""
        path = self.path / name
        if not path.is_file():
            raise RunDirError(f"{path} is missing: {self.path} is not a complete metadisco run directory")
        try:
            return json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RunDirError(f"{path} is corrupt ({e})") from None

    def config(self) -> RunConfig:
        """The resolved config the run was started with, read by `RunConfig.from_stored` (a field
        the file lacks takes RunConfig's default), as `metadisco train --resume` reads it.
        RunDirError, before any compute, for a value `check_run_config` refuses, as train does: the
        file's name, then the same ConfigError message (environment names and what needs jax are
        checked where a run is built, not here)."""
        if not self.path.is_dir():
            raise RunDirError(f"no run directory at {self.path}; `{command()} train --run-dir {self.path}` creates one")
        config = self.read_json("config.json")
        if not isinstance(config, dict):
            raise RunDirError(f"{self.config_path} is corrupt (not a JSON object)")
        try:
            return RunConfig.from_stored(config)
        except ConfigError as e:
            raise RunDirError(f"{self.config_path} is not a run config this metadisco reads: {e}") from None

    @property
    def digest_path(self) -> Path:
        return self.path / "config.digest"

    def started_digest(self) -> str | None:
        """RunConfig.digest of the config the run started with (None for a run written before the
        digest was kept)."""
        return self.digest_path.read_text().strip() if self.digest_path.is_file() else None

    def metrics(self) -> list[GenerationRecord]:
        """One record per completed generation, oldest first; [] before the first generation.
        RunDirError for a line that is JSON but not a metrics row (no integer generation)."""
        try:
            rows = parse_metrics(self.metrics_path.read_text())
        except FileNotFoundError:
            return []
        records = []
        for line, row in enumerate(rows, 1):
            try:
                records.append(GenerationRecord.from_row(row))
            except ValueError as e:
                raise RunDirError(f"{self.metrics_path} line {line} is not a metrics row: {e}") from None
        return records

    def baseline(self) -> dict | None:
        """{env: {field: PPO's value}} (the fields of metadisco.scoring.Baseline: init_eval, final_eval,
        auc, ...) for a run with normalised fitness, else None."""
        return self.read_json("baseline.json") if self.baseline_path.is_file() else None

    def checkpoints(self) -> list[Path]:
        """Checkpoint files, oldest first (temporary files of a write in progress are not listed)."""
        if not self.checkpoint_dir.is_dir():
            return []
        return sorted(p for p in self.checkpoint_dir.iterdir() if CHECKPOINT_RE.match(p.name))

    @staticmethod
    def checkpoint_generation(path: Path) -> int:
        """The number of completed generations a checkpoint file holds (from its name)."""
        return int(CHECKPOINT_RE.match(Path(path).name).group(1))

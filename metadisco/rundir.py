"""The writing side of a run directory, on its schema (the files and every read of them:
metadisco.measure.run_files.RunFiles, the base the finished-run reader metadisco.analysis.runs.Run shares).

    run = RunDir(path)
    with run.lock():                 one writer per run directory (an OS lock; see `lock`)
    run.check_unlocked()             RunLockedError at once if another process holds it
        run.create(config)           config.json (refuses a non-empty directory unless overwrite)
        run.write_json(name, obj)    RUN_DIR/name, atomically
        run.append_metrics(record)   one line of metrics.jsonl, record.to_row() (never a partial line left behind)
        run.truncate_metrics(gen)    keep the rows a checkpoint covers (on resume)
        run.save_checkpoint(gen, tree) / run.load_checkpoint(template)

Every file is written whole or not at all (temporary file + fsync + rename, through
metadisco.core.fileio) with the umask's mode; a failed write raises RunWriteError naming the file
and the cause, and leaves the previous files as they were.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
from pathlib import Path

from metadisco.core.fileio import atomic_write_bytes, atomic_write_text, to_jsonable
from metadisco.core.invocation import command
from metadisco.core.records import GenerationRecord
from metadisco.core.run_config import RunConfig
from metadisco.measure.run_files import RunDirError, RunFiles, RunWriteError, writing

__all__ = ["KEEP_CHECKPOINTS", "RunDir", "RunDirError", "RunLockedError", "RunWriteError"]

KEEP_CHECKPOINTS = 3


class RunLockedError(RunDirError):
    """Another process is writing the run directory."""


class RunDir(RunFiles):
    """A run directory that this process writes (hold `lock()` while writing)."""

    @contextlib.contextmanager
    def lock(self):
        """Hold the run's one-writer lock (flock on RUN_DIR/.lock) for the duration of the block.

        The kernel releases it when the process ends, however it ends (kill -9 included), so a
        stale lock never needs cleaning. The file names the holder (pid and host) for the
        message a second writer gets: RunLockedError, at once.
        """
        with writing(self.lock_path):
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    with writing(self.lock_path):
                        raise
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
                raise RunLockedError(
                    f"{self.path} is being written by {holder}; one run directory has one writer. Wait for it "
                    f"to finish (or stop it: it checkpoints on Ctrl-C or SIGTERM), then `{command()} train "
                    f"--resume {self.path}`; or train into another --run-dir.") from None
            with contextlib.suppress(OSError):  # the holder's name is a courtesy, not a condition
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
            yield self
        finally:
            os.close(fd)  # releases the lock

    def check_unlocked(self) -> None:
        """RunLockedError now if another process writes this run (jax-free: a command can ask
        before it imports jax; `lock` is still what makes the writer the only one)."""
        if self.lock_path.is_file():
            with self.lock():
                pass

    def create(self, config: RunConfig, overwrite: bool = False) -> RunDir:
        """Write config.json and its digest (RunConfig.digest, which `--resume` compares) into an
        empty directory, or, with overwrite, a run directory cleared of everything the old run and its
        readers left (objectives/selected.json, distillations, evaluations, figures: a reader would
        otherwise take them for the new run's)."""
        self.refuse_existing(overwrite)
        with writing(self.path):
            if overwrite and self.path.is_dir():
                for child in self.path.iterdir():
                    if child.name == self.lock_path.name:
                        continue
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
            self.path.mkdir(parents=True, exist_ok=True)
        self.write_json("config.json", config.to_dict())
        with writing(self.digest_path):
            atomic_write_text(self.digest_path, config.digest() + "\n")
        return self

    def refuse_existing(self, overwrite: bool = False) -> None:
        """RunDirError for a directory with files in it (the lock file aside), unless overwrite; with
        overwrite still for one that is not a run directory (overwrite replaces a run, whole, and
        never deletes files that are not a run's)."""
        if not self.path.is_dir() or not any(p.name != self.lock_path.name for p in self.path.iterdir()):
            return
        if overwrite and not self.is_run():
            raise RunDirError(
                f"--overwrite replaces a run directory, and {self.path} is not one (no config.json) but holds "
                "files; nothing was deleted. Choose another --run-dir, or empty it yourself.")
        if not overwrite:
            raise RunDirError(
                f"run directory {self.path} already exists and is not empty. Resume it with "
                f"`{command()} train --resume {self.path}`, choose another --run-dir, or pass --overwrite.")

    def write_json(self, name: str, obj) -> Path:
        """RUN_DIR/name as strict JSON, atomically."""
        path = self.path / name
        with writing(path):
            return atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2))

    def write_file(self, path: Path, write, *args) -> Path:
        """`write(path, *args)` (a meta_objectives writer) with its OSError reported as RunWriteError."""
        with writing(path):
            return write(path, *args)

    # metrics
    def append_metrics(self, record: GenerationRecord) -> None:
        """Append its row as one line; on failure the file is cut back to its previous complete lines."""
        line = _line(record).encode()
        with writing(self.metrics_path):
            fd = os.open(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                size = os.fstat(fd).st_size
                try:
                    os.write(fd, line)
                    os.fsync(fd)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                    raise
            finally:
                os.close(fd)

    def truncate_metrics(self, generation: int) -> None:
        """Keep only rows of generations < `generation` (those covered by the checkpoint)."""
        kept = [r for r in self.metrics() if r.generation < generation]
        with writing(self.metrics_path):
            atomic_write_text(self.metrics_path, "".join(_line(r) for r in kept))

    # checkpoints
    def save_checkpoint(self, generation: int, tree: dict) -> Path:
        """Atomically write `tree` (a pytree of arrays and numbers) for `generation` completed
        generations (flax msgpack: plain arrays, nothing executes on load); keep the newest
        KEEP_CHECKPOINTS files."""
        from flax import serialization

        path = self.checkpoint_dir / f"gen_{generation:06d}.msgpack"
        data = serialization.msgpack_serialize(serialization.to_state_dict(tree))
        with writing(path):
            atomic_write_bytes(path, data)
        for old in self.checkpoints()[:-KEEP_CHECKPOINTS]:
            with contextlib.suppress(OSError):  # an old file left behind costs space, not correctness
                old.unlink()
        return path

    def newest_readable_checkpoint(self) -> Path | None:
        """The checkpoint `load_checkpoint` would start from (the newest that decodes), or None."""
        from flax import serialization

        for path in reversed(self.checkpoints()):
            try:
                serialization.msgpack_restore(path.read_bytes())
                return path
            except Exception:  # noqa: BLE001  (any decode error means unusable: load tries an older one)
                continue
        return None

    def load_checkpoint(self, template: dict) -> tuple[dict, Path, list[str]]:
        """Newest readable checkpoint restored into `template`'s structure.

        Returns (tree, path, warnings); a corrupt newest file is reported and the previous one used.
        """
        from flax import serialization

        warnings, mismatched = [], 0
        for path in reversed(self.checkpoints()):
            try:
                raw = serialization.msgpack_restore(path.read_bytes())
            except Exception as e:  # noqa: BLE001  (any decode error means unusable)
                warnings.append(f"checkpoint {path.name} is unreadable ({type(e).__name__}: {e}); trying an older one")
                continue
            try:
                return serialization.from_state_dict(template, raw), path, warnings
            except Exception as e:  # noqa: BLE001  (a structure that is not this version's run state)
                mismatched += 1
                warnings.append(f"checkpoint {path.name} does not fit this version's run state ({type(e).__name__})")
        if mismatched:
            raise RunDirError(
                f"the checkpoints in {self.checkpoint_dir} hold a run state of another metadisco version, which this "
                f"one cannot resume. `metadisco evaluate`, `plot` and `distil` still read {self.path}; resume it with "
                "the version that wrote it, or start a new run."
            )
        raise RunDirError(
            f"no usable checkpoint in {self.checkpoint_dir}"
            + (f" ({'; '.join(warnings)})" if warnings else "")
            + ": the run stopped before its first checkpoint; start it again with `metadisco train`."
        )


def _line(record: GenerationRecord) -> str:
    """A record's line of metrics.jsonl: its row as strict JSON."""
    return json.dumps(record.to_row()) + "\n"

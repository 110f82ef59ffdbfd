"""Writing files the way every metadisco output is written: atomic, umask-respecting, strict JSON.

    to_jsonable(obj)                 numpy/jax scalars and arrays -> plain Python; NaN/inf -> None; a record
                                     (anything with a to_json method) -> its stored form
    atomic_write_text(path, text)    temp file in the same folder + fsync + rename
    atomic_write_bytes(path, data)
    save_figure(fig, stem, formats)  one figure in several formats (atomically), then closed

jax-free (matplotlib is imported only by `save_figure`), so readers and the command line can use
it before jax starts. A reader never sees a half-written file: it sees the old one or the new one.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np


def to_jsonable(x):
    """Plain Python types only (strict JSON): NaN and inf become None; floats keep full precision; a
    record (a Violation, say) becomes what its `to_json` stores."""
    if hasattr(x, "to_json") and not isinstance(x, type):
        return to_jsonable(x.to_json())
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if hasattr(x, "__array__") and not isinstance(x, (np.generic, float, int, bool)):
        return to_jsonable(np.asarray(x).tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode an ordinary new file gets under the current umask (0644 under umask 022)."""
    return 0o666 & ~_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write via a temporary file in the same folder, fsync, and rename over `path`.

    The file gets the umask's mode (as `open` would give it), not mkstemp's private 0600. On any
    failure the temporary file is removed and the previous `path`, if any, is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def save_figure(fig, stem: str | os.PathLike, formats=("png", "pdf"), dpi: int = 150) -> dict[str, Path]:
    """Write `fig` as STEM.FORMAT for each format (each atomically), close it; returns {format: path}."""
    import io

    import matplotlib.pyplot as plt

    stem = Path(stem)
    written = {}
    try:
        for fmt in formats:
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
            written[fmt] = atomic_write_bytes(stem.with_name(f"{stem.name}.{fmt}"), buf.getvalue())
    finally:
        plt.close(fig)
    return written

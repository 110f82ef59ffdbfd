"""How a user types the `metadisco` command here, for the commands metadisco prints (`next:` lines,
resume hints): `metadisco` where the PATH finds this environment's command, else that command's
path, e.g. `.venv/bin/metadisco` after `make demo` without `source .venv/bin/activate`.

jax-free: readers and the command line call it before jax starts.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

NAME = "metadisco"


def command() -> str:
    """The words that run this environment's `metadisco`: NAME where the PATH resolves NAME to it; its
    script's path (relative to the working folder where it lies inside it) where the PATH finds none or
    another install's (quoted for a shell); NAME where this environment has no script (run from source)."""
    # the environment's scripts sit beside its interpreter: not resolved, so a venv's symlinked python
    # still names the venv's bin/
    script = Path(sys.executable).parent / NAME
    if not script.is_file():
        return NAME
    found = shutil.which(NAME)
    if found and Path(found).resolve() == script.resolve():
        return NAME
    try:
        relative = script.absolute().relative_to(Path.cwd())
        typed = str(relative) if relative.parent != Path(".") else f".{os.sep}{relative}"
    except ValueError:
        typed = str(script.absolute())
    return shlex.quote(typed)

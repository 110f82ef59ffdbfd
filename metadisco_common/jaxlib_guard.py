"""Refuse to run on a jaxlib known to deadlock on the CPU under metadisco's workload.

jaxlib 0.10.x (the newest that Python 3.11 can install) hangs forever in `block_until_ready`
when one process runs one large vmapped jitted program and then another: exactly what a
meta-training run does hundreds of times. No XLA flag made it safe; jaxlib 0.11.2 does not hang.
meta_objectives.base imports this module, so whatever builds an objective has checked it.
"""

import sys

import jaxlib

MIN_JAXLIB = (0, 11)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_jaxlib(version: str | None = None) -> None:
    """Raise RuntimeError if `version` (default: the installed jaxlib) is known to deadlock."""
    version = version or jaxlib.__version__
    if _version_tuple(version)[:2] < MIN_JAXLIB:
        raise RuntimeError(
            f"metadisco refuses to run on jaxlib {version}: jaxlib < 0.11 deadlocks on the CPU "
            "when one process runs several large jitted programs (every meta-training run does). "
            f"You are on Python {sys.version.split()[0]}; install Python >= 3.12 and run "
            "`make setup` (or `pip install -r requirements.lock`), which installs jax 0.11.2."
        )


check_jaxlib()

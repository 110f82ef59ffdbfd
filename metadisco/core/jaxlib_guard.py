"""Refuse to run on a jaxlib < 0.11, which deadlocks on the CPU under metadisco's workload.

jaxlib 0.10.x hangs forever in `block_until_ready` when one process runs one large vmapped jitted
program and then another: exactly what a meta-training run does hundreds of times. No XLA flag made
it safe; jaxlib 0.11.2 does not hang (tests/test_install.py runs the sequence that hung).

An install of metadisco cannot get there: pyproject.toml requires jaxlib >= 0.11.2 (and Python
>= 3.12, the oldest Python with a jaxlib 0.11 wheel), and requirements.lock pins jaxlib 0.11.2.
What this guards is the ways around those bounds: the source tree on PYTHONPATH beside a jax that
was installed some other way (the GPU scripts do this on a host's own CUDA jax:
benchmarks/gpu_env.sh), `pip install --no-deps`, or a jaxlib downgraded after the install.
metadisco.meta_objectives.base imports this module, so whatever builds an objective has checked it.
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


def check_jaxlib(version: str | None = None, python: tuple[int, ...] | None = None) -> None:
    """Raise RuntimeError if `version` (default: the installed jaxlib) is below 0.11.

    `python` (default: this interpreter's version) only chooses the advice in the message.
    """
    version = version or jaxlib.__version__
    if _version_tuple(version)[:2] >= MIN_JAXLIB:
        return
    python = tuple(python or sys.version_info[:3])
    shown = ".".join(str(x) for x in python)
    if python[:2] < (3, 12):
        fix = (
            f"jaxlib 0.11 has no wheels for Python {shown}: install Python >= 3.12 and run `make setup` "
            "(or `pip install -r requirements.lock` in a venv of it)"
        )
    else:
        fix = "install the locked set: `pip install -r requirements.lock` (or `make setup`), which has jaxlib 0.11.2"
    raise RuntimeError(
        f"metadisco refuses to run on jaxlib {version}: jaxlib < 0.11 deadlocks on the CPU when one "
        "process runs several large jitted programs (every meta-training run does). metadisco requires "
        "jaxlib >= 0.11.2 (pyproject.toml); this one came from outside that requirement (the source tree "
        f"on PYTHONPATH beside another jax, --no-deps, or a later downgrade). To fix it, {fix}."
    )


check_jaxlib()

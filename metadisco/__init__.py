"""metadisco: discover reinforcement-learning objectives by evolution, in JAX.

One installed package. Beneath it, from the bottom layer up:

    metadisco.core             jax-free: errors and exit codes, files, options, a user's plug-ins
    metadisco.meta_objectives  the plug points (drift, value loss, shaping) and their families
    metadisco.inner_loops      environments and the PPO inner loop, jitted end to end
    metadisco.analysis         scores, evaluation, figures, distillation, verdicts, run directories
    metadisco (this folder)    configs, the outer loop (engine, train), api, the command line

It imports jax lazily so that the command line can choose the device layout before jax starts.
"""

from pathlib import Path

__version__ = "0.1.0"

# In a source checkout on sys.path without an install (PYTHONPATH=checkout, or a git worktree run
# with another checkout's environment), the subpackages sit beside this folder, not in it: the
# installed layout comes from pyproject.toml's package-dir. Looking in the checkout too gives the
# same module names there. An install (wheel or editable) has no pyproject.toml beside the package.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "inner_loops" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))

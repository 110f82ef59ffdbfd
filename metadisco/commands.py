"""Sub-commands other than train (evaluate, plot, distil, export) register here."""

REGISTRY: list = []

# Sub-command modules append their `add(subparsers)` to REGISTRY when imported. They must not
# import jax at module level: the CLI builds its parser before it sets XLA_FLAGS.
from metadisco import distil_cmd, evaluate_cmd, plot_cmd  # noqa: E402,F401

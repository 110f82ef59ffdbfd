"""The verbs of the `metadisco` command, one module each.

Each module defines `add(subparsers)`, which registers its parser with `func` set to the module's
`run(args)`. `run` raises `MetadiscoError` for anything the user can fix; `metadisco.cli.main` is
the one place that turns it into a message and an exit code. No module here imports jax at import
time: the CLI builds its parser before it sets XLA_FLAGS (the device layout).
"""

from metadisco.commands import check, distil, envs, evaluate, experiments, export, objectives, plot, train, zoo

VERBS = (train, evaluate, plot, distil, export, experiments, envs, objectives, check, zoo)

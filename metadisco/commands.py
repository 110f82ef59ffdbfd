"""Sub-commands other than train (evaluate, plot, distil, export) register here."""

REGISTRY: list = []

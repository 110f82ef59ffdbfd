"""metadisco: discover reinforcement-learning objectives by evolution, in JAX.

One installed package. Beneath it, from the bottom layer up:

    metadisco.core             the vocabulary, jax-free: the run schema and its checks, PPO's settings,
                               the environment catalog, plug points, strategies, scores, random
                               streams, metrics records; errors and exit codes, files, options,
                               a user's plug-ins
    metadisco.meta_objectives  the plug points (drift, value loss, shaping) and their families
    metadisco.inner_loops      environments and the PPO inner loop, jitted end to end
    metadisco.measure          what a run measures while it runs: search health, statistics,
                               verdicts, a run directory's files (the engine's; no analysis)
    metadisco.analysis         reading finished runs: evaluation, figures, distillation, export
    metadisco (this folder)    configs, the outer loop (engine, train), api, the command line

The repository keeps inner_loops/, meta_objectives/, analysis/ and the data folders experiments/
and zoo/ beside this folder; pyproject.toml's package-dir installs each beneath metadisco (an
editable install maps them the same way). Import it installed (`make setup`), never from a
checkout on sys.path alone: there the subpackages do not exist.

It imports jax lazily so that the command line can choose the device layout before jax starts.
"""

__version__ = "0.1.0"

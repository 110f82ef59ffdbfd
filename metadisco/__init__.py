"""metadisco: discover reinforcement-learning objectives by evolution, in JAX.

The engine (configs, outer loop, run directories, CLI). It imports jax lazily so that the
command line can choose the device layout before jax starts.
"""

__version__ = "0.1.0"

"""A drift of your own, in a file of your own: no edit to metadisco.

    metadisco train objectives.drift=my_drifts:ScaledSquare     # from the folder holding this file
    metadisco check my_drifts:ScaledSquare                      # the drift constraints, checked

A drift D(r, A) enters PPO's policy loss as -(r A - D) (LPO, Lu et al. 2022, eq. 4): it must be
>= 0, and 0 with zero slope at r = 1, so that the first gradient step is the policy gradient.
"""

import jax.numpy as jnp

from metadisco.meta_objectives import MetaObjective


class ScaledSquare(MetaObjective):  # a subclass is a frozen dataclass by itself; its title: "scaled square"
    """D(r, A) = c |A| (r - 1)^2: >= 0, and 0 with zero slope at r = 1. `c` evolves."""

    plug = "drift"
    name = "scaled_square"
    c0: float = 0.5  # an option: objectives.drift.c0=1.0 sets the starting point of evolution

    def init(self, key):
        return {"c": jnp.float32(self.c0)}  # params are traced: evolution perturbs them, vmap batches them

    def drift(self, params, ratio, advantage, progress):
        return params["c"] * jnp.abs(advantage) * (ratio - 1.0) ** 2

"""Named random streams: which key feeds what, in one table.

A run with `seed` has one root key, `jax.random.key(seed)`. Everything random in it comes from
that root through this table, so no two consumers share a key and no run's keys are another
seed's: a stream is the root with its tag folded in (`key(seed, stream, *indices)`).

    root itself             the ES's initial population and every plug's init(key) parameters
    GENERATION (index g)    generation g: ask, the training seeds, the draw, tell (tags 0 .. 2**30 - 1
                            are the generations themselves: fold_in(root, g))
    BASELINE                PPO on the meta-training problems (the normaliser; its own seeds)
    COMPARISON (index g)    the comparison after g generations: fresh seeds for the ES mean,
                            its start and PPO
    DISTILLATION            the PPO states a closed form is fitted on (`metadisco distil`)
    EVALUATION              `metadisco evaluate --seed`: the evaluation seeds (index 0) and the
                            learning-rate tuning seeds (index 1), disjoint from each other

Inside a generation or a training run, keys are split from these; the tags folded there
(DRAW below, the inner loop's reward-noise and evaluation streams) are named where they are used.

jax-free at import: `key` imports jax when called.
"""

from __future__ import annotations

from enum import IntEnum

GENERATIONS = 2**30  # generation g's key is fold_in(root, g) for g < GENERATIONS


class Stream(IntEnum):
    """A stream's tag, folded into the root key. Tags at or above GENERATIONS, so that no
    generation's key is a stream's."""

    BASELINE = GENERATIONS
    COMPARISON = GENERATIONS + 1
    DISTILLATION = GENERATIONS + 2
    EVALUATION = GENERATIONS + 3


DRAW = 0x64726177  # folded into a generation's key: which envs, horizon and learning rates it trains on


def root(seed: int):
    """The run's root key, jax.random.key(seed)."""
    import jax

    return jax.random.key(seed)


def generation(seed: int, index: int):
    """The key of generation `index` (0-based): everything random in it comes from it."""
    import jax

    if not 0 <= index < GENERATIONS:
        raise ValueError(f"generation index {index} outside [0, {GENERATIONS})")
    return jax.random.fold_in(root(seed), index)


def key(seed: int, stream: Stream, *indices: int):
    """The key of `stream` of the run with `seed`, with `indices` folded in order
    (key(seed, Stream.COMPARISON, g): the comparison after g generations)."""
    import jax

    out = jax.random.fold_in(root(seed), int(stream))
    for index in indices:
        out = jax.random.fold_in(out, index)
    return out

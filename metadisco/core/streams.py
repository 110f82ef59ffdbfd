"""Named random streams: which key feeds what, in one table.

A run with `seed` has one root key, `jax.random.key(seed)`. Everything random in it comes from
that root through this table, so no two consumers share a key and no run's keys are another
seed's: a stream is the root with its tag folded in (`key(seed, stream, *indices)`).

    root itself             nothing directly: every key below is folded from it
    START                   where the run starts: every plug's init parameters, each plug point
                            from its share (meta_objectives.base.plug_key); the one definition is
                            MetaObjective.start_params(seed), and default_params() is seed 0's
    GENERATION (index g)    generation g: ask, the training seeds, the draw, tell (tags 0 .. 2**30 - 1
                            are the generations themselves: fold_in(root, g))
    BASELINE                PPO on the meta-training problems (the normaliser; its own seeds)
    COMPARISON (index g)    the comparison after g generations: fresh seeds for the ES mean,
                            its start and PPO
    VALIDATION (index g)    the validation after g generations (RunConfig.validation): fresh seeds,
                            disjoint from the comparison's, for the ES mean, its start and PPO on
                            the validation problems; index NORMALISER: PPO's normaliser there
    SELECTION (index g)     the end of a validated run after g generations: the common fresh seeds its
                            finalists are re-scored on (measure.selection), training problems (index 0)
                            and validation problems (index 1); the winner's reported score beside the
                            start's, on seeds the ranking never saw (index 2)
    DISTILLATION            the PPO states a closed form is fitted on (`metadisco distil`)
    EVALUATION              `metadisco evaluate --seed`: the evaluation seeds (index 0) and the
                            learning-rate tuning seeds (index 1), disjoint from each other
    ES_INIT                 the strategy's own state at the start (es.init: CR-FM-NES's direction,
                            a Stein population's split; most strategies draw nothing)
    POPULATION              a population-based strategy's first population: the start plus
                            sigma_init times normal noise

A check's seeds are split from its key, and with jax's default `jax_threefry_partitionable`
split(k, n)[i] is fold_in(k, i), the stream's index i: so a stream's seeds come from an indexed key
of it, never from the stream's key itself where it also has indexed keys (the validation
normaliser once trained seed g on the key of the validation check after g generations; stored runs
keep the normaliser they computed, in their checkpoints). Inside a generation or a training run,
keys are split from these; the tags folded there
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
    START = GENERATIONS + 4
    ES_INIT = GENERATIONS + 5
    POPULATION = GENERATIONS + 6
    VALIDATION = GENERATIONS + 7
    SELECTION = GENERATIONS + 8


NORMALISER = GENERATIONS  # the validation normaliser's index of Stream.VALIDATION: no check's generations reach it
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

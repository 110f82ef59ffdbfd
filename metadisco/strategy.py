"""Evolution strategies by name (evosax 0.3), configured from an `ESConfig`.

evosax MINIMISES. metadisco maximises fitness (returns). The sign is flipped in exactly one
place, `to_es_loss`, and nowhere else.
"""

from __future__ import annotations

import inspect

# The tables of strategy names (which exist, which pair members, which keep their own weights, which
# cannot run here) are the run config's allowed values, checked before jax starts.
from metadisco.core.strategies import WEIGHTED_STRATEGIES


def _shaping_fn(name: str):
    from evosax.core import fitness_shaping as shaping

    return {
        "centered_rank": shaping.centered_rank_fitness_shaping_fn,
        "z_score": shaping.standardize_fitness_shaping_fn,
        "normalize": shaping.normalize_fitness_shaping_fn,
        "raw": shaping.identity_fitness_shaping_fn,
        # the pair's comparison is made before tell (metadisco.es_step.EsStep.es_fitness): +-1/2 per member
        "pairwise": shaping.identity_fitness_shaping_fn,
    }[name]


def to_es_loss(fitness):
    """metadisco fitness (higher is better) -> evosax loss (lower is better)."""
    return -fitness


def _decay(init: float, rate: float, limit: float):
    import optax

    if rate >= 1.0:
        return optax.constant_schedule(init)
    return optax.exponential_decay(init, transition_steps=1, decay_rate=rate, end_value=min(limit, init))


def make_strategy(cfg, solution):
    """Build the named strategy for `solution` (a pytree template) -> (strategy, params).

    Passes each option only to strategies that take it (constructor arguments differ between
    evosax algorithms); `sigma_init` also sets `std_init` in the strategy params where it exists.
    """
    import jax.numpy as jnp
    import optax
    from evosax.algorithms import algorithms

    cls = algorithms[cfg.strategy]
    takes = inspect.signature(cls.__init__).parameters
    kwargs = {}
    if "optimizer" in takes:
        # decay counts ES steps: one optimizer update per generation
        lr = _decay(cfg.lr, cfg.lr_decay, cfg.lr_limit)
        kwargs["optimizer"] = optax.adam(lr) if cfg.optimizer == "adam" else optax.sgd(lr)
    if "std_schedule" in takes:
        kwargs["std_schedule"] = _decay(cfg.sigma_init, cfg.sigma_decay, cfg.sigma_limit)
    if "use_antithetic_sampling" in takes:
        kwargs["use_antithetic_sampling"] = cfg.antithetic
    shaping = cfg.fitness_shaping
    if shaping == "auto":
        shaping = "default" if cfg.strategy in WEIGHTED_STRATEGIES else "centered_rank"
    if "fitness_shaping_fn" in takes and shaping != "default":
        kwargs["fitness_shaping_fn"] = _shaping_fn(shaping)
    es = cls(cfg.population_size, solution, **kwargs)
    params = es.default_params
    if hasattr(params, "std_init"):
        params = params.replace(std_init=jnp.float32(cfg.sigma_init))
    return es, params


def is_population_based(es) -> bool:
    """Whether `es` evolves a population (no search distribution: no mean, no ES gradient);
    metadisco.core.strategies.POPULATION_STRATEGIES names them without jax."""
    return "population" in inspect.signature(es.init).parameters


def update_weights(es, params, population, state):
    """The weights the strategy's update gives its members, as a function of their fitness [P]
    (metadisco's, higher is better): evosax's own fitness shaping of the loss it is told
    (es.fitness_shaping_fn, as `tell` applies it: centred ranks, z-scores, recombination weights,
    ...), so that sum_i w_i z_i is the ES's step up to a sign and scale of its own. population
    [P, D] (raveled) and state: what `tell` will be given. None for a population-based strategy,
    which takes no gradient step."""
    if is_population_based(es):
        return None
    return lambda fitness: es.fitness_shaping_fn(population, to_es_loss(fitness), state, params)


def sigma_of(state):
    """The strategy's current search scale (mean over dimensions), NaN where it has none."""
    import jax.numpy as jnp

    std = getattr(state, "std", None)
    if std is None:
        std = getattr(state, "sigma", None)
    return jnp.mean(jnp.asarray(std, jnp.float32)) if std is not None else jnp.float32(jnp.nan)

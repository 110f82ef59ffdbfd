"""Evolution strategies by name (evosax 0.3), configured from an `ESConfig`.

evosax MINIMISES. metadisco maximises fitness (returns). The sign is flipped in exactly one
place, `to_es_loss`, and nowhere else.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from metadisco.core.errors import ConfigError

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


def _ranks(loss):
    """evosax's _rank_fitness in numpy: 0-based ranks of the loss [P] (ties share their mean rank), NaN last."""
    x = np.where(np.isnan(loss), np.inf, loss)
    below = (x[None, :] < x[:, None]).sum(1).astype(np.float32)
    ties = ((x[None, :] == x[:, None]).sum(1) - 1).astype(np.float32)
    return below + 0.5 * ties


def _standardize(loss):
    """jax.nn.standardize(loss, epsilon=1e-8, where=~isnan(loss)) ("fast" variance), in numpy float32."""
    where = ~np.isnan(loss)
    mean = np.mean(loss, where=where)
    variance = np.clip(np.mean(np.square(loss), where=where) - np.square(mean), 0, None)
    return (loss - mean) / np.sqrt(variance + np.float32(1e-8))


def _normalize(loss):
    """evosax's normalize(loss) to [-1, 1] in numpy: all 0 where the loss is flat (np.allclose)."""
    lo, hi = np.nanmin(loss), np.nanmax(loss)
    return np.zeros_like(loss) if np.allclose(hi, lo) else -1 + 2 * (loss - lo) / (hi - lo)


def _recombination(weights, loss):
    """evosax's weights_fitness_shaping_fn in numpy: the strategy's weights by rank, 0 where every loss is NaN."""
    picked = weights[..., _ranks(loss).astype(np.int32)]
    return np.zeros_like(picked) if np.isnan(loss).all() else picked


def update_weights(es, params):
    """The weights the strategy's update gives its members, as a numpy function of their fitness [P]
    (metadisco's, higher is better; on the host: metadisco.measure.health): evosax's own fitness shaping
    of the loss it is told (es.fitness_shaping_fn, as `tell` applies it: centred ranks, z-scores,
    [-1, 1], the loss itself, recombination weights), so that sum_i w_i z_i is the ES's step up to a
    sign and scale of its own. float32, as evosax's. None for a population-based strategy, which takes no
    gradient step. Every strategy and shaping a config can name is one of evosax's five
    (tests/test_search_health.py checks each against evosax)."""
    if is_population_based(es):
        return None
    from evosax.core import fitness_shaping as shaping

    numpy_shaping = {
        shaping.identity_fitness_shaping_fn: lambda loss: loss,
        shaping.centered_rank_fitness_shaping_fn: lambda loss: _ranks(loss) / (loss.shape[-1] - 1) - 0.5,
        shaping.standardize_fitness_shaping_fn: _standardize,
        shaping.normalize_fitness_shaping_fn: _normalize,
    }
    if es.fitness_shaping_fn is shaping.weights_fitness_shaping_fn:
        fn = functools.partial(_recombination, np.asarray(params.weights, np.float32))
    elif es.fitness_shaping_fn in numpy_shaping:
        fn = numpy_shaping[es.fitness_shaping_fn]
    else:
        # no configurable strategy reaches here (tests/test_search_health.py): refused before any compute
        name = getattr(es.fitness_shaping_fn, "__name__", repr(es.fitness_shaping_fn))
        raise ConfigError(f"es.strategy={type(es).__name__}: its fitness shaping {name} has no host form for "
                          "search health (metadisco.strategy.update_weights); choose another strategy")
    return lambda fitness: fn(to_es_loss(np.asarray(fitness, np.float32)))


def sigma_of(state):
    """The strategy's current search scale (mean over dimensions), NaN where it has none."""
    import jax.numpy as jnp

    std = getattr(state, "std", None)
    if std is None:
        std = getattr(state, "sigma", None)
    return jnp.mean(jnp.asarray(std, jnp.float32)) if std is not None else jnp.float32(jnp.nan)

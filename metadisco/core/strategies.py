"""The evolution strategies a run may name, and what each needs (jax-free).

The names are evosax 0.3.2's `evosax.algorithms.algorithms`; metadisco.strategy builds them, and
tests/test_engine.py checks these tables against evosax.
"""

from __future__ import annotations

STRATEGIES = (
    "ARS", "ASEBO", "CMAAnchoredLES", "CMA_ES", "CR_FM_NES", "DES", "DifferentialEvolution", "DiffusionEvolution",
    "ESMC", "EvoTF_ES", "GESMR_GA", "GradientlessDescent", "GuidedES", "HillClimbing", "LES", "LGA", "LM_MA_ES",
    "MA_ES", "MR15_GA", "NoiseReuseES", "Open_ES", "PGPE", "PSO", "PersistentES", "RandomSearch", "Rm_ES",
    "SAMR_GA", "SNES", "SV_CMA_ES", "SV_Open_ES", "Sep_CMA_ES", "SimpleES", "SimpleGA", "SimulatedAnnealing",
    "iAMaLGaM_Full", "iAMaLGaM_Univariate", "xNES",
)
# The strategies that take `use_antithetic_sampling` (they pair members +z, -z).
ANTITHETIC_STRATEGIES = ("EvoTF_ES", "Open_ES", "SV_Open_ES")
# The strategies whose update takes recombination weights (evosax's weights_fitness_shaping_fn):
# their fitness shaping is part of the algorithm and cannot be replaced.
WEIGHTED_STRATEGIES = ("CMA_ES", "CR_FM_NES", "DES", "LM_MA_ES", "MA_ES", "Rm_ES", "SNES", "SV_CMA_ES",
                       "Sep_CMA_ES", "SimpleES", "xNES")
# The population-based strategies (genetic algorithms, differential evolution, swarms): no search
# distribution, so no mean and no ES gradient. What a run saves as objectives/mean.json and compares
# on fresh seeds is then the best member seen (metadisco.engine.MetaTrainer.mean_params), and search
# health's gradient cosine is n/a (metadisco.measure.health.NO_GRADIENT).
POPULATION_STRATEGIES = ("DifferentialEvolution", "DiffusionEvolution", "GESMR_GA", "LGA", "MR15_GA", "PSO",
                         "SAMR_GA", "SimpleGA")
# Strategies that need more than a population size and a solution to be built.
UNSUPPORTED_STRATEGIES = {
    "RandomSearch": "it needs a sampling function, which a config cannot name",
    "SV_CMA_ES": "Stein variational strategies evolve several populations at once",
    "SV_Open_ES": "Stein variational strategies evolve several populations at once",
}
# "auto": centered ranks (the published LPO/OPEN/EvIL setting), except for the weighted strategies,
# which keep their own recombination weights; "default": always the strategy's own evosax default
# (centered ranks for Open_ES and PGPE, raw fitness for ARS and the
# genetic algorithms, recombination weights for CMA-ES and the NES family).
FITNESS_SHAPING = ("auto", "default", "centered_rank", "z_score", "normalize", "raw", "pairwise")
ES_OPTIMIZERS = ("adam", "sgd")
# The strategies whose ask mirrors members i and i + P/2 (+z, -z) always, beside those that do it
# with es.antithetic (ANTITHETIC_STRATEGIES); tests/test_distributions.py checks the layout against evosax.
MIRRORED_STRATEGIES = ("ARS", "ASEBO", "CR_FM_NES", "GuidedES", "NoiseReuseES", "PGPE", "PersistentES")


def searched_point(strategy: str) -> str:
    """What a run of `strategy` follows, saves as objectives/mean.json and compares on fresh seeds,
    in words: "ES mean", or "best member" for a population-based strategy, which has no mean."""
    return "best member" if strategy in POPULATION_STRATEGIES else "ES mean"

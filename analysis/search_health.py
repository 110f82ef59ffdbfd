"""Search health: how much of a generation's ranking, and of its ES gradient, is signal and how
much is seed noise.

Every member of a generation trains on the same S seeds (common random numbers). Split them into
two halves, score each member on each half alone, and estimate the ES gradient twice, once from
each half: g_a = sum_i w(f_a)_i z_i and g_b likewise, z_i = x_i - mean(x) the member's
perturbation and w the centred-rank weights (the shaping of OpenES in LPO, OPEN and EvIL). The
two estimates share the population and differ only in the seeds. Writing g_h = s + n_h, with s
the seed-independent part and n_h the seeds' noise (independent between halves):

    E[g_a . g_b] = |s|^2,    E|g_h|^2 = |s|^2 + |n_h|^2,

so their cosine c estimates |s|^2 / (|s|^2 + |n_h|^2): 1 when the seeds do not matter, 0 when
the gradient is pure seed noise. The run's own gradient averages both halves (half the noise
variance), so its signal share of the squared norm is 2c / (1 + c) (`signal_share`). The rank
correlation of the two halves' scores says the same about the ranking itself.

Noise here is measured against the seed-independent part of the estimate, which includes the
finite population's sampling error: the figure says whether more seeds would help, not whether
the population is large enough. Cost: nothing (the scores exist already); it needs S >= 2.

Zhang, Clune & Stanley 2017 (arXiv 1712.06564) compare ES gradients with true gradients as the
population grows; the split-half agreement is the seed-noise counterpart that a run can measure
on itself. None of LPO, OPEN or evosax reports it. (jax is imported inside the functions that
need it: the command line and the report read the figures without starting jax.)
"""

from __future__ import annotations

import math

# Below this cosine between the halves' gradients (a mean over the recent generations) the
# gradient the ES follows is mostly seed noise: its signal share 2c/(1+c) is under 1/3.
NOISY_COSINE = 0.2


def centred_rank_weights(scores):
    """[P] scores (higher is better; NaN ranks lowest) -> centred ranks in [-0.5, 0.5]."""
    import jax.numpy as jnp

    x = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    below = (x[None, :] < x[:, None]).sum(1)
    ties = (x[None, :] == x[:, None]).sum(1) - 1
    return (below + 0.5 * ties) / (x.shape[0] - 1) - 0.5


def _cosine(a, b):
    import jax.numpy as jnp

    denom = jnp.linalg.norm(a) * jnp.linalg.norm(b)
    return jnp.where(denom > 0, jnp.dot(a, b) / jnp.where(denom > 0, denom, 1.0), jnp.nan)


def split_half(perturbations, scores_a, scores_b, weights=centred_rank_weights) -> dict:
    """Agreement of two independent halves of a generation's seeds.

    perturbations: [P, D] members minus their mean (any scale); scores_a, scores_b: [P] each
    member's score on either half of the seeds (higher is better). `weights` maps [P] scores to
    the ES's fitness weights (centred ranks by default).
    Returns {"grad_cos": [] cosine of the two ES gradient estimates, "rank_corr": [] Spearman
    correlation of the two halves' scores}; NaN where undefined (a constant half).
    """
    g_a = perturbations.T @ weights(scores_a)
    g_b = perturbations.T @ weights(scores_b)
    ranks_a, ranks_b = centred_rank_weights(scores_a), centred_rank_weights(scores_b)
    return {"grad_cos": _cosine(g_a, g_b), "rank_corr": _cosine(ranks_a - ranks_a.mean(), ranks_b - ranks_b.mean())}


def signal_share(grad_cos):
    """The signal's share of the squared norm of the full (both halves) gradient, 2c / (1 + c),
    from the halves' cosine c (0 where c <= 0: no signal shown)."""
    import jax.numpy as jnp

    c = jnp.clip(grad_cos, 0.0, 1.0)
    return 2.0 * c / (1.0 + c)


def flat_perturbations(pop):
    """A population pytree (leaves [P, ...]) -> [P, D] members minus the population mean."""
    import jax
    import jax.flatten_util

    flat = jax.vmap(lambda m: jax.flatten_util.ravel_pytree(m)[0])(pop)
    return flat - flat.mean(0)


def recent(rows: list[dict], key: str = "health/grad_cos", window: int = 10) -> tuple[float, int] | None:
    """The mean of `key` over the last `window` metrics rows that have it (and how many), or None."""
    values = [r[key] for r in rows if r.get(key) is not None and math.isfinite(r[key])][-window:]
    return (sum(values) / len(values), len(values)) if values else None


def advice(cos: float, generations: int) -> str | None:
    """One line of warning and advice when the gradient is mostly seed noise, else None."""
    if cos >= NOISY_COSINE:
        return None
    share = 2 * max(cos, 0.0) / (1 + max(cos, 0.0))
    return (f"search health: the ES gradient is mostly seed noise (split-half cosine {cos:+.2f} over the last "
            f"{generations} generation(s), signal ~{share:.0%} of it). Try more seeds per member "
            "(seeds_per_member), a larger sigma (es.sigma_init), a smaller search space (e.g. "
            "objectives.drift=drift_mix), or a larger population (es.population_size). Late in a run that has "
            "converged this is expected: where the landscape is flat there is no gradient to find.")

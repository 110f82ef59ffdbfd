"""Search health: how much of a generation's ranking, and of its ES gradient, is signal and how
much is seed noise.

Every member of a generation trains on the same S seeds (common random numbers). Split them into
two halves, score each member on each half alone, and estimate the ES gradient twice, once from
each half: g_a = sum_i w(f_a)_i z_i and g_b likewise, z_i = x_i - mean(x) the member's
perturbation and w the weights the strategy's own update gives its members (its fitness shaping:
centred ranks for OpenES as in LPO, OPEN and EvIL, z-scores where a run asks for them, CMA-ES's
recombination weights; metadisco.strategy.update_weights), so that the gradient measured is the one
the ES takes. The two estimates share the population and differ only in the seeds. Writing g_h = s + n_h, with s
the seed-independent part and n_h the seeds' noise (independent between halves):

    E[g_a . g_b] = |s|^2,    E|g_h|^2 = |s|^2 + |n_h|^2,

so their cosine c estimates |s|^2 / (|s|^2 + |n_h|^2): 1 when the seeds do not matter, 0 when
the gradient is pure seed noise. The run's own gradient averages both halves (half the noise
variance), so its signal share of the squared norm is 2c / (1 + c) (`signal_share`). The rank
correlation of the two halves' scores says the same about the ranking itself.

Noise here is measured against the seed-independent part of the estimate, which includes the
finite population's sampling error: the figure says whether more seeds would help, not whether
the population is large enough. Cost: nothing (the scores exist already); it needs S >= 2.

2c/(1+c) is a heuristic: it reads c as |s|^2 / (|s|^2 + |n_h|^2), which holds in expectation over
the seeds, not for one generation's c. Where the cosine cannot tell, health is NaN and the
generation's `Health.undefined` (metadisco.core.records) says why (`UNDEFINED`, read with
`why_undefined`): every member scored the same (a collapsed population: no ranking, so no
gradient and nothing to agree on), a half whose gradient is zero, a search over one
meta-parameter, where the cosine of two 1-D vectors is +-1 by construction, or a population-based
strategy (a genetic algorithm, a swarm), which takes no gradient step at all (in the last two the
halves' rank correlation, `rank_corr`, still means something and is kept).

Zhang, Clune & Stanley 2017 (arXiv 1712.06564) compare ES gradients with true gradients as the
population grows; the split-half agreement is the seed-noise counterpart that a run can measure
on itself. None of LPO, OPEN or evosax reports it. It is computed on the host, in numpy
(`of_generation`), from what the jitted tell returns (`Halves`: each half's scores as the ES is
told them), so that tell compiles none of it but those scores, once however many envs it draws.
(jax is imported inside the one function that needs it: the command line and the report read the
figures without starting jax.)
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from metadisco.core.records import GenerationRecord, Health, completed, finite

# Below this cosine between the halves' gradients (a mean over the recent generations) the
# gradient the ES follows is mostly seed noise: its signal share 2c/(1+c) is under 1/3.
NOISY_COSINE = 0.2

# Why a generation's health is undefined: the code in its `Health.undefined` (0: defined) -> (a
# short label for the progress bar, the reason in words).
DEFINED, COLLAPSED, ONE_PARAMETER, FLAT_HALF, NO_GRADIENT, NOT_DRAWN = 0, 1, 2, 3, 4, 5
UNDEFINED = {
    COLLAPSED: ("collapsed", "every member scored the same (collapsed population)"),
    ONE_PARAMETER: ("one parameter", "one meta-parameter: the cosine is ±1 by construction"),
    FLAT_HALF: ("flat half", "one half of the seeds scored every member the same (its ES gradient is zero)"),
    NO_GRADIENT: ("no gradient", "a population-based strategy takes no gradient step (a genetic algorithm, a swarm)"),
    NOT_DRAWN: ("not drawn", "the generation did not train on this environment (a game's own health only)"),
}

# Scores whose spread is within this many float32 rounding steps (ulps, relative to their
# magnitude) are tied. Members that train identically score bit for bit the same; a spread of a
# few ulps is rounding, not what the member did, and ranks members in an order that both halves
# of the seeds share (a member's rounding does not depend on the seed), which reads as a cosine
# of 1. A mean of S float32 values carries up to about S/2 ulps of rounding; 64 covers the means
# over seeds and envs that make a score, and is far below seed noise in any RL return.
TIE_ULPS = 64
FLOAT32_EPS = 2.0**-23


def _namespace(x):
    """numpy for host arrays, jax.numpy for jax's (tracers too): one formula serves both."""
    return x.__array_namespace__() if hasattr(x, "__array_namespace__") else np


def centred_rank_weights(scores):
    """[P] scores (higher is better; NaN ranks lowest) -> centred ranks in [-0.5, 0.5], float32.
    numpy or jax arrays alike: the ES ranks with it inside the jitted tell (es_step.centered_ranks),
    search health on the host (`split_half`)."""
    xp = _namespace(scores)
    x = xp.where(xp.isnan(scores), -xp.inf, scores)
    below = (x[None, :] < x[:, None]).sum(1).astype(xp.float32)
    ties = ((x[None, :] == x[:, None]).sum(1) - 1).astype(xp.float32)
    return (below + 0.5 * ties) / (x.shape[0] - 1) - 0.5


def tied(scores, scale=None) -> bool:
    """[P] scores -> whether every member scored the same, within TIE_ULPS float32 rounding steps of
    `scale` (default: the scores' largest magnitude). NaN ranks below every number, so NaN beside
    numbers is not a tie; all NaN is. In float32, as the scores are."""
    scores = np.asarray(scores, np.float32)
    finite = np.isfinite(scores)
    hi = np.max(np.where(finite, scores, -np.inf))
    lo = np.min(np.where(finite, scores, np.inf))
    scale = np.maximum(np.abs(hi), np.abs(lo)) if scale is None else np.float32(scale)
    return bool((~finite).all() or (finite.all() and hi - lo <= TIE_ULPS * FLOAT32_EPS * scale))


def _cosine(a, b) -> np.float32:
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return np.float32(np.dot(a, b) / denom) if denom > 0 else np.float32(np.nan)


def split_half(perturbations, scores_a, scores_b, *, weights, scores=None, scale=None) -> Health:
    """Agreement of two independent halves of a generation's seeds (numpy, float32, on the host).

    perturbations: [P, D] members minus their mean (any scale); scores_a, scores_b: [P] each
    member's score on either half of the seeds (higher is better). `weights` maps [P] scores to the
    weights the ES's update gives its members (metadisco.strategy.update_weights, numpy; centred
    ranks, `centred_rank_weights`, for OpenES as published), or is None for a strategy that takes no
    gradient step (grad_cos n/a, NO_GRADIENT). scores: [P] what the ES ranks (all seeds), to tell a collapsed
    population; scale: the magnitude against which the halves' ties are judged (`tied`; default each
    half's own).
    Returns a Health of numpy numbers: grad_cos the cosine of the two ES gradient estimates,
    rank_corr the Spearman correlation of the two halves' scores, undefined (int32) a key of
    UNDEFINED or DEFINED. Both are NaN for a collapsed population or a tied half; grad_cos alone for
    D = 1 and without a gradient, where the halves' rank correlation still says how far the seeds
    agree on the ranking.
    """
    z = np.asarray(perturbations, np.float32)
    scores_a, scores_b = np.asarray(scores_a, np.float32), np.asarray(scores_b, np.float32)
    flat_a, flat_b = tied(scores_a, scale), tied(scores_b, scale)
    ranks_a, ranks_b = centred_rank_weights(scores_a), centred_rank_weights(scores_b)
    rank_corr = np.nan if flat_a or flat_b else _cosine(ranks_a - ranks_a.mean(), ranks_b - ranks_b.mean())
    grad_cos = np.nan
    if weights is None:
        code = NO_GRADIENT
    else:
        g_a, g_b = (z.T @ (np.zeros(len(s)) if flat else np.asarray(weights(s))).astype(np.float32)
                    for s, flat in ((scores_a, flat_a), (scores_b, flat_b)))
        code = FLAT_HALF if np.linalg.norm(g_a) == 0 or np.linalg.norm(g_b) == 0 else DEFINED
        if code == DEFINED and z.shape[1] == 1:
            code = ONE_PARAMETER
        if code == DEFINED:
            grad_cos = _cosine(g_a, g_b)
    if scores is not None and tied(scores):
        code, rank_corr, grad_cos = COLLAPSED, np.nan, np.nan
    return Health(grad_cos=np.float32(grad_cos), rank_corr=np.float32(rank_corr), undefined=np.int32(code))


class Halves(NamedTuple):
    """What search health reads of one generation, as EsStep.tell returns it (on device; `of_generation`
    reads it on the host). V views: view 0 the generation's whole draw and, in a run of several envs,
    then each drawn env alone (Draw.envs' order). P members, D meta-parameters."""

    perturbations: Any  # [P, D] the members minus their mean (raveled as evosax ravels them: flat_members)
    told: Any  # [2, V, P] what the ES would be told of each member's score on either half of the seeds
    scale: Any  # [V] the magnitude the halves' ties are judged against (`tied`); None: each half's own
    scores: Any  # [V, P] what the ES ranks (all seeds), to tell a collapsed population
    envs: Any  # [k] the drawn envs (Draw.envs): indices into the run's envs


def of_generation(halves: Halves | None, num_envs: int, weights) -> tuple[Health | None, Health | None]:
    """A generation's search health on the host, from what its tell returned (`Halves`, fetched), each
    half's gradient weighted by `weights` (`split_half`'s: the strategy's, strategy.update_weights):
    (its Health, each env's own Health as arrays [num_envs], NaN and NOT_DRAWN where the generation
    did not draw the env); (None, None) with one seed per member, the second None in a run of one env."""
    if halves is None:
        return None, None
    told, scores = np.asarray(halves.told), np.asarray(halves.scores)
    views = [split_half(halves.perturbations, told[0, v], told[1, v], weights=weights, scores=scores[v],
                        scale=None if halves.scale is None else np.asarray(halves.scale)[v])
             for v in range(told.shape[1])]
    if len(views) == 1:
        return views[0], None
    games = Health(np.full(num_envs, np.nan, np.float32), np.full(num_envs, np.nan, np.float32),
                   np.full(num_envs, NOT_DRAWN, np.int32))
    for env, view in zip(np.asarray(halves.envs).tolist(), views[1:], strict=True):
        for field, value in zip(games, view, strict=True):
            field[env] = value
    return views[0], games


def signal_share(grad_cos):
    """The signal's share of the squared norm of the full (both halves) gradient, 2c / (1 + c),
    from the halves' cosine c (0 where c <= 0: no signal shown). A heuristic: exact only in
    expectation, for c averaged over generations."""
    c = np.clip(grad_cos, 0.0, 1.0)
    return 2.0 * c / (1.0 + c)


def flat_members(pop):
    """A population pytree (leaves [P, ...]) -> [P, D], each member raveled (as evosax ravels them); jax."""
    import jax
    import jax.flatten_util

    return jax.vmap(lambda m: jax.flatten_util.ravel_pytree(m)[0])(pop)


def why_undefined(health: Health | None) -> str | None:
    """Why a generation's health is undefined, in words; None where it is defined or not measured."""
    code = health.undefined if health is not None else None
    return UNDEFINED[code][1] if code in UNDEFINED else None


def share_text(cos: float) -> str:
    """The signal share 2c/(1+c) of a mean cosine, labelled as the heuristic it is."""
    c = max(cos, 0.0)
    return f"signal ~{2 * c / (1 + c):.0%} by the heuristic 2c/(1+c)"


class Window(NamedTuple):
    """Health over the last generations that measured it."""

    mean: float  # mean of the defined values; NaN where none is defined
    defined: int  # generations with a defined value
    undefined: dict  # reason in words -> generations undefined for it


def recent(records: list[GenerationRecord], measure: str = "grad_cos", window: int = 10,
           game: str | None = None) -> Window | None:
    """Health's `measure` (a field of Health: grad_cos or rank_corr) over the last `window`
    generations that measured it (of env `game` alone: GenerationRecord.game_health): the mean of
    the defined (finite) values, how many, and why the others are undefined; None where no
    generation measured it. NaN generations (null in metrics.jsonl) are counted, never averaged."""
    healths = [r.game_health.get(game) if game else r.health for r in records]
    values = [(h, getattr(h, measure)) for h in healths if h is not None and getattr(h, measure) is not None][-window:]
    if not values:
        return None
    defined = [v for _, v in values if finite(v)]
    undefined: dict = {}
    for health, v in values:
        if not finite(v):
            reason = why_undefined(health) or "not a number"
            undefined[reason] = undefined.get(reason, 0) + 1
    return Window(sum(defined) / len(defined) if defined else math.nan, len(defined), undefined)


def by_game(records: list[GenerationRecord], window: int = 10) -> str | None:
    """Each env's own split-half gradient cosine over the last `window` generations that drew it, in
    one phrase ("Breakout-MinAtar +0.31 over 5, Freeway-MinAtar +0.02 over 5"): which game moves the
    ES gradient and which is seed noise; None for a run that does not record it (one env)."""
    games = list(dict.fromkeys(env for r in records for env in r.game_health))
    parts = []
    for env in games:
        w = recent(records, window=window, game=env)
        if w is not None:
            parts.append(f"{env} {w.mean:+.2f} over {w.defined}" if w.defined else f"{env} n/a")
    return ", ".join(parts) or None


def undefined_text(undefined: dict) -> str:
    """{reason: generations} -> "n/a in 3: every member scored the same (collapsed population)"."""
    return "; ".join(f"n/a in {n}: {reason}" for reason, n in undefined.items())


def is_collapsed(record: GenerationRecord) -> bool:
    """Whether a generation's population collapsed: its health says so or, where health is not
    measured, its finite scores are tied (`tied`, on the generation's min and max)."""
    if record.health is not None and record.health.undefined is not None:
        return record.health.undefined == COLLAPSED
    lo, hi = record.fitness_min, record.fitness_max
    if not finite(lo) or not finite(hi):
        return False
    return hi - lo <= TIE_ULPS * FLOAT32_EPS * max(abs(hi), abs(lo))


def collapse_warning(records: list[GenerationRecord]) -> str | None:
    """A warning, with its causes and what to change, at the first generation of a collapse (the
    newest generation collapsed, the one before it not); None otherwise, so an episode is warned of once."""
    if not records or not is_collapsed(records[-1]) or (len(records) > 1 and is_collapsed(records[-2])):
        return None
    return (f"generation {completed(records[-1])}: every member scored the same (fitness std 0): the "
            "population has collapsed, so the ES gradient is zero and the search cannot move. Causes: a search "
            "space with a flat region (a dead zone, e.g. every relu weight at 0, where every member is the same "
            "objective), or a sigma too small for the fitness's resolution. Try a larger es.sigma_init, another "
            "search space, or starting again with another seed.")


def advice(cos: float, generations: int) -> str | None:
    """One line of warning and advice when the gradient is mostly seed noise, else None."""
    if not cos < NOISY_COSINE:  # also NaN: no generation defined it
        return None
    return (f"search health: the ES gradient is mostly seed noise (split-half cosine {cos:+.2f} over the last "
            f"{generations} generation(s), {share_text(cos)}). Try more seeds per member "
            "(seeds_per_member), a larger sigma (es.sigma_init), a smaller search space (e.g. "
            "objectives.drift=drift_mix), or a larger population (es.population_size). Late in a run that has "
            "converged this is expected: where the landscape is flat there is no gradient to find.")

"""Parametric closed-form families: search spaces made for small budgets.

A network drift (LPO: 1,152 parameters) needs about a thousand generations; these families have
a few to a few tens of traced constants, every member evolution proposes is a valid objective by
construction (`valid_for_every_member`: a drift >= 0, 0 and flat at r = 1; a value loss that
pulls toward its target and is nowhere all zero), and `closed_form(params)` writes the member as
one expression: what evolved *is* the formula, no distillation loss.

    DPOSchedule  ("dpo_schedule", 4 parameters)   DPO whose alpha and beta follow training
                                                  progress; starts at DPO exactly
    DriftMix     ("drift_mix", 40 parameters)     a non-negative, progress-dependent combination
                                                  of the valid terms of drift_terms.mix_terms, per
                                                  sign of A; starts at PPO-clip exactly
    ValueLossMix ("value_loss_mix", 2 parameters) a convex combination of PPO's clipped value
                                                  loss, robust losses and the unclipped one; starts
                                                  at PPO's exactly

Progress dependence is linear between the start (p = 0) and the end (p = 1) of training, so a
member is read as "this at the start, that at the end".
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from optax.projections import projection_simplex

from metadisco.meta_objectives.base import MetaObjective, register
from metadisco.meta_objectives.drift import PPOClip
from metadisco.meta_objectives.drift_terms import SIDES, mix_terms, on_side
from metadisco.meta_objectives.expressions import compile_function
from metadisco.meta_objectives.formulas import DPO_FORMULA, PPO_CLIP_FORMULA, number, ppo_clip_expression, with_constants

LOG_LIMIT = 6.0  # DPOSchedule: a constant moves at most e^6 (about 400x) away from its base value


def interpolate(start, end, progress):
    """start + p (end - start): exactly `start` when end == start (so init reproduces a baseline
    bit for bit, where (1 - p) start + p end would round)."""
    return start + progress * (end - start)


def linear(value: float, slope: float) -> str:
    """value + slope p as the shortest expression: "0.5", "0.2*p", "(0.5 - 0.2*p)"."""
    if slope == 0:
        return number(value)
    if value == 0:
        return f"{number(slope)}*p"
    return f"({number(value)} {'+' if slope > 0 else '-'} {number(abs(slope))}*p)"


@register
class DPOSchedule(MetaObjective):
    """DPO (Lu et al. 2022, the drift of eq. (11) with the discovered constants) whose constants
    follow training progress p = n / N:

        alpha(p) = alpha * exp(m(p)),  m(p) = clip(m0 + p (m1 - m0), -LOG_LIMIT, LOG_LIMIT)

    and beta(p) likewise. Params {"log_alpha": [m0, m1], "log_beta": [m0, m1]} (float32), the
    log-multipliers at the start and the end of training: an ES step of 0.1 moves a constant by
    about 10% at any scale, and no step can make it <= 0. DPO is a valid drift for every alpha,
    beta > 0 and these do not depend on r, so every member is valid.

    Starts at DPO exactly (m = 0; alpha = 2, beta = 0.6 by default): PPO-clip is not a member
    (its kink is not DPO's smooth hinge), and DPO is this family's best-known point, so "evolved
    vs its start" is "evolved vs DPO", a baseline the evaluation tunes too. `drift_mix` is the
    family that starts at PPO-clip.
    """

    alpha: float = 2.0
    beta: float = 0.6
    plug = "drift"
    name = "dpo_schedule"
    title = "DPO schedule"

    @property
    def valid_for_every_member(self) -> bool:
        return True

    @property
    def depends_on_progress(self) -> bool:
        return True

    @property
    def drawn_when_fixed(self) -> bool:
        return True

    def init(self, key):
        return {"log_alpha": jnp.zeros(2, jnp.float32), "log_beta": jnp.zeros(2, jnp.float32)}

    def constants(self, params, progress):
        """(alpha(p), beta(p)), each of progress's shape."""
        def scheduled(base, m):
            return base * jnp.exp(jnp.clip(interpolate(m[0], m[1], progress), -LOG_LIMIT, LOG_LIMIT))

        return scheduled(self.alpha, params["log_alpha"]), scheduled(self.beta, params["log_beta"])

    def drift(self, params, ratio, advantage, progress):
        alpha, beta = self.constants(params, jnp.asarray(progress, jnp.float32))
        return DPO_FORMULA(ratio, advantage, progress, alpha=alpha, beta=beta)

    def closed_form(self, params) -> str:
        def scheduled(base, m):
            m0, m1 = (float(v) for v in np.asarray(m, np.float32))
            if m0 == m1:
                return number(base * np.exp(np.clip(m0, -LOG_LIMIT, LOG_LIMIT)))
            if max(abs(m0), abs(m1)) <= LOG_LIMIT:  # m(p) is linear: the clip acts nowhere on [0, 1]
                return f"{number(base * np.exp(m0))}*exp({linear(0.0, m1 - m0)})"
            return f"{number(base)}*exp(Min(Max({linear(m0, m1 - m0)}, {-LOG_LIMIT!r}), {LOG_LIMIT!r}))"

        return with_constants(DPO_FORMULA, alpha=scheduled(self.alpha, params["log_alpha"]),
                              beta=scheduled(self.beta, params["log_beta"]))


@register
class DriftMix(MetaObjective):
    """A non-negative combination of valid drift terms with weights that follow training progress:

        D(r, A, p) = sum_k w_k(p, s) T_k(r, A),  s = [A >= 0] or [A < 0]
        w_k(p, s) = u(start)[k, s] + p (u(end)[k, s] - u(start)[k, s]) >= 0
        u(x)[k, s] = relu(x[k, s]) + relu(-x[k, s'])   (s' the other sign of A)

    T_k = drift_terms.mix_terms(clip_eps) (K = 10: PPO-clip's term, smooth walls, quadratic and
    KL-like trust regions, squares of (r-1)A, DPO's hinges), or the subset that `terms` names. Each
    T_k is a valid drift, so every member is. Params {"start": [K, 2], "end": [K, 2]} (float32;
    columns A >= 0, A < 0); with schedule=False the weights are constant over training and the
    params are {"start": [K, 2]} alone (half the search space).

    Starts at PPO-clip exactly: weight `ppo_weight` = 1 on PPO-clip's term (on both sides, at
    both ends), 0 on the rest, so a PPO run with it at init is PPO's bit for bit. With
    ppo_weight = 0 it starts at D = 0, the plain importance-sampled surrogate r A with no trust
    region (the start of the trust-region rediscovery problem). A parameter at 0 is on the edge of
    its term's weight: of an antithetic pair, one member adds the term on its own sign of A and the
    other adds it on the other sign, so the two differ and the ES has a signal.

    Every parameter moves a weight wherever it is (version 2): a positive one weighs its term on
    its own sign of A, a negative one on the other sign. Version 1, kept so that its runs resume
    with it, was w = relu(x): every parameter <= 0 is relu's dead zone, where all the members a
    population draws there train the same drift and the search stalls unseen. Its negative initial
    weights (other_weight < 0) started inside that zone.
    """

    clip_eps: float = 0.2
    ppo_weight: float = 1.0  # the initial weight of PPO-clip's term (0: start at D = 0)
    other_weight: float = 0.0  # the initial weight of every other term
    terms: tuple[str, ...] = ()  # names of mix_terms to combine (empty: all ten)
    schedule: bool = True  # weights follow training progress (False: one weight per term and side)
    version: int = 2  # 2: no dead zone; 1: relu weights (its runs resume with it)
    plug = "drift"
    name = "drift_mix"
    title = "drift mix"

    def __post_init__(self):
        check_version(self.name, self.version, DRIFT_MIX_VERSIONS)
        known = [name for name, _ in mix_terms(self.clip_eps)]
        unknown = [t for t in self.terms if t not in known]
        if unknown or len(set(self.terms)) != len(self.terms):
            raise ValueError(f"terms: {', '.join(unknown) or 'a term named twice'}; the terms are: {', '.join(known)}")
        if self.ppo_weight and self.terms and known[0] not in self.terms:
            raise ValueError(f"ppo_weight = {self.ppo_weight} weighs PPO-clip's term, which terms leaves out: "
                             f"add {known[0]} to terms, or set ppo_weight = 0")

    @property
    def selected(self) -> list[tuple[str, str]]:
        """The (name, expression) of each term this member combines, in mix_terms' order."""
        every = mix_terms(self.clip_eps)
        return [t for t in every if not self.terms or t[0] in self.terms]

    @property
    def valid_for_every_member(self) -> bool:
        return True

    @property
    def depends_on_progress(self) -> bool:
        return self.schedule

    @property
    def drawn_when_fixed(self) -> bool:
        return True

    def _is_ppo(self, name: str) -> bool:
        return name == mix_terms(self.clip_eps)[0][0]

    def init(self, key):
        initial = [self.ppo_weight if self._is_ppo(n) else self.other_weight for n, _ in self.selected]
        start = jnp.broadcast_to(jnp.asarray(initial, jnp.float32)[:, None], (len(self.selected), len(SIDES)))
        return {"start": start, "end": start} if self.schedule else {"start": start}

    def params_reproducing(self, other):
        """PPO-clip at this clip range, where PPO-clip's term is among the terms: weight 1 on it,
        0 on the rest (tested bit for bit over whole PPO runs)."""
        names = [n for n, _ in self.selected]
        if isinstance(other, PPOClip) and other.clip_eps == self.clip_eps and any(map(self._is_ppo, names)):
            return dataclasses.replace(self, ppo_weight=1.0, other_weight=0.0).default_params()
        return super().params_reproducing(other)

    def _side_weights(self, x):
        """[K, 2] parameters -> [K, 2] weights >= 0 (version 2: a negative one weighs the other side)."""
        if self.version == 1:
            return jax.nn.relu(x)
        return jax.nn.relu(x) + jax.nn.relu(-x[:, ::-1])

    def weights(self, params, progress):
        """w_k(p, s): [..., K, 2] for progress of shape [...]."""
        p = jnp.asarray(progress, jnp.float32)[..., None, None]
        start = self._side_weights(params["start"])
        return interpolate(start, self._side_weights(params["end"]) if self.schedule else start, p)

    def _term_values(self, ratio, advantage, progress):
        values = []
        for name, term in self.selected:
            if self._is_ppo(name):  # as drift.PPOClip computes it
                values.append(PPO_CLIP_FORMULA(ratio, advantage, progress, eps=self.clip_eps))
            else:
                values.append(compile_function(term, "drift")(ratio, advantage, progress))
        return values

    def drift(self, params, ratio, advantage, progress):
        ratio, advantage = jnp.broadcast_arrays(ratio, advantage)
        values = jnp.stack(jnp.broadcast_arrays(*self._term_values(ratio, advantage, progress)), axis=-1)  # [..., K]
        w = self.weights(params, progress)
        side = jnp.where((advantage >= 0)[..., None], w[..., 0], w[..., 1])  # [..., K]
        return jnp.sum(side * values, axis=-1)

    def closed_form(self, params) -> str:
        start = np.asarray(self._side_weights(jnp.asarray(params["start"], jnp.float32)))
        end = np.asarray(self._side_weights(jnp.asarray(params["end"], jnp.float32))) if self.schedule else start
        expressions = [ppo_clip_expression(self.clip_eps) if self._is_ppo(n) else term for n, term in self.selected]
        parts = []
        for k, term in enumerate(expressions):
            weights = [(start[k, j], end[k, j]) for j in range(len(SIDES))]
            sides = [(None, weights[0])] if weights[0] == weights[1] else list(zip(SIDES, weights))
            for side, (a, b) in sides:
                if a == 0 and b == 0:
                    continue
                coefficient = linear(a, b - a)
                parts.append(on_side(term, side) if coefficient == "1.0" else f"{coefficient}*{on_side(term, side)}")
        return " + ".join(parts) or "0"


# Bounded-slope value-loss terms of e = v - t (ValueLossMix): each >= 0, 0 at e = 0 and pulling
# toward the target; their slope never exceeds 1 in |e|, where L2's grows without bound.
ROBUST_VALUE_TERMS = (
    ("huber(1)", "Piecewise((e**2/2, Abs(e) <= 1), (Abs(e) - 1/2, True))"),  # Huber 1964, delta = 1
    ("log(1+e^2)", "log(1 + e**2)"),  # Cauchy (Lorentzian) loss: slope <= 1, falling back to 0 far out
)


VALUE_LOSS_MIX_VERSIONS = (1, 2, 3)
DRIFT_MIX_VERSIONS = (1, 2)


def check_version(name: str, version: int, versions: tuple[int, ...]) -> None:
    if version not in versions:
        raise ValueError(f"{name} version {version} does not exist; the versions are {', '.join(map(str, versions))} "
                         f"({versions[-1]}, the default, is valid for every parameter and has no flat region)")


@register
class ValueLossMix(MetaObjective):
    """A convex combination of PPO's clipped value loss, bounded-slope robust losses and the
    squared loss without PPO's clip:

        L(v, t, v_old) = w_0 clipped_l2(v, t, v_old) + sum_k w_k T_k(v - t) + w_l2 (v - t)^2 / 2,
        w = u / sum(u),  u = [1, relu(s_1), ..., relu(s_K), sum_k relu(-s_k)]

    T_k = ROBUST_VALUE_TERMS (Huber with delta 1, and log(1 + e^2)). Params {"scores": [K]}: a
    score above 0 moves weight onto its robust term, one below 0 onto the unclipped squared loss.
    Every weight is >= 0 and they sum to 1 for every parameter value, so every member is a value
    loss that trains the critic (>= 0, 0 at e = 0, pulls toward the target); none is 0 everywhere.
    And every score moves a weight wherever it is: the family has no flat region (version 3), so
    a population never collapses onto one objective. The clipped loss keeps a weight
    1 / sum(u) > 0 that a score of s takes down to 1 / (1 + |s|).

    Starts at PPO's clipped value loss exactly (scores 0: weights [1, 0, ..., 0]), so "evolved vs
    its start" is "evolved vs PPO". Of an antithetic pair at the start, one member adds a robust
    term and the other the unclipped loss, which gives the ES a signal. The answer for rewards with
    heavy-tailed noise is known: a loss whose gradient in e is bounded (Huber 1964), i.e. weight
    moving from w_0 to the robust terms.

    Earlier parameterisations, kept so that runs made with them resume with them: version 2, w =
    sparsemax([1, s_1, ..., s_K]) (Martins & Astudillo 2016, optax.projections), which is PPO's
    loss for every score <= 0 and flat at each vertex of the simplex; version 1,
    {"weights": [1 + K]}, w = relu(weights), which is 0 everywhere once every weight is <= 0.
    """

    clip_eps: float = 0.2
    version: int = 3
    plug = "value_loss"
    name = "value_loss_mix"
    title = "value-loss mix"

    def __post_init__(self):
        check_version(self.name, self.version, VALUE_LOSS_MIX_VERSIONS)

    @property
    def terms(self) -> list[tuple[str, str]]:
        """(name, expression) of every term, PPO's clipped loss first (its expression without the
        clipping), then the robust ones, then (version 3) the unclipped squared loss."""
        unclipped = [("l2", "e**2/2")] if self.version >= 3 else []
        return [("clipped_l2", "e**2/2"), *ROBUST_VALUE_TERMS, *unclipped]

    @property
    def _free_terms(self) -> list[str]:
        """The expressions of e of every term but PPO's clipped loss, in `terms` order."""
        return [term for _, term in self.terms[1:]]

    @property
    def drawn_when_fixed(self) -> bool:
        return True

    @property
    def valid_for_every_member(self) -> bool:
        return self.version >= 2

    def init(self, key):
        if self.version == 1:
            return {"weights": jnp.zeros(len(self.terms), jnp.float32).at[0].set(1.0)}
        return {"scores": jnp.zeros(len(ROBUST_VALUE_TERMS), jnp.float32)}

    def weights(self, params) -> jax.Array:
        """The weights of `terms` (PPO's clipped loss first), each >= 0."""
        if self.version == 1:
            return jax.nn.relu(params["weights"])
        scores = params["scores"]
        if self.version == 2:
            return projection_simplex(jnp.concatenate([jnp.ones(1, jnp.float32), scores]))
        u = jnp.concatenate([jnp.ones(1, jnp.float32), jax.nn.relu(scores), jnp.sum(jax.nn.relu(-scores))[None]])
        return u / jnp.sum(u)

    def params_reproducing(self, other):
        """PPO's clipped value loss at this clip range: the initial parameters."""
        from metadisco.meta_objectives.value_loss import ClippedL2

        if isinstance(other, ClippedL2) and other.clip_eps == self.clip_eps:
            return self.default_params()
        return super().params_reproducing(other)

    def value_loss(self, params, value, target, old_value):
        from metadisco.meta_objectives.value_loss import clipped_l2

        w = self.weights(params)
        loss = w[0] * clipped_l2(value, target, old_value, self.clip_eps)
        for k, term in enumerate(self._free_terms, start=1):
            loss = loss + w[k] * compile_function(term, "value_loss")(value, target)
        return loss

    def closed_form(self, params) -> str | None:
        """The member as one expression of e (and t); None while PPO's clipped loss has weight
        (it reads the old value, which an expression of e and t cannot)."""
        w = np.asarray(self.weights(params), np.float32)
        if w[0] > 0:
            return None
        parts = [f"{number(float(wk))}*({term})" for wk, term in zip(w[1:], self._free_terms) if wk > 0]
        return " + ".join(parts) or "0"

    def found(self, params) -> str:
        """The member's weights (its closed form is None while PPO's clipped loss has weight)."""
        return self.describe(params)

    def describe(self, params) -> str:
        """The member in one line, PPO's clipped loss included."""
        w = np.asarray(self.weights(params), np.float32)
        return " + ".join(f"{float(wk):.3g}*{name}" for wk, (name, _) in zip(w, self.terms) if wk > 0) or "0"

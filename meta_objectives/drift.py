"""Drift functions: the policy objective of mirror learning, loss = -(r*A - D(r, A)).

Lu et al. 2022, "Discovered Policy Optimisation" (LPO/DPO), and Jackson et al. 2024 (TA-LPO).
A drift must be >= 0 and equal 0 with zero gradient at r = 1 (mirror-learning condition).
`ratio` r = pi_new / pi_old, `advantage` A (normalised per minibatch by the caller), `progress`
n / N in [0, 1] (update index over total updates). All arrays broadcast together.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from metadisco.meta_objectives._nets import apply_mlp, init_mlp
from metadisco.meta_objectives.base import MetaObjective, register
from metadisco.meta_objectives.formulas import DPO_FORMULA, PPO_CLIP_FORMULA, dpo_expression, number, ppo_clip_expression


@register
class PPOClip(MetaObjective):
    """PPO-clip (Schulman et al. 2017) written as a drift (formulas.PPO_CLIP_FORMULA); no parameters."""

    clip_eps: float = 0.2
    plug = "drift"
    name = "ppo_clip"
    title = "PPO-clip"

    def init(self, key):
        return {}

    def drift(self, params, ratio, advantage, progress):
        return PPO_CLIP_FORMULA(ratio, advantage, progress, eps=self.clip_eps)

    def closed_form(self, params) -> str:
        return ppo_clip_expression(self.clip_eps)


@register
class DPO(MetaObjective):
    """Discovered Policy Optimisation (Lu et al. 2022; formulas.DPO_FORMULA, alpha=2, beta=0.6).

    A >= 0: relu((r-1)A - alpha*tanh((r-1)A / alpha))
    A <  0: relu(log(r)A - beta*tanh(log(r)A / beta))
    alpha and beta are traced parameters, so they can be evolved or vmapped over.
    """

    alpha: float = 2.0
    beta: float = 0.6
    plug = "drift"
    name = "dpo"
    title = "DPO"

    def init(self, key):
        return {"alpha": jnp.float32(self.alpha), "beta": jnp.float32(self.beta)}

    def drift(self, params, ratio, advantage, progress):
        return DPO_FORMULA(ratio, advantage, progress, alpha=params["alpha"], beta=params["beta"])

    def closed_form(self, params) -> str:
        # alpha tanh(x / alpha) is even in alpha: a sign evolution flipped changes nothing
        return dpo_expression(*(abs(float(number(params[k]))) for k in ("alpha", "beta")))


def lpo_features(ratio, advantage):
    """The 8 LPO inputs [d, d^2, u, u^2, A d, A d^2, A u, A u^2], d = log r, u = 1 - r.

    Every feature is 0 at r = 1, so a bias-free network of them is 0 there for every A.
    """
    d = jnp.log(ratio)
    u = 1.0 - ratio
    a = advantage
    base = [d, d * d, u, u * u]
    return jnp.stack(base + [a * f for f in base], axis=-1)


@register
class LPO(MetaObjective):
    """Learned Policy Optimisation: a learned residual on PPO's drift (Lu et al. 2022).

    D(r, A) = relu(ppo_clip(r, A) + shrink(net(x), offset)), net = Dense(hidden, no bias) ->
    tanh -> Dense(1, no bias) of `lpo_features` (and, for TA-LPO, progress * features).

    shrink(n, c) = sign(n) * relu(|n| - c) sets the learned part to exactly 0 wherever
    |net| < c, i.e. in a neighbourhood of r = 1, so the drift there is 0 with zero gradient.
    (The published code subtracts c from the whole sum, relu(net + ppo - c), which also shifts
    PPO's own term; shrinking only the residual makes the initial parameters, a zero output
    layer over a random hidden layer, give PPO-clip bit for bit.)
    """

    hidden: int = 128
    clip_eps: float = 0.2
    offset: float = 1e-4
    progress_features: bool = False
    plug = "drift"
    name = "lpo"
    title = "learned (LPO)"
    learned = True

    @property
    def depends_on_progress(self) -> bool:
        return self.progress_features

    @property
    def num_features(self) -> int:
        return 16 if self.progress_features else 8

    def init(self, key):
        return init_mlp(key, self.num_features, self.hidden, bias=False)

    def params_reproducing(self, other):
        """PPO-clip at this clip range: the initial parameters (a zero output layer; tested bit
        for bit over whole PPO runs)."""
        if isinstance(other, PPOClip) and other.clip_eps == self.clip_eps:
            return self.default_params()
        return super().params_reproducing(other)

    def features(self, ratio, advantage, progress):
        x = lpo_features(ratio, advantage)
        if self.progress_features:
            p = jnp.broadcast_to(jnp.asarray(progress, x.dtype), x.shape[:-1])[..., None]
            x = jnp.concatenate([x, p * x], axis=-1)
        return x

    def drift(self, params, ratio, advantage, progress):
        ratio, advantage = jnp.broadcast_arrays(ratio, advantage)
        learned = apply_mlp(params, self.features(ratio, advantage, progress))[..., 0]
        shrunk = jnp.sign(learned) * jax.nn.relu(jnp.abs(learned) - self.offset)
        return jax.nn.relu(PPO_CLIP_FORMULA(ratio, advantage, progress, eps=self.clip_eps) + shrunk)


@register
class TALPO(LPO):
    """Temporally-aware LPO (Jackson et al. 2024): features [x, (n/N) x], 16 inputs."""

    progress_features: bool = True
    name = "talpo"
    title = "learned (TA-LPO)"

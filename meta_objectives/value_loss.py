"""Value losses L(v_pred, v_target) per sample; PPO averages them over the minibatch."""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from meta_objectives._nets import apply_mlp, init_mlp
from meta_objectives.base import MetaObjective, register


def l2(value, target):
    return 0.5 * jnp.square(value - target)


def clipped_l2(value, target, old_value, clip_eps):
    """PPO's clipped value loss: 0.5 * max((v - t)^2, (v_old + clip(v - v_old) - t)^2)."""
    clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    return 0.5 * jnp.maximum(jnp.square(value - target), jnp.square(clipped - target))


@register
@dataclass(frozen=True)
class L2(MetaObjective):
    plug = "value_loss"
    name = "l2"
    title = "L2"

    def init(self, key):
        return {}

    def value_loss(self, params, value, target, old_value):
        return l2(value, target)


@register
@dataclass(frozen=True)
class ClippedL2(MetaObjective):
    """PPO's default (PureJaxRL): L2 with the value change clipped to +-clip_eps."""

    clip_eps: float = 0.2
    plug = "value_loss"
    name = "clipped_l2"
    title = "clipped L2"

    def init(self, key):
        return {}

    def value_loss(self, params, value, target, old_value):
        return clipped_l2(value, target, old_value, self.clip_eps)


@register
@dataclass(frozen=True)
class LearnedValueLoss(MetaObjective):
    """L2 plus a learned residual of the prediction error e = v - t (and optionally of t).

    L = 0.5 e^2 + net([e, e|e|, (e tanh t, e|e| tanh t)]), net bias-free with a tanh hidden layer.
    Every feature is 0 at e = 0, so a perfect prediction always costs 0; the initial parameters
    (zero output layer) give exactly L2, so evolution starts from the baseline.
    """

    hidden: int = 16
    use_target: bool = False
    plug = "value_loss"
    name = "learned"
    title = "learned"
    learned = True

    def init(self, key):
        return init_mlp(key, 4 if self.use_target else 2, self.hidden, bias=False)

    def features(self, value, target):
        e = value - target
        x = [e, e * jnp.abs(e)]
        if self.use_target:
            t = jnp.tanh(target)
            x += [e * t, e * jnp.abs(e) * t]
        return jnp.stack(x, axis=-1)

    def value_loss(self, params, value, target, old_value):
        return l2(value, target) + apply_mlp(params, self.features(value, target))[..., 0]

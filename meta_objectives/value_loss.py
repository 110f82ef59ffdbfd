"""Value losses L(v_pred, v_target) per sample; PPO averages them over the minibatch."""

from __future__ import annotations

import jax.numpy as jnp

from metadisco.meta_objectives._nets import apply_mlp, init_mlp
from metadisco.meta_objectives.base import MetaObjective, register
from metadisco.meta_objectives.formulas import L2_EXPRESSION


def l2(value, target):
    return 0.5 * jnp.square(value - target)


def clipped_l2(value, target, old_value, clip_eps):
    """PPO's clipped value loss: 0.5 * max((v - t)^2, (v_old + clip(v - v_old) - t)^2)."""
    clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    return 0.5 * jnp.maximum(jnp.square(value - target), jnp.square(clipped - target))


def value_clipping(value, target, old_value, clip_eps):
    """What PPO's value clipping adds to L2: clipped_l2 - l2 (>= 0; 0 where v_old = v). A loss
    L(e, t) plus this is L with PPO's clipping applied (L = e^2/2 gives clipped_l2 itself)."""
    return clipped_l2(value, target, old_value, clip_eps) - l2(value, target)


def clipped_l2_latex(clip_eps: float) -> str:
    """`clipped_l2` in LaTeX (v, t, v_old; e = v - t), for printed closed forms."""
    return (r"\tfrac{1}{2}\max\left(e^{2}, \left(v_{\mathrm{old}} + \operatorname{clip}\left(v - v_{\mathrm{old}}, "
            rf"\pm {clip_eps:g}\right) - t\right)^{{2}}\right)")


@register
class L2(MetaObjective):
    plug = "value_loss"
    name = "l2"
    title = "L2"

    def init(self, key):
        return {}

    def value_loss(self, params, value, target, old_value):
        return l2(value, target)

    def closed_form(self, params) -> str:
        return L2_EXPRESSION


@register
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


BASES = ("l2", "clipped_l2")  # the hand-designed loss a learned value loss adds its residual to


@register
class LearnedValueLoss(MetaObjective):
    """A hand-designed base loss plus a learned residual of the prediction error e = v - t.

    L = base(v, t, v_old) + net(x), net bias-free with a tanh hidden layer, x the features of e:
      odd  [e, e|e|]        bias the critic toward over- or under-prediction;
      even [e^2, |e|^3]     (even=True) change the loss alike on both sides: a Huber-like
                            softening or a steeper wall, which odd features alone cannot express;
      each times tanh(t) as well with use_target=True.
    base: "l2" (0.5 e^2) or "clipped_l2" (PPO's clipped loss at clip_eps, which reads v_old).
    Every feature is 0 at e = 0, so a perfect prediction adds nothing; the initial parameters
    (zero output layer) give exactly the base loss, so evolution starts from it.
    """

    hidden: int = 16
    use_target: bool = False
    even: bool = False
    base: str = "l2"
    clip_eps: float = 0.2
    plug = "value_loss"
    name = "learned"
    title = "learned"
    learned = True

    def __post_init__(self):
        if self.base not in BASES:
            raise ValueError(f"value_loss {self.name!r}: base must be one of {', '.join(BASES)}, got {self.base!r}")

    @property
    def num_features(self) -> int:
        return (4 if self.even else 2) * (2 if self.use_target else 1)

    def init(self, key):
        return init_mlp(key, self.num_features, self.hidden, bias=False)

    def features(self, value, target):
        """[..., num_features]: odd, then even (with `even`), then the same times tanh(t)."""
        e = value - target
        x = [e, e * jnp.abs(e)]
        if self.even:
            x += [e * e, jnp.abs(e) ** 3]
        if self.use_target:
            t = jnp.tanh(target)
            x += [f * t for f in x]
        return jnp.stack(x, axis=-1)

    def base_loss(self, value, target, old_value):
        if self.base == "clipped_l2":
            return clipped_l2(value, target, old_value, self.clip_eps)
        return l2(value, target)

    def value_loss(self, params, value, target, old_value):
        return self.base_loss(value, target, old_value) + apply_mlp(params, self.features(value, target))[..., 0]

    def params_reproducing(self, other):
        """PPO's clipped value loss, on that base at its clip range: the initial parameters (a
        zero output layer adds exactly 0)."""
        if self.base == "clipped_l2" and isinstance(other, ClippedL2) and other.clip_eps == self.clip_eps:
            return self.default_params()
        return super().params_reproducing(other)


@register
class LearnedClippedValueLoss(LearnedValueLoss):
    """LearnedValueLoss from PPO's own clipped value loss, with odd and even features: at its
    initial parameters it is PPO's value loss bit for bit, so "evolved vs PPO" measures what
    evolution found (the plain `learned` starts at L2, itself a change from PPO)."""

    even: bool = True
    base: str = "clipped_l2"
    name = "learned_clipped"
    title = "learned (from clipped L2)"

"""Tiny MLPs as plain pytrees of arrays (no framework state), shared by the learned objectives.

Every learned objective starts at its hand-designed baseline by a *zero output layer over a
random hidden layer*. An all-zero start would be a symmetric stationary point (f(W1, W2) =
f(-W1, -W2)): antithetic ES members would then be identical and the ES gradient exactly zero.
"""

import jax
import jax.numpy as jnp


def init_mlp(key: jax.Array, in_dim: int, hidden: int, out_dim: int = 1, bias: bool = False) -> dict:
    """Params for x -> tanh(x @ w1 [+ b1]) @ w2 [+ b2]; w2 (and b2) are zero.

    w1: [in_dim, hidden], lecun-normal; w2: [hidden, out_dim], zeros.
    """
    w1 = jax.random.normal(key, (in_dim, hidden), jnp.float32) / jnp.sqrt(in_dim)
    params = {"w1": w1, "w2": jnp.zeros((hidden, out_dim), jnp.float32)}
    if bias:
        params["b1"] = jnp.zeros((hidden,), jnp.float32)
        params["b2"] = jnp.zeros((out_dim,), jnp.float32)
    return params


def apply_mlp(params: dict, x: jax.Array) -> jax.Array:
    """x: [..., in_dim] -> [..., out_dim]."""
    h = x @ params["w1"]
    if "b1" in params:
        h = h + params["b1"]
    out = jnp.tanh(h) @ params["w2"]
    if "b2" in params:
        out = out + params["b2"]
    return out

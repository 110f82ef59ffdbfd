"""Composition: one objective per plug point, and meta-parameters as one pytree keyed by plug.

`Objectives` is static structure (hashable, safe to close over in jit); its parameters are the
dict {"drift": ..., "value_loss": ..., "shaping": ...}. A run evolves any subset of the plugs:
the ES solution is the sub-dict of the evolved plugs, and `merge` fills in the rest from the
fixed defaults, so the inner loop always sees the full dict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax

from metadisco.core import streams
from metadisco.meta_objectives import drift as _drift
from metadisco.meta_objectives import shaping as _shaping
from metadisco.meta_objectives import value_loss as _value_loss
from metadisco.meta_objectives.base import PLUGS, MetaObjective, from_spec, plug_key


@dataclass(frozen=True)
class Objectives:
    """The three plug points of the inner PPO; the defaults are PPO exactly."""

    drift: MetaObjective = _drift.PPOClip()
    value_loss: MetaObjective = _value_loss.ClippedL2()
    shaping: MetaObjective = _shaping.NoShaping()

    def __post_init__(self):
        for plug in PLUGS:
            obj = getattr(self, plug)
            if getattr(obj, "plug", None) != plug:
                raise ValueError(f"Objectives.{plug} got a {getattr(obj, 'plug', type(obj).__name__)} objective")

    def init(self, key: jax.Array, plugs=PLUGS) -> dict:
        """Initial parameters of `plugs`, each plug point from its own share of `key` (`plug_key`)."""
        return {plug: getattr(self, plug).init(plug_key(key, plug)) for plug in plugs}

    def start_params(self, seed: int, plugs=PLUGS) -> dict:
        """The parameters a run with `seed` starts from: `init` of its START stream
        (metadisco.core.streams), each plug's `MetaObjective.start_params(seed)`."""
        return self.init(streams.key(seed, streams.Stream.START), plugs)

    def default_params(self, plugs=PLUGS) -> dict:
        """`start_params(0, plugs)`: where a run with seed 0 starts, and what PPO's programs, the
        evaluation targets and the constraint checks use for objectives given without parameters."""
        return self.start_params(0, plugs)

    def items(self) -> list[tuple[str, MetaObjective]]:
        """[(plug, objective)] in PLUGS order."""
        return [(plug, getattr(self, plug)) for plug in PLUGS]

    @property
    def reads_observations(self) -> bool:
        """Whether some plug is sized for one observation shape (see `for_env`)."""
        return any(obj.reads_observations for _, obj in self.items())

    def for_env(self, obs_shape: tuple[int, ...]) -> Objectives:
        """Every plug sized for an environment with observations of `obs_shape`."""
        return Objectives(**{plug: obj.for_env(obs_shape) for plug, obj in self.items()})

    def incompatibility(self, obs_shape: tuple[int, ...], env_name: str = "the environment") -> str | None:
        """Why these objectives cannot run on an environment with observations of `obs_shape`
        (the first plug's reason), or None."""
        reasons = (obj.incompatibility(obs_shape, env_name) for _, obj in self.items())
        return next((r for r in reasons if r), None)

    def merge(self, meta_params: dict, defaults: dict) -> dict:
        """Full params dict: evolved entries from `meta_params`, the rest from `defaults`."""
        unknown = set(meta_params) - set(PLUGS)
        if unknown:
            raise ValueError(f"meta_params has unknown plug points {sorted(unknown)}; expected {PLUGS}")
        return {plug: meta_params.get(plug, defaults.get(plug, {})) for plug in PLUGS}

    def params_reproducing(self, other: Objectives) -> dict | None:
        """Full parameters at which these objectives compute what `other` computes at its default
        parameters, bit for bit, plug by plug (MetaObjective.params_reproducing); None where one plug cannot."""
        params = {plug: obj.params_reproducing(getattr(other, plug)) for plug, obj in self.items()}
        return None if any(p is None for p in params.values()) else params

    def replace(self, **changes) -> Objectives:
        return dataclasses.replace(self, **changes)

    def spec(self) -> dict:
        return {plug: getattr(self, plug).spec() for plug in PLUGS}

    @classmethod
    def from_spec(cls, spec: dict) -> Objectives:
        return cls(**{plug: from_spec(spec[plug]) for plug in PLUGS if plug in spec})

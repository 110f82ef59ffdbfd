"""What evolves: drifts, value losses and reward shapings behind one interface (see base.py).

The package imports lazily, so that importing it does not start jax (the command line validates
configs and reads run directories before jax is imported): `from metadisco.meta_objectives import
LPO` imports the module that defines it on first use. The plug points themselves (PLUGS) are
vocabulary, defined in metadisco.core.plugs, as is what a constraint check finds (Violation:
metadisco.core.records).
"""

from __future__ import annotations

import importlib

_SUBMODULES = ("drift", "value_loss", "shaping", "closed_form", "base", "io", "objectives",
               "expressions", "formulas", "constraints", "families", "drift_terms",
               "discovered")
_EXPORTS = {
    "PLUGS": "metadisco.core.plugs", "PLUG_METHODS": "metadisco.core.plugs",
    "MetaObjective": "base", "from_spec": "base", "make_objective": "base", "names": "base", "register": "base",
    "check_options": "base", "objective_class": "base", "check_contract": "base", "objective_name": "base",
    "check_objective": "constraints", "Violation": "metadisco.core.records", "ConstraintsViolated": "constraints",
    "PPOClip": "drift", "DPO": "drift", "LPO": "drift", "TALPO": "drift",
    "L2": "value_loss", "ClippedL2": "value_loss", "LearnedValueLoss": "value_loss", "LearnedClippedValueLoss": "value_loss",
    "NoShaping": "shaping", "PotentialShaping": "shaping",
    "ClosedFormDrift": "closed_form", "ClosedFormValueLoss": "closed_form", "ClosedFormShaping": "closed_form",
    "DPOSchedule": "families", "DriftMix": "families", "ValueLossMix": "families",
    "ObjectiveFileError": "io", "load_objectives": "io", "save_objectives": "io",
    "Objectives": "objectives",
}

__all__ = sorted(_EXPORTS) + list(_SUBMODULES[:3])


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _EXPORTS[name] if "." in _EXPORTS[name] else f"{__name__}.{_EXPORTS[name]}"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))

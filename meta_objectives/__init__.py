"""What evolves: drifts, value losses and reward shapings behind one interface (see base.py)."""

from meta_objectives import (
    _compat,  # noqa: F401  (refuses a deadlocking jaxlib)
    drift,
    shaping,
    value_loss,
)
from meta_objectives.base import PLUGS, MetaObjective, from_spec, make_objective, names, register
from meta_objectives.closed_form import ClosedFormDrift, ClosedFormValueLoss
from meta_objectives.drift import DPO, LPO, TALPO, PPOClip, evaluate_drift
from meta_objectives.io import ObjectiveFileError, load_objectives, save_objectives
from meta_objectives.objectives import Objectives
from meta_objectives.shaping import NoShaping, PotentialShaping
from meta_objectives.value_loss import L2, ClippedL2, LearnedValueLoss

__all__ = [
    "PLUGS", "MetaObjective", "Objectives", "make_objective", "from_spec", "names", "register",
    "PPOClip", "DPO", "LPO", "TALPO", "evaluate_drift", "L2", "ClippedL2", "LearnedValueLoss",
    "ClosedFormDrift", "ClosedFormValueLoss", "NoShaping", "PotentialShaping",
    "save_objectives", "load_objectives", "ObjectiveFileError",
    "drift", "value_loss", "shaping",
]

"""Export discovered closed forms: LaTeX, a metadisco objectives JSON, a standalone JAX module,
and a `loss.py` for DiscoGen's on-policy RL domain (`export_discogen`).

A drift D(r, A, p) and/or a value loss L(e, t), each one expression string (see
meta_objectives.expressions); all three files are derived from those strings, the module by the
printer that the in-process closed forms compile too. An expression that
breaks its plug's constraints (drift: D >= 0, D = 0 and dD/dr = 0 at r = 1; value loss:
L(0, t) = 0 and e dL/de >= 0) is refused before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path

from meta_objectives.closed_form import ClosedFormDrift, ClosedFormValueLoss
from meta_objectives.constraints import check_drift_constraints, check_value_loss_constraints
from meta_objectives.errors import MetadiscoError
from meta_objectives.expressions import (
    DRIFT_VARIABLES,
    VALUE_LOSS_VARIABLES,
    function_source,
    jax_module_source,
    parse_expression,
    to_latex,
)
from meta_objectives.fileio import atomic_write_text
from meta_objectives.io import save_objectives
from meta_objectives.objectives import Objectives

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def export_closed_form(expression: str | None, out_dir, name: str = "discovered_drift",
                       metadata: dict | None = None, value_loss: str | None = None,
                       fixed: tuple[Objectives, dict] | None = None) -> dict:
    """Write <name>.tex, <name>.json and <name>.py under `out_dir` -> {"tex", "json", "py": path}.

    expression: the drift (None: keep `fixed`'s drift); value_loss: the value loss over e, t
    (None: keep `fixed`'s). fixed: (objectives, params) for the plug points not given here
    (default: PPO's). <name>.json is an objectives file that `meta_objectives.load_objectives`
    reads back; `metadata` is stored as its "extra". <name>.py imports only jax.numpy and defines
    drift(ratio, advantage, progress=0.0) and/or value_loss(value, target).
    Raises MetadiscoError for an invalid expression or one that violates its constraints.
    """
    if not _NAME.match(name):
        raise MetadiscoError(f"name must be a Python identifier (it names a module), got {name!r}")
    if expression is None and value_loss is None:
        raise MetadiscoError("nothing to export: give a drift expression, a value-loss expression or both")
    objectives, params = fixed if fixed is not None else (Objectives(), Objectives().default_params())
    params = dict(params)
    pieces = []  # (kind, expression, latex lhs)
    if expression is not None:
        drift = ClosedFormDrift(expression)  # ValueError for an unparsable / unsafe expression
        _refuse(expression, "drift", check_drift_constraints(drift))
        objectives, params["drift"] = objectives.replace(drift=drift), {}
        pieces.append(("drift", expression, "D(r, A, p)", to_latex(expression)))
    if value_loss is not None:
        loss = ClosedFormValueLoss(value_loss)
        _refuse(value_loss, "value loss", check_value_loss_constraints(value_loss))
        objectives, params["value_loss"] = objectives.replace(value_loss=loss), {}
        pieces.append(("value_loss", value_loss, "L(e, t)", to_latex(value_loss, variables=VALUE_LOSS_VARIABLES)))

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"tex": out_dir / f"{name}.tex", "json": out_dir / f"{name}.json", "py": out_dir / f"{name}.py"}
    tex = ["% Closed forms exported by metadisco (analysis.export).",
           "% Policy loss -(r A - D(r, A, p)); r = pi_new/pi_old, A normalised advantage, p = progress.",
           "% Value loss L(e, t) per sample; e = v - target, t = target."]
    for kind, expr, lhs, latex in pieces:
        tex += [f"% {kind} (sympy): {' '.join(expr.split())}",
                f"\\begin{{equation}}\n  {lhs} = {latex}\n\\end{{equation}}"]
    atomic_write_text(paths["tex"], "\n".join(tex) + "\n")
    save_objectives(paths["json"], objectives, params, extra=metadata)
    atomic_write_text(paths["py"], _module_source(pieces))
    return {k: str(v) for k, v in paths.items()}


def _refuse(expression: str, what: str, violations: list[str]) -> None:
    if violations:
        raise MetadiscoError(
            f"refusing to export {expression!r}: it is not a valid {what}:\n  - " + "\n  - ".join(violations)
        )


def _module_source(pieces) -> str:
    return jax_module_source({kind: expr for kind, expr, _, _ in pieces})


# ---------------------------------------------------------------------------------------------
# DiscoGen (Goldie et al. 2026): the on-policy RL domain's editable loss.py
# ---------------------------------------------------------------------------------------------

_DISCOGEN_LOSS = '''

def loss_actor_and_critic(params, traj_batch, gae, targets, network, config):
    """DiscoGen's on-policy loss (PureJaxRL's _loss_fn) with the discovered objectives.

    network.apply(params, obs) -> (pi, value), pi with log_prob(action) and entropy();
    traj_batch has obs, action, log_prob (of the acting policy) and value fields; gae and targets
    are [B]. config keys: CLIP_EPS, VF_COEF, ENT_COEF (and PROGRESS, the share of training done,
    read only by a progress-dependent drift; 0.0 when absent).
    Returns (total_loss, (value_loss, actor_loss, entropy)).
    """
    pi, value = network.apply(params, traj_batch.obs)
    log_prob = pi.log_prob(traj_batch.action)

{value_loss}

    # Actor: -(r A - D(r, A)) with A normalised per minibatch (mirror learning, Lu et al. 2022)
    ratio = jnp.exp(log_prob - traj_batch.log_prob)
    gae = (gae - gae.mean()) / (gae.std() + 1e-8)
    progress = config.get("PROGRESS", 0.0) if hasattr(config, "get") else 0.0
    actor_loss = -jnp.mean(ratio * gae - drift(ratio, gae, progress))
    entropy = pi.entropy().mean()

    total_loss = actor_loss + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
    return total_loss, (value_loss, actor_loss, entropy)
'''

_PPO_VALUE_LOSS = '''    # Critic: PPO's clipped value loss (PureJaxRL)
    value_pred_clipped = traj_batch.value + jnp.clip(value - traj_batch.value, -config["CLIP_EPS"], config["CLIP_EPS"])
    value_loss = 0.5 * jnp.maximum(jnp.square(value - targets), jnp.square(value_pred_clipped - targets)).mean()'''

_DISCOVERED_VALUE_LOSS = '''    # Critic: the discovered value loss L(v - target, target), averaged
    value_loss = jnp.mean(discovered_value_loss(value, targets))'''


def discogen_loss_source(drift: str, value_loss: str | None = None) -> str:
    """Text of a DiscoGen `loss.py` (imports only jax.numpy): the drift D(r, A, p) and the value
    loss L(e, t) as functions printed from their expressions, and `loss_actor_and_critic` with
    actor loss -(r A - D) and the discovered value loss (None: PPO's clipped one).
    Raises MetadiscoError for an expression that violates its plug's constraints."""
    _refuse(drift, "drift", check_drift_constraints(ClosedFormDrift(drift)))
    functions = [function_source("drift", "drift", parse_expression(drift, DRIFT_VARIABLES))]
    header = [f"Drift D(r, A, p) = {' '.join(drift.split())}"]
    if value_loss is not None:
        ClosedFormValueLoss(value_loss)
        _refuse(value_loss, "value loss", check_value_loss_constraints(value_loss))
        functions.append(function_source("value_loss", "discovered_value_loss",
                                         parse_expression(value_loss, VALUE_LOSS_VARIABLES)))
        header.append(f"Value loss L(e, t) = {' '.join(value_loss.split())}  (e = v - target, t = target)")
    else:
        header.append("Value loss: PPO's clipped value loss")
    doc = ("DiscoGen on-policy RL loss, generated by metadisco (metadisco export RUN --format discogen).\n\n"
           + "\n".join(header) + "\n\nDepends only on jax.")
    body = _DISCOGEN_LOSS.replace("{value_loss}", _DISCOVERED_VALUE_LOSS if value_loss is not None else _PPO_VALUE_LOSS)
    return f'"""{doc}\n"""\n\nimport jax.numpy as jnp\n\n\n' + "\n\n".join(functions) + body


def export_discogen(drift: str, out_dir, value_loss: str | None = None) -> str:
    """Write `out_dir`/loss.py (`discogen_loss_source`) -> its path; nothing is written for an
    invalid expression."""
    source = discogen_loss_source(drift, value_loss)
    path = Path(out_dir) / "loss.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, source)
    return str(path)

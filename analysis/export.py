"""Export discovered closed forms: LaTeX, a metadisco objectives JSON, a standalone JAX module,
and a `loss.py` for DiscoGen's on-policy RL domain (`export_discogen`).

A drift D(r, A, p), a value loss L(e, t) and/or a shaping potential Phi(s) over the observation's
numbers s0, s1, ..., each one expression string (see metadisco.meta_objectives.expressions); all
three files are derived from those strings, the module by the printer that the in-process closed
forms compile too. A value loss distilled from one on PPO's
clipped base (learned_clipped) comes with `value_loss_base` {"base": "clipped_l2", "clip_eps"}
(distil's report["closed_form_base"]): every form then applies PPO's value clipping to the
expression, as ClosedFormValueLoss(base="clipped_l2") does. An expression that
breaks its plug's constraints (drift: D >= 0, D = 0 and dD/dr = 0 at r = 1; value loss:
L(0, t) = 0 and e dL/de >= 0) is refused before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path

from metadisco.core.errors import MetadiscoError
from metadisco.core.fileio import atomic_write_text
from metadisco.meta_objectives.closed_form import ClosedFormDrift, ClosedFormShaping, ClosedFormValueLoss
from metadisco.meta_objectives.constraints import require_valid
from metadisco.meta_objectives.expressions import (
    DRIFT_VARIABLES,
    VALUE_LOSS_VARIABLES,
    function_source,
    jax_module_source,
    parse_expression,
    to_latex,
)
from metadisco.meta_objectives.io import save_objectives
from metadisco.meta_objectives.objectives import Objectives

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def export_closed_form(expression: str | None, out_dir, name: str = "discovered_drift",
                       metadata: dict | None = None, value_loss: str | None = None,
                       fixed: tuple[Objectives, dict] | None = None, value_loss_base: dict | None = None,
                       potential: str | None = None) -> dict:
    """Write <name>.tex, <name>.json and <name>.py under `out_dir` -> {"tex", "json", "py": path}.

    expression: the drift (None: keep `fixed`'s drift); value_loss: the value loss over e, t
    (None: keep `fixed`'s); potential: a shaping potential over s0, s1, ... (None: keep `fixed`'s
    shaping; sized for `fixed`'s observation shape, where its shaping has one). fixed: (objectives,
    params) for the plug points not given here (default: PPO's). value_loss_base:
    ClosedFormValueLoss's base and clip_eps for the value loss
    (None: base "none", the expression is the whole loss). <name>.json is an objectives file that
    `metadisco.meta_objectives.load_objectives` reads back; `metadata` is stored as its "extra". <name>.py
    imports only jax.numpy and defines drift(ratio, advantage, progress=0.0) and/or
    value_loss(value, target) (on the clipped base value_loss(value, target, old_value), and
    value_loss_expression(value, target) for the expression alone) and/or potential(obs) with
    shaped_reward(obs, reward, next_obs, terminated, gamma).
    Raises MetadiscoError for an invalid expression or one that violates its constraints.
    """
    if not _NAME.match(name):
        raise MetadiscoError(f"name must be a Python identifier (it names a module), got {name!r}")
    if expression is None and value_loss is None and potential is None:
        raise MetadiscoError("nothing to export: give a drift, a value-loss or a potential expression")
    objectives, params = fixed if fixed is not None else (Objectives(), Objectives().default_params())
    params = dict(params)
    pieces = []  # (kind, expression, latex lhs, latex, description)
    loss = None
    if expression is not None:
        drift = ClosedFormDrift(expression)  # ValueError for an unparsable / unsafe expression
        _refuse(expression, drift)
        objectives, params["drift"] = objectives.replace(drift=drift), {}
        pieces.append(("drift", expression, "D(r, A, p)", to_latex(expression), " ".join(expression.split())))
    if value_loss is not None:
        loss = _value_loss(value_loss, value_loss_base)
        objectives, params["value_loss"] = objectives.replace(value_loss=loss), {}
        lhs = r"L(v, t, v_{\mathrm{old}})" if loss.clipped else "L(e, t)"
        pieces.append(("value_loss", value_loss, lhs, loss.latex(), loss.describe()))
    obs_dim = 0
    if potential is not None:
        shaping = ClosedFormShaping(potential, obs_shape=objectives.shaping.observation_shape() or ())
        _refuse(potential, shaping)
        obs_dim = max(shaping.obs_dim, shaping.reads)
        objectives, params["shaping"] = objectives.replace(shaping=shaping), {}
        pieces.append(("shaping", potential, r"\Phi(s)", shaping.latex(), " ".join(potential.split())))

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"tex": out_dir / f"{name}.tex", "json": out_dir / f"{name}.json", "py": out_dir / f"{name}.py"}
    tex = ["% Closed forms exported by metadisco (metadisco.analysis.export).",
           "% Policy loss -(r A - D(r, A, p)); r = pi_new/pi_old, A normalised advantage, p = progress.",
           "% Value loss L(e, t) per sample; e = v - target, t = target.",
           "% Shaping r + gamma Phi(s') - Phi(s); s_i the i-th number of the raw observation."]
    for kind, _, lhs, latex, description in pieces:
        tex += [f"% {kind} (sympy): {description}",
                f"\\begin{{equation}}\n  {lhs} = {latex}\n\\end{{equation}}"]
    atomic_write_text(paths["tex"], "\n".join(tex) + "\n")
    save_objectives(paths["json"], objectives, params, extra=metadata)
    atomic_write_text(paths["py"], _module_source(pieces, loss, obs_dim))
    return {k: str(v) for k, v in paths.items()}


def _value_loss(expression: str, base: dict | None) -> ClosedFormValueLoss:
    """The closed-form value loss to export (ValueError for an invalid expression or base, or one
    that violates the value-loss constraints)."""
    loss = ClosedFormValueLoss(expression, **(base or {}))
    _refuse(expression, ClosedFormValueLoss(expression))  # the expression alone: what the loss is where v_old = v
    return loss


def _refuse(expression: str, objective) -> None:
    """ConstraintsViolated (a MetadiscoError) when the closed form breaks its plug's constraints."""
    require_valid(repr(expression), objective, {}, refusing="export")


def _module_source(pieces, loss: ClosedFormValueLoss | None, obs_dim: int = 0) -> str:
    expressions = {kind: expr for kind, expr, *_ in pieces}
    if loss is None or not loss.clipped:
        return jax_module_source(expressions, obs_dim=obs_dim)
    source = jax_module_source(expressions, {"value_loss": "value_loss_expression"}, obs_dim=obs_dim)
    return source + "\n\n" + _PPO_CLIPPED_L2 + "\n\n" + _clipped_value_loss("value_loss", "value_loss_expression", loss)


# PPO's clipped value loss as generated code: the one text that the standalone module and DiscoGen's
# loss.py print (metadisco.meta_objectives.value_loss.clipped_l2 is the in-process one).
_PPO_CLIPPED_L2 = '''def ppo_clipped_l2(value, target, old_value, clip_eps):
    """PPO's clipped value loss per sample (PureJaxRL):
    0.5 max((v - t)^2, (v_old + clip(v - v_old, -clip_eps, clip_eps) - t)^2)."""
    value_pred_clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    return 0.5 * jnp.maximum(jnp.square(value - target), jnp.square(value_pred_clipped - target))
'''


def _clipped_value_loss(name: str, expression_name: str, loss: ClosedFormValueLoss) -> str:
    """Generated `name(value, target, old_value)`: the expression (function `expression_name`) with
    PPO's value clipping at the loss's clip_eps, as ClosedFormValueLoss(base="clipped_l2")."""
    return (f'''def {name}(value, target, old_value, clip_eps={loss.clip_eps!r}):
    """The discovered value loss with PPO's value clipping applied (metadisco's
    ClosedFormValueLoss(base="clipped_l2")): {expression_name}(value, target) + ppo_clipped_l2(...)
    - (value - target)^2/2. It is the expression where old_value = value, and PPO's clipped value
    loss for the expression e**2/2."""
    return ({expression_name}(value, target) + ppo_clipped_l2(value, target, old_value, clip_eps)
            - 0.5 * jnp.square(value - target))
''')


# ---------------------------------------------------------------------------------------------
# DiscoGen (Goldie et al. 2026): the on-policy RL domain's editable loss.py
# ---------------------------------------------------------------------------------------------

_DISCOGEN_LOSS = '''

def loss_actor_and_critic({signature}, traj_batch, gae, targets, network, config):
    """DiscoGen's on-policy loss (PureJaxRL's _loss_fn) with the discovered objectives.

{network_doc} config keys: CLIP_EPS, VF_COEF, ENT_COEF{progress_doc}.
    Returns (total_loss, (value_loss, actor_loss, entropy)).
    """
{network_call}
    log_prob = pi.log_prob(traj_batch.action)

{value_loss}

    # Actor: -(r A - D(r, A)) with A normalised per minibatch (mirror learning, Lu et al. 2022)
    ratio = jnp.exp(log_prob - traj_batch.log_prob)
    gae = (gae - gae.mean()) / (gae.std() + 1e-8)
{progress}
    actor_loss = -jnp.mean(ratio * gae - drift(ratio, gae, progress))
    entropy = pi.entropy().mean()

    total_loss = actor_loss + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
    return total_loss, (value_loss, actor_loss, entropy)
'''

# The share of training done, as metadisco's PPO gives it to the drift: update / NUM_UPDATES,
# constant within an update. DiscoGen's train.py counts optimiser steps (train_state.step), so two
# lines before its grad_fn call pass it in; a drift without p needs nothing.
DISCOGEN_PROGRESS_LINES = (
    'steps_per_update = config["UPDATE_EPOCHS"] * config["NUM_MINIBATCHES"]',
    'config = {**config, "PROGRESS": (train_state.step // steps_per_update) / config["NUM_UPDATES"]}',
)

# DiscoGen's OnPolicyRL domain has three template backends (task config `template_backend`): default
# and transformer call loss_actor_and_critic(params, traj_batch, ...) on [B] samples; recurrent (its
# templates/recurrent/base/loss.py, PureJaxRL ppo_rnn.py's) calls it with init_hstate, the carry its
# rollout began from, and replays [T, E] sequences with the reset flags traj_batch.done (each
# observation's `last_done`), as metadisco's recurrent PPO does (metadisco.inner_loops.ppo.replay).
DISCOGEN_BACKENDS = {
    False: ("default", "params",
            "    network.apply(params, obs) -> (pi, value), pi with log_prob(action) and entropy();\n"
            "    traj_batch has obs, action, log_prob (of the acting policy) and value fields; gae and targets\n"
            "    are [B].",
            "    pi, value = network.apply(params, traj_batch.obs)"),
    True: ("recurrent", "params, init_hstate",
           "    For DiscoGen's recurrent backend (template_backend: recurrent): init_hstate [1, E, ...] is the\n"
           "    carry the rollout began from; network.apply(params, carry, (obs, done)) -> (carry, pi, value)\n"
           "    replays the sequences traj_batch.obs [T, E, ...], resetting the carry where traj_batch.done\n"
           "    (the observation begins an episode); pi has log_prob(action) and entropy(); gae and targets\n"
           "    are [T, E], the means below over all T * E samples.",
           "    carry = jax.tree.map(lambda h: h[0], init_hstate)  # the template's init_hstate[0], for any carry\n"
           "    _, pi, value = network.apply(params, carry, (traj_batch.obs, traj_batch.done))"),
}


def discogen_backend_notes(network: str, rnn_size: int | None = None) -> list[str]:
    """What DiscoGen needs to run the exported loss.py of a run whose inner network is `network`
    (PPOConfig.network; rnn_size: its width, None for the preset's 128), as lines to print."""
    if network == "mlp":
        return []
    size = 128 if rnn_size is None else rnn_size
    notes = ["this run's inner loop is recurrent: use DiscoGen's recurrent template backend (template_backend: "
             "recurrent in the task config), whose loss takes init_hstate and replays the rollout's sequences"]
    if network == "gru":
        notes.append(f"its network is metadisco's (PureJaxRL ppo_rnn.py's GRU): set HSIZE = {size} in the task's "
                     "config to train as the objectives were found")
    else:
        notes.append(f"the objectives were found with an LSTM of {size} units; DiscoGen's recurrent networks.py is a "
                     "GRU (HSIZE units): as shipped it trains a GRU, or swap the cell there (change_networks) and "
                     "keep the carry (c, h) a pytree, which this loss.py accepts")
    return notes

_PROGRESS_MESSAGE = ("this loss's drift depends on training progress p: pass config['PROGRESS'] (update / NUM_UPDATES). "
                     "In train.py, before grad_fn(...): " + "; ".join(DISCOGEN_PROGRESS_LINES))
_PROGRESS_REQUIRED = f'''    # This drift depends on the share of training done, p. It never runs silently at p = 0:
    # without config["PROGRESS"] the loss refuses to trace. In train.py, before grad_fn(...):
    #     {DISCOGEN_PROGRESS_LINES[0]}
    #     {DISCOGEN_PROGRESS_LINES[1]}
    # and pass that config to the loss.
    if "PROGRESS" not in config:
        raise KeyError({_PROGRESS_MESSAGE!r})
    progress = config["PROGRESS"]'''

_PROGRESS_UNUSED = "    progress = 0.0  # the drift does not depend on training progress"

_PPO_VALUE_LOSS = '''    # Critic: PPO's clipped value loss (PureJaxRL)
    value_loss = ppo_clipped_l2(value, targets, traj_batch.value, config["CLIP_EPS"]).mean()'''

_DISCOVERED_VALUE_LOSS = '''    # Critic: the discovered value loss L(v - target, target), averaged
    value_loss = jnp.mean(discovered_value_loss(value, targets))'''

_DISCOVERED_CLIPPED_VALUE_LOSS = '''    # Critic: the discovered value loss with PPO's value clipping at the clip_eps it was
    # discovered with (not config["CLIP_EPS"]), averaged
    value_loss = jnp.mean(discovered_value_loss(value, targets, traj_batch.value))'''


def discogen_loss_source(drift: str, value_loss: str | None = None, value_loss_base: dict | None = None,
                         recurrent: bool = False) -> str:
    """Text of a DiscoGen `loss.py` (imports only jax.numpy): the drift D(r, A, p) and the value
    loss L(e, t) as functions printed from their expressions, and `loss_actor_and_critic` with
    actor loss -(r A - D) and the discovered value loss (None: PPO's clipped one).
    value_loss_base: as in `export_closed_form`; on the clipped base the loss applies PPO's value
    clipping (at its own clip_eps) to the expression, as ClosedFormValueLoss does. recurrent: for
    DiscoGen's recurrent template backend (`DISCOGEN_BACKENDS`: the loss takes init_hstate and
    replays sequences), as a run with a recurrent inner loop (inner.network gru or lstm) needs.
    Raises MetadiscoError for an expression that violates its plug's constraints."""
    _refuse(drift, ClosedFormDrift(drift))
    parsed_drift = parse_expression(drift, DRIFT_VARIABLES)
    functions = [function_source("drift", "drift", parsed_drift)]
    header = [f"Drift D(r, A, p) = {' '.join(drift.split())}"]
    uses_progress = drift_uses_progress(drift)
    if uses_progress:
        header.append("The drift depends on training progress p: the loss needs config['PROGRESS'] (update / "
                      "NUM_UPDATES) and refuses to run without it; loss_actor_and_critic's comment has the two "
                      "lines for train.py.")
    if value_loss is None:
        functions.append(_PPO_CLIPPED_L2)
        header.append("Value loss: PPO's clipped value loss")
        critic = _PPO_VALUE_LOSS
    else:
        loss = _value_loss(value_loss, value_loss_base)
        lhs = "L(v, t, v_old)" if loss.clipped else "L(e, t)"
        header.append(f"Value loss {lhs} = {loss.describe()}  (e = v - target, t = target)")
        parsed = parse_expression(value_loss, VALUE_LOSS_VARIABLES)
        if loss.clipped:
            functions += [function_source("value_loss", "discovered_value_loss_expression", parsed), _PPO_CLIPPED_L2,
                          _clipped_value_loss("discovered_value_loss", "discovered_value_loss_expression", loss)]
            critic = _DISCOVERED_CLIPPED_VALUE_LOSS
        else:
            functions.append(function_source("value_loss", "discovered_value_loss", parsed))
            critic = _DISCOVERED_VALUE_LOSS
    _, signature, network_doc, network_call = DISCOGEN_BACKENDS[recurrent]
    if recurrent:
        header.append("For DiscoGen's recurrent backend: set template_backend: recurrent in the task config (the "
                      "loss takes init_hstate and replays the rollout's sequences).")
    doc = ("DiscoGen on-policy RL loss, generated by metadisco (metadisco export RUN --format discogen).\n\n"
           + "\n".join(header) + "\n\nDepends only on jax.")
    body = (_DISCOGEN_LOSS.replace("{signature}", signature).replace("{network_doc}", network_doc)
            .replace("{network_call}", network_call).replace("{value_loss}", critic)
            .replace("{progress}", _PROGRESS_REQUIRED if uses_progress else _PROGRESS_UNUSED)
            .replace("{progress_doc}", ", PROGRESS (update / NUM_UPDATES)"
                     if uses_progress else ""))
    imports = "import jax\nimport jax.numpy as jnp" if recurrent else "import jax.numpy as jnp"
    return f'"""{doc}\n"""\n\n{imports}\n\n\n' + "\n\n".join(functions) + body


def drift_uses_progress(drift: str) -> bool:
    """Whether a drift expression reads the training progress p."""
    return any(str(symbol) == "p" for symbol in parse_expression(drift, DRIFT_VARIABLES).free_symbols)


def export_discogen(drift: str, out_dir, value_loss: str | None = None, value_loss_base: dict | None = None,
                    recurrent: bool = False) -> str:
    """Write `out_dir`/loss.py (`discogen_loss_source`) -> its path; nothing is written for an
    invalid expression."""
    source = discogen_loss_source(drift, value_loss, value_loss_base, recurrent)
    path = Path(out_dir) / "loss.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, source)
    return str(path)

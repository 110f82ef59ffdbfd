"""The plug points of the inner PPO and the config section that picks an objective for each.

jax-free (the command line reads configs and run directories before jax starts). The section
has one form, nested per plug point, in an experiment file and in a run's config.json:

    [objectives]
    evolve = ["drift"]
    [objectives.drift]
    name = "lpo"        # a registered objective (meta_objectives.names("drift"))
    hidden = 64         # its options: the objective's dataclass fields

and on the command line a plug's name alone (objectives.drift=lpo), which `upgrade_section` reads.
"""

from __future__ import annotations

PLUGS = ("drift", "value_loss", "shaping")
# The method each plug point calls (see base.py for the signatures); `register` checks it.
PLUG_METHODS = {"drift": "drift", "value_loss": "value_loss", "shaping": "shape_reward"}

# Families whose parameterisation changed: (plug, name) -> (the option that selects the
# parameterisation, the value that every choice written before the option existed ran with). A new
# config records the current version (its default: metadisco.config.typed_choice); a stored
# config or objectives file that does not name it ran the old one (`pin_stored_version`), so that
# a run resumes, and is evaluated, with the parameterisation it evolved.
VERSIONED = {("value_loss", "value_loss_mix"): ("version", 1), ("drift", "drift_mix"): ("version", 1)}


def pin_stored_version(plug: str, choice: dict) -> dict:
    """A stored objective choice ({"name": ..., OPTION: VALUE}) with its family's version named:
    the old one where the choice predates the version option."""
    versioned = VERSIONED.get((plug, choice.get("name")))
    if versioned is None or versioned[0] in choice:
        return choice
    option, old = versioned
    return {**choice, option: old}


def version_option(plug: str, name: str) -> str | None:
    """The option that selects the parameterisation of objective (plug, name), if it has versions."""
    versioned = VERSIONED.get((plug, name))
    return versioned[0] if versioned else None


def upgrade_section(section: dict, stored: bool = False) -> dict:
    """An objectives section -> the nested form (a new dict).

    A plug given as a string is its name ({"name": s}). Other keys are left as they are (the
    config reader reports unknown ones). stored: the section is a run's config.json, whose
    versioned families are pinned to the version they ran (`pin_stored_version`).
    """
    out = {k: ({"name": v} if k in PLUGS and isinstance(v, str) else v) for k, v in section.items()}
    if stored:
        out = {k: (pin_stored_version(k, v) if k in PLUGS and isinstance(v, dict) else v) for k, v in out.items()}
    return out


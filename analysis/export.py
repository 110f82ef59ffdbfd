"""Export a discovered closed-form drift: LaTeX, a metadisco objectives JSON, a standalone JAX module.

All three files are derived from the one expression string (see meta_objectives.closed_form);
an expression that breaks the drift constraints (D >= 0, D = 0 and dD/dr = 0 at r = 1) is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from meta_objectives.closed_form import (
    ClosedFormDrift,
    check_drift_constraints,
    to_jax_module_source,
    to_latex,
)
from meta_objectives.io import atomic_write_text, save_objectives
from meta_objectives.objectives import Objectives

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def export_closed_form(expression: str, out_dir, name: str = "discovered_drift", metadata: dict | None = None) -> dict:
    """Write <name>.tex, <name>.json and <name>.py under `out_dir` -> {"tex", "json", "py": path}.

    <name>.json is an objectives file (drift = ClosedFormDrift(expression), other plugs default)
    that `meta_objectives.load_objectives` reads back; `metadata` is stored as its "extra".
    <name>.py imports only jax.numpy and defines drift(ratio, advantage, progress=0.0).
    Raises ValueError for an invalid expression or one that violates the drift constraints.
    """
    if not _NAME.match(name):
        raise ValueError(f"name must be a Python identifier (it names a module), got {name!r}")
    drift = ClosedFormDrift(expression)  # ValueError for an unparsable / unsafe expression
    violations = check_drift_constraints(drift)
    if violations:
        raise ValueError(
            f"refusing to export {expression!r}: it is not a valid drift:\n  - " + "\n  - ".join(violations)
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"tex": out_dir / f"{name}.tex", "json": out_dir / f"{name}.json", "py": out_dir / f"{name}.py"}

    tex = (
        f"% Closed-form drift exported by metadisco (analysis.export).\n"
        f"% Policy loss -(r A - D(r, A, p)); r = pi_new/pi_old, A normalised advantage, p = progress.\n"
        f"% Expression (sympy): {' '.join(expression.split())}\n"
        f"\\begin{{equation}}\n  D(r, A, p) = {to_latex(expression)}\n\\end{{equation}}\n"
    )
    atomic_write_text(paths["tex"], tex)
    save_objectives(paths["json"], Objectives(drift=drift), {"drift": {}}, extra=metadata)
    atomic_write_text(paths["py"], to_jax_module_source(expression, function_name="drift"))
    return {k: str(v) for k, v in paths.items()}

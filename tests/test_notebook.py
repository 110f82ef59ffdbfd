"""examples/quickstart.ipynb runs top to bottom, as a user runs it in Jupyter, at a tiny size."""

import json
import re
from pathlib import Path

import pytest

from tests.helpers import REDISCOVERY_CHEAPER, REDISCOVERY_SIZE

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "quickstart.ipynb"


@pytest.mark.slow
def test_the_quickstart_notebook_runs_top_to_bottom(tmp_path, monkeypatch, capsys):
    """Every code cell, in order, in one namespace (a kernel's), with SMOKE = True: meta-train,
    the verdict's inputs, the figures, an evaluation against PPO, distil and export."""
    monkeypatch.chdir(tmp_path)
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    namespace = {"SMOKE": True}
    for i, cell in enumerate(cells):
        exec(compile("".join(cell["source"]), f"{NOTEBOOK.name}, cell {i}", "exec"), namespace)
    run = namespace["run"]
    # at the rediscovery tests' size (tests/test_search_health.py), so that it loads their compiled programs
    from metadisco.config import resolve

    smoke = resolve("rediscover_value_loss", [f"{k}={v}" for k, v in namespace["SIZE"].items()])
    assert smoke == resolve("rediscover_value_loss", [*REDISCOVERY_SIZE, *REDISCOVERY_CHEAPER])
    assert (run / "figures" / "training_curves.png").exists()
    assert (namespace["results"].out_dir / "results.md").exists()
    exported = namespace["exported"]  # api.export's record of what it wrote
    assert set(exported.expressions) == {"value_loss"} and exported.paths["json"].exists()
    out = capsys.readouterr().out
    assert "constraints the ES mean fails: none" in out
    assert re.search(r"after generation \d+: ES mean -?[\d.]+ vs PPO -?[\d.]+ on fresh seeds, difference [+-]", out), out

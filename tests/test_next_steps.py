"""Every command a run prints works on that run: the `next:` line a finished `train` ends with, the export
that `distil` names and the evaluation that `export` names, run as printed (at a tiny budget), on a run of
each plug point and on a recurrent one."""

import shlex

import pytest

from tests.helpers import SMALL
from tests.helpers import metadisco_in_process as cli

RUNS = {  # a run of each plug point, and a recurrent one: the suite's finished runs (tests.helpers.FINISHED_RUNS)
    "drift": "lpo",
    "value_loss": "drift_value",
    "shaping": "shaping",  # the demo (no experiment named): its declared held-out set
    "recurrent": "gru",
}


def printed(text: str, lead: str) -> list[list[str]]:
    """The commands after `lead` on the last line of `text` that holds it (split at "|", each without the
    optional "[...]" words it lists), each as argv without `metadisco`."""
    line = [ln for ln in text.splitlines() if lead in ln][-1]
    commands = [shlex.split(part.strip().split(" [")[0]) for part in line.split(lead, 1)[1].split("|")]
    assert all(c[0] == "metadisco" for c in commands), line
    return [c[1:] for c in commands]


def run_ok(argv, capsys) -> str:
    code, out, err = cli([*argv, *SMALL.get(argv[0], [])], capsys)
    assert code == 0, (argv, err[-2000:])
    return out + err


@pytest.mark.parametrize("finished_run", list(RUNS.values()), ids=list(RUNS), indirect=True)
def test_every_command_a_run_prints_works_on_that_run(finished_run, capsys, planned_evaluations):
    """train's next line (plot, evaluate, distil), distil's (export) and export's (evaluate the closed form beside
    the network): plot, distil and export run whole; the evaluations are planned (targets resolved and
    checked, every environment and method planned: where the demo's line failed), not trained."""
    run_dir, out = finished_run
    steps = printed(out, "next: ")
    assert [s[0] for s in steps] == ["plot", "evaluate", "distil"], steps
    if run_dir.name == "shaping":  # its potential reads MountainCar's two numbers: evaluated on the set it declared
        assert steps[1] == ["evaluate", str(run_dir)]
    for step in steps:
        said = run_ok(step, capsys)
    (export,) = printed(said, "next: ")  # distil's last line names the export
    (evaluate,) = printed(run_ok(export, capsys), "evaluate it beside the network: ")
    run_ok(evaluate, capsys)
    first, closed_form = planned_evaluations
    assert first and len(closed_form) == len(first)  # every environment planned, the closed form beside the run

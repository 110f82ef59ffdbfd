"""Every `metadisco` command the README, docs/*.md and each verb's `--help` epilog show, run as written
against the kind of run it is written for.

A page says which kind of run its RUN is with a comment the site does not show, above the commands it
covers: `<!-- RUN: EXPERIMENT -->` (an experiment's name, or `demo`); its prose says the same to the
reader. RUN maps to one of the suite's finished runs of that kind (tests.helpers.FINISHED_RUNS), a
committed run directory to a copy of it.

What runs whole: plot, distil, export, check and the listings (distil without its symbolic search, plot
in one format: sizes, not what runs). What is planned: `train` (the config resolved and validated as the
command resolves it, a resume's stored config checked, the MetaTrainer built: every check before the
first compiled program) and `evaluate` (targets resolved and checked, every environment and method
planned: where a shaping that cannot read an environment is refused), as tests/test_next_steps does.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from metadisco.config import run_plan
from tests.helpers import ROOT, SMALL
from tests.helpers import metadisco_in_process as cli

GENERATED = {"cli.md", "config.md", "objectives.md", "changelog.md"}  # the site writes these from the code
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in GENERATED)]
# what a page's `<!-- RUN: NAME -->` names -> the suite's finished run of that kind
KINDS = {"demo": "shaping", "rediscover_shaping": "shaping", "drift_and_value_loss_cpu": "drift_value",
         "lpo_cartpole_cpu": "lpo", "drift_mix_minatar_gpu": "lpo", "memory_cpu": "gru"}
EPILOG_KIND = "lpo_cartpole_cpu"  # what the epilogs say their RUN is
MARKER = re.compile(r"<!-- RUN: (\S+) -->")
VERBS = ("train", "evaluate", "plot", "distil", "export", "check", "experiments", "envs", "objectives", "zoo")
# a command named, not one to type: a verb alone where it needs an argument, or a placeholder other than RUN
NAMED_ONLY = re.compile(r"\.\.\.|\b(NAME|DURATION|N)\b")


@dataclass(frozen=True)
class Command:
    where: str  # page:line, or `VERB --help`
    argv: tuple[str, ...]  # without `metadisco`
    kind: str | None  # the finished run RUN stands for (None: the command names no run)
    cwd: str = "."  # relative to the clone (`cd examples` before it)

    @property
    def id(self) -> str:
        return f"{self.where} metadisco {shlex.join(self.argv)}"[:150]


def commands_of_line(line: str) -> list[list[str]]:
    """The `metadisco` commands of one shell line (comments dropped; `a && b` two; after `||` only a
    handler), each as argv without `metadisco`."""
    if "metadisco" not in line:
        return []
    lexer = shlex.shlex(re.sub(r"(^|\s)#.*$", "", line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found, current, handler = [], [], False
    for token in [*lexer, ";"]:
        if token in ("&&", "||", ";", "|"):
            if current and current[0] == "metadisco" and not handler:
                found.append(current[1:])
            current, handler = [], token == "||" or handler and token != ";"
        else:
            current.append(token)
    return found


def page_commands(page: Path) -> list[Command]:
    """Every command of `page`: its shell blocks line by line (`\\` continued, `$ ` prompts, `cd`), and
    its inline spans that are commands to type."""
    name, kind, out, cwd = page.relative_to(ROOT).as_posix(), None, [], "."
    lines, fence = page.read_text().splitlines(), None
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        if m := MARKER.search(line):
            kind = m.group(1)
        if line.lstrip().startswith("```"):
            fence = None if fence is not None else line.strip()[3:]  # unlabelled: output shown, not typed
            cwd = "."
        elif fence in ("bash", "sh", "console", "shell"):
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            shell = line.strip().removeprefix("$ ")
            if shell.startswith("cd "):
                cwd = shell.split()[1]
            for argv in commands_of_line(shell):
                out.append(Command(f"{name}:{number}", tuple(argv), kind, cwd))
        elif fence is None:
            for span in re.findall(r"`(metadisco [^`]+)`", line):
                argv = shlex.split(span)[1:]
                needs_argument = argv[0] in ("plot", "distil", "export", "check", "evaluate")
                if argv[0] in VERBS and not NAMED_ONLY.search(span) and not (needs_argument and len(argv) == 1):
                    out.append(Command(f"{name}:{number}", tuple(argv), kind))
        i += 1
    return out


def epilog_commands() -> list[Command]:
    """The commands each verb's `--help` epilog shows (lines that begin `metadisco `)."""
    import argparse

    from metadisco import cli

    parser = cli.build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    out = []
    for verb, sub in verbs.items():
        for line in (sub.epilog or "").splitlines():
            if not line.strip().startswith("metadisco "):  # an example's line, not prose that names one
                continue
            for argv in commands_of_line(line.strip()):
                out.append(Command(f"{verb} --help", tuple(argv), EPILOG_KIND))
    return out


DOCUMENTED = [c for page in PAGES for c in page_commands(page)]
EPILOGS = epilog_commands()


def once_each(commands: list[Command]) -> list[Command]:
    """The commands, each the same words on the same kind of run from the same folder once (the first
    place that shows it names it)."""
    seen = {}
    for c in commands:
        seen.setdefault((c.argv, c.kind if _names_a_run(c.argv) else None, c.cwd), c)
    return list(seen.values())


def test_the_commands_of_the_pages_and_epilogs_are_found():
    """The extraction finds what a reader sees: the README's four workflows, a continued line of
    docs/train.md, a command after `cd examples`, an epilog's examples; and it skips what is only named."""
    ids = {c.id.split(" ", 1)[1] for c in DOCUMENTED}
    assert "metadisco evaluate runs/RUN dpo --envs Pendulum-v1 --seeds 8 --tune-lr" in ids
    assert {"metadisco distil runs/RUN", "metadisco export runs/RUN", "metadisco plot runs/RUN"} <= ids
    assert any(c.argv[0] == "train" and "es.population_size=32" in c.argv and len(c.argv) > 5 for c in DOCUMENTED)
    assert any(c.cwd == "examples" and c.argv[0] == "check" for c in DOCUMENTED)
    assert not any(c.argv in (("plot",), ("distil",)) for c in DOCUMENTED)
    assert commands_of_line('metadisco train --resume runs/g || { [ $? -eq 75 ] && scontrol requeue "$J"; }') \
        == [["train", "--resume", "runs/g"]]
    assert len(EPILOGS) >= 5


def test_every_command_that_names_a_run_says_which_kind():
    """A command on RUN (or runs/...) sits below a `<!-- RUN: NAME -->` naming a kind the suite has."""
    unsaid = [c.id for c in DOCUMENTED if _names_a_run(c.argv) and c.kind not in KINDS]
    assert not unsaid, (f"put `<!-- RUN: EXPERIMENT -->` (one of {sorted(KINDS)}) above each of these, and say in "
                        "the page which run it needs:\n" + "\n".join(unsaid))


def _names_a_run(argv: tuple[str, ...]) -> bool:
    """Whether the command reads a run (a new --run-dir or --out is written, not read)."""
    return any(re.match(r"(runs/|RUN\b|RUN_DIR\b)", word) for before, word in zip(("", *argv), argv)
               if before not in ("--run-dir", "--out"))


class Runs:
    """A copy of each kind of finished run for this file's commands, made on first use (kind -> path), and a
    copy of each committed run directory a page names (docs/results/...)."""

    def __init__(self, finished_runs, root: Path):
        self.finished, self.root, self.made, self.exported = finished_runs, root, {}, set()

    def exported_of_kind(self, kind: str, capsys) -> Path:
        """The copy of `kind`, distilled and exported once (what a page's export and evaluate of an export read)."""
        path = self.of_kind(kind)
        if kind not in self.exported:
            for argv in (["distil", str(path), *SMALL["distil"]], ["export", str(path)]):
                code, _, err = cli(argv, capsys)
                assert code == 0, err[-2000:]
            self.exported.add(kind)
        return path

    def of_kind(self, kind: str) -> Path:
        if kind not in self.made:
            self.made[kind] = self.finished.copy(KINDS.get(kind, kind), self.root / kind / "run")
        return self.made[kind]

    def committed(self, relative: str) -> Path:
        """A copy of the committed run directory that holds `relative` (the path under it kept)."""
        path = ROOT / relative
        run = next((p for p in [path, *path.parents] if (p / "config.json").is_file()), None)
        if run is None:
            return path
        if run not in self.made:
            self.made[run] = self.root / "committed" / run.relative_to(ROOT)
            shutil.copytree(run, self.made[run])
        return self.made[run] / path.relative_to(run)


@pytest.fixture(scope="module")
def runs(finished_runs, tmp_path_factory):
    return Runs(finished_runs, tmp_path_factory.mktemp("documented"))


def as_typed(command: Command, runs: Runs, tmp_path: Path) -> list[str]:
    """The command's argv with what it names mapped to the suite's: RUN (runs/NAME, RUN_DIR) to a copy of its
    kind of run, a committed run directory to a copy, a new --run-dir or --out to this test's folder."""
    argv, out = list(command.argv), []
    for i, word in enumerate(argv):
        before = argv[i - 1] if i else ""
        if before in ("--run-dir", "--out"):
            out.append(str(tmp_path / "new"))
        elif m := re.match(r"(runs/[^/:\s]+|RUN_DIR|RUN)(.*)", word):
            out.append(str(runs.of_kind(command.kind)) + m.group(2))
        elif word.startswith("docs/results/"):
            out.append(str(runs.committed(word)))
        else:
            out.append(word)
    return out


@pytest.fixture
def typed(command, runs, tmp_path) -> list[str]:
    """`as_typed` of the test's command, its runs copied before `train` and `evaluate` are planned (the copies
    are trained for real)."""
    return as_typed(command, runs, tmp_path)


@pytest.fixture
def planned_trains(typed, monkeypatch):
    """`metadisco train` that resolves and validates its config as the command does, checks a resume's stored
    config as a resume does, and builds the MetaTrainer, but compiles and writes nothing: [config, ...]."""
    from metadisco import train
    from metadisco.engine import MetaTrainer
    from metadisco.rundir import RunDir

    configs = []

    def planned(cfg, run_dir, resume=False, overwrite=False, **_):
        run = RunDir(run_dir)
        if resume:
            cfg = train.resume_config(run, cfg)
        else:
            run.refuse_existing(overwrite)
        MetaTrainer(run_plan(cfg))
        configs.append(cfg)
        return run.path

    monkeypatch.setattr(train, "run", planned)
    return configs


@pytest.mark.parametrize("command", once_each(DOCUMENTED + EPILOGS), ids=lambda c: c.id)
def test_every_documented_command_works_as_written(command, typed, runs, planned_trains, planned_evaluations,
                                                   monkeypatch, tmp_path, capsys):
    argv = typed
    # what an export of the distilled forms, or an evaluation of an export, reads: the page's distil and export
    if any("/export/" in a for a in argv) or (argv[0] == "export" and not {"--expression", "--value-loss",
                                                                           "--potential"} & set(argv)):
        runs.exported_of_kind(command.kind, capsys)
    monkeypatch.chdir(ROOT / command.cwd if command.cwd != "." else tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main puts the working directory on it
    code, out, err = cli([*argv, *(SMALL.get(argv[0], []) if argv[0] != "evaluate" else [])], capsys)  # planned
    assert code == 0, f"{command.id}\nran as: metadisco {shlex.join(argv)}\n{(out + err)[-3000:]}"

"""The README and the documentation pages, read as a reader reads them: every figure they show is
in the repository and says which command drew it, every plot `scripts/redraw-figures` redraws comes
from a run directory the repository holds, and no page names an issue number."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
# The pages a reader reads: the README and docs/'s hand-written pages. Not the tables `metadisco
# evaluate` writes (results.md beside results.json) or the raw benchmark records.
PAGES = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").rglob("*.md")
    if p.name != "results.md" and "benchmark_results" not in p.parts and "gpu_runs" not in p.parts)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.(?:png|svg|jpg))\)")
COMMAND = re.compile(r"`(?:metadisco |scripts/)[^`]*`")


def figures(page: Path):
    """(line number, target, the lines around it) of every image the page embeds."""
    lines = page.read_text().splitlines()
    for i, line in enumerate(lines):
        for target in IMAGE.findall(line):
            yield i + 1, target, lines[max(0, i - 2):i + 8]


def test_the_pages_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/results/index.md", "docs/results/minatar_drift.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_figure_is_in_the_repository_and_names_the_command_that_drew_it(page):
    for line, target, around in figures(page):
        assert (page.parent / target).is_file(), f"{page.name}:{line}: {target} is not in the repository"
        # a caption below the image, or (in a table) the heading cell above it
        assert COMMAND.search(" ".join(around)), \
            f"{page.name}:{line}: {target} names no command (`metadisco ...` or `scripts/...`) beside it"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_names_an_issue_number(page):
    found = re.findall(r"\bissues? ?#?\d+|\bissue\d+", page.read_text(), flags=re.IGNORECASE)
    assert not found, f"{page.name}: {found}"


def test_every_run_directory_the_redraw_script_plots_is_committed():
    script = "\n".join(line for line in (ROOT / "scripts/redraw-figures").read_text().splitlines()
                       if not line.lstrip().startswith("#"))
    runs = re.findall(r'plot "?(docs/results/[^"\s]+)', script)
    assert runs, "scripts/redraw-figures plots no run directory"
    for run in runs:
        for seed in ("0", "1", "2") if "$seed" in run else ("",):
            path = ROOT / run.replace("$seed", seed)
            assert (path / "config.json").is_file() and (path / "metrics.jsonl").is_file(), path


def readme_commands() -> list[list[str]]:
    """Every `metadisco ...` command in the README's bash blocks, as argv lists (comments, `&&` and
    `||` chains split off)."""
    import shlex

    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    out = []
    for block in blocks:
        for line in block.splitlines():
            for part in re.split(r"&&|\|\|", line.split(" #")[0]):
                words = shlex.split(part.strip()) if part.strip() else []
                if words[:1] == ["metadisco"]:
                    out.append(words[1:])
    return out


@pytest.mark.timeout(240)
def test_every_command_the_readme_gives_parses_and_its_config_or_objective_is_valid(monkeypatch, capsys):
    """As written, from a fresh clone: each command's options parse, each `train`'s experiment and
    overrides make a valid config (RUN and runs/... stand for a run of the reader's), and each
    `check` passes."""
    from metadisco.cli import build_parser, main
    from metadisco.config import demo, resolve

    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # the README's plug-in lives in examples/
    commands = readme_commands()
    assert {c[0] for c in commands} >= {"train", "evaluate", "plot", "distil", "export", "check"}
    for argv in commands:
        args = build_parser().parse_args(argv)  # SystemExit (a failure here) on an option that does not exist
        if argv[0] == "train" and not args.resume:
            named = args.experiment if args.experiment and "=" not in args.experiment else None
            overrides = [*([args.experiment] if args.experiment and not named else []), *args.overrides]
            resolve(named, overrides) if named else demo(overrides)
        elif argv[0] == "check":
            main(argv)
            assert "constraint holds" in capsys.readouterr().out

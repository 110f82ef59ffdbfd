"""The README and the documentation pages, read as a reader reads them: every figure they show is
in the repository and says which command drew it, every plot `scripts/redraw-figures` redraws comes
from a run directory the repository holds, and no page names an issue number."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
# The pages a reader reads: the README and docs/'s hand-written pages. Not the tables `metadisco
# evaluate` writes (results.md beside results.json) or the raw benchmark records.
PAGES = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").rglob("*.md")
    if p.name != "results.md" and "benchmark_results" not in p.parts and "gpu_runs" not in p.parts)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.(?:png|svg|jpg))\)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
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


def links(page: Path):
    """(line number, target without its #anchor) of every relative link of a page, outside code."""
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    for m in LINK.finditer(text):
        target = m.group(1)
        if not re.match(r"[a-z]+:|#", target):
            yield text.count("\n", 0, m.start()) + 1, target.partition("#")[0]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves_in_a_clone(page):
    """As a clone or a code host shows the page: a link to a page the site generates (cli.md,
    config.md, ...) finds the stub docs/ holds for it (docs/hooks.py replaces it on the site)."""
    for line, target in links(page):
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)}:{line}: {target} is not in the clone"


def test_the_links_of_a_page_are_found():
    assert ("config.md" in {t for _, t in links(ROOT / "docs/train.md")}
            and "docs/guide.md" in {t for _, t in links(ROOT / "README.md")})


def test_every_stub_of_a_generated_page_is_replaced_on_the_site():
    generated = re.findall(r'\("(\w+\.md)", \w+\)', (ROOT / "docs/hooks.py").read_text())
    assert {"cli.md", "config.md", "objectives.md", "changelog.md"} <= set(generated)
    for name in generated:
        stub = ROOT / "docs" / name
        assert not stub.exists() or "when the documentation site is" in stub.read_text(), stub


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


# What the README's commands name that is the reader's own: a run directory they made (runs/RUN).
PLACEHOLDER = "runs/"
# Commands that compute nothing (listings, a check at one objective's start, help): run as written.
CHEAP = {"check", "experiments", "envs", "objectives", "zoo"}


def readme_commands() -> list[tuple[Path, list[str]]]:
    """Every `metadisco ...` command in the README's bash blocks, as (the folder a reader types it
    in, argv): a `cd DIR` line moves the commands after it, as it moves the reader's shell; comments,
    `&&` and `||` chains split off."""
    import shlex

    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    out, cwd = [], ROOT
    for block in blocks:
        for line in block.splitlines():
            for part in re.split(r"&&|\|\|", line.split(" #")[0]):
                words = shlex.split(part.strip()) if part.strip() else []
                if words[:1] == ["cd"]:
                    cwd = (cwd / words[1]).resolve()
                elif words[:1] == ["metadisco"]:
                    out.append((cwd, words[1:]))
    return out


def test_every_cheap_command_the_readme_gives_runs_as_written():
    """In a fresh process, from the folder the README puts the reader in: `metadisco check
    my_drifts:ScaledSquare` after its `cd examples` (not from the root, where no my_drifts is)."""
    from tests.helpers import metadisco

    cheap = [(cwd, argv) for cwd, argv in readme_commands() if argv[0] in CHEAP or "--help" in argv]
    assert {argv[0] for _, argv in cheap} >= {"check"}
    for cwd, argv in cheap:
        done = metadisco(*argv, cwd=cwd, timeout=200)
        assert done.returncode == 0, f"metadisco {' '.join(argv)} in {cwd.relative_to(ROOT)}/: {done.stderr[-2000:]}"


def test_every_command_the_readme_gives_parses_and_what_it_names_is_there(monkeypatch):
    """As written, from a fresh clone, in the folder the README puts the reader in: each command's
    options parse, each `train`'s experiment and overrides make a valid config, each `evaluate`'s
    targets and environments resolve, and every run directory named is committed or the reader's
    own (runs/...)."""
    import sys

    from metadisco.analysis.targets import resolve_target
    from metadisco.cli import build_parser
    from metadisco.config import demo, resolve
    from metadisco.inner_loops import check_env_name

    commands = readme_commands()
    assert {c[0] for _, c in commands} >= {"train", "evaluate", "plot", "distil", "export", "check"}
    for cwd, argv in commands:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "path", [str(cwd), *sys.path])  # as the command line imports plug-ins
        args = build_parser().parse_args(argv)  # SystemExit (a failure here) on an option that does not exist
        runs = [a for a in (getattr(args, "run_dir", None), getattr(args, "resume", None), *getattr(args, "targets", ()))
                if a and "/" in a]
        for run in runs:
            assert run.startswith(PLACEHOLDER) or (cwd / run / "config.json").is_file(), f"{argv}: {run}"
        if argv[0] == "train" and not args.resume:
            named = args.experiment if args.experiment and "=" not in args.experiment else None
            overrides = [*([args.experiment] if args.experiment and not named else []), *args.overrides]
            resolve(named, overrides) if named else demo(overrides)
        elif argv[0] == "evaluate":
            for target in args.targets:
                if not target.startswith(PLACEHOLDER):
                    resolve_target(target)
            for env in (args.envs or "").split(","):
                if env:
                    check_env_name(env)

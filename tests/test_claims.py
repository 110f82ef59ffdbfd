"""Every number the README and the results pages quote comes from committed data, so that a number edited by
hand fails here.

**Rendered blocks.** A block between `<!-- rendered by SCRIPT: begin NAME -->` and `<!-- rendered by SCRIPT:
end NAME -->` is what SCRIPT's `render(NAME)` makes from the committed data: the README's demo table,
docs/results/demo.md's record and the index's demo sentence, by scripts/demo-summary from docs/results/demo.
Each is rendered again here and must be the same text (`SCRIPT --write` puts it back).

**Everything else is found whole** in the data its text cites. A claim is
- an interval `x [low, high]`: the three numbers, each with its sign, within a few lines of one another
  (WINDOW characters) in one file;
- a count `k of n`: that phrase, or `k/n`, in one file;
- a range `a to b` or `a-b` (an end signed or with a decimal point): both ends, with their signs, in one
  file;
- on the demo's pages (the README's demo section and docs/results/demo.md), a value: every other number
  with a sign or a decimal point, with its sign.
A number is found at the digits shown (they fix its rounding), and its sign is its own: -46.2 is not +46.2.
What a claim may be found in: the files its block (a paragraph, list item, table row or fenced block) cites,
and those its section (from one heading to the next) cites; where neither cites anything, those its page
cites. A block cites its relative links and the data paths it names (docs/results/..., zoo/records/..., or a
path that exists beside the page): a file, or every data file under a folder but a run's parameters
(objectives/, export/, checkpoints/). A results page cited is data too (its own numbers are checked here in
turn); the hand-written guides are not.
Not claims: numbers in inline code and in commands (settings as typed), link targets, wall-clock times (a
number followed by s, min or h), version numbers. A number whose data is not committed says so where it
stands: a paragraph, list item or table row holding "†" (the page's legend says what it means), or a page
that opens with "> **Unverifiable:**" for every number on it.
"""

import importlib.util
import re
import sys
from functools import cache
from importlib.machinery import SourceFileLoader
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "results").glob("*.md"))]
UNVERIFIABLE_PAGE = "> **Unverifiable:**"
UNVERIFIABLE_LINE = "†"
# Where every number with a sign or a decimal point is a claim, a value: the pages whose every number is the
# demo's record (a page's section from its heading to the next "## ", or the whole page)
VALUES = {"README.md": "## What the demo shows", "docs/results/demo.md": None}

RENDERED = re.compile(r"<!-- rendered by (?P<script>[\w./-]+): begin (?P<name>[\w-]+) -->(?P<body>.*?)"
                      r"<!-- rendered by (?P=script): end (?P=name) -->", re.S)
MARKER = re.compile(r"<!-- rendered by [\w./-]+: (?:begin|end) [\w-]+ -->")

NUMBER = r"(?<![\w.])[+\-−]?\d+(?:\.\d+)?(?:e[+\-]?\d+)?"
_N = rf"({NUMBER})"
CLAIMS = {  # in this order: a number in an interval is not a range's or a value's too
    "interval": re.compile(rf"{_N}\s*\[{_N},\s*{_N}\]"),
    "count": re.compile(r"(?<![\w.])(\d+) of (\d+)\b"),
    "range": re.compile(rf"{_N}(?: to |[-–]){_N}"),
    "value": re.compile(_N),
}
TIME = re.compile(r"\s?(?:ms|s|min|minutes?|seconds?|h|hours?)\b")
WINDOW = 400
LINK = re.compile(r"\]\(([^)#\s]+)")
NAMED = re.compile(r"(?:docs/results|zoo/records)/[\w./\-]+")
CODE_PATH = re.compile(r"`([\w.\-]+/[\w./\-]+)`")
DATA = {".json", ".jsonl", ".md", ".csv", ".txt", ".log"}
PARAMETERS = {"objectives", "export", "checkpoints"}
COMMAND = re.compile(r"\s*(?:\$|metadisco\b|scripts/|\.venv/|benchmarks/|make\b|python|cd\b|git\b|--|"
                     r"[A-Z_]+=)")  # a line of a fenced block that a reader types


# --- rendered blocks ---------------------------------------------------------------------------------

@cache
def renderer(script: str):
    """The script named in a marker, imported (scripts/ hold no .py names)."""
    path = ROOT / script
    loader = SourceFileLoader("rendered_by_" + re.sub(r"\W", "_", script), str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    sys.modules[loader.name] = module
    loader.exec_module(module)
    return module


@cache
def render(script: str, name: str) -> str:
    return renderer(script).render(name)


def stale_blocks(page: Path, text: str) -> list[str]:
    """The rendered blocks of `text` that are not what their script renders now; markers left unpaired."""
    bad = []
    for m in RENDERED.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        body = render(m["script"], m["name"])
        expected = f"\n{body}\n" if m["body"].startswith("\n") else body
        if m["body"] != expected:
            bad.append(f"{page.name}:{line}: the block {m['name']} is not what {m['script']} renders from its "
                       f"data (run {m['script']} --write; never edit it by hand)")
    if len(MARKER.findall(text)) != 2 * len(RENDERED.findall(text)):
        bad.append(f"{page.name}: a rendered block's begin or end marker is missing or misspelt")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_rendered_block_is_what_its_script_renders_from_the_data(page):
    bad = stale_blocks(page, page.read_text())
    assert not bad, "\n".join(bad)


def test_the_demos_numbers_are_rendered_wherever_they_are_quoted():
    """The README's demo table, demo.md's record and the index's demo sentence are rendered, not written,
    and docs/results/demo/summary.md is what scripts/demo-summary prints (scripts/demo-record writes it so)."""
    names = {(p.name, m["name"]) for p in PAGES for m in RENDERED.finditer(p.read_text())}
    assert {("README.md", "demo-table"), ("demo.md", "demo-record"), ("index.md", "demo-index")} <= names
    summary = (ROOT / "docs/results/demo/summary.md").read_text()
    assert summary == render("scripts/demo-summary", "demo-record") + "\n", (
        "docs/results/demo/summary.md is not what scripts/demo-summary renders from docs/results/demo "
        "(run scripts/demo-summary --write)")


# --- numbers found whole -----------------------------------------------------------------------------

def blocks(text: str) -> list[tuple[int, str, int, bool]]:
    """(first line, text, section, fenced) of each paragraph, list item, table row, heading and fenced
    block: a claim may wrap across the lines of a paragraph, and a mark covers the block it stands in."""
    out, start, lines, fence, section = [], None, [], False, 0
    for i, line in enumerate(text.splitlines() + [""], 1):
        s = line.strip()
        if fence:
            lines.append(line)
            if s.startswith("```"):
                out.append((start, "\n".join(lines), section, True))
                start, lines, fence = None, [], False
            continue
        if lines and (not s or s.startswith(("|", "#", "```")) or re.match(r"\s*(?:[-*]|\d+\.) ", line)):
            out.append((start, " ".join(lines), section, False))
            start, lines = None, []
        if s.startswith("```"):
            start, lines, fence = i, [line], True
        elif s.startswith(("|", "#")):
            section += s.startswith("#")
            out.append((i, line, section, False))
        elif s:
            start, lines = start or i, lines + [line]
    return out


def cited(text: str, page: Path) -> list[Path]:
    """What a piece of a page cites: its relative links and the data paths it names, each an existing file
    or folder (a named file's folder where the file is not there: a results page names files inside it)."""
    paths = [page.parent / link for link in LINK.findall(text) if "://" not in link]
    paths += [ROOT / name.rstrip(".") for name in NAMED.findall(text)]
    paths += [page.parent / name for name in CODE_PATH.findall(text) if (page.parent / name).exists()]
    out = []
    for p in paths:
        p = (p if p.exists() else p.parent).resolve()
        if p.exists() and p != page.resolve() and p not in (ROOT, ROOT / "docs") and data_files(p):
            out.append(p)
    return list(dict.fromkeys(out))


@cache
def data_files(p: Path) -> tuple[Path, ...]:
    """The data files at or under `p`: not a run's parameters, nor a hand-written guide (docs/*.md)."""
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file()
                                           and not PARAMETERS & set(f.relative_to(p).parts[:-1]))
    return tuple(f for f in files if f.suffix in DATA and f.stat().st_size < 20_000_000
                 and not (f.suffix == ".md" and f.parent in (ROOT, ROOT / "docs")))


@cache
def contents(f: Path) -> tuple[str, np.ndarray, np.ndarray]:
    """A file's text, and every number in it with its sign, and where it stands."""
    text = f.read_text(errors="ignore").replace("−", "-")
    found = list(re.finditer(NUMBER, text))
    return text, np.array([float(m[0]) for m in found]), np.array([m.start() for m in found])


def at(shown: str, f: Path) -> np.ndarray:
    """Where in `f` the number `shown` stands (as printed: its digits fix its rounding, its sign is its
    own)."""
    shown = shown.replace("−", "-")
    mantissa, _, exponent = shown.partition("e")
    decimals = len(mantissa.partition(".")[2])
    tol = 0.5 * 10.0 ** (int(exponent or 0) - decimals) * (1 + 1e-9)
    _, values, where = contents(f)
    return where[np.abs(values - float(shown)) <= tol]


def found(kind: str, shown: str, numbers: tuple[str, ...], files) -> bool:
    """Whether the claim is whole in one of `files`."""
    for f in files:
        if kind == "count":
            k, n = numbers
            if re.search(rf"(?<![\w.]){k}(?: of |/){n}\b", contents(f)[0]):
                return True
        elif kind == "interval":
            x, low, high = (at(s, f) for s in numbers)
            if any((np.abs(low - p) <= WINDOW).any() and (np.abs(high - p) <= WINDOW).any() for p in x):
                return True
        elif all(len(at(s, f)) for s in numbers):
            return True
    return False


def claims(text: str, fenced: bool, values: bool) -> list[tuple[str, str, tuple[str, ...]]]:
    """(kind, as shown, its numbers) of every claim in a block."""
    if fenced:  # a console's output: its command lines are what a reader types
        text = "\n".join("" if COMMAND.match(line) else line for line in text.splitlines()[1:-1])
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    out, taken = [], []
    for kind, pattern in CLAIMS.items():
        for m in pattern.finditer(text):
            numbers = m.groups()
            if any(m.start() < end and m.end() > start for start, end in taken):
                continue
            taken.append(m.span())  # what is not a claim here is not a smaller one either
            measured = TIME.match(text, m.end()) or re.match(r"\.\d", text[m.end():])  # a time, a version
            if kind in ("range", "value") and (measured or not any("." in s or s[0] in "+-−" for s in numbers)):
                continue
            if kind != "value" or values:
                out.append((kind, m[0], numbers))
    return out


def named(p: Path) -> str:
    return p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else p.name


def value_lines(name: str, text: str) -> range:
    """The lines of a page where every number with a sign or a decimal point is a claim (VALUES)."""
    if name not in VALUES:
        return range(0)
    lines = text.splitlines()
    if VALUES[name] is None:
        return range(1, len(lines) + 1)
    start = next((i for i, line in enumerate(lines, 1) if line.startswith(VALUES[name])), None)
    assert start, f"{name} has no section {VALUES[name]!r} (tests/test_claims.py's VALUES names it)"
    end = next((i for i, line in enumerate(lines, 1) if i > start and line.startswith("## ")), len(lines) + 1)
    return range(start, end)


def unsupported(page: Path, text: str | None = None) -> list[str]:
    """The claims of `page` (or of `text` read as if it stood there) not found whole in the data they cite,
    outside rendered blocks and marked blocks."""
    text = page.read_text() if text is None else text
    if text.lstrip().startswith(UNVERIFIABLE_PAGE):
        return []
    text = RENDERED.sub(lambda m: "\n" * m[0].count("\n"), text)
    every = blocks(text)
    sections = {}
    for _, block, section, _ in every:
        sections.setdefault(section, []).extend(cited(block, page))
    whole_page = cited(text, page)
    name, values_at = named(page), value_lines(named(page), text)
    bad = []
    for line, block, section, fenced in every:
        if UNVERIFIABLE_LINE in block:
            continue
        sources = list(dict.fromkeys(cited(block, page) + sections[section])) or whole_page
        files = [f for p in sources for f in data_files(p)]
        values = line in values_at
        for kind, shown, numbers in claims(block, fenced, values):
            if (name == "README.md" and not values and kind != "interval") or found(kind, shown, numbers, files):
                continue  # the README's guide sections: intervals only
            bad.append(f"{name}:{line}: {kind} {shown!r} is not in "
                       f"{', '.join(map(named, sources)) or 'any data: the text cites none'}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_number_outside_a_rendered_block_is_found_whole_in_the_data_its_text_cites(page):
    bad = unsupported(page)
    assert not bad, ("claims not found whole in the data their paragraph or section cites (cite the data, "
                     f"fix the number to it, or mark the line with {UNVERIFIABLE_LINE} and say why in the page's "
                     "legend):\n" + "\n".join(bad))
    legend = rf"{UNVERIFIABLE_LINE}[^|\n]*(not committed|no committed|unverifiable)"
    if UNVERIFIABLE_LINE in page.read_text():
        assert re.search(legend, page.read_text()), (
            f"{page.name} marks numbers {UNVERIFIABLE_LINE} without a legend that says why")


# --- the checks themselves ---------------------------------------------------------------------------

def test_a_claim_is_found_whole_or_not_at_all(tmp_path):
    """Each number of a claim, with its sign, in one file: not its ends in two files, not its magnitude."""
    (tmp_path / "a.json").write_text('{"diff": {"value": 55.17, "low": 51.51, "high": 58.83}, '
                                     '"n": "5 of 5", "lo": -0.62, "k": 4}')
    (tmp_path / "b.json").write_text('{"x": 0.73, "y": 2.9, "d": {"value": 1.25, "low": 0.5, "high": 2.0}}')
    page = tmp_path / "page.md"

    def bad(line):
        return unsupported(page, f"{line} ([a](a.json), [b](b.json))\n")

    assert not bad("+55.17 [+51.51, +58.83]; 5 of 5; -0.62 to +58.83")
    for edit in ("+55.17 [+51.51, +58.88]", "-55.17 [+51.51, +58.83]", "4 of 5", "-0.62 to +2.9",
                 "+0.62 to +58.83"):
        assert bad(edit), edit
    assert unsupported(page, "| seeds | +55.2 [+51.5, +58.8] |\n"), "a claim whose text cites nothing"
    (tmp_path / "c.json").write_text('{"value": 55.17, ' + '"pad": 0, ' * WINDOW + '"low": 51.51, "high": 58.83}')
    assert unsupported(page, "+55.17 [+51.51, +58.83] ([c](c.json))\n"), "an interval's ends far apart"
    sections = "## one\n\nfrom [b](b.json):\n\n| {} |\n\n## two\n\n[a](a.json)\n"
    assert not unsupported(page, sections.format("+1.25 [+0.5, +2.0]")), "a table row: what its section cites"
    assert unsupported(page, sections.format("+55.17 [+51.51, +58.83]")), "what another section cites"


def test_a_number_is_checked_where_it_is_a_claim_only():
    text = ("```\nmetadisco train --seed 1.5\nverdict: +1.25 [+0.5, +2.0] in 3 of 4\n```\n")
    (_, block, _, fenced), = blocks(text)
    assert [c[1] for c in claims(block, fenced, values=True)] == ["+1.25 [+0.5, +2.0]", "3 of 4"]
    prose = "took 1.7-1.8 s, jax 0.11.2, `lr 2.5e-3`, [x](run_0.5/a.json); moved -0.6 to +2.9 and by 0.25"
    assert [c[1] for c in claims(prose, False, values=True)] == ["-0.6 to +2.9", "0.25"]
    assert [c[1] for c in claims(prose, False, values=False)] == ["-0.6 to +2.9"]


README_EDITS = {  # realistic hand edits of the README's demo section: each must fail the checks
    "P(> PPO) 0.90 to 0.80": ("P(> PPO) 0.90 to 1.00", "P(> PPO) 0.80 to 1.00"),
    "held out in 4 of 5": ("interval above 0.5 in 5 of 5", "interval above 0.5 in 4 of 5"),
    "held-out mean -133.2": ("-136.2 to -167.6", "-133.2 to -167.6"),
    "R² 0.57": ("R² 0.47-0.75", "R² 0.57-0.75"),
    "a digit in a range": ("-140.1 to -164.1", "-140.1 to -164.7"),
    "a count elsewhere": ("FOUND in 5 of 5", "FOUND in 4 of 5"),
    "a sign": ("difference +46.2 to", "difference -46.2 to"),
    "an interval in the console excerpt": ("+55.17 [+51.51, +58.83] (95%", "+55.17 [+51.51, +58.38] (95%"),
    "a sign in the console excerpt": ("ES mean -143.4 vs", "ES mean +143.4 vs"),
}


def problems(page: Path, text: str) -> list[str]:
    return stale_blocks(page, text) + unsupported(page, text)


def test_the_readme_as_committed_passes():
    assert not problems(ROOT / "README.md", (ROOT / "README.md").read_text())


@pytest.mark.parametrize("edit", README_EDITS, ids=README_EDITS)
def test_a_hand_edit_of_the_readmes_demo_numbers_fails(edit, tmp_path):
    old, new = README_EDITS[edit]
    copy = tmp_path / "README.md"
    copy.write_text((ROOT / "README.md").read_text().replace(old, new, 1))
    assert old in (ROOT / "README.md").read_text() and copy.read_text() != (ROOT / "README.md").read_text()
    assert problems(ROOT / "README.md", copy.read_text()), f"{old!r} -> {new!r} passed the checks"

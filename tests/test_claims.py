"""Every interval the README and the results pages quote comes from committed data.

A claim on a page is a number with its 95% interval, `x [low, high]`. Each of the three numbers must be
found (at the digits shown) in the data the page cites: the files and run directories it links or names
under docs/results/ or zoo/records/ (their results.json, metrics.jsonl, summary.md, ...). So a number edited
by hand, or quoted from a run whose data is not in the repository, fails here. A number whose data is not
committed says so where it stands: a paragraph, list item or table row holding "†" (the page's legend says
what it means), or a page that opens with "> **Unverifiable:**" for every number on it.
"""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "results").glob("*.md"))]
NUMBER = r"[+\-−]?\d+(?:\.\d+)?"
TRIPLE = re.compile(rf"({NUMBER})\s*\[({NUMBER}),\s*({NUMBER})\]")
LINK = re.compile(r"\]\(([^)#\s]+)")
NAMED = re.compile(r"(?:docs/results|zoo/records)/[\w./\-]+")
DATA = {".json", ".jsonl", ".md", ".csv", ".txt"}
UNVERIFIABLE_PAGE = "> **Unverifiable:**"
UNVERIFIABLE_LINE = "†"


def cited(page: Path) -> list[Path]:
    """What a page cites: its relative links and the data paths it names, each an existing file or folder."""
    text = page.read_text()
    paths = [(page.parent / link) for link in LINK.findall(text) if "://" not in link]
    paths += [ROOT / name.rstrip(".") for name in NAMED.findall(text)]
    out = []
    for p in paths:
        p = p if p.exists() else p.parent  # a named file's folder: a results page names files inside it
        if p.exists() and p.resolve() != page.resolve() and p.resolve() != ROOT:
            out.append(p.resolve())
    return out


def numbers_in(paths: list[Path]) -> list[float]:
    """Every number written in the data files at or under `paths`."""
    files = set()
    for p in paths:
        files |= {f for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file() and f.suffix in DATA}
    values = []
    for f in files:
        if f.stat().st_size < 20_000_000:
            values += [float(m.replace("−", "-")) for m in re.findall(rf"{NUMBER}(?:e[+\-]?\d+)?", f.read_text(
                errors="ignore"))]
    return values


def found(shown: str, values) -> bool:
    """Whether `shown` (as printed: its digits fix the rounding) is one of `values`, up to its sign."""
    shown = shown.replace("−", "-")
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    v, tol = abs(float(shown)), 0.5 * 10 ** -decimals + 1e-9
    return any(abs(abs(x) - v) <= tol for x in values)


def blocks(text: str):
    """(first line number, text) of each paragraph or list item, and of each table row alone: an interval may
    wrap across the lines of a paragraph, and a mark covers the block it stands in."""
    start, lines = None, []
    for i, line in enumerate(text.splitlines() + [""], 1):
        if not line.strip() or line.lstrip().startswith(("|", "- ", "* ", "#")) or re.match(r"\s*\d+\. ", line):
            if lines:
                yield start, " ".join(lines)
            start, lines = i, [line] if line.strip() else []
            if line.lstrip().startswith(("|", "#")):
                yield i, line
                start, lines = None, []
        else:
            start, lines = start or i, lines + [line]


def unsupported(page: Path) -> list[str]:
    """The blocks of `page` with an interval whose numbers are not in the data it cites (and not marked)."""
    text = page.read_text()
    if text.lstrip().startswith(UNVERIFIABLE_PAGE):
        return []
    values = sorted(set(numbers_in(cited(page))))
    return [f"{page.relative_to(ROOT)}:{i}: {' '.join(m.group(0) for m in TRIPLE.finditer(block))}"
            for i, block in blocks(text)
            if UNVERIFIABLE_LINE not in block
            and any(not found(x, values) for m in TRIPLE.finditer(block) for x in m.groups())]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_quoted_interval_is_in_the_data_its_page_cites(page):
    bad = unsupported(page)
    assert not bad, ("intervals not found in the data the page cites (cite the data, or mark the line with "
                     f"{UNVERIFIABLE_LINE} and say why in the page's legend):\n" + "\n".join(bad))
    if UNVERIFIABLE_LINE in page.read_text():
        assert re.search(rf"{UNVERIFIABLE_LINE}[^|\n]*(not committed|no committed|unverifiable)", page.read_text()), (
            f"{page.name} marks numbers {UNVERIFIABLE_LINE} without a legend that says why")


def test_a_number_edited_by_hand_is_caught(tmp_path):
    """The check itself: a quoted interval moved by one digit is no longer in the data it cites."""
    data = tmp_path / "results.json"
    data.write_text('{"p": 0.62, "low": 0.50, "high": 0.73}')
    page = tmp_path / "page.md"
    page.write_text("P(> PPO) 0.62 [0.50, 0.73] ([data](results.json))\n")
    values = numbers_in(cited(page))
    line = page.read_text()
    assert all(found(x, values) for m in TRIPLE.finditer(line) for x in m.groups())
    assert not all(found(x, values) for x in ("0.63", "0.50", "0.73"))


def test_the_readmes_demo_numbers_are_the_demo_records():
    """Every number with a decimal point in the README's demo section is in the record it quotes
    (docs/results/demo: scripts/demo-record's summary.md, seed 0's console output and its runs' files)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## What the demo shows"):text.index("## The four workflows")]
    values = numbers_in([ROOT / "docs" / "results" / "demo"])
    quoted = re.findall(rf"{NUMBER}", section.replace("R²", ""))
    missing = [x for x in quoted if "." in x and not found(x, values)]
    assert not missing, f"the README's demo section quotes numbers that are not in docs/results/demo: {missing}"

"""mkdocs hooks: the pages generated from the code at build time, so that they cannot go stale.

- config.md, the configuration reference: every field of the run schema
  (metadisco.core.run_config) with its type, default and meaning. A field's meaning is the
  comment beside it in the source (or on the lines above it); a field without one fails the build.
- objectives.md, the objectives reference: every built-in objective, from the function that
  `metadisco objectives NAME` prints (metadisco.commands.objectives.describe).
- cli.md, the command-line reference: every verb, argument and option, read from the parser that
  `metadisco` itself builds, and the evaluation suites from their one table (analysis.suites).
- index.md, the front page: README.md, and changelog.md: CHANGELOG.md, with their links made
  relative to docs/ (a link to a file outside docs/ becomes its path as code).

docs/ holds a stub of each generated page that a page links to (config.md, cli.md, ...), which says
where its content comes from, so that the link works in a clone and on a code host too; the
generated page replaces it on the site.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import runpy
import tokenize
import typing
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent


def link_layout() -> None:
    """Link the installed layout into .docs-src/ (mkdocstrings reads the source from there):
    scripts/link-layout, which lays each package out where pyproject.toml's package-dir installs
    it. Run when mkdocs loads this file, before any plugin looks for the source."""
    runpy.run_path(str(ROOT / "scripts" / "link-layout"))["link_layout"](ROOT / ".docs-src")


link_layout()


def on_files(files, config):
    for name, render in (("index.md", front_page), ("config.md", config_reference), ("objectives.md", objectives_reference),
                         ("cli.md", cli_reference), ("changelog.md", changelog)):
        stub = files.get_file_from_path(name)
        if stub is not None:
            files.remove(stub)
        files.append(File.generated(config, name, content=render()))
    return files


# --- the command-line reference ----------------------------------------------------------------


def cli_reference() -> str:
    import argparse

    from metadisco.analysis import suites
    from metadisco.cli import build_parser

    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    out = ["# Command-line reference", "",
           "Every command, argument and option of `metadisco`, read from the parser the command itself builds "
           "when this site is built (`metadisco VERB --help` prints the same). What each workflow is for: "
           "[the user guide](guide.md); every config field an override can set: [configuration](config.md).", ""]
    helps = {a.dest: a.help for a in verbs._choices_actions}  # noqa: SLF001  (each verb's one-line help)
    for name, sub in verbs.choices.items():
        out += [f"## `metadisco {name}`", "", _cell(sub.description or helps.get(name) or ""), "",
                "```", sub.format_usage().strip(), "```", "",
                "| argument | default | meaning |", "|---|---|---|"]
        for action in sub._actions:  # noqa: SLF001
            if isinstance(action, argparse._HelpAction):  # noqa: SLF001
                continue
            flags = ", ".join(f"`{f}`" for f in action.option_strings) or f"`{action.metavar or action.dest}`"
            if action.choices and not isinstance(action.choices, dict):
                flags += " (" + " \\| ".join(map(str, action.choices)) + ")"
            default = "" if action.default in (None, argparse.SUPPRESS, False) or action.required else f"`{action.default}`"
            meaning = (action.help or "").replace("\n", " ") % {"default": action.default, "prog": sub.prog}
            out.append(f"| {flags} | {default} | {_cell(meaning)} |")
        if sub.epilog:
            out += ["", "```", sub.epilog.strip(), "```"]
        out.append("")
    out += ["## Evaluation suites", "",
            f"What `metadisco evaluate --suite NAME` (`--quick`: the quick suite) trains on, {suites.DEFAULT_SEEDS} "
            "seeds a method by default (`--seeds`), from the table that the command reads "
            "(`metadisco.analysis.suites.TABLE`). A budget is environment steps per training run.", "",
            "| suite | what it is for |", "|---|---|",
            *(f"| {name} | {text} |" for name, text in suites.DESCRIPTIONS.items()), "",
            suites.markdown_table(), ""]
    return "\n".join(out) + "\n"


# --- the configuration reference ---------------------------------------------------------------


def field_comments(cls) -> dict[str, str]:
    """{field: the comment beside it, or on the comment lines right above it} of a class's
    annotated fields, read from its module's source."""
    path = inspect.getsourcefile(cls)
    source = Path(path).read_text()
    lines = source.splitlines()
    trailing = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and lines[tok.start[0] - 1][: tok.start[1]].strip():
            trailing[tok.start[0]] = tok.string.lstrip("#").strip()
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    out = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above, i = [], stmt.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
        text = " ".join(above + [trailing[n] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in trailing])
        if text:
            out[stmt.target.id] = text
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def _type(tp) -> str:
    text = getattr(tp, "__name__", None) if not typing.get_args(tp) else None
    return text or str(tp).replace("typing.", "").replace("metadisco.core.run_config.", "")


def _value(v) -> str:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return "section"
    return f"`{v}`" if type(v).__name__ == "PlugChoice" else f"`{v!r}`"


def config_reference() -> str:
    from metadisco.core.ppo_config import PRESETS, PPOConfig, PPOHyperparams
    from metadisco.core.run_config import FIXED_PPO_FIELDS, InnerConfig, RunConfig

    out = [
        "# Configuration reference",
        "",
        "Every field of a run's config, generated from its schema (`metadisco.core.run_config`) when "
        "this site is built. A run is the defaults below, then an experiment file "
        "(`metadisco train NAME`, experiments/NAME.toml), then `FIELD=VALUE` overrides on the command line; "
        "a section's fields are set with dots (`es.population_size=32`) or as a TOML table (`[es]`). "
        "The run directory stores the result as config.json. See [the user guide](guide.md) for the commands.",
        "",
    ]
    default = RunConfig()
    sections = []
    out += _section_table(RunConfig, default, "", sections)
    for name, cls, value in sections:
        out += ["", f"## `{name}`", "", inspect.cleandoc(cls.__doc__ or ""), ""]
        if cls is InnerConfig:
            out += _inner_table(value, PPOConfig, PPOHyperparams, PRESETS, FIXED_PPO_FIELDS)
        else:
            out += _section_table(cls, value, f"{name}.", [])
    return "\n".join(out) + "\n"


def _section_table(cls, value, prefix: str, sections: list) -> list[str]:
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        v = getattr(value, f.name)
        if dataclasses.is_dataclass(hints[f.name]) and type(v).__name__ != "PlugChoice":
            sections.append((prefix + f.name, hints[f.name], v))
            meaning = inspect.getdoc(hints[f.name]).split("\n\n")[0].replace("\n", " ")
            rows.append(f"| [`{prefix + f.name}`](#{prefix + f.name}) | section | | {_cell(meaning)} |")
            continue
        if f.name not in comments:
            raise ValueError(f"config reference: {cls.__name__}.{f.name} has no comment saying what it means "
                             f"(add one beside it in {inspect.getsourcefile(cls)})")
        rows.append(f"| `{prefix + f.name}` | {_cell(_type(hints[f.name]))} | {_cell(_value(v))} | "
                    f"{_cell(comments[f.name])} |")
    return rows


def _inner_table(value, ppo, hyper, presets, fixed) -> list[str]:
    comments = field_comments(ppo) | field_comments(hyper)
    hints = typing.get_type_hints(ppo) | typing.get_type_hints(hyper)
    names = [f.name for f in dataclasses.fields(ppo) if f.name not in (*fixed, "hparams")] + list(hyper._fields)
    run_default = value.overrides()
    out = ["Each environment's preset (`metadisco.core.ppo_config.PRESETS`, PureJaxRL's published settings; "
           "`metadisco envs` says which an environment uses) sets every field; an `inner.NAME=VALUE` "
           "overrides it for every environment of the run. "
           + (f"The default run (the demo) overrides {', '.join(f'`{k}={v!r}`' for k, v in run_default.items())}."
              if run_default else ""),
           "",
           "| field | type | " + " | ".join(presets) + " | meaning |",
           "|---|---|" + "---|" * len(presets) + "---|"]
    for name in names:
        if name not in comments:
            raise ValueError(f"config reference: PPO setting {name} has no comment saying what it means")
        cells = []
        for preset in presets.values():
            v = getattr(preset.hparams, name) if name in hyper._fields else getattr(preset, name)
            cells.append(_cell(f"`{v!r}`"))
        out.append(f"| `inner.{name}` | {_cell(_type(hints[name]))} | " + " | ".join(cells)
                   + f" | {_cell(comments[name])} |")
    return out


# --- the objectives reference ------------------------------------------------------------------


def objectives_reference() -> str:
    from metadisco.commands.objectives import describe
    from metadisco.meta_objectives import PLUGS, families
    from metadisco.meta_objectives.base import listing

    out = [
        "# Objectives reference",
        "",
        "Every built-in objective, per plug point: what `metadisco objectives NAME` prints, generated when "
        "this site is built. A config names one as `objectives.PLUG=NAME` and sets its options as "
        "`objectives.PLUG.OPTION=VALUE`; [writing your own](plugins.md) says how to add one. "
        "Parameters are those of the objective at its start (its default options).",
        "",
        "## Search spaces for small budgets",
        "",
        "```text",
        inspect.cleandoc(families.__doc__),
        "```",
    ]
    rows = [(plug, name) for plug, name, source in listing() if source.kind == "built-in"]
    for plug in PLUGS:
        out += ["", f"## {plug}"]
        for p, name in rows:
            if p != plug:
                continue
            (d,) = describe(name, plug)
            out += ["", f"### `{name}` ({plug}): {d.title}", "", "```text", d.doc, "```", ""]
            if d.options:
                out += [f"Options (`objectives.{plug}.OPTION=VALUE`):", "", "| option | type | default |", "|---|---|---|"]
                out += [f"| `{k}` | {tp} | {_cell(f'`{v!r}`')} |" for k, tp, v in d.options]
            else:
                out += ["Options: none."]
            out += ["", f"Parameters at the start: {d.size}" + (":" if d.parameters else ".")]
            if d.parameters:
                out += [""] + [f"- `{path}`: shape `{shape}`" for path, shape in d.parameters]
            if d.closed_form is not None:
                out += ["", f"At the start, as one expression: `{d.closed_form}`"]
            out += ["", "Every member is a valid objective of its plug point." if d.valid_for_every_member else
                    "Members away from the start may break their plug's constraints (`metadisco check` says which)."]
    return "\n".join(out) + "\n"


# --- README.md and CHANGELOG.md -----------------------------------------------------------------


def _from_root(text: str) -> str:
    """Links written from the repository's root, made relative to docs/."""

    def link(m):
        label, target = m.group(1), m.group(2)
        if re.match(r"[a-z]+:|#", target):
            return m.group(0)
        if target.startswith("docs/"):
            return f"[{label}]({target.removeprefix('docs/')})"
        if target in ("README.md", "CHANGELOG.md"):
            return f"[{label}]({'index.md' if target == 'README.md' else 'changelog.md'})"
        return label if label.strip("`") == target else f"{label} (`{target}`)"

    return re.sub(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)", link, text).replace("](docs/", "](")


def front_page() -> str:
    return _from_root((ROOT / "README.md").read_text())


def changelog() -> str:
    return _from_root((ROOT / "CHANGELOG.md").read_text())

"""The HTML report of a run: one self-contained page (figures embedded as PNG data URIs, the
config summary, the verdict, the held-out evaluation and the distillation, or the command that
makes each, the last metrics rows, notes), written by `metadisco.analysis.plots.plot_run`. Generations are
numbered as the console numbers them (`metadisco.core.records.completed`)."""

from __future__ import annotations

import base64
import datetime
import html
import math
from pathlib import Path

from metadisco.core.fileio import atomic_write_text
from metadisco.core.records import GenerationRecord, Violation, completed
from metadisco.core.strategies import searched_point
from metadisco.measure import health as search_health
from metadisco.measure.selection import selected_words, selection
from metadisco.measure.verdicts import es_mean_vs_ppo, verdict

__all__ = ["CAPTIONS", "write_report"]

CAPTIONS = {
    "training_curves": "Fitness of the ES population per generation (mean, min–max band, and the highest member "
                       "score so far, a maximum over noisy scores) and, where evaluated, the ES mean against its "
                       "start and PPO on the same fresh seeds; the search health (the cosine between ES gradients "
                       "estimated from two disjoint halves of the seeds: near 0, the gradient is seed noise); "
                       "below, the ES step size σ.",
    "drift_surface": "Drift D(r, A) of the discovered objective beside PPO-clip and DPO on one colour scale "
                     "(dashed: r = 1, where every drift is 0 and flat). Second row: ∂(rA − D)/∂r, the weight "
                     "the policy gradient puts on ∇log π at each (r, A); 0 where the update is clipped.",
    "drift_slices": "D(r) at fixed advantages A.",
    "progress_surfaces": "TA-LPO drift at several training progresses n/N, and its change from the start.",
    "value_loss": "Learned value loss and its gradient against the prediction error, beside L2.",
    "shaping": "Learned potential Φ(s) on 2-D slices of the observation space (other dimensions at the "
               "midpoint of the range a random policy visits).",
}


def _fmt(v) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.4g}" if (v == 0 or 1e-3 <= abs(v) < 1e6) else f"{v:.3e}"
    if isinstance(v, Violation):
        return f"{v.plug}/{v.constraint}: {v.message}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    if v is None:
        return "–"
    return str(v)


def _record_rows(row: dict, record: GenerationRecord) -> list[tuple[str, object]]:
    """A metrics row's (key, value) pairs for a table, its violations as the Violations the record
    holds (not their stored objects)."""
    typed = {} if record.violations is None else {"eval_mean_violations": record.violations.mean,
                                                   "eval_best_violations": record.violations.best}
    return [(key, typed.get(key, value)) for key, value in row.items()]


def _table(pairs) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in pairs)
    return f"<table>{body}</table>"


def _choice(choice) -> str:
    """A PlugChoice as the report names it: "lpo", or "lpo (hidden=64)"."""
    options = ", ".join(f"{k}={_fmt(v)}" for k, v in choice.options)
    return choice.name + (f" ({options})" if options else "")


def _config_summary(config) -> list[tuple[str, object]]:
    """(label, value) rows of a RunConfig (`Run.config()`) for the report's Configuration table."""
    o, es, inner = config.objectives, config.es, config.inner.overrides()
    return [
        ("name", config.name),
        ("environments", config.envs),
        ("drift / value loss / shaping", " / ".join(_choice(getattr(o, p)) for p in ("drift", "value_loss", "shaping"))),
        ("evolved plug points", o.evolve),
        ("strategy", f"{es.strategy}, population {es.population_size}, σ₀ {es.sigma_init}, lr {es.lr}, {es.optimizer}"),
        ("generations", config.generations),
        ("fitness", f"{config.fitness} over {config.seeds_per_member} seed(s) per member"),
        ("inner PPO overrides", ", ".join(f"{k}={_fmt(v)}" for k, v in inner.items()) or "(preset)"),
        ("seed", config.seed),
    ]


def write_report(path, run_dir, config, records: list[GenerationRecord], images: dict, written: dict, notes,
                 which: str, extra: dict, evaluation: Path | None = None, distillation: dict | None = None,
                 exported: list[Path] | None = None, what_was_found: dict | None = None) -> Path:
    """One self-contained HTML page: config summary (`config`, the run's RunConfig), the verdict,
    the held-out evaluation, the distillation, the last metrics row (`records`, the run's
    generations), figures as data URIs.

    images {figure name: PNG file} are embedded in order; written {figure name: [paths]} are linked.
    evaluation: the folder `metadisco evaluate RUN_DIR` wrote (results.md), or None;
    distillation: {plug: distil's report or None} for the plug points with closed forms;
    exported: the files `metadisco export` wrote (RUN_DIR/export/), if any;
    what_was_found: {plug: what the evolved objective is (MetaObjective.found), or None for a network}.
    """
    path, run_dir = Path(path), Path(run_dir)
    last = records[-1] if records else None
    last_eval = next((r for r in reversed(records) if r.comparison is not None and r.comparison.scored), None)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>metadisco report: {html.escape(config.name)}</title>",
        "<style>body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1100px;margin:2em auto;"
        "padding:0 1em;color:#222;line-height:1.45}h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;"
        "border-bottom:1px solid #ddd}table{border-collapse:collapse;font-size:.9em;margin:.5em 0}"
        "th,td{padding:.25em .8em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}"
        "th{font-weight:600;color:#444}td{font-variant-numeric:tabular-nums}figure{margin:1.2em 0}"
        "img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:.9em;color:#555}"
        ".notes{background:#fff8e1;padding:.5em 1em;border-left:3px solid #f0b400}</style></head><body>",
        f"<h1>metadisco run: {html.escape(config.name)}</h1>",
        f"<p>Run directory <code>{html.escape(str(run_dir.resolve()))}</code>; objectives: <b>{html.escape(which)}</b>"
        + (f" (saved after {html.escape(_fmt(extra.get('generation')))} generations)"
           if extra.get("generation") is not None else "")
        + f"; generated {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}.</p>",
        "<h2>Configuration</h2>", _table(_config_summary(config)),
    ]
    parts += _verdict_section(config, last_eval, run_dir)
    parts += _validation_section(config, records, extra if which == "selected" else {})
    parts += _found_section(what_was_found or {}, which, run_dir)
    parts += _evaluation_section(evaluation, run_dir, path.parent)
    parts += _distillation_section(distillation or {}, run_dir, exported or [], path.parent)
    if last is not None:  # the stored `generation` is 0-based: the heading says how many are done
        parts += [f"<h2>Last generation ({completed(last)})</h2>", _table(_record_rows(last.measures(), last))]
    if last_eval is not None and last_eval is not last:
        found = last_eval.comparison.to_row() | (last_eval.violations.to_row() if last_eval.violations else {})
        parts += [f"<h2>Last evaluation (generation {completed(last_eval)})</h2>",
                  _table(_record_rows(found, last_eval))]
    parts += _health_section(records)
    if notes:
        parts.append("<div class='notes'><b>Notes</b><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
                     + "</ul></div>")
    parts.append("<h2>Figures</h2>")
    for name, png in images.items():
        links = " ".join(
            f"<a href='{html.escape(_relative(p, path.parent))}'>{html.escape(p.suffix[1:].upper())}</a>"
            for p in written.get(name, []))
        data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
        parts.append(
            f"<figure id='{html.escape(name)}'><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption><b>{html.escape(name.replace('_', ' '))}.</b> {html.escape(CAPTIONS.get(name, ''))} {links}"
            "</figcaption></figure>")
    parts.append("</body></html>")
    return atomic_write_text(path, "\n".join(parts))


def _verdict_section(config, last_eval: GenerationRecord | None, run_dir: Path) -> list[str]:
    """The verdict on the run's stated expectation from its last comparison on fresh seeds, or
    what it lacks for one."""
    if last_eval is None:
        text = ("No comparison on fresh seeds yet: the run makes one every eval_every generations and at its last; "
                f"`metadisco train --resume {run_dir}` continues it.")
    else:
        subject = searched_point(config.es.strategy)
        text = verdict(last_eval, config.expect, subject) or (
            f"after generation {completed(last_eval)}: {es_mean_vs_ppo(last_eval.comparison, subject)}. "
            "No verdict: the config states "
            "no expectation (expect.beats).")
    return ["<h2>Verdict</h2>", f"<p>{html.escape(text)}</p>"]


def _validation_section(config, records: list[GenerationRecord], selected: dict) -> list[str]:
    """Validation beside training (RunConfig.validation): per generation that scored it, the ES mean on
    the training problems and on the validation problems (fresh seeds each), the start's, and which
    objectives/selected.json holds (a generation's ES mean, or the start), with the finalists' re-scoring
    where the run ended (`selected`: selected.json's extra); [] for a run without validation."""
    rows = [r for r in records if r.validation is not None]
    if not rows:
        return []
    if selected.get("finalists"):
        return _final_selection_section(config, rows, selected)
    chosen = selection(rows)
    mark = "selected: its start" if chosen.start else "selected"
    head = ("<tr><th>generation</th><th>training: ES mean</th><th>training: PPO</th><th>validation: ES mean</th>"
            "<th>validation: its start</th><th>validation: PPO</th><th></th></tr>")
    body = "".join(
        f"<tr><td>{completed(r)}</td><td>{_fmt(r.comparison.mean if r.comparison else None)}</td>"
        f"<td>{_fmt(r.comparison.ppo if r.comparison else None)}</td><td>{_fmt(r.validation.mean)}</td>"
        f"<td>{_fmt(r.validation.start)}</td><td>{_fmt(r.validation.ppo)}</td>"
        f"<td>{mark if r is chosen.record else ''}</td></tr>" for r in rows)
    text = (f"Validation on {', '.join(config.validation.envs)} ({config.validation.seeds} fresh seeds each time, "
            f"never used by the ES update), scored as the fitness ({config.fitness}). ")
    text += (f"objectives/selected.json holds {chosen.describe()}, validation score {chosen.score:.4g}: what "
             "evaluate, distil, export and plot take from this run." if chosen.record is not None else
             "No generation has a finite validation score yet.")
    return ["<h2>Validation</h2>", f"<p>{html.escape(text)}</p>", f"<table>{head}{body}</table>"]


def _final_selection_section(config, rows: list[GenerationRecord], selected: dict) -> list[str]:
    """A finished validated run: each check's scores (what nominated the finalists), then the finalists
    re-scored on common fresh seeds, the chosen one marked (metadisco.measure.selection)."""
    def interval(i):
        return f"{_fmt(i['value'])} [{_fmt(i['low'])}, {_fmt(i['high'])}]"

    checks = "".join(f"<tr><td>{completed(r)}</td><td>{_fmt(r.validation.mean)}</td><td>{_fmt(r.validation.start)}</td>"
                     f"<td>{_fmt(r.validation.ppo)}</td></tr>" for r in rows)
    finalists = "".join(
        f"<tr><td>{'the start' if f['generation'] == 0 else 'ES mean of generation ' + str(f['generation'])}</td>"
        f"<td>{_fmt(f['checked'])}</td><td>{interval(f['score'])}</td><td>{interval(f['vs_start'])}</td>"
        f"<td>{'selected' if f['generation'] == selected['generation'] else ''}</td></tr>" for f in selected["finalists"])
    v = selected["validation"]
    text = (f"Validation on {', '.join(config.validation.envs)}, scored as the fitness ({config.fitness}), never used by "
            f"the ES update. Each check ({config.validation.seeds} fresh seeds of its own) only nominates: at the end "
            f"of the run the start and the best-checked ES means were re-scored together on {v['seeds']} common fresh "
            "seeds, and objectives/selected.json holds the highest there (a maximum over checks would overstate it): "
            f"{selected_words(selected['candidate'] == 'start', selected['generation'])}.")
    return ["<h2>Validation</h2>", f"<p>{html.escape(text)}</p>",
            "<table><tr><th>check after generation</th><th>ES mean</th><th>its start</th><th>PPO</th></tr>"
            f"{checks}</table>",
            "<table><tr><th>finalist</th><th>its check</th><th>re-scored [95% CI]</th><th>vs its start, paired</th>"
            f"<th></th></tr>{finalists}</table>"]


def _found_section(found: dict, which: str, run_dir: Path) -> list[str]:
    """What each evolved objective is at the saved parameters: a family's member or closed form, or
    the command that distils a network into one."""
    if not found:
        return []
    items = [f"{plug}: {text}" if text else f"{plug}: a learned network; `metadisco distil {run_dir}` fits a closed form"
             for plug, text in found.items()]
    return [f"<h2>What was found ({html.escape(which)})</h2>",
            "<ul>" + "".join(f"<li>{html.escape(t)}</li>" for t in items) + "</ul>"]


def _evaluation_section(evaluation: Path | None, run_dir: Path, page_dir: Path) -> list[str]:
    """The newest held-out evaluation's tables (its results.md), or the command that makes one."""
    if evaluation is None:
        return ["<h2>Held-out evaluation</h2>",
                f"<p>Not evaluated yet: <code>metadisco evaluate {html.escape(str(run_dir))}</code> trains PPO with the "
                "ES mean on held-out environments beside PPO and DPO.</p>"]
    evaluation = Path(evaluation)
    link = html.escape(_relative(evaluation / "results.json", page_dir))
    return ["<h2>Held-out evaluation</h2>",
            f"<p>From <code>{html.escape(str(evaluation))}</code> (<a href='{link}'>results.json</a>):</p>",
            f"<pre>{html.escape((evaluation / 'results.md').read_text())}</pre>"]


def _distillation_section(distillation: dict, run_dir: Path, exported: list[Path], page_dir: Path) -> list[str]:
    """Each distilled plug point's chosen closed form, or the command that distils it; the files
    exported, or the command that exports them."""
    if not distillation:
        return []
    items = []
    for plug, report in distillation.items():
        if report is None:
            text = f"{plug}: not distilled yet: metadisco distil {run_dir}"
        elif report.chosen:
            text = f"{plug}: {report.chosen.expression}" + ("" if exported else f" (export it: metadisco export {run_dir})")
        else:
            text = f"{plug}: no candidate satisfies the constraints (see {Path(run_dir) / 'distil'})"
        items.append(f"<li>{html.escape(text)}</li>")
    links = ", ".join(f"<a href='{html.escape(_relative(p, page_dir))}'>{html.escape(p.name)}</a>" for p in exported)
    return ["<h2>Distillation</h2>", "<ul>" + "".join(items) + "</ul>"] + ([f"<p>Exported: {links}</p>"] if exported else [])


def _health_section(records: list[GenerationRecord]) -> list[str]:
    """Search health over the last 10 generations (metadisco.measure.health), with its warning."""
    recent = search_health.recent(records)
    if recent is None:
        return []
    cos, n = recent.mean, recent.defined
    undefined = search_health.undefined_text(recent.undefined)
    out = ["<h2>Search health</h2>", _table([
        (f"split-half gradient cosine (mean of the last {n} generations that define it)", cos if n else "n/a"),
        ("signal share of the ES gradient, 2c/(1+c) (a heuristic)",
         2 * max(cos, 0.0) / (1 + max(cos, 0.0)) if n else "n/a"),
        *([("generations where it is undefined", undefined)] if undefined else []),
    ])]
    warning = search_health.advice(cos, n)
    if warning:
        out.append(f"<div class='notes'><b>Warning.</b> {html.escape(warning)}</div>")
    return out


def _relative(p: Path, base: Path) -> str:
    try:
        return p.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return p.resolve().as_uri()

"""Rendering an evaluation: markdown, CSV, the learning-curves figure, and the output folder.

    to_markdown(results)   a table per environment and the aggregate tables
    to_csv(results)        one row per method x environment
    curves_figure(results) learning curves (mean over seeds, 95% t-band), one panel per environment
    save(results, out_dir) all of them (and results.json) into a new folder, moved into place at once

`results` is an Evaluation (metadisco.analysis.evaluation.results: what `run.evaluate` returns and
`read_results` reads back from a results.json).
"""

from __future__ import annotations

import csv
import io
import math
import os
import secrets
import shutil
import time
from pathlib import Path

import numpy as np

from metadisco.analysis.evaluation import summary
from metadisco.analysis.evaluation.protocol import LABELS
from metadisco.analysis.evaluation.results import Estimate, Evaluation, MethodScores, Tuning, write_results
from metadisco.analysis.suites import EvaluationError
from metadisco.analysis.targets import Target
from metadisco.core.fileio import save_figure

__all__ = ["CSV_COLUMNS", "OUTPUTS", "default_out_dir", "check_out_dir", "to_markdown", "to_csv", "curves_figure",
           "save"]

OUTPUTS = ("results.json", "results.csv", "results.md", "curves.png", "curves.pdf")


def default_out_dir(targets=(), root: str | os.PathLike = "evaluations") -> Path:
    """RUN_DIR/evaluation/<timestamp> for the first run-directory target, else ./evaluations/<timestamp>."""
    run_dirs = [t.run_dir for t in targets if isinstance(t, Target) and t.run_dir]
    parent = Path(run_dirs[0]) / "evaluation" if run_dirs else Path(root)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = parent / stamp, 2
    while path.exists():
        path, n = parent / f"{stamp}-{n}", n + 1
    return path


def check_out_dir(out_dir) -> Path:
    """Raise EvaluationError if `out_dir` exists and is not an empty directory."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EvaluationError(f"output folder {out} already exists and is not empty; choose another --out")
    return out


def _fmt(x, digits: int = 4) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}g}"


def _ci(point, low, high, fmt=_fmt) -> str:
    if point is None:
        return "–"
    if low is None or high is None:
        return fmt(point)
    return f"{fmt(point)} [{fmt(low)}, {fmt(high)}]"


def _boot(x) -> str:
    """A bootstrap estimate: two decimals, the digits the default replicates keep stable."""
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.2f}"


def _boot_ci(e: Estimate) -> str:
    return _ci(e.point, e.low, e.high, _boot)


def _training_cell(value, e: MethodScores) -> str:
    """A training score (the end of training, the AUC) of a method's entry `e`: where no training
    episode ended it is the initial policy's evaluation, and the cell says so."""
    none, seeds = e.no_episode_ended or 0, len(e.scores)
    if none == seeds:
        return "no episode ended"
    return f"{_fmt(value)} ({none} of {seeds} seeds: no episode ended)" if none else _fmt(value)


def _tuning_line(tuning: dict[str, Tuning]) -> str:
    first = next(iter(tuning.values()))
    best = ", ".join(f"{m} {_fmt(t.best_lr, 3)}" for m, t in tuning.items())
    tied = [m for m, t in tuning.items() if t.tied]
    return (f"Learning rates tuned over {', '.join(_fmt(x, 3) for x in first.lrs)} on separate tuning seeds "
            f"(by {first.select}); each method is scored at its best: {best}."
            + (f" Every rate scored the same for {', '.join(tied)} (the tuning could not tell them apart): "
               "scored at the base rate." if tied else ""))


def to_markdown(results: Evaluation) -> str:
    """A table per environment and the aggregate tables (held-out and meta-train apart)."""
    s = results.settings
    p = s.protocol
    roles = results.roles
    lines = [
        "# Held-out evaluation",
        "",
        f"Protocol {p.name}: {p.summary}. Score: {s.score_meaning} ({p.score}). "
        f"{s.seeds} seeds per method and environment"
        + (f", {s.tuning_seeds} tuning seeds per learning rate" if s.tune_lr else "")
        + "; budgets (environment steps per run): "
        + ", ".join(f"{e} {s.budgets[e]:,}" for e in s.envs) + ". "
        "Normalised score: (score - init) / (PPO - init), 0 = the initial policy's evaluation, 1 = PPO"
        + (" at its tuned learning rate" if s.tune_lr else "") + ". "
        "Intervals are 95%: Student-t for scores, stratified bootstrap "
        f"({s.bootstrap_reps:,} replicates, resampling PPO's and the initial policy's seeds too) for "
        "normalised scores and aggregates.",
        "",
    ]
    for name, r in results.envs.items():
        flags = f" ({', '.join(r.flags)})" if r.flags else ""
        lines += [f"## {name}{flags}", ""]
        if r.tuning:
            lines += [_tuning_line(r.tuning), ""]
        lines += ["| method | lr | score [95% CI] | normalised [95% CI] | final policy, sampled | greedy | "
                  f"training, last {p.tail:.0%} | auc | diverged |", "|---|---|---|---|---|---|---|---|---|"]
        for m, e in r.methods.items():
            c = e.columns
            lines.append(f"| {m} | {_fmt(e.lr, 3)} | {_ci(e.mean, e.ci_low, e.ci_high)} | "
                         f"{_ci(e.norm_mean, e.norm_ci_low, e.norm_ci_high, _boot)} | "
                         f"{_fmt(c['eval'])} | {_fmt(c['eval_greedy'])} | {_training_cell(c['train_final'], e)} | "
                         f"{_training_cell(c['auc'], e)} | {e.diverged}/{len(e.scores)} |")
        lines.append("")
    titles = {"held_out": "Aggregate over held-out environments",
              "meta_train": "Aggregate over meta-training environments"}
    for group, agg in results.aggregate.items():
        unnormalised = {name: r for name, r in results.envs.items()  # vs_ppo None: written before it existed
                        if r.excluded_from_aggregate and r.vs_ppo is not None
                        and ("meta-train" in r.flags) == (group == "meta_train")}
        if group == "meta_train" and not agg.envs and not unnormalised:
            continue
        lines += [f"## {titles[group]}", ""]
        if unnormalised:
            lines += _versus_ppo_lines(unnormalised, roles, none_usable=not agg.methods)
        if not agg.methods:
            if not unnormalised:
                lines += ["No environment in this group has a usable normaliser (see the notes).", ""]
            continue
        refs = agg.references
        lines += [f"Environments: {', '.join(agg.envs)}.", "",
                  "| method | IQM [95% CI] | mean [95% CI] | " + " | ".join(f"P(> {r}) [95% CI]" for r in refs) + " |",
                  "|---|---|---|" + "---|" * len(refs)]
        for m, e in agg.methods.items():
            cells = [_boot_ci(e.iqm), _boot_ci(e.mean)] + [_boot_ci(e.poi_vs[r]) for r in refs]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
        if len(agg.pairwise or {}) > len(refs) + 1:  # more methods than the reference columns show
            labels = list(agg.pairwise)
            lines += ["Probability of improvement of each row over each column [95% CI]:", "",
                      "| P(row > column) | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
            for m in labels:
                cells = ["–" if m == n else _boot_ci(agg.pairwise[m][n]) for n in labels]
                lines.append(f"| {m} | " + " | ".join(cells) + " |")
            lines.append("")
        readings = [f"- {m} against {r}: P(improvement) {_boot_ci(e.poi_vs[r])}, {summary.reading(e.poi_vs[r])}."
                    for m, e in agg.methods.items() if "target" in roles.get(m, "") for r in refs if r != m]
        if readings:
            lines += ["Reading:", ""] + readings + [""]
    if results.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in results.notes] + [""]
    return "\n".join(lines)


def _versus_ppo_lines(envs: dict, roles: dict, none_usable: bool) -> list[str]:
    """The environments without a usable normaliser, on raw scores against PPO: each method's paired
    difference and P(> PPO), with intervals (normalising would change neither within an environment)."""
    lead = ("No environment in this group has a usable normaliser, so there is no normalised aggregate (why: the "
            "notes)." if none_usable else "Left out of the aggregate below: no usable normaliser (why: the notes).")
    lines = [lead + " Per environment, on raw scores against PPO (paired by seed: every method trains on the same "
             "evaluation seeds):", "",
             "| environment | method | score - PPO [95% CI] | P(> PPO) [95% CI] |", "|---|---|---|---|"]
    readings = []
    for name, r in envs.items():
        for m, v in (r.vs_ppo or {}).items():
            lines.append(f"| {name} | {m} | {_ci(v.diff.point, v.diff.low, v.diff.high)} | {_boot_ci(v.poi)} |")
            if "target" in roles.get(m, ""):
                readings.append(f"- {m} against ppo on {name} (raw): P(improvement) {_boot_ci(v.poi)}, "
                                f"{summary.reading(v.poi)}.")
    lines.append("")
    return lines + (["Reading:", ""] + readings + [""] if readings else [])


CSV_COLUMNS = [
    "method", "role", "env", "group", "flags", "seeds", "budget", "lr", "score", "mean", "ci_low", "ci_high",
    "normalized", "norm_ci_low", "norm_ci_high", "diverged", *LABELS,
]


def to_csv(results: Evaluation) -> str:
    """One row per method x environment: the headline score with its interval, and the mean of
    every kind of score (one column each)."""
    roles = results.roles
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for name, r in results.envs.items():
        for m, e in r.methods.items():
            flags = list(r.flags) + ([f"diverged:{e.diverged}"] if e.diverged else []) \
                + ([f"no_episode_ended:{e.no_episode_ended}"] if e.no_episode_ended else [])
            writer.writerow({
                "method": m, "role": roles.get(m, ""), "env": name, "group": r.group, "flags": ";".join(flags),
                "seeds": len(e.scores), "budget": r.budget, "lr": e.lr, "score": r.score,
                "mean": e.mean, "ci_low": e.ci_low, "ci_high": e.ci_high, "normalized": e.norm_mean,
                "norm_ci_low": e.norm_ci_low, "norm_ci_high": e.norm_ci_high, "diverged": e.diverged,
                **e.columns,
            })
    return buf.getvalue()


def curves_figure(results: Evaluation):
    """Learning curves (mean over seeds, 95% t-band), one panel per environment -> Figure."""
    import seaborn as sns
    from matplotlib.figure import Figure

    envs = list(results.envs)
    labels = list(results.labels)
    roles = results.roles
    colors = dict(zip(labels, sns.color_palette("colorblind", max(len(labels), 3))))
    ncols = min(len(envs), 4)
    nrows = math.ceil(len(envs) / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.2 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, name in zip(axes.flat, envs):
        r = results.envs[name]
        x = (np.arange(r.num_updates) + 1) * r.steps_per_update
        for m in labels:
            c = r.methods[m].curve
            ax.plot(x, c.mean, color=colors[m], lw=1.6, ls="--" if roles[m] == "reference" else "-", label=m)
            if np.isfinite(c.low).any():
                ax.fill_between(x, c.low, c.high, color=colors[m], alpha=0.2, lw=0)
        seeds = np.concatenate([r.methods[m].curve.seeds.ravel() for m in labels])
        if np.isfinite(seeds).any():  # the band may reach far past the seeds themselves (few seeds)
            lo, hi = np.nanmin(seeds), np.nanmax(seeds)
            pad = 0.05 * (hi - lo) if hi > lo else max(1.0, 0.05 * abs(hi))
            ax.set_ylim(lo - pad, hi + pad)
        tags = [f for f in r.flags if f in ("meta-train", "ppo-flat")]
        ax.set_title(name + (f" ({', '.join(tags)})" if tags else ""), fontsize=10)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(envs):]:
        ax.set_visible(False)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(f"Learning curves: mean over {results.settings.seeds} seeds, 95% confidence band "
                 "(dashed: references)", fontsize=11)
    fig.legend(handles, names, loc="outside lower center", ncols=min(len(labels), 6), frameon=False)
    return fig


def save(results: Evaluation, out_dir) -> Path:
    """Write results.json, results.csv, results.md, curves.png and curves.pdf into `out_dir`.

    Everything is written into a temporary folder beside it (modes as the umask gives them) and
    moved into place at the end, so a failure leaves nothing half-written. Returns the folder.
    """
    out = check_out_dir(out_dir)
    created = [p for p in reversed(out.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{secrets.token_hex(4)}.tmp"
    try:
        tmp.mkdir()
        write_results(results, tmp / "results.json")
        (tmp / "results.csv").write_text(to_csv(results))
        (tmp / "results.md").write_text(to_markdown(results))
        save_figure(curves_figure(results), tmp / "curves", ("png", "pdf"), dpi=150)
        if out.exists():
            out.rmdir()  # empty (check_out_dir)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in reversed(created):  # folders made only for this output
            try:
                p.rmdir()
            except OSError:
                pass
        raise
    return out

"""What `metadisco train` prints: the run's description before it starts, the progress bar or a line per
generation, search health, and the summary a finished run ends with (its verdict last). The host loop
(metadisco.train) calls these; they read the run directory and the trainer, and write nothing."""

from __future__ import annotations

import shlex
import sys

import jax
import numpy as np

from metadisco.core.invocation import command
from metadisco.core.plugs import PLUGS
from metadisco.core.records import GenerationRecord, Health, Violations, completed, finite
from metadisco.core.strategies import POPULATION_STRATEGIES, searched_point
from metadisco.engine import MetaTrainer
from metadisco.measure import health
from metadisco.measure.registration import changed_rule_note
from metadisco.measure.selection import FinalSelection, selection
from metadisco.measure.verdicts import degenerate, es_mean_vs_ppo, pass_criterion, verdict
from metadisco.rundir import RunDir


def score_text(i) -> str:
    return f"{i.value:.4g} [{i.low:.4g}, {i.high:.4g}]"


def describe(trainer: MetaTrainer, run: RunDir, log) -> None:
    cfg = trainer.cfg
    log(f"metadisco run {run.path}")
    log(f"  evolving {', '.join(f'{p}={getattr(cfg.objectives, p)}' for p in trainer.evolve)} "
        f"({trainer.num_params} meta-parameters) with {cfg.es.strategy}, population {cfg.es.population_size} "
        f"x {cfg.seeds_per_member} seeds, {cfg.generations} generations")
    fixed = [f"{p}={getattr(cfg.objectives, p)}" for p in PLUGS if p not in trainer.evolve]
    if fixed:  # every plug point evolving leaves none to name
        log(f"  fixed at their start (objectives.evolve chooses what evolves): {', '.join(fixed)}")
    for env in trainer.envs:
        pc = env.ppo_config
        log(f"  inner loop: PPO on {env.name}, {pc.steps_per_run:,} steps per run ({pc.num_updates} updates)")
    batch = f"{cfg.members_per_batch} members at a time" if cfg.members_per_batch else "its whole shard at once"
    log(f"  fitness: {cfg.fitness}; population split over {trainer.mesh.devices.size} "
        f"{jax.devices()[0].platform} device(s) in {jax.process_count()} process(es), each training {batch}")
    d = cfg.distribution
    drawn = [f"{d.envs_per_generation} of {len(cfg.envs)} envs" if d.envs_per_generation else "",
             f"lr x [{d.lr_range[0]:g}, {d.lr_range[1]:g}] per {d.lr_draw}" if d.lr_range else "",
             f"horizons {', '.join(f'{h:g}' for h in d.horizons)}" if d.horizons else "",
             "per-env ranks" if d.env_fitness == "rank" else ""]
    if any(drawn):
        log(f"  each generation draws: {'; '.join(x for x in drawn if x)}")
    if cfg.validation.envs:
        log(f"  validation (scored every {cfg.eval_every} generations on {cfg.validation.seeds} fresh seeds, never "
            f"trained on; chooses objectives/selected.json): {', '.join(cfg.validation.envs)}")
    if cfg.heldout.envs:
        log(f"  held out (fixed now; `{command()} evaluate {shlex.quote(str(run.path))}` uses it): {', '.join(cfg.heldout.envs)}")
    if cfg.seeds_per_member < 2:
        log("  search health is not measured: it compares two halves of each member's seeds (seeds_per_member >= 2)")
    if cfg.expect.not_applied:
        log(f"  no verdict: {cfg.expect.not_applied}")
    if cfg.expect.answer:
        log(f"  expected answer (stated before the run): {cfg.expect.answer}")
    if cfg.expect.beats:
        log(f"  pass criterion: {pass_criterion(cfg.expect, searched_point(cfg.es.strategy))}")
    changed = changed_rule_note(cfg)
    if changed:
        log(f"  {changed}")
    if cfg.es.strategy in POPULATION_STRATEGIES:
        log(f"  {cfg.es.strategy} evolves a population without a mean: mean.json and the comparisons on fresh seeds "
            "are the best member seen, and search health has no gradient to measure (its rank correlation stays)")


def progress_bar(enabled: bool, start: int, total: int):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=start, unit="gen", dynamic_ncols=True, file=sys.stderr)


def update_bar(bar, record: GenerationRecord, log, total: int | None = None, notes=(), subject: str = "ES mean") -> None:
    measured = record.health is not None and record.health.grad_cos is not None
    if bar is None:  # --no-progress (logs, batch jobs): one line per generation instead
        gen = completed(record)
        log(f"gen {gen}{f'/{total}' if total else ''}: fitness mean {record.fitness_mean:.4g}, "
            f"max member so far {record.best_fitness:.4g}, "
            + (f"health {health_figure(record, long=True)}, " if measured else "")
            + f"{record.num_diverged} diverged, {record.wall_time_s:.1f} s ({record.env_steps_per_s:.3g} env steps/s)")
        if record.comparison is not None and gen != total:  # the last one: the run's summary says it
            log(f"gen {gen}: {es_mean_vs_ppo(record.comparison, subject)}")
        for note in notes:
            log(note)
        return
    shown_health = {"health": health_figure(record)} if measured else {}
    # the members' mean fitness on their training seeds: not the ES mean's score on fresh seeds that the
    # comparisons print
    bar.set_postfix(members_fitness=f"{record.fitness_mean:.3g}", **shown_health, sps=f"{record.env_steps_per_s:.3g}")
    bar.update(1)
    if record.comparison is not None and completed(record) != total:  # the last one: the summary says it
        bar.write(f"gen {completed(record)}: {es_mean_vs_ppo(record.comparison, subject)}")
    for note in notes:
        bar.write(note)


def health_figure(record: GenerationRecord, long: bool = False) -> str:
    """A generation's split-half cosine, or n/a with its reason (short for the progress bar)."""
    measured = record.health or Health()
    if finite(measured.grad_cos):
        return f"{measured.grad_cos:+.2f}"
    short, reason = health.UNDEFINED.get(measured.undefined, ("nan", "not a number"))
    return f"n/a: {reason}" if long else f"n/a ({short})"


def health_line(records: list[GenerationRecord], window: int = 10) -> str | None:
    """Search health over the last `window` generations that measured it (undefined ones counted
    with their reasons, not averaged), with a warning and advice when the ES gradient is mostly
    seed noise; None when the run does not measure it."""
    recent = health.recent(records, window=window)
    if recent is None:
        return None
    undefined = f" ({health.undefined_text(recent.undefined)})" if recent.undefined else ""
    if not recent.defined:
        ranks = health.recent(records, measure="rank_corr", window=window)
        rank_note = (f"; the halves' rank correlation {ranks.mean:+.2f} over {ranks.defined} of them"
                     if ranks is not None and ranks.defined else "")
        return (f"search health: n/a over the last {sum(recent.undefined.values())} generation(s)"
                f"{undefined}{rank_note}")
    games = health.by_game(records, window=window)
    games = f"; each game alone: {games}" if games else ""
    warning = health.advice(recent.mean, recent.defined)
    if warning:
        return f"warning: {warning}{undefined}{games}"
    return (f"search health: split-half gradient cosine {recent.mean:+.2f} over the last {recent.defined} "
            f"generation(s) that define it{undefined}, {health.share_text(recent.mean)} of the ES gradient{games}")


def degenerate_warning(record: GenerationRecord, subject: str = "ES mean") -> str | None:
    """A warning line when the ES mean (subject: what the run follows, core.strategies.searched_point)
    of a generation with a comparison is not a valid objective."""
    reason = degenerate(record.violations.mean if record.violations is not None else None)
    if reason is None:
        return None
    return (f"warning: generation {completed(record)}: the {subject} is DEGENERATE, whatever it scores: {reason}. "
            "Its search space holds invalid objectives: pick a family that is valid for every member "
            "(`metadisco objectives`), or a smaller sigma")


def summary(run: RunDir, cfg, log, violations: Violations, final: FinalSelection | None = None) -> None:
    records = run.metrics()
    if not records:
        return
    k = min(5, len(records))

    def mean_fitness(part):  # a generation whose every member scored NaN is logged as null (NaN)
        values = [np.nan if r.fitness_mean is None else r.fitness_mean for r in part]
        return np.nanmean(values) if np.isfinite(values).any() else np.nan

    first, last = mean_fitness(records[:k]), mean_fitness(records[-k:])
    log(f"population mean fitness: first {k} generations {first:.4g}, last {k} {last:.4g}"
        + ("" if np.isfinite([first, last]).all() else
           " (nan: no member had a finite score there; with fitness=final no training episode may have ended)"))
    evals = [r for r in records if r.comparison is not None]
    validated = [r for r in records if r.validation is not None and finite(r.validation.mean)]
    state = health_line(records)
    if state:
        log(state)
    log(f"run directory: {run.path}")
    subject = searched_point(cfg.es.strategy)
    log(f"  objectives: {run.objectives_dir}/mean.json (the {subject}), best.json (the highest single-generation "
        "score: selected on noise)")
    last = f"{validated[-1].validation.mean:.4g}" if validated else "none finite"
    if final is not None:
        c = final.chosen
        r = final.reported
        log(f"  selected.json: {final.describe()}, ranked first of {len(final.finalists)} at {score_text(c.score)}; "
            f"scored {score_text(r.score)} on {', '.join(cfg.validation.envs)} on {r.seeds} fresh seeds the ranking never "
            f"saw (vs its start {score_text(r.vs_start)}; the last check's ES mean scored {last}); evaluate, distil, "
            "export and plot take it")
    elif run.selection_final():  # a finished run resumed: the end's selection as it was written
        stored = run.read_json("objectives/selected.json")["extra"]
        log(f"  selected.json: the end's selection, {stored['note']}")
    else:
        chosen = selection(records)  # as the checks kept it
        if chosen.record is not None:
            at = f" at generation {completed(chosen.record)}" if chosen.start else ""
            log(f"  selected.json: {chosen.describe()}, validation score {chosen.score:.4g} on "
                f"{', '.join(cfg.validation.envs)}{at} (the last generation's ES mean: {last}); evaluate, distil, "
                "export and plot take it")
    log(run.next_steps())
    if cfg.expect.not_applied:
        log(f"no verdict: {cfg.expect.not_applied}")
    if violations.best:
        log(f"warning: best.json (the highest single-generation score) is not a valid objective: "
            f"{degenerate(violations.best)}")
    changed = changed_rule_note(cfg)
    if changed and (evals or final is not None):  # before the verdicts: a run's last line is its verdict
        log(changed)
    # a FOUND from a search whose gradient was mostly seed noise: one reading, on the verdict's own line
    noisy = (" (the search that found it was noisy: search health above; the verdict reads fresh seeds, so it "
             "stands, and more seeds_per_member would make the search itself reliable)"
             if state and state.startswith("warning: ") else "")
    if evals:
        e = evals[-1]
        log(f"after generation {completed(e)}: {es_mean_vs_ppo(e.comparison, subject)}")
        line = verdict(e, cfg.expect, subject)
        if line:
            line += noisy if line.startswith("verdict: FOUND") else ""
            log(line if final is None else f"{line} [the last {subject}]")
    if final is not None:  # what every reader takes: its own verdict, on the training problems' fresh seeds
        named = final.named()
        log(f"re-scored at the end: {es_mean_vs_ppo(final.comparison, named)}")
        line = verdict(final.record(), cfg.expect, named)
        if line:
            line += noisy if line.startswith("verdict: FOUND") else ""
            log(f"{line} [the selected objective]")
    elif cfg.validation.envs and run.selection_final():
        stored = run.read_json("objectives/selected.json")["extra"]
        log(f"re-scored at the end: {stored['comparison']}")
        if stored.get("verdict"):
            log(f"{stored['verdict']} [the selected objective]")
    elif violations.mean:  # no comparison on fresh seeds (eval_every = 0): the checks still speak
        log(f"verdict: DEGENERATE after generation {completed(records[-1])}: the {subject} is not a valid objective: "
            f"{degenerate(violations.mean)}")

"""The host loop of a meta-training run: generations, metrics, checkpoints, resume, Ctrl-C, SIGTERM.

    run(cfg, run_dir)                 # a new run
    run(None, run_dir, resume=True)   # continue; equals the uninterrupted run bit for bit
    run(override(stored, ["generations=N"]), run_dir, resume=True)   # extend a run to N generations

An extended run equals one started with N generations, bit for bit (state, checkpoints,
objectives, metrics rows): nothing in a generation reads the total (the ES step-size and
learning-rate decays are per generation, evosax's std_schedule and optax's exponential_decay with
transition_steps=1; the comparisons' seeds are picked by the generations done), but for one
row: the old last generation keeps the comparison on fresh seeds it was given as a last
generation (`eval_every`), which a run started with N has only where eval_every divides it.

A run holds its directory's one-writer lock (RunDir.lock) while it runs. Ctrl-C and SIGTERM (a
scheduler's preemption) write a checkpoint of the last completed generation and raise
RunInterrupted, whose message says how to resume; so does a time limit (metadisco.time_limit),
at the last generation boundary that fits, with its own exit status; a failed write raises RunWriteError naming the
file, the cause and the next step. Either way the directory is left resumable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import signal
import threading
import time
from pathlib import Path

import jax

from metadisco import config as config_lib
from metadisco import console
from metadisco.core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_TIME_LIMIT, RunInterrupted
from metadisco.core.invocation import command
from metadisco.core.plugs import PLUGS
from metadisco.core.records import Violations, completed
from metadisco.core.run_config import config_digest
from metadisco.core.scores import fitness_of
from metadisco.core.strategies import searched_point
from metadisco.engine import MetaTrainer
from metadisco.es_step import RunState
from metadisco.measure import health
from metadisco.measure import selection as final_selection
from metadisco.measure.selection import Selection, select, selected_words, selection
from metadisco.meta_objectives import load_objectives, save_objectives
from metadisco.meta_objectives.constraints import check_evolved, require_valid
from metadisco.mirrors import Mirrors
from metadisco.rundir import RunDir, RunDirError, RunWriteError
from metadisco.scoring import Baseline, fetch
from metadisco.time_limit import TimeLimit


def _checkpoint_tree(state: RunState, baseline: Baseline) -> dict:
    return {"state": state, "baseline": baseline}


def save_state(run: RunDir, trainer: MetaTrainer, state: RunState, baseline: Baseline) -> None:
    """The best and mean objectives as loadable files, then the checkpoint (process 0 only).

    The checkpoint is written last: one on disk means everything it covers is written too, so a
    failed write leaves the previous checkpoint as the point to resume from.
    """
    host_state, host_baseline = fetch((state, baseline))  # local copies: no collective op
    if jax.process_index() != 0:
        return
    gen = int(host_state.generation)
    extra = {"generation": gen, "envs": list(trainer.cfg.envs), "evolved": list(trainer.evolve)}
    run.write_file(run.objectives_path("best"), save_objectives, trainer.objectives,
                   trainer.full_params(host_state.best_params), extra | {
                       "fitness": float(host_state.best_fitness),
                       "note": "the member with the highest score of any one generation: a maximum over noisy "
                               "scores, not re-scored on fresh seeds; mean.json (the ES mean) is what the checks "
                               "on fresh seeds score"})
    run.write_file(run.objectives_path("mean"), save_objectives, trainer.objectives,
                   trainer.full_params(fetch(trainer.mean_params(host_state))), extra)
    run.save_checkpoint(gen, _checkpoint_tree(host_state, host_baseline))


def save_selected(run: RunDir, trainer: MetaTrainer, state: RunState, chosen: Selection) -> None:
    """objectives/selected.json: the candidate `chosen` (metadisco.measure.selection.select), the ES mean of
    `state` or the run's start, with the scores of the check that chose it (process 0 only). Written when a
    candidate's validation score beats every earlier one; a resumed run recomputes the same (its rows are
    the same), so it needs no checkpoint."""
    if jax.process_index() != 0:
        return
    extra = final_selection.provisional_json(chosen, trainer.cfg, trainer.evolve)
    solution = trainer.initial_solution if chosen.start else fetch(trainer.mean_params(fetch(state)))
    run.write_file(run.objectives_path("selected"), save_objectives, trainer.objectives,
                   trainer.full_params(solution), extra)


def save_candidate(run: RunDir, trainer: MetaTrainer, state: RunState, generation: int) -> None:
    """objectives/candidates/gen_NNNNNN.json: the ES mean of `state` after `generation` generations, kept
    at each validation check so that the end of the run can re-score it (process 0 only)."""
    if jax.process_index() != 0:
        return
    run.write_file(run.candidate_path(generation), save_objectives, trainer.objectives,
                   trainer.full_params(fetch(trainer.mean_params(fetch(state)))),
                   {"generation": generation, "envs": list(trainer.cfg.envs), "evolved": list(trainer.evolve),
                    "note": "the ES mean at a validation check: a finalist of the selection if nominated"})


def finalise_selection(run: RunDir, trainer: MetaTrainer, baseline: Baseline, done: int,
                       log) -> final_selection.FinalSelection | None:
    """At the end of a validated run: re-score its finalists (the start and the ES means its checks
    nominated) on common fresh seeds, keep the best as objectives/selected.json with its re-scored value
    and interval, and return the decision (None in a multi-process job, which keeps the checks' choice:
    the finalists' files are process 0's)."""
    if jax.process_count() > 1:
        log("note: selection re-scores its finalists in single-process runs only; selected.json is the checks' "
            "best (a maximum over noisy checks)")
        return None
    records = run.metrics()
    # a check from before candidates were kept has no file to re-score: it cannot be a finalist
    kept = [r for r in records if r.validation is None or run.candidate_path(completed(r)).is_file()]
    if len(kept) < len(records):
        log(f"note: {len(records) - len(kept)} check(s) from before candidates were kept cannot be re-scored; "
            "the finalists come from the others and the start")
    candidates = final_selection.finalists(kept)
    solutions = [trainer.initial_solution if c.start else _evolved(trainer, run.candidate_path(c.generation))
                 for c in candidates]
    t = time.perf_counter()
    # every finalist on the same calls of validation; the training comparison, for the verdict, only for the one kept
    finalists = final_selection.rescored(candidates, trainer.rescore(solutions, baseline, done))
    index = final_selection.chosen(finalists)
    violations = Violations(mean=tuple(check_evolved(trainer.objectives, trainer.full_params(solutions[index]),
                                                     trainer.evolve)))
    # the winner's score to quote, beside the start's, on a third set of seeds: the ranking's is a maximum
    pair = [solutions[0]] if candidates[index].start else [solutions[0], solutions[index]]
    reported = final_selection.reported(candidates[index], trainer.rescore(pair, baseline, done, use=2))
    final = final_selection.FinalSelection(finalists, index, reported, trainer.compare_selected(solutions[index], baseline, done),
                           violations, done)
    extra = final_selection.final_json(final, trainer.cfg, trainer.evolve)
    run.write_file(run.objectives_path("selected"), save_objectives, trainer.objectives,
                   trainer.full_params(solutions[index]), extra)
    log(f"selection: {len(finalists)} finalists re-scored on {trainer.cfg.validation.seeds} common fresh seeds of "
        f"{', '.join(trainer.cfg.validation.envs)} ({time.perf_counter() - t:.1f} s): " + "; ".join(
            f"{selected_words(f.finalist.start, f.finalist.generation).split(' (')[0]} {console.score_text(f.score)}"
            for f in finalists))
    return final


def _evolved(trainer: MetaTrainer, path: Path) -> dict:
    """The evolved plugs' parameters of an objectives file the run wrote (an ES solution)."""
    params = load_objectives(path)[1]
    return {plug: params[plug] for plug in trainer.evolve}


def load_state(run: RunDir, trainer: MetaTrainer) -> tuple[RunState, Baseline, list[str]]:
    template = fetch(_checkpoint_tree(trainer.init(), trainer.baseline_template()))
    tree, path, warnings = run.load_checkpoint(template)
    return tree["state"], tree["baseline"], warnings


def default_run_dir(cfg: config_lib.RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.name}-{stamp}"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by the handler `run` installs: handled as Ctrl-C is."""


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM raises _Terminated while the block runs; the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the final checkpoint
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(cfg: config_lib.RunConfig | None, run_dir, resume: bool = False, overwrite: bool = False,
        progress: bool = True, stop_after: int | None = None, log=print, trainer: MetaTrainer | None = None,
        time_limit: TimeLimit | None = None, allow_layout_change: bool = False) -> Path:
    """Run (or resume) a meta-training run in `run_dir`; returns the run directory.

    stop_after: stop (with a checkpoint) once this many generations are complete.
    time_limit: before each generation, stop (with a checkpoint) if it would not end inside the
    limit, by what this process has measured; raises RunInterrupted with EXIT_TIME_LIMIT.
    trainer: a prebuilt MetaTrainer for `cfg` (custom inner loops); built from the config if None.
    allow_layout_change: resume on a device layout that changes the run's bits (check_layout) anyway.
    Raises RunDirError (missing, busy or non-empty directory, changed config), RunWriteError (a
    file could not be written) and RunInterrupted (Ctrl-C, SIGTERM, the time limit), each saying
    what to do.
    """
    run = RunDir(run_dir)
    is_main = jax.process_index() == 0  # in a multi-host job only process 0 writes (and locks)
    if resume:
        cfg = resume_config(run, cfg)
    elif is_main:
        run.refuse_existing(overwrite)
    if trainer is None and not resume:
        trainer = MetaTrainer(config_lib.run_plan(cfg))  # a config it cannot build fails before the directory is created
    if not resume:
        refuse_invalid_start(trainer)
    with run.lock() if is_main else contextlib.nullcontext(), _sigterm_interrupts():
        try:
            trainer = trainer or MetaTrainer(config_lib.run_plan(cfg))
            _run(run, cfg, resume, overwrite, progress, stop_after, log, trainer, time_limit, allow_layout_change)
        except KeyboardInterrupt as e:
            raise _interrupted(run, cfg, e) from None
        except RunWriteError as e:
            raise RunWriteError(f"{e}. {_resume_hint(run, 'Fix that, then')}") from None
    return run.path


def layout_of(trainer: MetaTrainer) -> dict:
    """How this process runs `trainer`'s population (layout.json): what a member's bits may depend on."""
    return {"devices": int(trainer.mesh.devices.size), "platform": jax.devices()[0].platform,
            "processes": jax.process_count(), "members_per_batch": trainer.cfg.members_per_batch}


def record_layout(run: RunDir, trainer: MetaTrainer, generation: int) -> None:
    """Add this process's layout to layout.json as the leg that begins at `generation` (0: the run's start)."""
    legs = run.layouts() if generation else []
    run.write_json("layout.json", {"legs": [*legs, {"from_generation": generation, **layout_of(trainer)}]})


def check_layout(run: RunDir, trainer: MetaTrainer, allow: bool = False) -> list[str]:
    """Lines that say how this resume's device layout differs from the one the run last ran under
    (layout.json), or RunDirError before any compute where the difference changes the run's bits (another
    platform; one device against several, which compiles the population without shard_map's manual region;
    another device count with member_batch = 0, each device's whole shard at once), unless `allow`."""
    started, now = run.layout(), layout_of(trainer)
    if started is None:
        return [f"note: {run.path} did not record the devices it started on (a run from before layout.json); "
                f"resuming on {now['devices']} {now['platform']} device(s), {_batch_words(now)}"]
    differs = [f"{key} {started.get(key)} -> {now[key]}" for key in now if started.get(key) != now[key]]
    if not differs:
        return []
    changes_bits = (started.get("platform") != now["platform"] or started.get("members_per_batch") != now["members_per_batch"]
                    or (started.get("devices") == 1) != (now["devices"] == 1)
                    or (not now["members_per_batch"] and started.get("devices") != now["devices"]))
    if not changes_bits:
        return [f"note: resuming on another layout ({', '.join(differs)}); {_batch_words(now)} fixes each member's "
                "bits, so the run continues as it began"]
    if not allow:
        raise RunDirError(
            f"refusing to resume {run.path} on another device layout ({', '.join(differs)}): with "
            f"{_batch_words(now)} on another platform, on one device against several, or (member_batch = 0) on "
            f"another device count a member's last bits change, so the resumed run "
            f"would not equal the one it began. Resume where it started ({started.get('devices')} "
            f"{started.get('platform')} device(s): on a CPU, --host-devices {started.get('devices')}), or pass "
            "--allow-layout-change to continue anyway (its results then differ in the last bits from an uninterrupted run).")
    return [f"warning: resuming on another device layout ({', '.join(differs)}), as asked (--allow-layout-change): "
            "from here its bits differ from an uninterrupted run's"]


def _batch_words(layout: dict) -> str:
    n = layout["members_per_batch"]
    return f"{n} members at a time (member_batch)" if n else "each device's whole shard at once (member_batch = 0)"


def refuse_invalid_start(trainer: MetaTrainer) -> None:
    """ConstraintsViolated, before any compute, where a plug's objective fails its plug point's
    constraints at the parameters the run starts from (as `check`, `evaluate` and `export` refuse)."""
    for plug in PLUGS:
        objective = getattr(trainer.objectives, plug)
        require_valid(f"objectives.{plug}={getattr(trainer.cfg.objectives, plug)}", objective,
                      trainer.default_params[plug], initial=True, refusing="start this run",
                      hint="Fix the objective (`metadisco check NAME` runs the same checks), or choose another.")


def resume_config(run: RunDir, cfg: config_lib.RunConfig | None) -> config_lib.RunConfig:
    """The run's own config, or `cfg` where it differs from it in `generations` alone and by no
    fewer than the generations done (a finished run is extended so); any other difference is
    refused with the differences listed."""
    stored = run.config()
    started = run.started_digest()
    if started is not None and started != config_digest(run.read_json("config.json")):
        raise RunDirError(
            f"refusing to resume {run.path}: its config.json was changed since the run began (its digest, kept in "
            f"{run.digest_path.name}, no longer matches), and a run resumed under another config is neither run "
            "nor the one it claims to be. Restore config.json, or start a new run with the config you want "
            "(`metadisco train --resume DIR generations=N` is the one change a resume accepts).")
    if cfg is None or cfg == stored:
        return config_lib.validate(stored)
    changes = config_lib.diff(stored.to_dict(), cfg.to_dict())
    others = [c for c in changes if not c.startswith("generations:")]
    if others:
        raise RunDirError(
            f"refusing to resume {run.path} with a different config:\n  " + "\n  ".join(others)
            + "\nResume with the stored config (`metadisco train --resume DIR`, and generations=N to extend it: "
              "the one change a resume accepts), or start a new run."
        )
    resumed_from = run.newest_readable_checkpoint()  # where the resume starts: a corrupt newest one is passed over
    done = run.checkpoint_generation(resumed_from) if resumed_from is not None else 0
    if cfg.generations < done:
        raise RunDirError(f"refusing to resume {run.path} with generations={cfg.generations}: it has completed {done} "
                          f"generations already; give generations={done} or more (a resume extends a run, it never "
                          "drops generations)")
    return config_lib.validate(cfg)


def _resume_hint(run: RunDir, lead: str) -> str:
    if run.checkpoints():
        return f"{lead} resume with:\n  {command()} train --resume {shlex.quote(str(run.path))}"
    return f"{lead} start the run again (it had no checkpoint yet; --overwrite reuses {run.path})"


def _interrupted(run: RunDir, cfg: config_lib.RunConfig, e: KeyboardInterrupt) -> RunInterrupted:
    code = EXIT_TERMINATED if isinstance(e, _Terminated) else EXIT_INTERRUPTED
    checkpoints = run.checkpoints()
    if not checkpoints:
        return RunInterrupted(f"interrupted before the first checkpoint: nothing to resume. {_resume_hint(run, 'Instead,')}",
                              exit_code=code)
    done = run.checkpoint_generation(checkpoints[-1])
    return RunInterrupted(f"interrupted: checkpoint written at generation {done}/{cfg.generations}. "
                          f"Resume with:\n  {command()} train --resume {shlex.quote(str(run.path))}", exit_code=code)


def _evaluates_after(cfg, gen: int) -> bool:
    """Whether generation `gen` (0-based) ends with the scheduled comparison on fresh seeds."""
    return bool(cfg.eval_every) and ((gen + 1) % cfg.eval_every == 0 or gen + 1 == cfg.generations)


def _timed_save(run, trainer, state, baseline, time_limit: TimeLimit | None) -> None:
    t = time.perf_counter()
    save_state(run, trainer, state, baseline)
    if time_limit is not None:
        time_limit.record_save(time.perf_counter() - t)


def _out_of_time(run: RunDir, cfg, gen: int, time_limit: TimeLimit, evaluates: bool) -> RunInterrupted:
    step = "generation and its comparison on fresh seeds" if evaluates else "generation"
    return RunInterrupted(
        f"time limit {time_limit.text}: stopped at generation {gen}/{cfg.generations} with a checkpoint: the next "
        f"{step} would take about {time_limit.predicted(evaluates):.0f} s and {max(0.0, time_limit.remaining()):.0f} s "
        f"are left. Resume with:\n  {command()} train --resume {shlex.quote(str(run.path))}", exit_code=EXIT_TIME_LIMIT)


def _run(run: RunDir, cfg, resume, overwrite, progress, stop_after, log, trainer: MetaTrainer,
         time_limit: TimeLimit | None = None, allow_layout_change: bool = False) -> None:
    is_main = jax.process_index() == 0
    if resume:
        for line in check_layout(run, trainer, allow_layout_change):
            log(line)
        state, baseline, warnings = load_state(run, trainer)
        for w in warnings:
            log(f"warning: {w}")
        if is_main and run.layout() not in (None, layout_of(trainer)):  # a leg on another layout: recorded
            record_layout(run, trainer, int(fetch(state.generation)))
        if is_main:
            run.truncate_metrics(int(state.generation))
            stored = run.config().generations
            if stored != cfg.generations:  # the one change a resume accepts (resume_config); the rest as stored
                run.write_json("config.json", {**run.read_json("config.json"), "generations": cfg.generations})
                log(f"{run.path}: generations {stored} -> {cfg.generations}")
        log(f"resuming {run.path} at generation {int(state.generation)}/{cfg.generations}")
    else:
        if is_main:
            run.refuse_existing(overwrite)
        console.describe(trainer, run, log)
        t0 = time.perf_counter()
        baseline = trainer.baseline()  # before anything is written: a refused normaliser leaves no run behind
        if is_main:
            run.create(cfg, overwrite=overwrite)
            record_layout(run, trainer, 0)
        state = trainer.init()
        if is_main and fitness_of(cfg.fitness).normalised:
            b = fetch(baseline)
            run.write_json("baseline.json", b.as_dict(trainer.problem_names))
            log(f"PPO baseline for fitness normalisation: {time.perf_counter() - t0:.1f} s")
        save_state(run, trainer, state, baseline)
    state = trainer.replicate(fetch(state))
    baseline_dev = trainer.replicate(fetch(baseline))
    start = int(fetch(state.generation))
    end = cfg.generations if stop_after is None else min(cfg.generations, stop_after)
    mirrors = Mirrors(cfg, run.path, start) if is_main else None
    bar = console.progress_bar(progress and is_main, start, cfg.generations)
    logged = state  # the newest state whose metrics row is written
    history = run.metrics()[:start] if resume and is_main else []  # for the search-health window
    saved = start  # the generation of the newest checkpoint
    selected = selection(history)  # what objectives/selected.json holds: a resume folds the same rows
    try:
        for gen in range(start, end):
            evaluates = _evaluates_after(cfg, gen)
            if time_limit is not None and not time_limit.fits(evaluates):
                if saved != gen:
                    save_state(run, trainer, state, baseline_dev)
                raise _out_of_time(run, cfg, gen, time_limit, evaluates)
            t = time.perf_counter()
            state, metrics = trainer.generation(state, baseline_dev, gen)
            metrics = fetch(metrics)  # waits for the generation
            wall = time.perf_counter() - t
            record = trainer.record(gen, metrics, wall)
            if time_limit is not None:
                time_limit.record_generation(wall)
            if evaluates:
                t = time.perf_counter()
                comparison, validation = trainer.check(state, baseline_dev, gen + 1)
                record = dataclasses.replace(record, comparison=comparison, validation=validation,
                                             violations=found_violations(trainer, state))
                if time_limit is not None:
                    time_limit.record_evaluation(time.perf_counter() - t)
            if is_main:
                run.append_metrics(record)
                if record.validation is not None:  # a finalist of the selection at the end, if nominated
                    save_candidate(run, trainer, state, completed(record))
                chosen = select(selected, record)
                if chosen is not selected:
                    selected = chosen
                    save_selected(run, trainer, state, selected)
            logged = state
            if is_main:
                mirrors.log(record)
            if (gen + 1) % cfg.checkpoint_every == 0 or gen + 1 == end:
                _timed_save(run, trainer, state, baseline_dev, time_limit)
                saved = gen + 1
            if is_main:
                history.append(record)
                # at the last generation the run's summary says it
                collapse = health.collapse_warning(history)
                notes = [f"warning: {collapse}"] if collapse else []
                if evaluates and gen + 1 < cfg.generations:
                    notes += [console.health_line(history), console.degenerate_warning(record, searched_point(cfg.es.strategy))]
                console.update_bar(bar, record, log, cfg.generations, [n for n in notes if n], searched_point(cfg.es.strategy))
    except KeyboardInterrupt:
        save_state(run, trainer, logged, baseline_dev)
        if is_main:  # a row written after `logged` (a signal inside the append) is dropped, as resume would
            run.truncate_metrics(int(fetch(logged.generation)))
        raise
    finally:
        if bar is not None:
            bar.close()
        if mirrors is not None:
            mirrors.close()
    done = int(fetch(state.generation))
    final = None
    if done == cfg.generations and cfg.validation.envs:
        if run.selection_final():  # a finished run resumed (e.g. to read its end again): nothing to re-score
            log(f"selection: final already ({run.objectives_path('selected')}, re-scored at the run's end); "
                "not re-scored")
        else:
            finalists = len(final_selection.finalists(run.metrics()))
            if time_limit is not None and not time_limit.fits_selection(finalists):
                raise RunInterrupted(
                    f"time limit {time_limit.text}: the {done} generations are done, but the selection's re-scoring of "
                    f"{finalists} finalists would take about {time_limit.predicted_selection(finalists):.0f} s and "
                    f"{max(0.0, time_limit.remaining()):.0f} s are left; objectives/selected.json stays provisional. "
                    f"Resume with:\n  {command()} train --resume {shlex.quote(str(run.path))}", exit_code=EXIT_TIME_LIMIT)
            final = finalise_selection(run, trainer, baseline_dev, done, log)
    if is_main and done == cfg.generations:
        console.summary(run, cfg, log, found_violations(trainer, state), final)
    elif is_main:
        log(f"stopped at generation {done}/{cfg.generations} (--stop-after {stop_after}); checkpoint written. "
            f"Continue with:\n  {command()} train --resume {shlex.quote(str(run.path))}")


def found_violations(trainer: MetaTrainer, state: RunState) -> Violations:
    """What the run found, through its plugs' constraint checks (`metadisco check`'s, at the
    evolved parameters): the Violations of the ES mean and of the best member."""
    host = fetch(state)
    found = {"mean": fetch(trainer.mean_params(host)), "best": host.best_params}
    return Violations(**{which: tuple(check_evolved(trainer.objectives, trainer.full_params(params), trainer.evolve))
                         for which, params in found.items()})



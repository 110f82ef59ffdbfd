"""metadisco from Python (a notebook, a script): the same configs and run directories as the CLI.

    from metadisco import api

    run = api.train("lpo_cartpole_cpu", "runs/demo", generations=2, es={"population_size": 4},
                    objectives={"drift": "my_drifts:ScaledSquare"})
    api.plot(run)                                   # {"training": [paths], ..., "report": [path]}
    results = api.evaluate([run, "ppo"], envs="my_envs:Corridor,CartPole-v1", quick=True)   # an Evaluation record
    api.distil(run)                                 # {"drift": DistillationReport, ...}
    api.export(run)                                 # Exported: the closed forms and the files written

Every function raises `MetadiscoError` (a ValueError) for anything the user can fix, with the
message the CLI prints; none raises SystemExit. An interrupted `train` (Ctrl-C) raises
`RunInterrupted` after writing a checkpoint; `train(..., resume=True)` continues it.

The device layout cannot be chosen from here: XLA reads it (XLA_FLAGS, e.g.
--xla_force_host_platform_device_count=N to split a CPU population over N host devices) only when
jax starts, so set it in the environment before the first `import jax` (the CLI does that for
you). On a CPU without it, the population runs on one device.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from metadisco.core.errors import ConfigError, MetadiscoError

if TYPE_CHECKING:
    from metadisco.analysis.distillation.report import DistillationReport
    from metadisco.analysis.evaluation.results import Evaluation

__all__ = ["Exported", "distil", "evaluate", "export", "plot", "train"]


def train(config=None, run_dir=None, *, resume: bool = False, overwrite: bool = False, progress: bool = False,
          stop_after: int | None = None, **overrides) -> Path:
    """Meta-train (or resume) a run; returns its run directory.

    config: a `RunConfig`, a named experiment or a TOML file (str), or None for the demo (as
    `metadisco train` with no experiment: `config.demo`, which on other envs leaves out what is MountainCar's).
    run_dir: where to write (default runs/NAME-TIMESTAMP, as the CLI). overrides: config fields
    with typed values (generations=3, envs=("CartPole-v1", "Acrobot-v1"), tensorboard=True), a
    section as a dict (es={"population_size": 4}, inner={"hidden": (64, 64)}) or a dotted name in a
    dict (**{"inner.total_timesteps": 2048}); each is read as its field's type (a string as the
    command line writes it reads too) and checked as `metadisco train` checks its overrides, with
    the same ConfigError, before anything compiles. resume=True continues
    the run in `run_dir` (config must then be None or agree with it; overrides apply to its stored
    config, and generations=N, no fewer than it has done, is the one change accepted: it extends the run).
    """
    from metadisco import config as config_lib
    from metadisco.train import default_run_dir
    from metadisco.train import run as run_training

    if resume and run_dir is None:
        raise ConfigError("train(resume=True) needs the run_dir to continue")
    if isinstance(config, config_lib.RunConfig):
        cfg = config_lib.override(config, overrides)
    elif config is None and resume:  # the stored config, with the overrides (generations=N extends it)
        from metadisco.rundir import RunDir

        cfg = config_lib.override(RunDir(run_dir).config(), overrides) if overrides else None
    else:
        cfg = config_lib.demo(overrides) if config is None else config_lib.resolve(str(config), overrides)
    if run_dir is None:
        run_dir = default_run_dir(cfg)
    return run_training(cfg, run_dir, resume=resume, overwrite=overwrite, progress=progress, stop_after=stop_after)


def evaluate(targets: Sequence[str | Path] | str | Path, envs: Sequence[str] | str | None = None, *,
             out: str | Path | None = None, inner: dict | Sequence[str] | None = None, inner_from_run: bool = False,
             allow_invalid: bool = False, **options) -> Evaluation:
    """Held-out evaluation of `targets` ("ppo", "dpo", objectives files, run directories,
    RUN_DIR:best / :init, `module:attr` objectives) on `envs` (names or `module:attr`, a list or
    a comma-separated string), as `metadisco evaluate` (which calls this); `options` as
    `metadisco.analysis.evaluation.run.evaluate` (seeds, budget, quick, suite, tune_lr, lr, seed, progress,
    protocol, bootstrap_reps). Writes results.json/csv/md and the curves to `out` (default:
    RUN_DIR/evaluation/TIMESTAMP or ./evaluations/TIMESTAMP) and returns the results, an Evaluation
    record (metadisco.analysis.evaluation.results; `read_results` reads results.json back as one)
    whose `out_dir` is the folder written.

    inner: PPO settings for every environment, a dict of typed values ({"num_envs": 64, "hidden":
    (64, 64)}) or FIELD=VALUE strings, read and checked as `metadisco train` reads inner.FIELD=VALUE, over the
    first run target's own inner settings (except its budget) when `inner_from_run`. Run targets
    found with a recurrent network (inner.network gru or lstm) are evaluated with it, every method
    (PPO and DPO included) on any environments, unless `inner` names the network.
    With no `envs`, `suite` or `quick`, the held-out set the first run target declared before it
    ran (its config's `heldout`: envs, timesteps, seeds, inner_from_run) is used, and said on
    stderr; options given win over it.

    A target whose objectives break their plug point's constraints (`metadisco check`'s checks)
    is refused with ConstraintsViolated before anything compiles; allow_invalid=True evaluates
    it anyway, with a warning on stderr.
    """
    from metadisco.analysis.targets import declared_heldout, require_valid_target, resolve_target
    from metadisco.meta_objectives import ConstraintsViolated

    if isinstance(targets, (str, Path)):
        targets = [targets]
    resolved = [resolve_target(str(t)) for t in targets]
    for target in resolved:
        try:
            require_valid_target(target)
        except ConstraintsViolated as e:
            if not allow_invalid:
                raise
            print(f"warning: evaluating {target.spec!r} anyway (allow_invalid, --allow-invalid), although it breaks "
                  f"{len(e.violations)} constraint(s) ({', '.join(v.constraint for v in e.violations)}):\n  - "
                  + "\n  - ".join(map(str, e.violations)), file=sys.stderr)

    from metadisco.analysis.evaluation import render
    from metadisco.analysis.evaluation import run as evaluation
    if envs is None and options.get("suite") is None and not options.get("quick"):
        found = declared_heldout(resolved)
        if found is not None:
            run_dir, heldout = found
            envs = list(heldout.envs)
            if options.get("budget") is None:
                options["budget"] = heldout.timesteps
            if options.get("seeds") is None:
                options["seeds"] = heldout.seeds
            inner_from_run = inner_from_run or heldout.inner_from_run
            steps = options["budget"]
            print(f"evaluating on the held-out set {run_dir} declared before it ran: {','.join(envs)}"
                  f"{f' at {steps:,} steps' if isinstance(steps, int) else ''} (config: heldout)", file=sys.stderr)
    options["inner"] = _inner_settings(inner, resolved, inner_from_run)
    out_dir = render.check_out_dir(out) if out else render.default_out_dir(resolved)
    options.setdefault("progress", False)
    results = evaluation.evaluate(resolved, envs=envs, **options)
    saved = render.save(results, out_dir)
    for run_dir in {t.run_dir for t in resolved if getattr(t, "run_dir", None) is not None}:
        refresh_report(run_dir)
    return results.saved(saved)


def _network_of(targets) -> dict:
    """The recurrent network (inner.network gru or lstm, and its rnn_size) that the run targets'
    objectives were found with, which every method of the evaluation then trains with (an
    environment has one PPO config: PPO and DPO get the same network), said on stderr; {} where no
    run target trained one. Run targets found with different networks are refused: no one network
    evaluates them all as they ran."""
    from metadisco.analysis.runs import Run
    from metadisco.core.ppo_config import RECURRENT

    found = {}
    for target in targets:
        if target.run_dir:
            stored = Run(target.run_dir).config().inner
            found[target.spec] = {"network": stored.network or "mlp",
                                  **({"rnn_size": stored.rnn_size} if stored.rnn_size is not None else {})}
    networks = {tuple(sorted(n.items())): n for n in found.values()}
    if not any(n["network"] in RECURRENT for n in networks.values()):
        return {}
    if len(networks) > 1:
        raise ConfigError("the run targets were found with different networks ("
                          + ", ".join(f"{spec}: {n['network']}" for spec, n in found.items())
                          + "): evaluate them separately, or name the one network every method trains with "
                            "(--inner network=NAME)")
    (network,) = networks.values()
    print(f"every method, PPO and DPO included, trains with the recurrent network the run's objectives were "
          f"found with ({', '.join(f'{k}={v}' for k, v in network.items())}; --inner network=NAME for another)",
          file=sys.stderr)
    return network


def _inner_settings(inner: dict | Sequence[str] | None, targets=(), from_run: bool = False) -> dict:
    """PPO overrides for every environment: the recurrent network the run targets were found with
    (`_network_of`, unless `inner` names one), then the first run target's `inner` section where
    `from_run` (inner_from_run; its total_timesteps stays out, the budget sets it), then `inner`
    (typed values by field, or FIELD=VALUE items), read and checked as `metadisco train` reads inner.FIELD=VALUE."""
    from metadisco.analysis.runs import Run
    from metadisco.config import inner_config

    try:
        given = inner_config({}, inner or ()).overrides()
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--inner (inner): {e}; fields: see the documentation site's configuration reference") from None
    base = {} if "network" in given else _network_of(targets)
    if from_run:
        runs = [t for t in targets if t.run_dir]
        if not runs:
            raise ConfigError("--inner-from-run (inner_from_run) needs a RUN_DIR target, or a file in a run directory "
                              "(RUN_DIR/export/*.json, RUN_DIR/objectives/*.json)")
        stored = Run(runs[0].run_dir).config().inner.overrides()
        base |= {k: v for k, v in stored.items() if k != "total_timesteps"}
    return {**base, **given}


def chosen_objective(run_dir: str | Path, which: str | None = None) -> tuple[str, str]:
    """(which, in words) of the objectives a reader takes from a run: `which` where given, else the
    selected objective where the run kept one (RunConfig.validation), else the last ES mean."""
    from metadisco.analysis.runs import Run

    run = Run(run_dir)
    run.config()  # RunDirError where it is no run directory, before a reader says what it reads
    which = which or run.default_which()
    return which, run.which_text(which)


def plot(run_dir: str | Path, **options) -> dict:
    """Draw a run's figures and write its report (`metadisco.analysis.plots.plot_run` options: out_dir,
    formats, which); returns {figure: [paths]}, "report": [path], and "notes": what was skipped.
    A figure that fails to draw is a bug: the others are drawn, then FigureError names it."""
    from metadisco.analysis.plots import plot_run
    from metadisco.analysis.runs import Run

    run = Run(run_dir)
    config = run.config()  # RunDirError before anything heavy
    options["which"] = options.get("which") or run.default_which()
    notes: list[str] = []
    span = None
    if "value_loss" in config.objectives.evolve and run.objectives_path(options["which"]).is_file():
        own_folder = options.get("out_dir") is None or Path(options["out_dir"]) == run.figures_dir
        span = visited_error_span(run, options["which"], store=own_folder)
        notes.append(f"the value loss is drawn over the errors its critic makes: |v - target| <= {span:.3g} "
                     "(3 standard deviations of those PPO visits with it)")
    written = plot_run(run_dir, notes=notes, error_span=span, **options)
    return {**written, "notes": notes}


def visited_error_span(run, which: str = "mean", store: bool = True) -> float:
    """3 standard deviations of the critic's errors v - target that PPO makes when it trains with a
    run's objectives: distil's measure where `metadisco distil` has run, else the one stored in
    RUN_DIR/figures/error_span.json for these objectives and this config, else measured now (one
    short training run per meta-training environment, as distil samples them) and, with `store`,
    stored there, so that the report's redraws after evaluate and export do not train again."""
    import hashlib
    import json

    import numpy as np

    from metadisco.analysis.distillation.run import params_digest, stored_report
    from metadisco.core.fileio import atomic_write_text

    report = stored_report(run, "value_loss", which)
    if report is not None and report.data.error_std:
        return 3.0 * float(report.data.error_std)
    objectives, params, _ = run.objectives(which)
    measured_for = {"which": which, "params_digest": params_digest(params),
                    "config_digest": hashlib.sha256(run.config_path.read_bytes()).hexdigest()[:16]}
    try:
        stored = json.loads(run.error_span_path.read_text())
        if {k: stored.get(k) for k in measured_for} == measured_for and isinstance(stored.get("span"), float):
            return stored["span"]
    except (OSError, ValueError, AttributeError):  # none yet, or not one this code wrote: measure it
        pass
    rows = _visited(run.config(), objectives, params)
    span = 3.0 * float(np.std(rows[:, 2] - rows[:, 3]))
    if store:
        try:
            atomic_write_text(run.error_span_path, json.dumps({**measured_for, "span": span}))
        except OSError:  # a read-only run directory: measured again next time
            pass
    return span


def refresh_report(run_dir: str | Path) -> Path | None:
    """Redraw a run's report.html (and its figures) where `plot` wrote one, so that what evaluate,
    distil and export add shows at once; None where there is no report yet. A figure that fails
    leaves the report as it was and says so: the command that called this has done its work."""
    import sys

    from metadisco.analysis.plots import FigureError
    from metadisco.analysis.runs import Run

    run = Run(run_dir)
    if not (run.path / "report.html").is_file():
        return None
    try:
        plot(run.path)
    except (FigureError, MetadiscoError) as e:
        print(f"metadisco: note: {run.path / 'report.html'} not refreshed: {e}", file=sys.stderr)
        return None
    return run.path / "report.html"


def distil(run_dir: str | Path, which: str | None = None, plugs: Sequence[str] | None = None,
           **options) -> dict[str, DistillationReport]:
    """Fit closed forms to what a run evolved, as `metadisco distil` (which calls this; so does
    `metadisco export` for a plug point not distilled yet): writes RUN_DIR/distil/ and returns
    {plug: its DistillationReport} (metadisco.analysis.distillation.report). plugs: the plug points
    to distil (default: every evolved one: the drift, the value loss and/or the shaping potential).
    options: symbolic, progress, seed, prior_fraction, fit. which: the run's objectives file (None: the
    selected objective where the run kept one, else the last ES mean: `chosen_objective`).

    The fit runs on the points PPO visits when it trains with the run's objectives on each of its
    meta-training environments, equally many per environment, plus points from a prior; a
    shaping potential on the observations that training reaches on the first of them.
    """
    from metadisco.analysis.distillation.run import check_distil_options, distil_run, distillable
    from metadisco.analysis.runs import Run

    run = Run(run_dir)
    cfg = run.config()
    which = which or run.default_which()
    plugs = distillable(cfg) if plugs is None else tuple(plugs)
    objectives, params, _ = run.objectives(which)
    check_distil_options(options.get("progress"), options.get("prior_fraction", 0.5), options.get("fit", "value"))
    seed = options.get("seed", 0)
    rows = _visited(cfg, objectives, params, seed) if set(plugs) - {"shaping"} else None
    observations = _visited_observations(cfg, objectives, params) if "shaping" in plugs else None
    reports = distil_run(run, rows, objectives, params, which, plugs=plugs, observations=observations, **options)
    refresh_report(run.path)
    return reports


@dataclasses.dataclass(frozen=True)
class Exported:
    """What `export` wrote. expressions: {plug: expression} exported; sources: {plug: where each
    came from}; value_loss_base: PPO's value clipping applied to the value loss (None: the
    expression is the whole loss); paths: {kind: path} written ("tex", "json", "py"; "loss.py"
    for DiscoGen); distilled: the plugs `distil` ran for first, having no distillation yet; notes:
    what DiscoGen needs to run the loss.py (a recurrent run: its recurrent template backend)."""

    expressions: dict
    sources: dict
    value_loss_base: dict | None
    paths: dict
    distilled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def export(run_dir: str | Path, which: str | None = None, *, expression: str | None = None, value_loss: str | None = None,
           potential: str | None = None, candidate: int | None = None, format: str = "metadisco",
           name: str | None = None) -> Exported:
    """Write a run's closed forms, as `metadisco export` (which calls this): LaTeX, a loadable
    objectives JSON (the run's other plug points kept) and a standalone JAX module into
    RUN_DIR/export/, or with format="discogen" a `loss.py` for DiscoGen's on-policy RL domain.

    Each evolved drift, value loss or shaping potential is exported as: `expression` / `value_loss`
    (the whole loss) / `potential` (over s0, s1, ...) where given; else a closed-form family's
    member itself (no fit); else row `candidate` of distil's Pareto front, or distil's chosen one
    (distilling first where the run has not been).
    A value loss distilled from one on PPO's clipped base is exported with that clipping applied.
    MetadiscoError for a candidate that does not exist, a plug with no valid candidate, or an
    expression that breaks its plug's constraints (export refuses what `metadisco check` refuses).
    """
    from metadisco.analysis.distillation.run import DISTILLABLE, distillable, stored_report
    from metadisco.analysis.export import discogen_backend_notes, export_closed_form, export_discogen
    from metadisco.analysis.runs import Run
    from metadisco.core.ppo_config import RECURRENT
    from metadisco.meta_objectives.closed_form import closed_form_base

    run = Run(run_dir)
    cfg = run.config()
    which = which or run.default_which()  # the selected objective where the run kept one
    given = {"drift": expression, "value_loss": value_loss, "shaping": potential}
    plugs = tuple(p for p in DISTILLABLE if given[p] is not None) or distillable(cfg)
    objectives, params, _ = run.objectives(which)
    expressions, sources, distilled = {}, {}, []
    value_loss_base = None  # the expression is the whole loss, unless distilled from a clipped base
    for plug in plugs:
        if given[plug] is not None:
            expressions[plug], sources[plug] = given[plug], "given"
            continue
        own = getattr(objectives, plug).closed_form(params.get(plug, {})) if candidate is None else None
        if own is not None:  # a closed-form family (drift_mix, dpo_schedule): the member is its formula
            expressions[plug], sources[plug] = own, "the evolved member's own closed form, no fit"
            continue
        report = stored_report(run, plug, which)  # None where it was fitted to another objective: fitted anew
        if report is None:
            report = distil(run.path, which, plugs=(plug,))[plug]
            distilled.append(plug)
        if plug == "value_loss":  # a report from before closed_form_base: the run's own loss says it
            value_loss_base = report.closed_form_base or closed_form_base(objectives.value_loss)
        if candidate is not None:
            rows = report.front
            if not 0 <= candidate < len(rows):
                raise MetadiscoError(f"--candidate {candidate}: the {plug} distillation's Pareto front has "
                                     f"{len(rows)} rows, numbered 0 to {len(rows) - 1} as `metadisco distil` prints "
                                     f"them (see {run.distil_dir})")
            expressions[plug], sources[plug] = rows[candidate].expression, f"Pareto front row {candidate}"
        elif report.chosen:
            expressions[plug], sources[plug] = report.chosen.expression, "distil's chosen candidate"
        else:
            flag = {"drift": "--expression", "value_loss": "--value-loss", "shaping": "--potential"}[plug]
            raise MetadiscoError(
                f"distillation found no {plug} candidate that satisfies the constraints; pass one with {flag}")
    notes = ()
    if format == "discogen":
        if "shaping" in expressions:
            raise MetadiscoError("a DiscoGen loss.py has no place for a reward shaping (it is a loss, not a reward): "
                                 f"export the potential without --format discogen (metadisco export {run.path})")
        if "drift" not in expressions:
            raise MetadiscoError("a DiscoGen loss needs a drift: this run evolved no drift; pass one with --expression")
        network = cfg.inner.network or "mlp"  # the presets' (inner.network unset)
        paths = {"loss.py": export_discogen(expressions["drift"], run.export_dir / "discogen",
                                            value_loss=expressions.get("value_loss"), value_loss_base=value_loss_base,
                                            recurrent=network in RECURRENT)}
        notes = tuple(discogen_backend_notes(network, cfg.inner.rnn_size))
    else:
        # plug points not exported as closed forms keep the run's own (fixed) objectives
        paths = export_closed_form(expressions.get("drift"), run.export_dir,
                                   name=name or "discovered_" + "_and_".join(expressions),
                                   value_loss=expressions.get("value_loss"), potential=expressions.get("shaping"),
                                   fixed=(objectives, params),
                                   metadata={"run_dir": str(run.path), "source": sources, "envs": list(cfg.envs)},
                                   value_loss_base=value_loss_base)
    refresh_report(run.path)
    return Exported(expressions, sources, value_loss_base, {k: Path(v) for k, v in paths.items()}, tuple(distilled),
                    notes)


def _visited_observations(cfg, objectives, params):
    """Raw observations PPO reaches training with `objectives` at `params` on the first environment
    of `cfg` (a potential reads one observation shape: the one it was sized for)."""
    import jax

    from metadisco.analysis.distillation.run import visited_observations
    from metadisco.config import ppo_config
    from metadisco.core import streams
    from metadisco.inner_loops import make_env

    env = cfg.envs[0]
    key = jax.random.split(streams.key(cfg.seed, streams.Stream.DISTILLATION), len(cfg.envs))[0]
    return visited_observations(key, make_env(env), ppo_config(cfg, env), objectives.for_env(make_env(env).obs_shape),
                                params)


def _visited(cfg, objectives, params, seed: int = 0):
    """(ratio, advantage, value, target, progress) rows PPO visits with `objectives` at `params`
    on each environment of `cfg` (the run's RunConfig), equally many per environment."""
    import jax

    from metadisco.analysis.distillation.run import balanced, visited_samples
    from metadisco.config import ppo_config
    from metadisco.core import streams
    from metadisco.inner_loops import make_env

    keys = jax.random.split(streams.key(cfg.seed, streams.Stream.DISTILLATION), len(cfg.envs))
    return balanced([visited_samples(k, make_env(env), ppo_config(cfg, env), objectives, params)
                     for k, env in zip(keys, cfg.envs)], seed)

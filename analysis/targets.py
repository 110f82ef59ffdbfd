"""What an evaluation compares: a TARGET spec -> objectives with their full parameters.

A TARGET is "ppo" or "dpo" (built-in baselines; "ppo[clip_eps=0.3]", "dpo[alpha=1.5]" with
other options of their drift), zoo:NAME (a discovered objective shipped with
metadisco, metadisco.meta_objectives.discovered), an objectives JSON file (an exported closed
form, a run's objectives/best.json), `module:attr` (an objective class of the user's own, at its
initial parameters, the other plug points PPO's), or a run directory (its objectives/selected.json where it
validated, else mean.json; RUN_DIR:mean and RUN_DIR:selected pick one; RUN_DIR:best
picks best.json, RUN_DIR:init the objectives at their initial parameters). Only files are read
here, nothing is compiled; run directories are read through `metadisco.analysis.runs`. `require_valid_target`
refuses a target whose objectives break their plug's constraints, as `metadisco check` and
`export` do.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from metadisco.analysis.runs import Run, run_containing
from metadisco.analysis.suites import EvaluationError
from metadisco.core.options import split_options
from metadisco.core.plugins import is_import_path, load
from metadisco.core.run_config import HeldoutConfig
from metadisco.measure.run_files import RunDirError
from metadisco.meta_objectives import DPO, PLUGS, ObjectiveFileError, Objectives, discovered, load_objectives, make_objective
from metadisco.meta_objectives.constraints import require_valid

__all__ = ["REFERENCES", "Target", "builtin", "declared_heldout", "full_params", "require_valid_target",
           "resolve_target"]

REFERENCES = ("ppo", "dpo")


class Target(NamedTuple):
    """A method to evaluate: objectives (structure) with their full parameters."""

    label: str
    objectives: Objectives
    params: dict  # full meta-params, keyed by plug point
    meta_train_envs: tuple[str, ...]  # environments it was meta-trained on (flagged, never held out)
    source: str  # "builtin" | "file" | "run" | "plugin" | "zoo"
    spec: str  # as given
    run_dir: str | None = None  # the run it came from: a run-directory target, or a file inside one
    where: str | None = None  # where its parameters come from, as a refusal names it: a file, or a run's start
    initial: bool | None = None  # its parameters are where a run started (RUN_DIR:init); None: the checks decide


def declared_heldout(targets) -> tuple[str, HeldoutConfig] | None:
    """(run directory, the held-out set it declared before it ran) of the first target from a run
    that declared one (config `heldout.envs`), or None: what an evaluation given no environments
    runs on (`metadisco.api.evaluate`, and so `metadisco evaluate`)."""
    for target in targets:
        if target.run_dir:
            heldout = Run(target.run_dir).heldout()
            if heldout is not None:
                return str(target.run_dir), heldout
    return None


def builtin(name: str) -> Objectives:
    """The objectives of a built-in reference: "ppo" (PPO-clip, L2, no shaping) or "dpo"."""
    return {"ppo": Objectives, "dpo": lambda: Objectives(drift=DPO())}[name]()


BASELINE_DRIFTS = {"ppo": "ppo_clip", "dpo": "dpo"}  # a reference -> its drift's registered name


def _baseline_with_options(spec: str) -> Target | None:
    """"ppo[clip_eps=0.3]" -> PPO with its drift at other options (a control: PPO with its clip
    range tuned as well as its rate), "dpo[alpha=1.5]" likewise; None for anything else."""
    name = spec.partition("[")[0].strip()
    if name not in BASELINE_DRIFTS or Path(spec).exists():
        return None
    try:
        name, options = split_options(spec)
        drift = make_objective("drift", BASELINE_DRIFTS[name], **options)
    except (TypeError, ValueError) as e:
        raise EvaluationError(f"target {spec!r}: {e}") from None
    objectives = Objectives(drift=drift)
    return Target(spec, objectives, full_params(objectives), (), "builtin", spec)


def full_params(objectives: Objectives, params: dict | None = None) -> dict:
    """`params` completed with the objectives' initial parameters for every plug point it lacks."""
    return objectives.merge(params or {}, objectives.default_params())


def _envs_from(value) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


def resolve_target(spec: str) -> Target:
    """"ppo" | "dpo" | zoo:NAME | an objectives JSON file | RUN_DIR | RUN_DIR:best | RUN_DIR:mean |
    RUN_DIR:selected | RUN_DIR:init -> Target. RUN_DIR alone is RUN_DIR:selected where the run kept a
    selected objective (RunConfig.validation), else RUN_DIR:mean; its label says which (RUN:selected).
    RUN_DIR:init is the run's objectives at their initial parameters, the point evolution started
    from (`start_params(the run's seed)`): the control that separates what evolution found from what
    the parameterisation gives before any search (e.g. a learned value loss starts at L2, not at
    PPO's clipped L2).

    Raises EvaluationError (reading files only, no compute) for a missing path, a directory that
    is not a run directory, a run that has not written its objectives yet, or a corrupt file.
    """
    spec = str(spec)
    if spec in REFERENCES:
        objectives = builtin(spec)
        return Target(spec, objectives, full_params(objectives), (), "builtin", spec)
    baseline = _baseline_with_options(spec)
    if baseline is not None:
        return baseline
    zoo_name = discovered.split_target(spec)
    if zoo_name is not None:  # an objective shipped in the zoo (`metadisco zoo` lists them)
        try:
            objectives, params, extra = discovered.load(zoo_name)
        except discovered.ZooError as e:
            raise EvaluationError(f"target {spec!r}: {e}") from None
        return Target(spec, objectives, full_params(objectives, params), _envs_from(extra.get("envs")), "zoo", spec,
                      where=f"the zoo entry {zoo_name}")
    path, which = Path(spec), None
    if not path.exists() and ":" in spec:
        base, _, suffix = spec.rpartition(":")
        if suffix in ("best", "mean", "selected", "init"):
            path, which = Path(base), suffix
    if path.is_dir():
        run = Run(path)
        return _run_target(spec, run, which or (run.default_which() if run.is_run() else "mean"))
    if path.is_file():
        if which:
            raise EvaluationError(f"target {spec!r}: ':{which}' picks a file of a run directory, but {path} is a file")
        return _file_target(spec, path)
    if is_import_path(spec):  # an objective of the user's own: PPO with it at its plug point
        return _plugin_target(spec)
    raise EvaluationError(
        f"target {spec!r}: no run directory or objectives file at {path}. A TARGET is ppo, dpo (or with other options "
        "of their drift: ppo[clip_eps=0.3]), zoo:NAME, an objectives "
        "JSON file (an exported closed form or RUN_DIR/objectives/best.json), or a run directory "
        "(RUN_DIR evaluates objectives/selected.json where the run validated, else mean.json; RUN_DIR:mean and "
        "RUN_DIR:selected pick one, RUN_DIR:best objectives/best.json, RUN_DIR:init the objectives at their initial "
        "parameters)."
    )


def _plugin_target(spec: str) -> Target:
    """module:attr naming an objective class: PPO's objectives with that one at its plug point,
    at its initial parameters (the class is imported by module name; PluginError otherwise)."""
    plug = getattr(load(spec, "objective"), "plug", None)
    if plug not in PLUGS:
        raise EvaluationError(f"target {spec!r} is not an objective (no plug point); a module:attr target names "
                              "a meta_objectives.MetaObjective class")
    objectives = Objectives(**{plug: make_objective(plug, spec)})
    return Target(spec.rpartition(":")[2], objectives, full_params(objectives), (), "plugin", spec)


def _usable(spec: str, path: Path, load):
    """load() -> (objectives, full params, extra), its errors as EvaluationError naming the target."""
    try:
        objectives, params, extra = load()
    except (ObjectiveFileError, RunDirError) as e:
        raise EvaluationError(f"target {spec!r}: {e}") from None
    except ValueError as e:  # e.g. a learned shaping without an observation shape
        raise EvaluationError(f"target {spec!r}: {path} does not describe usable objectives ({e})") from None
    return objectives, full_params(objectives, params), extra


def _file_target(spec: str, path: Path) -> Target:
    objectives, params, extra = _usable(spec, path, lambda: load_objectives(path))
    run = run_containing(path)  # RUN_DIR/objectives/*.json or RUN_DIR/export/*.json
    label = path.stem
    if run is not None and path.parent == run.objectives_dir:
        label = f"{run.path.name}:{path.stem}"  # RUN_DIR/objectives/best.json -> RUN:best
    return Target(label, objectives, params, _envs_from(extra.get("envs")), "file", spec,
                  str(run.path) if run is not None else None, str(path))


def _run_target(spec: str, run: Run, which: str) -> Target:
    if not run.is_run():
        raise EvaluationError(
            f"target {spec!r}: {run.path} is a directory but not a metadisco run directory (no config.json). "
            "Give a run directory made by `metadisco train`, or an objectives JSON file."
        )
    try:
        config = run.config()
    except RunDirError as e:
        raise EvaluationError(f"target {spec!r}: {e}") from None
    stored = "mean" if which == "init" else which
    objectives, params, extra = _usable(spec, run.objectives_path(stored), lambda: run.objectives(stored))
    where = str(run.objectives_path(stored))
    if which == "init":  # the run's own start, as the engine draws it
        params = objectives.start_params(config.seed)
        where = f"{run.path} at its initial parameters"
    plain = which == "mean" and run.default_which() == "mean"
    label = run.path.resolve().name + ("" if plain else f":{which}")
    envs = _envs_from(config.envs) or _envs_from(extra.get("envs"))
    return Target(label, objectives, params, envs, "run", spec, str(run.path), where, True if which == "init" else None)


def require_valid_target(target: Target) -> None:
    """ConstraintsViolated (exit code 2) naming the target, where its parameters come from and each
    violated constraint, when one of its objectives breaks its plug point's constraints at the
    target's parameters: the checks and the wording of `metadisco check` and `export`
    (metadisco.meta_objectives.constraints). PPO's own pieces are the reference itself and are not
    checked. Nothing is compiled."""
    ppo = builtin("ppo")
    for plug, objective in target.objectives.items():
        if objective == getattr(ppo, plug):
            continue
        closed = objective.closed_form(target.params.get(plug, {}))
        subject = f"the {plug} of {target.where or target.spec}" + (f" ({closed})" if closed else "")
        require_valid(subject, objective, target.params.get(plug, {}), initial=target.initial,
                      refusing=f"evaluate {target.spec!r}",
                      hint="--allow-invalid evaluates it anyway (to study an invalid objective)")

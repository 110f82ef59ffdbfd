"""Planning an evaluation: every check that can fail, before anything compiles.

    plan(targets, envs, ...) -> Plan(methods, jobs, suite, scale)

A method is a target or a reference (PPO and DPO are always evaluated beside the targets); a job
is one environment with its PPO config and budget. Every input error raises EvaluationError.
The protocol (scores, learning-rate grid) is `metadisco.analysis.evaluation.protocol`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

from metadisco.analysis import suites
from metadisco.analysis.evaluation.programs import Programs
from metadisco.analysis.evaluation.protocol import Protocol
from metadisco.analysis.suites import EvaluationError
from metadisco.analysis.targets import REFERENCES, Target, builtin, full_params, resolve_target
from metadisco.inner_loops import Env, PPOConfig, check_env_name, preset_for
from metadisco.meta_objectives import Objectives

__all__ = ["Method", "EnvJob", "Plan", "plan"]


@dataclass
class Method:
    label: str
    objectives: Objectives
    params: dict
    role: str  # "target" | "reference" | "target+reference"
    meta_train_envs: tuple[str, ...] = ()
    # (label, objectives, params) of another method whose family contains this one exactly: this
    # method trains through that one's compiled program (bit for bit the same runs, one compile less)
    through: tuple[str, Objectives, dict] | None = None

    @property
    def program(self) -> tuple[Objectives, dict]:
        """The objectives whose program this method trains through, and the parameters it passes."""
        return self.through[1:] if self.through else (self.objectives, self.params)


@dataclass
class EnvJob:
    name: str
    env: Env
    config: PPOConfig
    budget: int
    meta_train_for: list[str] = field(default_factory=list)  # labels of methods meta-trained on it


class Plan(NamedTuple):
    methods: list[Method]
    jobs: list[EnvJob]
    suite: str | None
    scale: str


def _as_targets(targets) -> list[Target]:
    if isinstance(targets, (str, os.PathLike, Target)):
        targets = [targets]
    out = [t if isinstance(t, Target) else resolve_target(t) for t in targets]
    if not out:
        raise EvaluationError("no targets: name at least one (ppo, dpo, an objectives file or a run directory)")
    return out


def _methods(targets: list[Target]) -> list[Method]:
    """The targets under unique labels, then whichever references they did not name."""
    methods: list[Method] = []
    taken: set[str] = set()
    for t in targets:
        if t.source == "builtin":
            if t.label not in taken:
                methods.append(Method(t.label, t.objectives, t.params, "target+reference"))
                taken.add(t.label)
            continue
        label = t.label
        if label in taken or label in REFERENCES:
            label = t.spec
        n, base = 2, label
        while label in taken or label in REFERENCES:
            label, n = f"{base}#{n}", n + 1
        methods.append(Method(label, t.objectives, t.params, "target", tuple(t.meta_train_envs)))
        taken.add(label)
    for ref in REFERENCES:
        if ref not in taken:
            objectives = builtin(ref)
            methods.append(Method(ref, objectives, full_params(objectives), "reference"))
            taken.add(ref)
    return _share_programs(methods)


def _share_programs(methods: list[Method]) -> list[Method]:
    """A built-in method (PPO, DPO at their default parameters) that a target's family contains
    exactly (`Objectives.params_reproducing`: LPO and drift_mix contain PPO-clip) trains through that
    target's program with the parameters that express it, instead of compiling its own."""
    for m in methods:
        if m.role == "target":
            continue  # a target's own parameters are not the defaults that `params_reproducing` matches
        for t in methods:
            if t.role == "target" and t.objectives != m.objectives:
                params = t.objectives.params_reproducing(m.objectives)
                if params is not None:
                    m.through = (t.label, t.objectives, params)
                    break
    return methods


def _task(env_name: str) -> str:
    """The task an environment name stands for (a brax backend does not make another task)."""
    return env_name.partition(":")[0]


def plan(targets, programs: Programs, protocol: Protocol, envs=None, seeds: int = suites.DEFAULT_SEEDS,
         budget=None, quick: bool = False, suite: str | None = None, lr: float | None = None,
         inner: dict | None = None) -> Plan:
    """Resolve targets, environments, budgets and PPO configs; check that each target fits each
    environment. Builds the environments (through `programs`), compiles nothing."""
    protocol.check()
    targets = _as_targets(targets)
    if int(seeds) != seeds or seeds < 1:
        raise EvaluationError(f"seeds must be a positive integer, got {seeds!r}")
    if budget is not None and not isinstance(budget, dict) and (int(budget) != budget or budget < 1):
        raise EvaluationError(f"the budget (total timesteps per run) must be a positive integer, got {budget!r}")
    if lr is not None and not lr > 0:
        raise EvaluationError(f"the learning rate must be > 0, got {lr!r}")
    names, suite = suites.environments(envs, suite, quick)
    for name in names:
        try:
            check_env_name(name)
        except ValueError as e:
            raise EvaluationError(str(e)) from None
    scale = suites.scale_of(quick, suite)
    methods = _methods(targets)
    jobs = []
    for name in names:
        steps = suites.budget_for(name, scale, budget)
        try:
            config = preset_for(name)
            if protocol.eval_episodes is not None:
                config = config.replace(eval_episodes=protocol.eval_episodes)
            config = config.replace(**(inner or {}))
            config = config.replace(total_timesteps=steps, **({"lr": float(lr)} if lr else {}))
            config.validate()
            if protocol.needs_evaluation and not config.eval_episodes:
                raise ValueError(f"protocol {protocol.name!r} scores final-policy evaluation episodes, but "
                                 "eval_episodes is 0")
        except ValueError as e:
            raise EvaluationError(
                f"{name} with a budget of {steps} steps: {e} "
                + ("(check --inner and --timesteps)" if inner else "(set the budget with --timesteps)")
            ) from None
        env = programs.env(name)
        for m in methods:
            problem = m.objectives.incompatibility(env.obs_shape, env.name)  # the objectives' own answer
            if problem:
                raise EvaluationError(f"target {m.label!r} cannot be evaluated on {name}: {problem}")
        meta = [m.label for m in methods if _task(name) in {_task(e) for e in m.meta_train_envs}]
        jobs.append(EnvJob(name, env, config, steps, meta))
    return Plan(methods, jobs, suite, scale)

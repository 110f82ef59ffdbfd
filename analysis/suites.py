"""Evaluation suites and budgets: ONE table, from which the command's help and the docs are made.

jax-free (`import metadisco.analysis.suites` starts no jax), so the command line can build its help and
check a suite or an environment list before jax starts.

    TABLE                      (suite, environment, budget, why) rows: the one source
    SUITES, BUDGETS            {suite: [env, ...]}, {scale: {env: steps}}, derived from TABLE
    FAMILY_BUDGETS             budgets of environments outside the table, by preset family
    environments(envs, suite, quick) -> (names, suite)   what an evaluation runs on
    budget_for(env, scale, budget)   environment steps per training run
    help_text()                the `metadisco evaluate` epilog (suites, TARGET forms, examples)
    markdown_table()           the table for the docs

A budget is environment steps per training run (the preset's total_timesteps). "quick" is
CPU-sized (a few minutes on 2 cores); "default" is accelerator-sized (hours on a 2-core CPU).
MountainCar-v0 and Pendulum-v1 are left out of "quick": PPO does not move off its initial return
there within 5e4 steps, so they have no normaliser at that budget.
"""

from __future__ import annotations

import textwrap
from itertools import groupby

from metadisco.core.catalog import preset_name
from metadisco.core.errors import MetadiscoError

__all__ = [
    "TABLE", "SUITES", "BUDGETS", "FAMILY_BUDGETS", "DESCRIPTIONS", "DEFAULT_SEEDS", "EvaluationError",
    "environments", "scale_of", "budget_for", "help_text", "markdown_table",
]

DEFAULT_SEEDS = 8

TABLE: tuple[tuple[str, str, int, str], ...] = (
    # suite, environment, budget (environment steps per run), why this budget
    ("quick", "CartPole-v1", 50_000, "CPU-sized: a few minutes on 2 cores, 8 seeds, 3 methods"),
    ("quick", "Acrobot-v1", 50_000, ""),
    ("quick", "Catch-bsuite", 50_000, ""),
    ("default", "CartPole-v1", 500_000, "PureJaxRL's CartPole budget"),
    ("default", "Acrobot-v1", 500_000, ""),
    ("default", "Breakout-MinAtar", 10_000_000, "the budget of the PPO normalisers of Goldie et al. 2024 (OPEN) and 2025"),
    ("default", "SpaceInvaders-MinAtar", 10_000_000, ""),
    ("default", "Asterix-MinAtar", 10_000_000, ""),
    ("default", "brax/hopper", 5_000_000, "1/10 of PureJaxRL's Brax budget (LPO meta-trained Ant at 3e7)"),
    ("default", "brax/ant", 5_000_000, ""),
)
DESCRIPTIONS = {"quick": "CPU-sized: a few minutes on 2 cores", "default": "accelerator-sized"}

SUITES: dict[str, list[str]] = {s: [env for _, env, _, _ in rows] for s, rows in groupby(TABLE, key=lambda r: r[0])}
# Environment steps per training run, by scale (a suite name; "quick" = CPU-sized) and environment.
BUDGETS: dict[str, dict[str, int]] = {s: {env: b for _, env, b, _ in rows} for s, rows in groupby(TABLE, lambda r: r[0])}
# Budgets of environments outside BUDGETS, by preset family (metadisco.core.catalog.preset_name).
FAMILY_BUDGETS: dict[str, dict[str, int]] = {
    "quick": {"classic": 50_000, "minatar": 500_000, "brax": 204_800},
    "default": {"classic": 500_000, "minatar": 10_000_000, "brax": 5_000_000},
}

TARGETS_HELP = """\
TARGET is one of:
  ppo, dpo              the built-in baselines
  ppo[clip_eps=0.3]     a baseline with other options of its drift (dpo[alpha=1.5]): a control
                        that tunes PPO's clip range beside every method's learning rate
  FILE.json             an objectives file (an exported closed form, RUN_DIR/objectives/best.json)
  RUN_DIR[:selected|:mean|:best]  a run directory: objectives/selected.json (the default where the
                        run validated: the ES mean of its best validation generation, or its
                        start where none scored higher), else mean.json (the last ES mean),
                        or best.json; its meta-training
                        environments are flagged and aggregated apart
  RUN_DIR:init          the run's objectives at their initial parameters (where evolution
                        started): the control for what evolution itself found
  zoo:NAME              a discovered objective shipped with metadisco (`metadisco zoo` lists them)
  module:attr           an objective class of your own, imported from your environment
examples (RUN: a run of lpo_cartpole_cpu; its export/ after `metadisco distil RUN && metadisco export RUN`):
  metadisco evaluate dpo --quick
  metadisco evaluate runs/lpo-cartpole-20261101-120000 --envs Acrobot-v1,Catch-bsuite --tune-lr
  metadisco evaluate runs/RUN runs/RUN:init --quick     # gain from evolution vs from the start point
  metadisco evaluate runs/RUN --quick --protocol discogen  # every method tuned and scored as in DiscoGen
  metadisco evaluate runs/RUN/export/discovered_drift.json --suite default --seeds 16
  metadisco evaluate runs/RUN/export/discovered_drift.json "ppo[clip_eps=0.1]" --envs Breakout-MinAtar --tune-lr"""


class EvaluationError(MetadiscoError):
    """Bad input to an evaluation (the message says what is wrong and what to do)."""


def environments(envs=None, suite: str | None = None, quick: bool = False) -> tuple[list[str], str | None]:
    """(environment names, suite name or None): `envs` (names or "a,b") or else the suite's
    (`suite`, else "quick" if `quick` else "default"). Names are not checked here."""
    if envs is not None and suite is not None:
        raise EvaluationError("give envs or a suite, not both")
    if envs is None:
        suite = suite or ("quick" if quick else "default")
        if suite not in SUITES:
            raise EvaluationError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
        return list(SUITES[suite]), suite
    if isinstance(envs, str):
        envs = envs.split(",")
    names = list(dict.fromkeys(e.strip() for e in envs if e and e.strip()))
    if not names:
        raise EvaluationError("no environments given: name at least one, e.g. envs=CartPole-v1")
    return names, None


def scale_of(quick: bool, suite: str | None) -> str:
    """The budget scale: "quick" when asked for or when the suite is "quick", else "default"."""
    return "quick" if quick or suite == "quick" else "default"


def budget_for(env: str, scale: str, budget: int | dict | None = None) -> int:
    """Environment steps per training run: `budget` (an int for every environment, or a dict by
    environment) where it says, else the table's at `scale`, else the preset family's."""
    if isinstance(budget, dict) and env in budget:
        return int(budget[env])
    if budget is not None and not isinstance(budget, dict):
        return int(budget)
    return BUDGETS[scale].get(env, FAMILY_BUDGETS[scale][preset_name(env)])


def _steps(n: int) -> str:
    """5e4 for 50,000; exact digits when there is no one-digit mantissa."""
    mantissa, _, exponent = f"{n:.0e}".partition("e")
    return f"{mantissa}e{int(exponent)}" if int(mantissa) * 10 ** int(exponent) == n else f"{n:,}"


def help_text(width: int = 100) -> str:
    """The epilog of `metadisco evaluate --help`: every suite with its environments and budgets
    (from TABLE), then the TARGET forms and examples."""
    lines = ["suites (environment steps per training run):"]
    for suite, budgets in BUDGETS.items():
        groups = [(b, [env for env, _ in g]) for b, g in groupby(budgets.items(), key=lambda kv: kv[1])]
        if len(groups) == 1:
            text = f"{', '.join(groups[0][1])} at {_steps(groups[0][0])} each"
        else:
            text = "; ".join(f"{', '.join(envs)} at {_steps(b)}" for b, envs in groups)
        text += f" ({DESCRIPTIONS[suite]})"
        lines += textwrap.wrap(text, width, initial_indent=f"  {suite:<8} ", subsequent_indent=" " * 11)
    return "\n".join(lines) + "\n" + TARGETS_HELP


def markdown_table() -> str:
    """TABLE as a markdown table (suite, environment, preset family, budget, why), for the docs."""
    rows = ["| suite | environment | preset | budget | why |", "|---|---|---|---|---|"]
    rows += [f"| {s} | {env} | {preset_name(env)} | {b:,} | {why} |" for s, env, b, why in TABLE]
    return "\n".join(rows)

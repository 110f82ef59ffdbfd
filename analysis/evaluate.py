"""Held-out evaluation: discovered objectives against PPO and DPO on environments of your choice.

    targets = [resolve_target("runs/lpo-cartpole-20261101-120000"), resolve_target("dpo")]
    results = evaluate(targets, envs=["Acrobot-v1", "Catch-bsuite"], seeds=8, protocol="discogen")
    out = save(results, default_out_dir(targets))   # results.json/csv/md, curves.png/pdf
    print(to_markdown(results))

This module is the entry point; each concern has its own module:

    analysis.suites               the suites and budgets table (jax-free; the CLI help is made from it)
    analysis.targets              TARGET specs: ppo, dpo, an objectives file, RUN_DIR[:best|:mean|:init]
    analysis.evaluation.protocol  what is scored, and how each method's learning rate is tuned
    analysis.evaluation.plan      every check that can fail, before anything compiles
    analysis.evaluation.programs  the compiled programs of one evaluation (a cache object)
    analysis.evaluation.run       training every method on every environment, the same seeds for all
    analysis.evaluation.summary   intervals, PPO-normalised scores, IQM, probability of improvement
    analysis.evaluation.render    markdown, CSV, the learning-curves figure, the output folder

Environments a target was meta-trained on are flagged "meta-train" and aggregated separately,
never mixed into the held-out aggregate.
"""

from __future__ import annotations

from analysis.evaluation.programs import Programs
from analysis.evaluation.protocol import BOOTSTRAP_REPS, LR_FACTORS, PROTOCOLS, SCORES, Protocol, resolve_protocol
from analysis.evaluation.render import (
    CSV_COLUMNS,
    OUTPUTS,
    check_out_dir,
    curves_figure,
    default_out_dir,
    save,
    to_csv,
    to_markdown,
)
from analysis.evaluation.run import FORMAT, VERSION, evaluate
from analysis.evaluation.summary import CONFIDENCE
from analysis.suites import BUDGETS, DEFAULT_SEEDS, FAMILY_BUDGETS, SUITES, EvaluationError
from analysis.targets import REFERENCES, Target, resolve_target

__all__ = [
    "SUITES", "BUDGETS", "FAMILY_BUDGETS", "LR_FACTORS", "PROTOCOLS", "SCORES", "Protocol", "resolve_protocol",
    "DEFAULT_SEEDS", "REFERENCES", "BOOTSTRAP_REPS", "CONFIDENCE", "FORMAT", "VERSION", "CSV_COLUMNS", "OUTPUTS",
    "EvaluationError", "Target", "Programs",
    "resolve_target", "evaluate", "save", "default_out_dir", "check_out_dir", "to_markdown", "to_csv",
    "curves_figure",
]

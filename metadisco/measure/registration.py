"""Pre-registration: each named experiment's pass rule and held-out set, frozen by a digest before its
first run (jax-free).

experiments/registered.json holds, for every experiment file, its run name and the digest of what it
declares it will be judged by: its expectation (the answer, the comparison that must lie above 0, the
share of the gap to close) and its held-out set (environments, budget, seeds). A test keeps the file
equal to the experiments as they are, so that changing a rule is a visible edit of the register, made
before a run, never after one; an experiment that has run gets a new version (a new name) instead.
A run whose config holds another rule than its experiment registered says so, beside its verdict.

    rule_digest(cfg)          the digest of a RunConfig's pass rule and held-out set
    registered()              {experiment: {"name": run name, "rule": digest}}, as committed
    changed_rule_note(cfg)    a line for a run judged under a rule its experiment did not register, or None
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json

from metadisco.core.run_config import RunConfig

DEFAULT_NAME = RunConfig.__dataclass_fields__["name"].default  # what a config without a name of its own is called
REGISTER = "registered.json"  # in the experiments data folder (package data of metadisco.experiments)


def rule_digest(cfg: RunConfig) -> str:
    """16 hex digits of the pass rule (expect: answer, beats, gap_closed) and held-out set (heldout) of `cfg`."""
    expect = {k: v for k, v in dataclasses.asdict(cfg.expect).items() if k != "not_applied"}
    rule = {"expect": expect, "heldout": dataclasses.asdict(cfg.heldout)}
    return hashlib.sha256(json.dumps(rule, sort_keys=True, default=list).encode()).hexdigest()[:16]


def registered() -> dict:
    """The committed register: {experiment file stem: {"name": its run name, "rule": rule_digest}}."""
    entry = importlib.resources.files("metadisco.experiments") / REGISTER  # metadisco.resources' folder, by name
    return json.loads(entry.read_text(encoding="utf-8")) if entry.is_file() else {}


def changed_rule_note(cfg: RunConfig) -> str | None:
    """Where `cfg` runs a named experiment (by its run name) under a pass rule or held-out set other than the
    one that experiment registered, the line that says so; None where it is the registered one, or the run
    is no registered experiment's (its expectation was dropped by overrides, or it is a user's own)."""
    if cfg.expect.not_applied or cfg.name == DEFAULT_NAME:  # a config that names no run of its own is no experiment's
        return None
    for experiment, entry in registered().items():
        if entry["name"] == cfg.name and entry["rule"] != rule_digest(cfg):
            return (f"note: this run's pass rule or held-out set is not the one experiments/{experiment}.toml "
                    f"registered before its first run (digest {rule_digest(cfg)}, registered {entry['rule']}): its "
                    "verdict and held-out result are under a changed rule")
    return None

"""`metadisco train --time-limit DURATION`: end a run at the last generation boundary that fits.

A batch job with a wall-time limit (a Slurm allocation, a GPU lent for an afternoon) should end
with a checkpoint, not be killed in the middle of a generation. Before each generation the host
loop asks `TimeLimit.fits` whether the next step, as measured so far in this process, still ends
inside the limit; if not, it writes a checkpoint and stops with exit status `EXIT_TIME_LIMIT`
(metadisco.core.errors), which a job script requeues on:

    metadisco train EXPERIMENT --run-dir runs/R --time-limit 3h50m    # a first job
    metadisco train --resume runs/R --time-limit 3h50m                 # each requeued one
    # exit status 75: stopped on time with a checkpoint; requeue (`scontrol requeue $SLURM_JOB_ID`)

jax-free: the duration is parsed (and refused) before any compute.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from metadisco.core.errors import ConfigError

HEADROOM = 1.2  # a step's predicted time is its slowest measured time x this (generations alternate envs)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str) -> float:
    """Seconds in '90', '600s', '9m', '1h30m', '2.5h' or Slurm's '[D-]HH:MM:SS' / 'MM:SS'."""
    value = str(text).strip().lower()
    try:
        if re.fullmatch(r"\d+(\.\d+)?", value):
            seconds = float(value)
        elif re.fullmatch(r"(\d+-)?\d+(:\d+){1,2}", value):
            days, _, clock = value.rpartition("-")
            parts = [int(p) for p in clock.split(":")]
            seconds = float(sum(p * 60 ** i for i, p in enumerate(reversed(parts))) + 86400 * int(days or 0))
        elif _PART.sub("", value) == "" and value:
            seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(value))
        else:
            raise ValueError
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        raise ConfigError(f"--time-limit {text!r}: give a positive duration, e.g. 600 (seconds), 9m, 1h30m or "
                          "Slurm's 01:30:00")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form: '45 s', '9 min 30 s', '2 h 05 min'."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@dataclass
class TimeLimit:
    """A wall-clock limit counted from `started`, and what this process has measured of a run's steps.

    The loop records each generation's time (`record_generation`), each scheduled comparison on
    fresh seeds (`record_evaluation`) and each checkpoint write (`record_save`); `fits` predicts
    the next step from them. The first generation in a process includes its compilation, so it is
    not used for later ones once one has been measured; an evaluation not measured yet in this
    process is predicted by that first generation (both are dominated by compiling a training
    program).
    """

    seconds: float
    clock: Callable[[], float] = time.monotonic
    started: float | None = None
    first_generation: float | None = None
    generations: list[float] = field(default_factory=list)
    evaluation: float | None = None
    save: float = 0.0

    def __post_init__(self):
        if self.started is None:
            self.started = self.clock()

    @property
    def text(self) -> str:
        return format_duration(self.seconds)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining(self) -> float:
        return self.seconds - self.elapsed()

    def record_generation(self, seconds: float) -> None:
        if self.first_generation is None:
            self.first_generation = seconds
        else:
            self.generations.append(seconds)

    def record_evaluation(self, seconds: float) -> None:
        self.evaluation = seconds

    def record_save(self, seconds: float) -> None:
        self.save = max(self.save, seconds)

    def predicted(self, with_evaluation: bool) -> float | None:
        """Seconds the next generation (and its comparison, if scheduled) and a checkpoint would
        take; None before the first generation in this process (nothing measured to go by)."""
        if self.first_generation is None:
            return None
        generation = max(self.generations[-5:]) if self.generations else self.first_generation
        evaluation = (self.evaluation if self.evaluation is not None else self.first_generation) if with_evaluation else 0.0
        return HEADROOM * (generation + evaluation) + self.save

    def predicted_selection(self, finalists: int) -> float:
        """Seconds the end's selection would take: its finalists re-scored on the validation problems and the
        chosen one compared on the training problems, about (1 + finalists / 3) comparisons (a comparison trains
        three objectives on both sets of problems), from the last comparison measured (else the first
        generation's time; 0 where nothing was measured)."""
        comparison = self.evaluation if self.evaluation is not None else (self.first_generation or 0.0)
        return HEADROOM * comparison * (1 + finalists / 3) + self.save

    def fits_selection(self, finalists: int) -> bool:
        """Whether the end's selection (`predicted_selection`) ends inside the limit."""
        return self.predicted_selection(finalists) <= self.remaining()

    def fits(self, with_evaluation: bool) -> bool:
        """Whether the next generation (with its scheduled comparison) ends inside the limit."""
        needed = self.predicted(with_evaluation)
        return needed is None or needed <= self.remaining()

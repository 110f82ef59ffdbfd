"""The one error type a user can cause, and the exit codes the command line gives them.

Every error a user can fix (a bad config, a missing or corrupt run directory, an unreadable
objectives file, a failed write) is a `MetadiscoError` whose message says what to do; the CLI's
`main` is the only place that turns one into a one-line message and an exit code. This module is
jax-free and sits at the bottom of the dependency graph (metadisco.core), so every package can
raise it.
"""

from __future__ import annotations

EXIT_FAILED = 1  # the command did its work but part of it failed on a bug (a figure that did not draw)
EXIT_USAGE = 2  # a user error: bad input, missing or corrupt files, failed writes
EXIT_TIME_LIMIT = 75  # `train --time-limit`: stopped on time after a checkpoint; requeue it (sysexits' EX_TEMPFAIL)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), after a checkpoint
EXIT_TERMINATED = 143  # SIGTERM (a scheduler's preemption), after a checkpoint


class MetadiscoError(ValueError):
    """An error the user can fix; the message says how. The CLI exits with `exit_code`.

    A ValueError so that library callers who catch ValueError (the usual contract for bad
    arguments) keep working.
    """

    exit_code: int = EXIT_USAGE


class ConfigError(MetadiscoError):
    """A config (experiment file, overrides, stored config.json) that cannot run."""


class RunInterrupted(MetadiscoError):  # noqa: N818  (a state, not a failure)
    """A run stopped by Ctrl-C, SIGTERM or its time limit after writing a checkpoint; the message
    says how to resume."""

    def __init__(self, message: str, exit_code: int = EXIT_INTERRUPTED):
        super().__init__(message)
        self.exit_code = exit_code

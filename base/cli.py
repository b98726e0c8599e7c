"""What the three commands (run_experiment.py, python -m analysis, python -m labs) share on
their standard error: one line format, and a user's mistake reported the same way by each,
as one line with exit status 2.

One format, so that a user (or a script, or a test) reads a mistake from any of them alike:
the time, the tool, ERROR, then what is wrong and where ("configs/x.yaml: protocol.k: ...").
"""

from __future__ import annotations

import logging

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
EXIT_BAD_INPUT = 2
"""A command's exit status for bad input: a config, a path, an argument, a submission."""


def setup_logging(verbose: bool = False) -> None:
    """Log to standard error in LOG_FORMAT, at INFO (DEBUG with ``verbose``)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT)


def user_error(log: logging.Logger, problem: object) -> int:
    """Report a user's mistake in one line on ``log`` (the tool's logger); EXIT_BAD_INPUT,
    for the command to return."""
    log.error("%s", " ".join(str(problem).splitlines()))
    return EXIT_BAD_INPUT

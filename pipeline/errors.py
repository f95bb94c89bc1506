"""The one exception type for user mistakes (bad files, bad settings).

Entry points catch it, print ``str(err)`` (no traceback) and exit with status 2.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path


class InputError(Exception):
    """Bad input from the user: names the file, the line (1-based) and the problem."""

    exit_code = 2

    def __init__(self, problem: str, path: str | Path | None = None, line: int | None = None):
        self.problem = problem
        self.path = None if path is None else str(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            where += ": "
        super().__init__(f"error: {where}{problem}")


class Interrupted(BaseException):
    """SIGINT or SIGTERM during a sweep (a BaseException, like KeyboardInterrupt, so that no
    job's ``except Exception`` swallows it). Here, below every tier that catches around user
    code, so that such a catch can let it through (``retrievers.external``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def positive_int(text: str) -> int:
    """An argparse ``type=`` for counts: an integer >= 1 (argparse turns the error into
    its one-line usage error, exit status 2). Shared by the command-line modules."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value

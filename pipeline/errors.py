"""The one exception type for user mistakes (bad files, bad settings).

Entry points catch it, print ``str(err)`` (no traceback) and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Callable
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


def bounded_int(low: int, high: int, what: str = "an integer") -> Callable[[str], int]:
    """An argparse ``type=`` for an integer in ``[low, high]``: the bound that keeps a count's
    memory and time within reach is checked before any work (argparse's one-line usage error,
    exit status 2, names the option). Accepts ``1e6`` when it is a whole number."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high:,}, got {text!r}") from None
            if not number.is_integer():
                raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high:,}, got {text!r}") from None
            value = int(number)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high:,}, got {text!r}")
        return value

    return parse


def check_output_folder(path: str | Path, option: str) -> Path:
    """InputError (naming ``option``) unless ``path`` can be an output folder: not an existing
    file, no file where one of its parents should be, its nearest existing parent writable.
    Called before the work starts, so a mistyped ``--out`` costs nothing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} is a file, not a folder", path)
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option}: {parent} is a file, not a folder", path)
            if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
                raise InputError(f"{option}: cannot create it in {parent} (permission denied)", path)
            break
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"{option}: the folder is not writable", path)
    return path

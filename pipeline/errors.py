"""The one error model: what went wrong, and the exit status that says so.

- :class:`PipelineError` is the base: an error the user can act on, reported as one line
  (``error: ...``) and an exit status, never a traceback. Its subclasses say which:
  :class:`InputError` (2: a bad file, setting or argument) and :class:`StoreError` (3: a
  tracking store, a server or a download that failed; ``pipeline.tracking.TrackingError``,
  ``pipeline.job.TrackingFailed`` and ``pipeline.io.fetch.FetchFailed`` are ones).
- :class:`Interrupted` (SIGINT, SIGTERM: 128 + the signal, 130 or 143) is a BaseException,
  like KeyboardInterrupt, so that an ``except Exception`` around user code lets it through.
- :func:`exit_line` turns any of them into that line and status: the commands' runner
  (``pipeline.cli.runner``) and the job (``pipeline.job``, ``pipeline.__main__``) both use it.

Low on purpose (standard library only): every tier raises these.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any


class PipelineError(Exception):
    """An error the user can act on: one line (``error: ...``) and :attr:`exit_status`."""

    #: The process's exit status for this error (2 bad input, 3 store or server).
    exit_status = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "exit_code" in cls.__dict__ and "exit_status" not in cls.__dict__:  # the older spelling
            cls.exit_status = cls.__dict__["exit_code"]

    @property
    def exit_code(self) -> int:
        """The older name of :attr:`exit_status`."""
        return self.exit_status


class InputError(PipelineError):
    """Bad input from the user: names the file, the line (1-based) and the problem."""

    exit_status = 2

    def __init__(self, problem: str, path: str | Path | None = None, line: int | None = None):
        self.problem = problem
        self.path = None if path is None else str(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            where += ": "
        super().__init__(f"error: {where}{problem}")


class StoreError(PipelineError):
    """A store or server failed (the MLflow store, a download server, a Ray cluster): exit
    status 3. What was computed is on disk nonetheless."""

    exit_status = 3


class Interrupted(BaseException):
    """SIGINT or SIGTERM (a BaseException, like KeyboardInterrupt, so that no job's ``except
    Exception`` swallows it). Here, below every tier that catches around user code, so that
    such a catch can let it through (``retrievers.external``). ``message``: the line to print
    instead of ``interrupted (SIGINT)`` (what to do next, say)."""

    def __init__(self, signum: int, message: str | None = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.message = message

    @property
    def exit_status(self) -> int:
        """128 + the signal, as a shell reports a process the signal ended: 130, 143."""
        return 128 + self.signum


def exit_line(err: BaseException) -> tuple[str, int]:
    """The one line and the exit status that report ``err``.

    A :class:`PipelineError`: its message (``error: `` in front unless it starts so) and its
    status; :class:`Interrupted` or KeyboardInterrupt: ``interrupted (SIGINT)`` (or its own
    message) and 128 + the signal; anything else: ``error: TYPE: first line`` and 1 (what a
    sweep job prints for an unexpected error; a single command shows the traceback instead)."""
    if isinstance(err, (Interrupted, KeyboardInterrupt)):
        signum = getattr(err, "signum", signal.SIGINT)
        message = getattr(err, "message", None)
        return message or f"interrupted ({signal.Signals(signum).name})", 128 + int(signum)
    if isinstance(err, PipelineError):
        text = str(err)
        return (text if text.startswith("error:") else f"error: {text}"), err.exit_status
    first = (str(err).strip().splitlines() or [""])[0]
    return f"error: {type(err).__name__}: {first}", 1


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

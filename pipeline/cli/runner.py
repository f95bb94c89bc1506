"""The one runner of the commands: their argument parser, their errors, their exit status.

Every command (``pipeline.cli.score`` and the others) is a :class:`Parser` and a body that
calls into the library; :func:`run` parses the arguments, calls the body and reports the
error model of ``pipeline.errors`` the same way for all of them:

- a :class:`~pipeline.errors.PipelineError` (2 bad input, 3 store or server) and Ctrl-C or
  SIGTERM (:class:`~pipeline.errors.Interrupted`, KeyboardInterrupt: 130, 143) are one line
  on standard error (:func:`pipeline.errors.exit_line`, credentials hidden) and the status,
  never a traceback (``--debug``, where a command has it, shows one);
- a bad argument is argparse's message as one line ``error: ...``, status 2 (:class:`Parser`);
- anything else is a bug: its traceback, as Python shows it.

:func:`start` is the process's side (``python -m pipeline.cli COMMAND``, ``rag-eval``, the
old ``python -m pipeline.score`` spellings): progress bars and colour off where there is no
terminal, and output cut short by a closed pipe (``| head``) ends quietly with status 141.
"""

from __future__ import annotations

import argparse
import os
from importlib import import_module
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from pipeline.errors import Interrupted, PipelineError, exit_line
from pipeline.io.progress import quiet_without_terminal
from pipeline.tracking.credentials import redact

#: How every command is spelled in help, usage and messages.
PROG = "python -m pipeline.cli"

#: A command's body: the parsed arguments in, the exit status out (None: 0).
Body = Callable[[argparse.Namespace], "int | None"]


class Parser(argparse.ArgumentParser):
    """The commands' argument parser: a bad argument is one line ``error: ...`` on standard
    error and exit status 2 (argparse's own prints the usage too). ``intermixed``: options
    may come between positional arguments (``compare A --metric mrr B``)."""

    def __init__(self, *args: object, intermixed: bool = False, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.intermixed = intermixed

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)

    def parse(self, argv: Sequence[str] | None) -> argparse.Namespace:
        return self.parse_intermixed_args(argv) if self.intermixed else self.parse_args(argv)


def run(parser: Parser, body: Body, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the command line) with ``parser``, call ``body`` with the
    arguments, and return its exit status; an error of the error model is one line on
    standard error and its status (re-raised with ``--debug``)."""
    args = parser.parse(None if argv is None else list(argv))
    try:
        return int(body(args) or 0)
    except (PipelineError, Interrupted, KeyboardInterrupt) as err:
        if getattr(args, "debug", False):
            raise
        line, status = exit_line(err)
        print(redact(line), file=sys.stderr)
        return status


def start(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """``main(argv)`` as a process runs it: progress bars and colour off where there is no
    terminal (``pipeline.io.progress.quiet_without_terminal``), and status 141 (128 +
    SIGPIPE, as a process the signal ends) without a traceback when standard output is
    closed early (``| head``)."""
    quiet_without_terminal()
    try:
        status = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout again at exit
        return 141
    return status


def moved(module: str, command: str) -> None:
    """The body of an old command module (``pipeline/score.py``): run as ``python -m
    pipeline.score`` it runs ``python -m pipeline.cli score``; imported, it raises ImportError
    naming the new place, so that ``pipeline.score`` never shadows an attribute of
    ``pipeline`` (``pipeline.compare`` is the Python API's function)."""
    if module != "__main__":
        raise ImportError(f"{module} moved to pipeline.cli.{command} (run it as `{PROG} {command}`)")
    sys.exit(start(import_module(f"pipeline.cli.{command}").main))

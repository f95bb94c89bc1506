"""``python -m pipeline.cli COMMAND [args]`` (and the console script ``rag-eval``): run a command.

``--help`` lists the commands; ``COMMAND --help`` describes one. The command's module is
imported when it is named, so each loads only what it uses.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import import_module

from pipeline.cli import COMMANDS
from pipeline.cli.runner import PROG, start


def usage() -> str:
    """The commands, one line each."""
    width = max(map(len, COMMANDS))
    return "\n".join([f"usage: {PROG} COMMAND [args]   (or: rag-eval COMMAND [args])", "",
                      "commands (each has --help):",
                      *(f"  {name:<{width}}  {what}" for name, what in COMMANDS.items()), "",
                      "a job or a sweep: python -m pipeline OVERRIDES (python -m pipeline --help)"])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv[0]`` (default: the command line's) with the rest of ``argv``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        stream = sys.stdout if argv else sys.stderr
        return start(lambda _: print(usage(), file=stream) or (0 if argv else 2), [])
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: {name!r} is not a command: {', '.join(COMMANDS)} ({PROG} --help)", file=sys.stderr)
        return 2
    return start(import_module(f"pipeline.cli.{name}").main, rest)


if __name__ == "__main__":
    sys.exit(main())

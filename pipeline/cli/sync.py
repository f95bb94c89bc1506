"""``python -m pipeline.cli sync [FOLDER ...]``: log to MLflow every finished job that is not there yet.

What it does and when it is safe: ``pipeline.sweep.sync`` (its docstring); docs/mlflow.md.
Exit status 2 when a record is unreadable or corrupt (one line naming the file and the key),
3 when a store failed; the other jobs are synced.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline import tracking
from pipeline.cli.runner import PROG, Parser, run
from pipeline.errors import InputError
from pipeline.sweep.sync import sync


def build_parser() -> Parser:
    parser = Parser(
        prog=f"{PROG} sync",
        description="Log to MLflow every finished job (results/record.json) that is not in its store (the store "
                    "is asked, not the marker), and close the parent runs of sweeps that the store does not hold "
                    "as closed. Safe to run any number of times.",
    )
    parser.add_argument("folders", nargs="*", type=Path, help="job, sweep or outputs folders (default: outputs)")
    parser.add_argument("--tracking-uri", help="log to this store instead of the one each job recorded; the "
                                               "folders keep their runs in the other stores")
    return parser


def sync_folders(args: argparse.Namespace) -> int:
    """Sync the folders; print what was done (stdout) and each error (stderr)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    folders = args.folders or [Path("outputs")]
    for folder in folders:
        if not folder.exists():
            raise InputError("no such folder", folder)
    done = sync(folders, args.tracking_uri)
    print(done.line())
    for error in done.errors:
        print(tracking.redact(error), file=sys.stderr)
    return 2 if done.bad_input else 3 if done.errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), sync_folders, argv)

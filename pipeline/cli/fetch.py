"""Download a BEIR collection: ``python -m pipeline.cli fetch NAME [--into DIR]``.

    python -m pipeline.cli fetch scifact               # -> data/scifact (corpus.jsonl, queries.jsonl, qrels/)
    python -m pipeline dataset=beir dataset.path=data/scifact

The zip comes from the BEIR server (``--url BASE`` or ``$RAG_EVAL_BEIR_URL`` moves it to a
mirror: ``BASE/NAME.zip``) and is checked against the MD5 that BEIR publishes for it
(the table in BEIR's README, copied into ``pipeline.io.fetch.CHECKSUMS``; ``--md5`` gives it for a
name that is not there). Then:

- the download goes to ``DIR/.NAME.zip.part`` and continues where it stopped when the
  server honours HTTP ranges (otherwise it starts again);
- the zip is unpacked into a temporary folder inside DIR and renamed to ``DIR/NAME`` only
  when complete, with a ``.fetched.json`` note (name, URL, MD5, every file and its size);
- an archive may hold only files and folders: links, devices, entries that would land
  outside the folder (absolute paths, ``..``) and a file where a folder must be are
  refused, and so is an archive that unpacks to more than 10 times its size (at most 20 GB;
  ``--max-unpacked SIZE`` sets another limit), counted on the sizes it declares and on the
  bytes really written; nothing of a refused archive is left behind;
- run again, it checks that note against the folder and says the collection is already
  there and verified (``--force`` downloads it again); a folder it did not make is left
  alone.

Exit status: 0 done (or already there); 2 bad input (an unknown name without ``--md5``, a
malformed checksum, a ``DIR/NAME`` that is not ours, a zip that is not a BEIR collection
or is refused as above);
3 the download failed: the server cannot be reached (offline: copy a BEIR folder from a
machine that has one instead), answers with an error, or sends bytes whose checksum is
wrong (nothing is unpacked, the partial download is deleted). Each failure is one line on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.cli.runner import PROG, Parser, run
from pipeline.errors import Interrupted
from pipeline.io.fetch import BASE_URL, CHECKSUMS, URL_ENV, collection_folders, fetch

_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9, "T": 10**12,
          "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def size(text: str) -> int:
    """An argparse ``type=`` for byte counts: ``500M``, ``30G``, ``2GiB``, ``1000000`` (K, M, G, T
    are powers of 1000; KiB, MiB, GiB, TiB of 1024); at least 1 byte."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if not match or unit not in _UNITS or float(match.group(1)) * _UNITS[unit] < 1:
        raise argparse.ArgumentTypeError(f"expected a size such as 500M, 30G or 2GiB, got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def build_parser() -> Parser:
    parser = Parser(
        prog=f"{PROG} fetch", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Download a BEIR collection, verify its checksum and unpack it into a folder.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    parser.add_argument("name", nargs="?", help=f"the collection: {', '.join(CHECKSUMS)}")
    parser.add_argument("--into", default="data", metavar="DIR",
                        help="the parent folder: the collection lands in DIR/NAME (default: data)")
    parser.add_argument("--url", default=None, metavar="BASE",
                        help=f"where the zips are, BASE/NAME.zip (default: ${URL_ENV} or {BASE_URL})")
    parser.add_argument("--md5", default=None, metavar="HEX",
                        help="the zip's expected MD5 (default: BEIR's published one; needed for other names)")
    parser.add_argument("--force", action="store_true", help="download and unpack again, replacing DIR/NAME")
    parser.add_argument("--max-unpacked", type=size, default=None, metavar="SIZE",
                        help="refuse archives that unpack to more (e.g. 50G; default: 10x the archive, at most 20 GB)")
    parser.add_argument("--list", action="store_true", help="list the collections with a published checksum")
    return parser


def fetch_collection(args: argparse.Namespace) -> int:
    """Download, verify and unpack ``args.name``; print the command that runs a job on it."""
    if args.list or not args.name:
        if not args.list:
            print(f"error: name a collection, e.g. {PROG} fetch scifact", file=sys.stderr)
        print("collections (BEIR, published MD5):", ", ".join(CHECKSUMS), file=sys.stdout if args.list else sys.stderr)
        return 0 if args.list else 2
    try:
        target = fetch(args.name, Path(args.into), args.url or os.environ.get(URL_ENV) or BASE_URL, md5=args.md5,
                       force=args.force, progress=sys.stderr.isatty(), say=print, max_unpacked=args.max_unpacked)
    except KeyboardInterrupt:
        raise Interrupted(signal.SIGINT, "interrupted; run the same command again to continue the download") from None
    print(hint(target))
    return 0


def hint(target: Path) -> str:
    """The command that runs the pipeline on what was fetched: its BEIR folder, or one of them."""
    folders = collection_folders(target)
    if len(folders) == 1:
        return f"run it: python -m pipeline dataset=beir dataset.path={folders[0]}"
    names = ", ".join(p.name for p in folders)
    return (f"run it on one of its {len(folders)} collections ({names}): "
            f"python -m pipeline dataset=beir dataset.path={target}/{folders[0].name if folders else 'NAME'}")


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), fetch_collection, argv)

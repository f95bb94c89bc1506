"""Reading text files line by line: plain or gzip, UTF-8, every fault named by file and line.

The one line reader of the project: ``pipeline.io.formats`` (qrels, runs) and ``pipeline.io.collection``
(corpora, queries) both read through it, so a file gets the same treatment whatever it holds.

- ``.gz`` files are decompressed on the fly; anything else is read as it is.
- Lines are split on ``\\n`` (the JSONL rule: a bare ``\\r`` stays in the line) or, with
  ``universal_newlines=True``, also on a bare ``\\r`` as pyarrow's CSV reader does, so the
  line-by-line and the fast readers of ``pipeline.io.formats`` agree on the same bytes.
- A UTF-8 byte order mark at the start of the file is dropped.
- Lines are numbered from 1 (blank lines count but are not yielded).
- A read fault (truncated or corrupt gzip, I/O error) and a bad UTF-8 byte raise
  :class:`~pipeline.errors.InputError` naming the file and the line.
- Standard input (the path ``-``, named ``<stdin>`` in messages) and pipes (``<(zcat run.gz)``,
  a FIFO) can be read only once, so :func:`require_file` reads them whole into memory, once,
  and every later read of that path (the fast reader, the line-by-line reader) reads those
  bytes; gzip is recognized by its magic bytes there, as a pipe has no file name to go by.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import IO

from pipeline.errors import InputError

BOM = b"\xef\xbb\xbf"
_AFTER_BARE_CR = re.compile(rb"(?<=\r)(?!\n)")  # the point after a \r that no \n follows
STDIN = "<stdin>"  # the name of standard input (the path ``-``) in messages
GZIP_MAGIC = b"\x1f\x8b"
_STREAMS: dict[str, bytes] = {}  # the streams that can be read only once (stdin, pipes), decompressed, by path


def open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for binary line iteration, ``.gz`` decompressed on the fly (a stream
    read by :func:`require_file` comes from memory)."""
    if str(path) in _STREAMS:
        return io.BytesIO(_STREAMS[str(path)])
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def buffered(path: Path) -> bytes | None:
    """The bytes of a stream :func:`require_file` read into memory; None for a plain file."""
    return _STREAMS.get(str(path))


def _read_stream(fh: IO[bytes], path: Path, what: str) -> None:
    try:
        data = fh.read()
        if data.startswith(GZIP_MAGIC):
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read {what} file ({exc})", path) from None
    _STREAMS[str(path)] = data


def require_file(path: str | Path, what: str) -> Path:
    """``path`` (``~`` expanded) when it names a file; else InputError ("corpus file not found").

    ``-`` is standard input (returned as ``<stdin>``); it and a pipe are read whole, once."""
    if str(path) in ("-", STDIN):
        stdin = Path(STDIN)
        if STDIN not in _STREAMS:
            _read_stream(sys.stdin.buffer, stdin, what)
        return stdin
    path = Path(path).expanduser()
    if str(path) in _STREAMS:
        return path
    if not path.exists():
        raise InputError(f"{what} file not found", path)
    if path.is_dir():
        raise InputError(f"{what} path is a folder, expected a file", path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise InputError(f"cannot read {what} file ({exc.strerror})", path) from None
    if not stat.S_ISREG(mode):  # a pipe or a device: it can be read only once
        try:
            with open(path, "rb") as fh:
                _read_stream(fh, path, what)
        except OSError as exc:
            raise InputError(f"cannot read {what} file ({exc.strerror})", path) from None
    return path


def _split_bare_cr(lines: Iterable[bytes]) -> Iterator[bytes]:
    for raw in lines:
        if b"\r" in raw:
            yield from (piece for piece in _AFTER_BARE_CR.split(raw) if piece)
        else:
            yield raw


def raw_lines(
    path: Path, what: str, *, universal_newlines: bool = False, offsets: array | None = None
) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw line with its line ending) for every non-blank line.

    ``what`` names the file in messages ("cannot read qrels file (...)"). ``offsets`` (an
    ``array("q")``; for a plain file read without ``universal_newlines``) gets the byte
    offset in the file of every line yielded, appended just before it is yielded.
    """
    no = 0
    try:
        with open_binary(path) as fh:
            first = fh.readline()
            at = 0  # byte offset of the next line
            if first.startswith(BOM):
                first = first[len(BOM) :]
                at = len(BOM)
            lines: Iterable[bytes] = chain((first,), fh)
            if universal_newlines:
                lines = _split_bare_cr(lines)
            if offsets is None:
                for no, raw in enumerate(lines, start=1):
                    if raw.strip():
                        yield no, raw
            else:
                for no, raw in enumerate(lines, start=1):
                    if raw.strip():
                        offsets.append(at)
                        yield no, raw
                    at += len(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read {what} file ({exc})", path, no + 1) from None


def decode(raw: bytes, path: Path | str, no: int) -> str:
    """``raw`` as UTF-8 text; a bad byte is an InputError naming the line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"line is not valid UTF-8 ({exc.reason} at byte {exc.start})", path, no) from None


def text_lines(path: Path, what: str, *, universal_newlines: bool = False) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line with its line ending) for every non-blank line."""
    for no, raw in raw_lines(path, what, universal_newlines=universal_newlines):
        yield no, decode(raw, path, no)


def first_text_line(path: Path, what: str, *, universal_newlines: bool = False) -> str | None:
    """The first non-blank line without its line ending; None when there is none."""
    for _, line in text_lines(path, what, universal_newlines=universal_newlines):
        return line.rstrip("\r\n")
    return None

"""Document texts read from the corpus file when they are needed, never held in memory."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.io.collection.records import jsonl_record

#: Documents :class:`FileTexts` reads at once when iterated.
READ_DOCS = 20_000

FileStamp = tuple[int, int, int, int]  # device, inode, size, modification time (ns)


def file_stamp(path: Path) -> FileStamp:
    """What tells a file from a changed one without reading it: device, inode, size, mtime."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class FileTexts(Sequence[str]):
    """The document texts of a plain JSONL corpus, read from the file when asked for.

    A Python str costs its characters plus a fixed overhead of a few dozen bytes, and the
    texts are needed once, to index (or encode, or chunk) the corpus; the byte offset of
    each record costs 8 bytes. ``texts[i]`` and ``texts[a:b]`` read the lines they need (a
    slice in one read); iteration reads :data:`READ_DOCS` documents at a time. A text comes
    out exactly as the loader made it.

    The file must be the one that was loaded: before every read its device, inode, size and
    modification time are compared with those seen when loading, and every record read must
    carry the id loaded at its index. Otherwise InputError ("changed since it was loaded"):
    no text of another file is ever used under this collection's digest.
    """

    def __init__(self, path: Path, offsets: np.ndarray, end: int, stamp: FileStamp,
                 ids: Sequence[str], title_field: str | None, text_field: str, join: str):
        self.path, self._offsets, self._end, self._stamp, self._ids = path, offsets, end, stamp, ids
        self._fields = (title_field, text_field, join)

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, i: Any) -> Any:
        n = len(self._offsets)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            return self._read(start, stop) if start < stop else []
        i = operator.index(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("document index out of range")
        return self._read(i, i + 1)[0]

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self._offsets), READ_DOCS):
            yield from self._read(start, min(start + READ_DOCS, len(self._offsets)))

    def __repr__(self) -> str:
        return f"FileTexts({str(self.path)!r}, {len(self)} documents)"

    def _changed(self, detail: str) -> InputError:
        return InputError(f"corpus file changed since it was loaded ({detail}); run again to load it anew", self.path)

    def _read(self, start: int, stop: int) -> list[str]:
        try:
            if file_stamp(self.path) != self._stamp:
                raise self._changed("its size, time or inode differ")
            lo = int(self._offsets[start])
            hi = int(self._offsets[stop]) if stop < len(self._offsets) else self._end
            with open(self.path, "rb") as fh:
                fh.seek(lo)
                data = fh.read(hi - lo)
        except OSError as exc:
            raise InputError(f"cannot read corpus file ({exc.strerror or exc})", self.path) from None
        lines = [raw for raw in data.split(b"\n") if raw.strip()]
        if len(lines) != stop - start:
            raise self._changed(f"{len(lines)} records where {stop - start} were")
        title_field, text_field, join = self._fields
        out = []
        for k, raw in enumerate(lines):
            try:
                rid, text = jsonl_record(raw, self.path, start + k + 1, "document", text_field, title_field, join)
            except InputError as err:
                raise self._changed(str(err)) from None
            if rid != self._ids[start + k]:
                raise self._changed(f"document {start + k} is {rid!r}, was {self._ids[start + k]!r}")
            out.append(text)
        return out

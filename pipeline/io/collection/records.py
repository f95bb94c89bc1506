"""The :class:`Collection`, the JSONL and TSV records it is read from, and :class:`FileTexts`.

Every reader yields :data:`DocRecord` tuples ``(line number, id, text)`` in file order and
raises :class:`InputError` naming the file and line of the first bad record. Nothing here
checks across records (duplicate ids, judgments): that is ``assemble``'s job.

- JSONL: one object a line with ``_id`` and a text field (``text``), documents also an
  optional title field (``title``); a document's text is ``title + join + text`` (just one
  of them when the other is empty). Ids may be JSON numbers (compared as strings).
- TSV: ``id<TAB>text``, documents also ``id<TAB>title<TAB>text``; the first data line
  fixes the column count for the whole file, and a header line such as ``id<TAB>text`` is
  recognised and skipped.
"""

from __future__ import annotations

import json
import operator
import os
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.io.readers import raw_lines, require_file, text_lines
from pipeline.metrics import Qrels

try:  # orjson parses large corpora faster; json is the reference for what is valid
    import orjson

    _fast_loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = json.loads


@dataclass(frozen=True)
class Collection:
    """Documents, evaluated queries and their judgments, with a digest of all of them.

    ``qrels`` holds integer indices: ``query_idx`` into ``query_ids``, ``doc_idx`` into
    ``doc_ids`` (-1 for a judged document missing from the corpus). ``digest`` changes when
    any document, query or judgment changes (cache keys, MLflow).
    """

    name: str
    doc_ids: list[str]
    doc_texts: Sequence[str]  # title + " " + text (configurable per loader); a list, or FileTexts
    query_ids: list[str]  # only the queries that are evaluated (those with judgments)
    query_texts: list[str]
    qrels: Qrels
    digest: str  # sha256 hex of the content
    source: str  # where it came from (a path or an ir_datasets id)
    report: dict[str, int] = field(default_factory=dict)  # counted soft problems, e.g. {"qrels_unknown_docs": 3}

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)


#: One document or query as a reader yields it: (1-based line or record number, id, text).
DocRecord = tuple[int, str, str]

FORMATS = ("auto", "jsonl", "tsv")


def parse_json(raw: bytes, path: Path, no: int) -> dict[str, Any]:
    """The JSON object on line ``no``; InputError for anything else (invalid UTF-8 or JSON)."""
    try:
        obj = _fast_loads(raw)
    except ValueError:
        try:  # the reference parser decides what is valid (e.g. a UTF-8 BOM is accepted)
            obj = json.loads(raw)
        except UnicodeDecodeError as exc:
            raise InputError(f"line is not valid UTF-8 ({exc.reason} at byte {exc.start})", path, no) from None
        except ValueError as exc:
            raise InputError(f"malformed JSON: {exc}", path, no) from None
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, found {type(obj).__name__}", path, no)
    return obj


def as_id(value: Any, key: str, path: Path | str, no: int) -> str:
    """``value`` as an id: a non-blank string UTF-8 can hold, or an integer (as its digits)."""
    if isinstance(value, str):
        if not value.strip():
            raise InputError(f"{key!r} is empty", path, no)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a JSON escape like "\ud800": no UTF-8 file could hold it
            raise InputError(f"{key!r} contains a lone surrogate", path, no) from None
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # some corpora write numeric ids; they are compared as strings
    raise InputError(f"{key!r} must be a string, found {type(value).__name__}", path, no)


def as_text(value: Any, key: str, path: Path | str, no: int) -> str:
    """``value`` as a text: a string, or ``""`` for null (an empty text is counted, not refused)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    raise InputError(f"{key!r} must be a string, found {type(value).__name__}", path, no)


def join_title(title: str, text: str, join: str) -> str:
    """``title + join + text``, or whichever of the two is not empty."""
    if title and text:
        return f"{title}{join}{text}"
    return title or text


def jsonl_record(raw: bytes, path: Path, no: int, item: str, text_field: str, title_field: str | None,
                 join: str) -> tuple[str, str]:
    """(id, text) of one JSONL line: ``_id`` and ``text_field`` required, ``title_field``
    optional (documents only). ``item`` ("document", "query") names a record in messages."""
    obj = parse_json(raw, path, no)
    if "_id" not in obj:
        raise InputError(f"{item} has no '_id' key", path, no)
    if text_field not in obj:
        raise InputError(f"{item} has no {text_field!r} key", path, no)
    rid = obj["_id"]
    if type(rid) is not str or not rid.strip():
        rid = as_id(rid, "_id", path, no)
    text = obj[text_field]
    if type(text) is not str:
        text = as_text(text, text_field, path, no)
    title = obj.get(title_field, "") if title_field else ""
    if type(title) is not str:
        title = as_text(title, title_field or "", path, no)
    return rid, join_title(title, text, join)


def jsonl_records(path: Path, what: str, item: str, text_field: str, title_field: str | None = None,
                  join: str = " ", offsets: array | None = None) -> Iterator[DocRecord]:
    """Records of a JSONL file (corpus or queries); ``offsets`` gets each record's byte offset."""
    for no, raw in raw_lines(path, what, offsets=offsets):
        rid, text = jsonl_record(raw, path, no, item, text_field, title_field, join)
        yield no, rid, text


def jsonl_docs(path: Path, title_field: str | None, text_field: str, join: str,
               offsets: array | None = None) -> Iterator[DocRecord]:
    """The documents of a JSONL corpus (see :func:`jsonl_records`)."""
    return jsonl_records(path, "corpus", "document", text_field, title_field, join, offsets)


_TSV_ID_HEADERS = {"id", "_id", "docid", "doc_id", "docno", "pid", "qid", "query_id", "query-id", "queryid"}
_TSV_TEXT_HEADERS = {"text", "title", "body", "contents", "content", "passage", "query", "question"}


def tsv_records(path: Path, what: str, allowed: tuple[int, ...], join: str) -> Iterator[DocRecord]:
    """``id<TAB>text`` (or ``id<TAB>title<TAB>text`` when 3 is allowed) lines.

    The column count of the first data line fixes the layout of the whole file: a text that
    contains a tab would silently shift columns, so a line that differs is an error.
    """
    n_cols = 0
    first = True
    for no, line in text_lines(path, what):
        fields = line.rstrip("\r\n").split("\t")
        if first:
            first = False
            names = [f.strip().lower() for f in fields]
            if len(fields) > 1 and names[0] in _TSV_ID_HEADERS and all(n in _TSV_TEXT_HEADERS for n in names[1:]):
                continue  # a header line
        if not n_cols:
            if len(fields) not in allowed:
                layouts = " or ".join(f"{n} tab-separated columns" for n in allowed)
                raise InputError(f"expected {layouts} (id, [title,] text), found {len(fields)}", path, no)
            n_cols = len(fields)
        elif len(fields) != n_cols:
            raise InputError(f"expected {n_cols} tab-separated columns like the first line, found {len(fields)}",
                             path, no)
        did = as_id(fields[0], "id", path, no)
        text = fields[1] if n_cols == 2 else join_title(fields[1], fields[2], join)
        yield no, did, text


def detect_format(path: Path, fmt: str, what: str) -> str:
    """``"jsonl"`` or ``"tsv"``: ``fmt`` when it is explicit, else by the extension (``.gz``
    aside), else by the first byte of the first non-blank line (``{``: JSONL)."""
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; expected auto, jsonl or tsv", path)
    if fmt != "auto":
        return fmt
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    if suffixes and suffixes[-1] in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffixes and suffixes[-1] in (".tsv", ".txt", ".tab"):
        return "tsv"
    for _, raw in raw_lines(path, what):
        return "jsonl" if raw.lstrip().startswith(b"{") else "tsv"  # a byte order mark is already gone
    return "tsv"


def read_corpus(path: str | Path, format: str = "auto", title_field: str | None = "title", text_field: str = "text",
                join: str = " ") -> Iterator[DocRecord]:
    """The documents of a JSONL or TSV corpus file (``format``: ``auto``, see :func:`detect_format`,
    ``jsonl`` or ``tsv``; ``.gz`` is read as gzip). The file and its format are checked now;
    records are read as they are iterated, the first bad one raising InputError."""
    file = require_file(path, "corpus")
    if detect_format(file, format, "corpus") == "jsonl":
        return jsonl_docs(file, title_field, text_field, join)
    return tsv_records(file, "corpus", (2, 3), join)


def read_queries(path: str | Path, format: str = "auto", text_field: str = "text") -> Iterator[DocRecord]:
    """The queries of a queries file (JSONL ``_id``, ``text_field``, or TSV ``id<TAB>text``),
    otherwise as :func:`read_corpus`."""
    file = require_file(path, "queries")
    if detect_format(file, format, "queries") == "jsonl":
        return jsonl_records(file, "queries", "query", text_field)
    return tsv_records(file, "queries", (2,), " ")


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

"""Collections: BEIR folders, TREC files, ir_datasets ids and the bundled sample.

Every loader returns a :class:`Collection`: ids and texts as lists of str (the texts of a large
plain BEIR corpus as :class:`FileTexts`, read from the file when needed), judgments as
integer arrays (:class:`pipeline.metrics.Qrels`), and a content digest that changes when
any document, query or judgment changes (used for cache keys and logged to MLflow).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import operator
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.errors import InputError
from pipeline.io.formats import QrelsFile, dedupe_judgments, judgment_line, read_qrels
from pipeline.metrics import Qrels
from pipeline.io.readers import raw_lines, require_file, text_lines

try:  # orjson is ~3x faster on large corpora; json is the reference for what is valid
    import orjson

    _fast_loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = json.loads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Collection:
    name: str
    doc_ids: list[str]
    doc_texts: Sequence[str]  # title + " " + text (configurable per loader); a list, or FileTexts
    query_ids: list[str]  # only the queries that are evaluated (those with judgments)
    query_texts: list[str]
    qrels: Qrels  # query_idx into query_ids, doc_idx into doc_ids (-1: judged doc not in corpus)
    digest: str  # sha256 hex of the content
    source: str  # where it came from (a path or an ir_datasets id)
    report: dict[str, int] = field(default_factory=dict)  # counted soft problems, e.g. {"qrels_unknown_docs": 3}

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)


# ---------------------------------------------------------------------------------------
# Loaders. All of them stream their files line by line (never ``read()`` a whole corpus),
# hash the content while they go, and hand the pieces to ``_assemble`` which applies the
# same validation and counting rules whatever the source format.
#
# Conventions shared by every loader:
# - documents keep the order of the corpus; evaluated queries keep the order of the
#   queries file (first appearance), restricted to the queries that have judgments;
# - judgments are stored sorted by (query index, document index, document id), so the
#   order of lines in a qrels file does not matter;
# - ``Collection.report`` always has every key of ``REPORT_KEYS`` (0 when nothing happened).

REPORT_KEYS = (
    "empty_docs",  # documents whose text is empty or blank (kept)
    "empty_queries",  # evaluated queries whose text is empty or blank (kept)
    "duplicate_judgments",  # identical repeated (query, doc, grade) lines (one kept)
    "qrels_unknown_docs",  # judgments naming a document not in the corpus (kept, doc_idx=-1)
    "qrels_unknown_queries",  # distinct judged query ids missing from the queries file
    "qrels_dropped_judgments",  # judgments dropped because their query is missing
    "queries_without_judgments",  # queries in the file with no judgment in this split
)

DocRecord = tuple[int, str, str]  # (1-based line or record number, id, text)


def _parse_json(raw: bytes, path: Path, no: int) -> dict[str, Any]:
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


def _as_id(value: Any, key: str, path: Path | str, no: int) -> str:
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


def _as_text(value: Any, key: str, path: Path | str, no: int) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""  # null text: kept as an empty text (and counted if the whole item is empty)
    raise InputError(f"{key!r} must be a string, found {type(value).__name__}", path, no)


def _join(title: str, text: str, join: str) -> str:
    if title and text:
        return f"{title}{join}{text}"
    return title or text


def _jsonl_record(
    raw: bytes, path: Path, no: int, item: str, text_field: str, title_field: str | None, join: str
) -> tuple[str, str]:
    """(id, text) of one JSONL line: ``_id`` and ``text_field`` required, ``title_field``
    optional (documents only). ``item`` ("document", "query") names a record in messages."""
    obj = _parse_json(raw, path, no)
    if "_id" not in obj:
        raise InputError(f"{item} has no '_id' key", path, no)
    if text_field not in obj:
        raise InputError(f"{item} has no {text_field!r} key", path, no)
    rid = obj["_id"]
    if type(rid) is not str or not rid.strip():
        rid = _as_id(rid, "_id", path, no)
    text = obj[text_field]
    if type(text) is not str:
        text = _as_text(text, text_field, path, no)
    title = obj.get(title_field, "") if title_field else ""
    if type(title) is not str:
        title = _as_text(title, title_field or "", path, no)
    return rid, _join(title, text, join)


def _jsonl_records(
    path: Path, what: str, item: str, text_field: str, title_field: str | None = None, join: str = " ",
    offsets: array | None = None,
) -> Iterator[DocRecord]:
    """Records of a JSONL file (corpus or queries); ``offsets`` gets each record's byte offset."""
    for no, raw in raw_lines(path, what, offsets=offsets):
        rid, text = _jsonl_record(raw, path, no, item, text_field, title_field, join)
        yield no, rid, text


def _jsonl_docs(
    path: Path, title_field: str | None, text_field: str, join: str, offsets: array | None = None
) -> Iterator[DocRecord]:
    return _jsonl_records(path, "corpus", "document", text_field, title_field, join, offsets)


#: ``load_beir(lazy_texts=None)`` reads the texts of a plain corpus.jsonl at least this big
#: from the file when they are needed, instead of holding them (see FileTexts).
LAZY_TEXTS_MIN_BYTES = 16 * 2**20
_READ_DOCS = 20_000  # documents FileTexts reads at once when iterated


def _file_stamp(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class FileTexts(Sequence[str]):
    """The document texts of a plain JSONL corpus, read from the file when asked for.

    A Python str costs ~49 bytes plus its characters, and the texts are needed once, to
    index (or encode, or chunk) the corpus: at 1M MS MARCO-like passages holding them took
    330 MiB of the job's memory, the file's byte offsets take 8 MiB. ``texts[i]`` and
    ``texts[a:b]`` read the lines they need (a slice in one read); iteration reads
    ``_READ_DOCS`` documents at a time. A text comes out exactly as the loader made it.

    The file must be the one that was loaded: before every read its device, inode, size and
    modification time are compared with those seen when loading, and every record read must
    carry the id loaded at its index. Otherwise InputError ("changed since it was loaded"):
    no text of another file is ever used under this collection's digest.
    """

    def __init__(self, path: Path, offsets: np.ndarray, end: int, stamp: tuple[int, int, int, int],
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
        for start in range(0, len(self._offsets), _READ_DOCS):
            yield from self._read(start, min(start + _READ_DOCS, len(self._offsets)))

    def __repr__(self) -> str:
        return f"FileTexts({str(self.path)!r}, {len(self)} documents)"

    def _changed(self, detail: str) -> InputError:
        return InputError(f"corpus file changed since it was loaded ({detail}); run again to load it anew", self.path)

    def _read(self, start: int, stop: int) -> list[str]:
        try:
            if _file_stamp(self.path) != self._stamp:
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
                rid, text = _jsonl_record(raw, self.path, start + k + 1, "document", text_field, title_field, join)
            except InputError as err:
                raise self._changed(str(err)) from None
            if rid != self._ids[start + k]:
                raise self._changed(f"document {start + k} is {rid!r}, was {self._ids[start + k]!r}")
            out.append(text)
        return out


def _jsonl_queries(path: Path, text_field: str = "text") -> Iterator[DocRecord]:
    return _jsonl_records(path, "queries", "query", text_field)


_TSV_ID_HEADERS = {"id", "_id", "docid", "doc_id", "docno", "pid", "qid", "query_id", "query-id", "queryid"}
_TSV_TEXT_HEADERS = {"text", "title", "body", "contents", "content", "passage", "query", "question"}


def _is_tsv_header(fields: list[str]) -> bool:
    """A first line like ``id<TAB>text`` or ``_id<TAB>title<TAB>text`` is a header, not data."""
    names = [f.strip().lower() for f in fields]
    return names[0] in _TSV_ID_HEADERS and all(n in _TSV_TEXT_HEADERS for n in names[1:])


def _tsv_records(path: Path, what: str, allowed: tuple[int, ...], join: str) -> Iterator[DocRecord]:
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
            if len(fields) > 1 and _is_tsv_header(fields):
                continue
        if not n_cols:
            if len(fields) not in allowed:
                layouts = " or ".join(f"{n} tab-separated columns" for n in allowed)
                raise InputError(f"expected {layouts} (id, [title,] text), found {len(fields)}", path, no)
            n_cols = len(fields)
        elif len(fields) != n_cols:
            raise InputError(
                f"expected {n_cols} tab-separated columns like the first line, found {len(fields)}", path, no
            )
        did = _as_id(fields[0], "id", path, no)
        text = fields[1] if n_cols == 2 else _join(fields[1], fields[2], join)
        yield no, did, text


def _is_jsonl(path: Path, fmt: str, what: str) -> bool:
    """Decide between JSONL and TSV: explicit ``fmt``, then the extension, then the first byte."""
    if fmt not in ("auto", "jsonl", "tsv"):
        raise InputError(f"unknown format {fmt!r}; expected auto, jsonl or tsv", path)
    if fmt != "auto":
        return fmt == "jsonl"
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    if suffixes and suffixes[-1] in (".jsonl", ".json", ".ndjson"):
        return True
    if suffixes and suffixes[-1] in (".tsv", ".txt", ".tab"):
        return False
    for _, raw in raw_lines(path, what):
        return raw.lstrip().startswith(b"{")  # a byte order mark is already gone
    return False


# --------------------------------------------------------------------------- assembling


def _hash_str(update: Callable[[bytes], None], *items: str) -> None:
    """Length-prefixed, so ("ab", "c") and ("a", "bc") hash differently."""
    for item in items:
        data = item.encode("utf-8", "surrogatepass")
        update(b"%d:" % len(data))
        update(data)


def _collect_docs(
    records: Iterable[DocRecord],
    rescan: Callable[[], Iterable[DocRecord]],
    where: Path | str,
    hasher: Any,
    keep_texts: bool = True,
) -> tuple[list[str], list[str], int]:
    """Consume document records: duplicate ids are an error, empty texts are counted.

    Memory matters here (a corpus can have millions of short documents): besides the two
    output lists only the 64-bit ``hash()`` of each id is kept (8 bytes a document instead
    of ~40 for a set). Equal hashes are checked exactly afterwards, and the lines of a real
    duplicate are found by reading the input again, which only happens on the way to an error.
    With ``keep_texts=False`` the texts are hashed and counted but not kept (an empty list).
    """
    ids: list[str] = []
    texts: list[str] = []
    id_hashes = array("q")
    empty = 0
    update = hasher.update
    update(b"docs\n")
    keep = texts.append if keep_texts else None
    for _, did, text in records:
        ids.append(did)
        if keep is not None:
            keep(text)
        id_hashes.append(hash(did))
        if not text or text.isspace():
            empty += 1
        bid = did.encode("utf-8", "surrogatepass")
        btext = text.encode("utf-8", "surrogatepass")
        update(b"%d:%d:" % (len(bid), len(btext)))
        update(bid)
        update(btext)
    if len(ids) > 1:
        sorted_hashes = np.frombuffer(id_hashes, dtype=np.int64)
        sorted_hashes.sort()  # in place: no second copy of the hashes
        same = sorted_hashes[1:] == sorted_hashes[:-1]
        if same.any():
            _raise_duplicate_doc(ids, set(sorted_hashes[1:][same].tolist()), rescan, where)
    return ids, texts, empty


def _raise_duplicate_doc(
    ids: list[str], suspect_hashes: set[int], rescan: Callable[[], Iterable[DocRecord]], where: Path | str
) -> None:
    """Raise for the first repeated id (in input order), naming both lines; return on a mere hash collision."""
    counts: dict[str, int] = {}
    for did in ids:
        if hash(did) in suspect_hashes:
            counts[did] = counts.get(did, 0) + 1
    repeated = {d for d, n in counts.items() if n > 1}
    if not repeated:
        return  # different ids with the same 64-bit hash
    first_line: dict[str, int] = {}
    for no, did, _ in rescan():
        if did in repeated:
            if did in first_line:
                raise InputError(f"duplicate document id {did!r} (first on line {first_line[did]})", where, no)
            first_line[did] = no
    raise AssertionError("duplicate id not found again")  # pragma: no cover - the input changed meanwhile


def _collect_queries(records: Iterable[DocRecord], where: Path | str) -> dict[str, tuple[str, int]]:
    """query id -> (text, line), in file order; a repeated id is an error naming both lines."""
    queries: dict[str, tuple[str, int]] = {}
    for no, qid, text in records:
        if qid in queries:
            raise InputError(f"duplicate query id {qid!r} (first on line {queries[qid][1]})", where, no)
        queries[qid] = (text, no)
    return queries


@dataclass(frozen=True)
class Parts:
    """The three parts of a collection: how to read each and what to call it in messages.

    ``docs`` and ``queries`` return fresh iterables of (line or record number, id, text);
    ``docs`` is called a second time only to name the lines of a duplicate id. ``judgments``
    returns the deduplicated judgments; ``judgment_line`` finds a judgment's line or record
    number for a strict-mode error.
    """

    name: str
    source: str  # where it came from (a path or an ir_datasets id)
    corpus_where: Path | str
    docs: Callable[[], Iterable[DocRecord]]
    queries_where: Path | str
    queries: Callable[[], Iterable[DocRecord]]
    qrels_where: Path | str
    judgments: Callable[[], QrelsFile]
    judgment_line: Callable[[str, str], int | None]
    strict: bool = False
    #: When set, the texts are not kept while loading: the collection's texts are
    #: ``texts_from(doc_ids)`` (FileTexts over the corpus file).
    texts_from: Callable[[list[str]], Sequence[str]] | None = None


def _load(parts: Parts) -> Collection:
    """Read the parts (cheap checks first, so a bad qrels or queries file fails before a big
    corpus is read) and assemble them."""
    judgments = parts.judgments()
    queries = _collect_queries(parts.queries(), parts.queries_where)
    hasher = hashlib.sha256()
    doc_ids, doc_texts, empty_docs = _collect_docs(parts.docs(), parts.docs, parts.corpus_where, hasher,
                                                   keep_texts=parts.texts_from is None)
    if parts.texts_from is not None:
        doc_texts = parts.texts_from(doc_ids)  # type: ignore[assignment]
    return _assemble(parts, judgments, queries, doc_ids, doc_texts, empty_docs, hasher)


def _assemble(
    parts: Parts,
    judgments: QrelsFile,
    queries: dict[str, tuple[str, int]],
    doc_ids: list[str],
    doc_texts: Sequence[str],
    empty_docs: int,
    hasher: Any,
) -> Collection:
    """Map judgments to indices, apply the soft/hard rules, finish the digest."""
    name, strict = parts.name, parts.strict
    corpus_where, queries_where, qrels_where = parts.corpus_where, parts.queries_where, parts.qrels_where
    judged_qids, judged_dids, grades = judgments.query_ids, judgments.doc_ids, judgments.grades
    if not doc_ids:
        raise InputError("corpus has no documents", corpus_where)
    if not queries:
        raise InputError("queries file has no queries", queries_where)
    report = dict.fromkeys(REPORT_KEYS, 0)
    report["empty_docs"] = empty_docs
    report["duplicate_judgments"] = int(judgments.n_duplicates)

    # Judged queries that the queries file lacks: their judgments cannot be evaluated.
    known_q = np.fromiter((q in queries for q in judged_qids), dtype=bool, count=len(judged_qids))
    if not known_q.all():
        missing = judged_qids[~known_q]
        if strict:
            q, d = str(missing[0]), str(judged_dids[~known_q][0])
            raise InputError(
                f"judged query {q!r} is not in the queries file {queries_where} (strict mode)",
                qrels_where,
                parts.judgment_line(q, d),
            )
        report["qrels_unknown_queries"] = len(set(missing.tolist()))
        report["qrels_dropped_judgments"] = int(len(missing))
        judged_qids, judged_dids, grades = judged_qids[known_q], judged_dids[known_q], grades[known_q]

    # Evaluated queries: file order, those with at least one (kept) judgment.
    judged_set = set(judged_qids.tolist())
    query_ids = [q for q in queries if q in judged_set]
    if not query_ids:
        raise InputError(
            f"no evaluable query: none of the {len(queries)} queries in this file is judged in {qrels_where}",
            queries_where,
        )
    query_texts = [queries[q][0] for q in query_ids]
    report["queries_without_judgments"] = len(queries) - len(query_ids)
    report["empty_queries"] = sum(1 for t in query_texts if not t or t.isspace())
    q_pos = {q: i for i, q in enumerate(query_ids)}

    # Document indices, looked up only for judged documents (one pass over the corpus ids).
    d_pos: dict[str, int] = dict.fromkeys(judged_dids.tolist(), -1)
    for i, d in enumerate(doc_ids):
        if d in d_pos:
            d_pos[d] = i
    query_idx = np.fromiter((q_pos[q] for q in judged_qids), dtype=np.int64, count=len(judged_qids))
    doc_idx = np.fromiter((d_pos[d] for d in judged_dids), dtype=np.int64, count=len(judged_dids))
    unknown = doc_idx < 0
    if unknown.any():
        if strict:
            q, d = str(judged_qids[unknown][0]), str(judged_dids[unknown][0])
            raise InputError(
                f"judged document {d!r} (query {q!r}) is not in the corpus {corpus_where} (strict mode)",
                qrels_where,
                parts.judgment_line(q, d),
            )
        report["qrels_unknown_docs"] = int(unknown.sum())

    # Canonical order: (query, document index, document id), independent of the file order.
    if len(judged_dids):
        _, did_rank = np.unique(judged_dids.astype(str), return_inverse=True)
    else:
        did_rank = np.zeros(0, dtype=np.int64)
    order = np.lexsort((did_rank, doc_idx, query_idx))
    query_idx, doc_idx, grades = query_idx[order], doc_idx[order], np.asarray(grades, dtype=np.int64)[order]
    judged_dids = judged_dids[order]

    update = hasher.update
    update(b"queries\n")
    for q, t in zip(query_ids, query_texts):
        _hash_str(update, q, t)
    update(b"qrels\n")
    for qi, d, g in zip(query_idx.tolist(), judged_dids.tolist(), grades.tolist()):
        _hash_str(update, query_ids[qi], d)
        update(b"%d;" % g)
    update(b"end %d %d %d\n" % (len(doc_ids), len(query_ids), len(grades)))

    _log_report(name, report, qrels_where)
    return Collection(
        name=name,
        doc_ids=doc_ids,
        doc_texts=doc_texts,
        query_ids=query_ids,
        query_texts=query_texts,
        qrels=Qrels(query_idx=query_idx, doc_idx=doc_idx, grade=grades),
        digest=hasher.hexdigest(),
        source=parts.source,
        report=report,
    )


_REPORT_TEXT = {
    "empty_docs": "documents have an empty text (kept)",
    "empty_queries": "evaluated queries have an empty text (kept)",
    "duplicate_judgments": "identical duplicate judgments were dropped (one kept each)",
    "qrels_unknown_docs": (
        "judgments name documents missing from the corpus (kept: they count in R but can never be retrieved)"
    ),
    "qrels_unknown_queries": "judged queries are missing from the queries file (their judgments were dropped)",
    "qrels_dropped_judgments": "judgments were dropped because their query is missing",
    "queries_without_judgments": "queries have no judgment in this split (not evaluated)",
}


def _log_report(name: str, report: dict[str, int], qrels_where: Path | str) -> None:
    for key, count in report.items():
        if count:
            # Queries outside the split are normal for BEIR (queries.jsonl holds every split).
            level = logging.INFO if key == "queries_without_judgments" else logging.WARNING
            log.log(level, "%s: %d %s [%s] (qrels: %s)", name, count, _REPORT_TEXT[key], key, qrels_where)


# --------------------------------------------------------------------------- public loaders


def _first_existing(folder: Path, names: tuple[str, ...], what: str) -> Path:
    for candidate in names:
        path = folder / candidate
        if path.is_file():
            return path
    raise InputError(f"no {what} file ({' or '.join(names)}) in the dataset folder", folder)


def load_beir(
    path: str | Path,
    split: str = "test",
    name: str | None = None,
    title_field: str | None = "title",
    text_field: str = "text",
    join: str = " ",
    strict: bool = False,
    lazy_texts: bool | None = None,
) -> Collection:
    """Load a BEIR folder: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv[.gz]``.

    Document text is ``title + join + text`` (just one of them when the other is empty;
    ``title_field=None`` ignores titles). Only the queries judged in ``qrels/<split>.tsv``
    are evaluated, in the order of ``queries.jsonl``. Judgments naming an unknown document
    are kept with ``doc_idx=-1`` (they count in R, as in trec_eval) and judgments of a query
    missing from ``queries.jsonl`` are dropped; both are counted in ``report`` and logged,
    and ``strict=True`` turns them into errors. ``name`` defaults to the folder name.

    ``lazy_texts``: the document texts of a plain (not gzipped) ``corpus.jsonl`` are read
    from the file when needed (:class:`FileTexts`) instead of held in memory: ``None`` (the
    default) does so for a file of ``LAZY_TEXTS_MIN_BYTES`` (16 MiB) or more, ``True``
    always, ``False`` never. The collection, its digest and every text are the same.
    """
    folder = Path(path).expanduser()
    if not folder.exists():
        raise InputError("dataset folder not found", folder)
    if not folder.is_dir():
        raise InputError("dataset path is a file, expected a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)", folder)
    corpus = _first_existing(folder, ("corpus.jsonl", "corpus.jsonl.gz"), "corpus")
    queries_path = _first_existing(folder, ("queries.jsonl", "queries.jsonl.gz"), "queries")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file() and qrels_path.with_suffix(".tsv.gz").is_file():
        qrels_path = qrels_path.with_suffix(".tsv.gz")
    if not qrels_path.is_file():
        available = sorted(p.name.split(".")[0] for p in (folder / "qrels").glob("*.tsv*"))
        hint = f"available splits: {', '.join(available)}" if available else "the qrels folder has no .tsv file"
        raise InputError(f"no qrels for split {split!r} ({hint})", qrels_path)
    parts = _file_parts(
        name=name or folder.resolve().name,
        source=str(folder),
        corpus=corpus,
        docs=lambda: _jsonl_docs(corpus, title_field, text_field, join),
        queries=queries_path,
        query_records=lambda: _jsonl_queries(queries_path),
        qrels=qrels_path,
        strict=strict,
    )
    if corpus.suffix != ".gz" and lazy_texts is not False:
        stamp = _file_stamp(corpus)
        if lazy_texts or stamp[2] >= LAZY_TEXTS_MIN_BYTES:
            offsets = array("q")

            def docs() -> Iterator[DocRecord]:
                del offsets[:]  # a second read (to name a duplicate id's lines) records them again
                return _jsonl_docs(corpus, title_field, text_field, join, offsets)

            def texts_from(doc_ids: list[str]) -> FileTexts:
                if _file_stamp(corpus) != stamp:
                    raise InputError("corpus file changed while it was being read; run again", corpus)
                return FileTexts(corpus, np.frombuffer(offsets, np.int64).copy(), stamp[2], stamp, doc_ids,
                                 title_field, text_field, join)

            parts = dataclasses.replace(parts, docs=docs, texts_from=texts_from)
    return _load(parts)


def load_trec(
    qrels: str | Path,
    queries: str | Path,
    corpus: str | Path,
    name: str | None = None,
    strict: bool = False,
    corpus_format: str = "auto",
    queries_format: str = "auto",
    title_field: str | None = "title",
    text_field: str = "text",
    join: str = " ",
) -> Collection:
    """Load TREC-style files: qrels (``qid iter docid grade`` or BEIR TSV), queries, corpus.

    Queries: TSV ``id<TAB>text`` or JSONL (``_id``, ``text``). Corpus: JSONL (``_id``,
    ``title_field``, ``text_field``) or TSV ``id<TAB>text`` / ``id<TAB>title<TAB>text``.
    ``*_format`` is ``auto`` (extension ``.jsonl``/``.tsv``, else the first character), ``jsonl``
    or ``tsv``; ``.gz`` works for every file; a TSV header line such as ``id<TAB>text`` is
    recognised and skipped. Same rules as :func:`load_beir`; ``name`` defaults to the name
    of the folder holding the corpus.
    """
    corpus_path = require_file(corpus, "corpus")
    queries_path = require_file(queries, "queries")
    qrels_path = require_file(qrels, "qrels")
    if _is_jsonl(corpus_path, corpus_format, "corpus"):
        docs: Callable[[], Iterable[DocRecord]] = lambda: _jsonl_docs(corpus_path, title_field, text_field, join)
    else:
        docs = lambda: _tsv_records(corpus_path, "corpus", (2, 3), join)
    if _is_jsonl(queries_path, queries_format, "queries"):
        query_records: Callable[[], Iterable[DocRecord]] = lambda: _jsonl_queries(queries_path)
    else:
        query_records = lambda: _tsv_records(queries_path, "queries", (2,), join)
    return _load(
        _file_parts(
            name=name or corpus_path.resolve().parent.name,
            source=str(corpus_path),
            corpus=corpus_path,
            docs=docs,
            queries=queries_path,
            query_records=query_records,
            qrels=qrels_path,
            strict=strict,
        )
    )


def _file_parts(
    *,
    name: str,
    source: str,
    corpus: Path,
    docs: Callable[[], Iterable[DocRecord]],
    queries: Path,
    query_records: Callable[[], Iterable[DocRecord]],
    qrels: Path,
    strict: bool,
) -> Parts:
    return Parts(
        name=name,
        source=source,
        corpus_where=corpus,
        docs=docs,
        queries_where=queries,
        queries=query_records,
        qrels_where=qrels,
        judgments=lambda: read_qrels(qrels),
        judgment_line=lambda q, d: judgment_line(qrels, q, d),
        strict=strict,
    )


def load_ir_datasets(
    id: str,
    name: str | None = None,
    strict: bool = False,
    title_field: str | None = "title",
    text_field: str = "text",
    join: str = " ",
) -> Collection:
    """Load any ``ir_datasets`` id (e.g. ``beir/scifact/test``) with the same rules as the files.

    Needs the optional extra ``ir_datasets`` (imported here, not at module import). The
    dataset must provide docs, queries and qrels and already be downloaded or be
    downloadable. Document text is ``title + join + text`` when the document type has those
    fields, else its ``default_text()``. Errors name ``ir_datasets:<id>/<part>`` and the
    1-based record number. ``name`` defaults to the id.
    """
    try:
        import ir_datasets
    except ImportError:
        raise InputError(
            "the ir_datasets package is not installed (pip install 'rag-retrieval-eval[ir_datasets]')"
        ) from None
    where = f"ir_datasets:{id}"
    try:
        dataset = ir_datasets.load(id)
    except KeyError:
        raise InputError(f"unknown ir_datasets id {id!r}") from None
    for part in ("docs", "queries", "qrels"):
        if not getattr(dataset, f"has_{part}")():
            raise InputError(f"ir_datasets id {id!r} has no {part}")

    def doc_records() -> Iterator[DocRecord]:
        for no, doc in enumerate(dataset.docs_iter(), start=1):
            fields = doc._fields
            if text_field in fields:
                text = _as_text(getattr(doc, text_field), text_field, f"{where}/docs", no)
                title = ""
                if title_field and title_field in fields:
                    title = _as_text(getattr(doc, title_field), title_field, f"{where}/docs", no)
                text = _join(title, text, join)
            elif hasattr(doc, "default_text"):
                text = doc.default_text()
            else:
                raise InputError(f"document type {type(doc).__name__} has no {text_field!r} field", f"{where}/docs", no)
            yield no, _as_id(doc.doc_id, "doc_id", f"{where}/docs", no), text

    def query_records() -> Iterator[DocRecord]:
        for no, query in enumerate(dataset.queries_iter(), start=1):
            if "text" in query._fields:
                text = _as_text(query.text, "text", f"{where}/queries", no)
            else:
                text = query.default_text()
            yield no, _as_id(query.query_id, "query_id", f"{where}/queries", no), text

    positions: dict[tuple[str, str], int] = {}

    def judgments() -> QrelsFile:
        qids: list[str] = []
        dids: list[str] = []
        grades: list[int] = []
        for no, qrel in enumerate(dataset.qrels_iter(), start=1):
            qids.append(str(qrel.query_id))
            dids.append(str(qrel.doc_id))
            grades.append(int(qrel.relevance))
            positions.setdefault((qids[-1], dids[-1]), no)
        return dedupe_judgments(
            pa.array(qids, pa.string()),
            pa.array(dids, pa.string()),
            np.array(grades, np.int64),
            f"{where}/qrels",
            np.arange(1, len(qids) + 1, dtype=np.int64),
            position_name="at judgment",
        )

    parts = Parts(
        name=name or id,
        source=where,
        corpus_where=f"{where}/docs",
        docs=doc_records,
        queries_where=f"{where}/queries",
        queries=query_records,
        qrels_where=f"{where}/qrels",
        judgments=judgments,
        judgment_line=lambda q, d: positions.get((q, d)),
        strict=strict,
    )
    try:
        return _load(parts)
    except (OSError, EOFError) as exc:  # missing download, no network, unreadable cache
        raise InputError(f"ir_datasets could not provide {id!r}: {exc}") from None


SAMPLE_DIR = Path(__file__).resolve().parents[1] / "sample"


def load_sample(name: str = "sample") -> Collection:
    """The bundled sample collection (``pipeline/sample``, a BEIR folder; see its README)."""
    return load_beir(SAMPLE_DIR, split="test", name=name)

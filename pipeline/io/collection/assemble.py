"""From records to a :class:`Collection`: the validation and counting rules of every loader.

A loader describes its three parts (:class:`Parts`: how to read documents, queries and
judgments, and what to call each in messages); :func:`load_parts` reads them, cheap checks
first, and applies the same rules whatever the source format:

- documents keep the order of the corpus; a repeated document or query id is an error
  naming both lines; empty texts are kept and counted;
- evaluated queries keep the order of the queries file (first appearance), restricted to
  the queries that have judgments;
- judgments of a query missing from the queries file are dropped, judgments of a document
  missing from the corpus kept with ``doc_idx=-1`` (they count in R, as in trec_eval); both
  counted, and errors with ``strict``;
- judgments are stored sorted by (query index, document index, document id), so the order
  of lines in a qrels file does not matter;
- ``Collection.report`` always has every key of ``REPORT_KEYS`` (0 when nothing happened),
  and each count that is not 0 is logged.

The digest is a sha256 over the documents (in corpus order), then the evaluated queries and
the judgments (in canonical order), every string length-prefixed.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.collection.records import Collection, DocRecord
from pipeline.io.formats import QrelsFile
from pipeline.metrics import Qrels

log = logging.getLogger(__name__)

#: The keys of ``Collection.report`` (each always present, 0 when nothing happened) and what they count.
REPORT_TEXT = {
    "empty_docs": "documents have an empty text (kept)",
    "empty_queries": "evaluated queries have an empty text (kept)",
    "duplicate_judgments": "identical duplicate judgments were dropped (one kept each)",
    "qrels_unknown_docs":
        "judgments name documents missing from the corpus (kept: they count in R but can never be retrieved)",
    "qrels_unknown_queries": "judged queries are missing from the queries file (their judgments were dropped)",
    "qrels_dropped_judgments": "judgments were dropped because their query is missing",
    "queries_without_judgments": "queries have no judgment in this split (not evaluated)",
}
REPORT_KEYS = tuple(REPORT_TEXT)


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


def hash_str(update: Callable[[bytes], None], *items: str) -> None:
    """Feed ``items`` to a hash's ``update``, length-prefixed, so ("ab", "c") and ("a", "bc") differ."""
    for item in items:
        data = item.encode("utf-8", "surrogatepass")
        update(b"%d:" % len(data))
        update(data)


def collect_docs(records: Iterable[DocRecord], rescan: Callable[[], Iterable[DocRecord]], where: Path | str,
                 hasher: Any, keep_texts: bool = True) -> tuple[list[str], list[str], int]:
    """Consume document records into (ids, texts, number of empty texts), hashing them into
    ``hasher``: duplicate ids are an error, empty texts are counted; with ``keep_texts=False``
    the texts are hashed and counted but not kept (an empty list).

    Memory matters here (a corpus can have millions of short documents): besides the two
    output lists only the 64-bit ``hash()`` of each id is kept (8 bytes a document, far less
    than a set of the ids). Equal hashes are checked exactly afterwards, and the lines of a
    real duplicate are found by reading the input again (``rescan``), on the way to an error.
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
            raise_duplicate_doc(ids, set(sorted_hashes[1:][same].tolist()), rescan, where)
    return ids, texts, empty


def raise_duplicate_doc(ids: list[str], suspect_hashes: set[int], rescan: Callable[[], Iterable[DocRecord]],
                        where: Path | str) -> None:
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


def collect_queries(records: Iterable[DocRecord], where: Path | str) -> dict[str, tuple[str, int]]:
    """query id -> (text, line), in file order; a repeated id is an error naming both lines."""
    queries: dict[str, tuple[str, int]] = {}
    for no, qid, text in records:
        if qid in queries:
            raise InputError(f"duplicate query id {qid!r} (first on line {queries[qid][1]})", where, no)
        queries[qid] = (text, no)
    return queries


def load_parts(parts: Parts) -> Collection:
    """Read the parts (cheap checks first, so a bad qrels or queries file fails before a big
    corpus is read) and assemble them into a Collection (the module docstring's rules)."""
    judgments = parts.judgments()
    queries = collect_queries(parts.queries(), parts.queries_where)
    hasher = hashlib.sha256()
    doc_ids, doc_texts, empty_docs = collect_docs(parts.docs(), parts.docs, parts.corpus_where, hasher,
                                                  keep_texts=parts.texts_from is None)
    if parts.texts_from is not None:
        doc_texts = parts.texts_from(doc_ids)  # type: ignore[assignment]
    if not doc_ids:
        raise InputError("corpus has no documents", parts.corpus_where)
    if not queries:
        raise InputError("queries file has no queries", parts.queries_where)
    report = dict.fromkeys(REPORT_KEYS, 0)
    report["empty_docs"] = empty_docs
    report["duplicate_judgments"] = int(judgments.n_duplicates)
    qids, dids, grades = _drop_unknown_queries(parts, queries, judgments.query_ids, judgments.doc_ids,
                                               judgments.grades, report)
    judged_set = set(qids.tolist())  # the evaluated queries: in file order, those with a kept judgment
    query_ids = [q for q in queries if q in judged_set]
    if not query_ids:
        raise InputError(
            f"no evaluable query: none of the {len(queries)} queries in this file is judged in {parts.qrels_where}",
            parts.queries_where)
    query_texts = [queries[q][0] for q in query_ids]
    report["queries_without_judgments"] = len(queries) - len(query_ids)
    report["empty_queries"] = sum(1 for t in query_texts if not t or t.isspace())
    query_idx, doc_idx = _judged_indices(parts, query_ids, doc_ids, qids, dids, report)
    # the canonical order: by query, document index, then document id, whatever the file order
    did_rank = np.unique(dids.astype(str), return_inverse=True)[1] if len(dids) else np.zeros(0, np.int64)
    order = np.lexsort((did_rank, doc_idx, query_idx))
    query_idx, doc_idx, dids = query_idx[order], doc_idx[order], dids[order]
    grades = np.asarray(grades, np.int64)[order]
    update = hasher.update  # the digest goes on: the evaluated queries, the judgments, the counts
    update(b"queries\n")
    for q, t in zip(query_ids, query_texts):
        hash_str(update, q, t)
    update(b"qrels\n")
    for qi, d, g in zip(query_idx.tolist(), dids.tolist(), grades.tolist()):
        hash_str(update, query_ids[qi], d)
        update(b"%d;" % g)
    update(b"end %d %d %d\n" % (len(doc_ids), len(query_ids), len(grades)))
    for key, count in report.items():
        if count:  # info for queries outside the split: normal for BEIR (queries.jsonl holds every split)
            level = logging.INFO if key == "queries_without_judgments" else logging.WARNING
            log.log(level, "%s: %d %s [%s] (qrels: %s)", parts.name, count, REPORT_TEXT[key], key, parts.qrels_where)
    return Collection(name=parts.name, doc_ids=doc_ids, doc_texts=doc_texts, query_ids=query_ids,
                      query_texts=query_texts, qrels=Qrels(query_idx=query_idx, doc_idx=doc_idx, grade=grades),
                      digest=hasher.hexdigest(), source=parts.source, report=report)


def _drop_unknown_queries(parts: Parts, queries: dict[str, tuple[str, int]], qids: NDArray[np.object_],
                          dids: NDArray[np.object_], grades: NDArray[np.int64],
                          report: dict[str, int]) -> tuple[NDArray[np.object_], NDArray[np.object_], NDArray[np.int64]]:
    """The judgments whose query is in the queries file (the others cannot be evaluated):
    the rest are counted, or an error in strict mode."""
    known_q = np.fromiter((q in queries for q in qids), dtype=bool, count=len(qids))
    if known_q.all():
        return qids, dids, grades
    missing = qids[~known_q]
    if parts.strict:
        q, d = str(missing[0]), str(dids[~known_q][0])
        raise InputError(f"judged query {q!r} is not in the queries file {parts.queries_where} (strict mode)",
                         parts.qrels_where, parts.judgment_line(q, d))
    report["qrels_unknown_queries"] = len(set(missing.tolist()))
    report["qrels_dropped_judgments"] = int(len(missing))
    return qids[known_q], dids[known_q], grades[known_q]


def _judged_indices(parts: Parts, query_ids: list[str], doc_ids: list[str], qids: NDArray[np.object_],
                    dids: NDArray[np.object_], report: dict[str, int]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(query index, document index) of each judgment; -1 for a document not in the corpus
    (counted, or an error in strict mode). Document indices are looked up only for judged
    documents, in one pass over the corpus ids."""
    q_pos = {q: i for i, q in enumerate(query_ids)}
    d_pos: dict[str, int] = dict.fromkeys(dids.tolist(), -1)
    for i, d in enumerate(doc_ids):
        if d in d_pos:
            d_pos[d] = i
    query_idx = np.fromiter((q_pos[q] for q in qids), dtype=np.int64, count=len(qids))
    doc_idx = np.fromiter((d_pos[d] for d in dids), dtype=np.int64, count=len(dids))
    unknown = doc_idx < 0
    if unknown.any():
        if parts.strict:
            q, d = str(qids[unknown][0]), str(dids[unknown][0])
            raise InputError(f"judged document {d!r} (query {q!r}) is not in the corpus {parts.corpus_where} "
                             "(strict mode)", parts.qrels_where, parts.judgment_line(q, d))
        report["qrels_unknown_docs"] = int(unknown.sum())
    return query_idx, doc_idx

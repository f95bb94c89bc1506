"""TREC runs: read strictly (:func:`read_run`), written so that every id reads back
(:func:`write_run`), and the tie rules every consumer of a run names."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.formats.arrow import to_numpy
from pipeline.io.formats.parsing import (clean_ids, dictionary_codes, field_lines, first_line_of, has_duplicate,
                                         is_float, read_fast, split_fields)

TIE_BREAKS = ("file_order", "doc_index", "docid_desc")  # see the docstring of pipeline.io.formats
TIE_BREAKS_WITHOUT_CORPUS = ("file_order", "docid_desc")  # the rules a run and qrels alone allow
TIE_BREAK_ALIASES = {"score": "file_order"}  # earlier names, still accepted


def tie_break_rule(name: str, allowed: Sequence[str] = TIE_BREAKS) -> str:
    """The canonical name of tie rule ``name`` (an alias is translated); ValueError when it
    is unknown or not one of ``allowed``."""
    rule = TIE_BREAK_ALIASES.get(name, name)
    if rule not in allowed:
        hint = " (it needs a corpus: use retriever=run_file)" if rule == "doc_index" else ""
        raise ValueError(f"unknown tie_break {name!r}{hint}; choose one of {', '.join(allowed)}")
    return rule


@dataclass(frozen=True)
class RunFile:
    """One row per line of a TREC run, in file order, ids dictionary-encoded once."""

    query_codes: NDArray[np.int64]  # index into query_dict
    query_dict: pa.Array  # distinct query ids (string)
    doc_codes: NDArray[np.int64]  # index into doc_dict
    doc_dict: pa.Array  # distinct document ids (string)
    scores: NDArray[np.float64]
    tag: str = ""

    @property
    def query_ids(self) -> NDArray[np.object_]:
        return to_numpy(self.query_dict)[self.query_codes]

    @property
    def doc_ids(self) -> NDArray[np.object_]:
        return to_numpy(self.doc_dict)[self.doc_codes]


def read_run(path: str | Path) -> RunFile:
    """Read a TREC run (``qid Q0 docid rank score tag``), rows in file order."""
    path, first_line = first_line_of(path, "run")
    delimiter = "\t" if "\t" in first_line else " "
    names = ["q", "q0", "d", "rank", "s", "tag"]
    first = split_fields(first_line, 6)
    # Ids are dictionary-encoded while parsing (one hash pass, no million-string column);
    # the tag is the first line's (the fast reader still checks that every line has 6 fields).
    ids = pa.dictionary(pa.int32(), pa.string())
    table = None
    if len(first) == 6:  # else e.g. a 7-field first line that the fast reader would take as 6
        table = read_fast(path, names, {"q": ids, "d": ids, "s": pa.float64()}, delimiter)
    scores = None
    if table is not None:
        (q_codes, q_dict), (d_codes, d_dict) = dictionary_codes(table["q"]), dictionary_codes(table["d"])
        if clean_ids(q_dict, delimiter) and clean_ids(d_dict, delimiter):
            scores = to_numpy(table["s"])  # else ids the line-by-line rule splits or strips differently
    if scores is None or not np.isfinite(scores).all():
        query, doc, scores, tag = _parse_run_slowly(path)
        q_codes, q_dict = dictionary_codes(query)
        d_codes, d_dict = dictionary_codes(doc)
    else:
        tag = first[5]
    # A document listed twice for one query makes every metric ambiguous: refuse it.
    if has_duplicate(q_codes * max(len(d_dict), 1) + d_codes):
        _parse_run_slowly(path)  # raises with the line number
    return RunFile(q_codes, q_dict, d_codes, d_dict, np.ascontiguousarray(scores, np.float64), tag)


def _parse_run_slowly(path: Path) -> tuple[pa.Array, pa.Array, NDArray[np.float64], str]:
    seen: dict[tuple[str, str], int] = {}
    queries: list[str] = []
    docs: list[str] = []
    scores: list[float] = []
    tag = ""
    for no, fields in field_lines(path, "run", 6):
        if len(fields) != 6:
            raise InputError(
                f"expected 6 columns (qid Q0 docid rank score tag), found {len(fields)}", path, no
            )
        if not (fields[0] and fields[2]):
            raise InputError("empty query or document id (two tabs in a row?)", path, no)
        if not is_float(fields[4]):
            raise InputError(f"score {fields[4]!r} is not a finite number", path, no)
        key = (fields[0], fields[2])
        if key in seen:
            raise InputError(
                f"document {fields[2]!r} is listed twice for query {fields[0]!r} (first on line {seen[key]})",
                path,
                no,
            )
        seen[key] = no
        queries.append(fields[0])
        docs.append(fields[2])
        scores.append(float(fields[4]))
        tag = tag or fields[5]
    if not scores:  # every line blank by Python's whitespace (e.g. U+001C), which the byte-level check keeps
        raise InputError("run file is empty", path)
    return pa.array(queries, pa.string()), pa.array(docs, pa.string()), np.array(scores, np.float64), tag


def check_writable_id(value: str, what: str, path: Path) -> None:
    """InputError unless ``value`` reads back unchanged from a tab-separated TREC file (a run
    or qrels): not empty, no tab or line break, no surrounding whitespace, valid UTF-8.
    ``what`` ("query", "document") and ``path`` name it in the message."""
    problem = None
    if not value:
        problem = "is empty"
    elif any(c in value for c in "\t\n\r"):
        problem = "contains a tab or a line break"
    elif value != value.strip():
        problem = "starts or ends with whitespace"
    else:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            problem = f"contains a lone surrogate (U+{ord(value[exc.start]):04X}) that UTF-8 cannot encode"
    if problem is not None:
        raise InputError(f"cannot write the run: {what} id {value!r} {problem}", path)


def write_run(
    path: str | Path,
    query_ids: list[str],
    doc_ids: list[str],
    doc_idx: NDArray[np.integer],
    scores: NDArray[np.floating],
    tag: str = "pipeline",
) -> None:
    """Write a Ranking-like pair of arrays as a TREC run (rank 1 first; -1 entries skipped).

    Scores are written with 9 significant digits so float32 values round-trip. The tag is
    one TREC field: whitespace in it becomes ``_`` (``bm25-none-k10 k1=1.5`` ->
    ``bm25-none-k10_k1=1.5``). Columns are separated by spaces, or by tabs when an id holds
    whitespace; an id that cannot round-trip is an InputError (:func:`check_writable_id`).
    The file is written atomically (``.gz``: gzip).
    """
    import gzip

    from pipeline.io.results import atomic_open  # an input/output module, like this one

    tag = re.sub(r"\s+", "_", tag.strip()) or "pipeline"
    path = Path(path)
    doc_idx = np.asarray(doc_idx)
    valid = doc_idx >= 0
    q_rows, cols = np.nonzero(valid)
    used_docs = np.unique(doc_idx[valid])
    doc_array = np.asarray(doc_ids, dtype=object)
    query_array = np.asarray(query_ids, dtype=object)
    used_queries = np.unique(q_rows)
    separator = " "
    for what, values in (("query", query_array[used_queries]), ("document", doc_array[used_docs])):
        for value in values:
            value = str(value)
            if value.isprintable() and " " not in value and value:
                continue  # the common case, checked fast
            check_writable_id(value, what, path)
            if any(c.isspace() for c in value):
                separator = "\t"
    docs = doc_array[doc_idx[valid]]
    qids = query_array[q_rows]
    text = np.char.mod("%.9g", scores[valid].astype(np.float64))
    ranks = cols + 1
    lines = [
        separator.join((q, "Q0", d, str(r), s, tag)) + "\n"
        for q, d, r, s in zip(qids.tolist(), docs.tolist(), ranks.tolist(), text.tolist())
    ]
    with atomic_open(path, "wb") as fh:
        out = gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) if path.suffix == ".gz" else fh
        out.write("".join(lines).encode("utf-8"))
        if out is not fh:
            out.close()

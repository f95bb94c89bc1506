"""TREC qrels and runs: read strictly (:func:`read_qrels`, :func:`read_run`), one rule for
repeated judgments (:func:`dedupe_judgments`), runs written so that every id reads back
(:func:`write_run`), and the tie rules every consumer of a run names."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.formats.arrow import (clean_ids, dictionary_codes, field_lines, first_line_of, first_occurrence,
                                       from_numpy, grade_problem, has_duplicate, is_float, is_int, read_fast,
                                       split_fields, to_numpy)
from pipeline.io.readers import first_text_line
from pipeline.io.results import atomic_open

BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class QrelsFile:
    """Judgments in file order (identical duplicates removed)."""

    query: pa.Array  # string
    doc: pa.Array  # string
    grades: NDArray[np.int64]
    n_duplicates: int = 0  # identical repeated judgments that were dropped

    @property
    def query_ids(self) -> NDArray[np.object_]:
        return to_numpy(self.query)

    @property
    def doc_ids(self) -> NDArray[np.object_]:
        return to_numpy(self.doc)


def _layout(path: Path, first_line: str) -> list[str]:
    """The column names of a qrels file from its first line: TREC (4) or BEIR TSV (3, header)."""
    first = split_fields(first_line, 4)
    if len(first) != 4:
        first = split_fields(first_line, 3)  # BEIR ids may hold spaces
    if len(first) == 3:
        if tuple(f.lower() for f in first) != BEIR_QRELS_HEADER:
            raise InputError("3-column qrels must be BEIR TSV with the header "
                             f"'query-id<TAB>corpus-id<TAB>score', found {' | '.join(first)!r}", path, 1)
        return ["q", "d", "g"]
    if len(first) == 4:
        return ["q", "it", "d", "g"]
    raise InputError(f"qrels line has {len(first)} columns; expected 4 (TREC: qid iter docid grade) "
                     "or 3 (BEIR TSV with header)", path, 1)


def read_qrels(path: str | Path) -> QrelsFile:
    """Read TREC or BEIR qrels; see ``pipeline.io.formats`` for the rules."""
    path, first_line = first_line_of(path, "qrels")
    names = _layout(path, first_line)
    n_fields = len(names)
    delimiter = "\t" if "\t" in first_line else " "
    table = read_fast(path, names, {"q": pa.string(), "d": pa.string(), "g": pa.string()}, delimiter)
    if table is not None and n_fields == 3:
        table = table.slice(1)  # the header line
    grades = None if table is None else _fast_grades(table["g"])
    if table is None or grades is None or not clean_ids(table["q"], delimiter) or not clean_ids(table["d"], delimiter):
        query, doc, grades, lines = _parse_qrels_slowly(path, n_fields)
        return dedupe_judgments(query, doc, grades, path, lines)
    if not table.num_rows:
        raise InputError("qrels file has no judgments", path)
    # Line numbers are only needed to report disagreeing grades: read them then.
    return dedupe_judgments(table["q"].combine_chunks(), table["d"].combine_chunks(), grades, path,
                            lambda: _parse_qrels_slowly(path, n_fields)[3])


def _fast_grades(column: pa.ChunkedArray) -> NDArray[np.int64] | None:
    """The grades as int64 when every one is a plain ASCII integer that fits; else None (the
    line-by-line reader then names the bad line)."""
    if len(column) and not pc.all(pc.match_substring_regex(column, r"^-?[0-9]+$")).as_py():
        return None
    try:
        return to_numpy(column.cast(pa.int64())).astype(np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def dedupe_judgments(query: pa.Array, doc: pa.Array, grades: NDArray[np.int64], where: Path | str,
                     positions: NDArray[np.int64] | Callable[[], NDArray[np.int64]],
                     position_name: str = "on line") -> QrelsFile:
    """The rule for repeated judgments, whatever their source (a qrels file, ir_datasets).

    A (query, document) pair judged again with the same grade is dropped (the first is kept)
    and counted; judged again with another grade, InputError at the first such judgment,
    naming the first one's grade and position. ``positions`` holds each row's 1-based line
    (or record) number, or is a function that computes them (called only for the error).
    """
    grades = np.asarray(grades, dtype=np.int64)
    q_codes, _ = dictionary_codes(query)
    d_codes, d_dict = dictionary_codes(doc)
    key = q_codes * max(len(d_dict), 1) + d_codes
    if not has_duplicate(key):
        return QrelsFile(query, doc, grades, 0)
    first = first_occurrence(key)
    dup = first != np.arange(len(first))
    n_dup = int(dup.sum())
    conflict = np.flatnonzero(dup & (grades != grades[first]))
    if len(conflict):
        row = int(conflict[0])
        prev = int(first[row])
        lines = positions() if callable(positions) else positions
        raise InputError(f"query {query[row].as_py()!r} judges document {doc[row].as_py()!r} twice with different "
                         f"grades ({grades[prev]} {position_name} {lines[prev]}, {grades[row]} here)", where,
                         int(lines[row]))
    keep = ~dup
    rows = from_numpy(np.flatnonzero(keep))
    return QrelsFile(query.take(rows), doc.take(rows), grades[keep], n_dup)


def _parse_qrels_slowly(path: Path, n_fields: int) -> tuple[pa.Array, pa.Array, NDArray[np.int64], NDArray[np.int64]]:
    """Line by line, any whitespace layout: (query, doc, grades, line numbers). The first bad
    line raises InputError: a malformed line, or disagreeing grades on an earlier one."""
    queries: list[str] = []
    docs: list[str] = []
    grades: list[int] = []
    numbers: list[int] = []
    lines = field_lines(path, "qrels", n_fields)
    if n_fields == 3:
        next(lines, None)  # header, already checked
    problem: InputError | None = None
    for no, fields in lines:
        if len(fields) != n_fields:
            problem = InputError(f"expected {n_fields} columns, found {len(fields)}", path, no)
            break
        if not (fields[0] and fields[-2]):
            problem = InputError("empty query or document id (two tabs in a row?)", path, no)
            break
        bad = grade_problem(fields[-1])
        if bad is not None:
            problem = InputError(bad, path, no)
            break
        queries.append(fields[0])
        docs.append(fields[1 if n_fields == 3 else 2])
        grades.append(int(fields[-1]))
        numbers.append(no)
    query, doc = pa.array(queries, pa.string()), pa.array(docs, pa.string())
    grade_array, line_array = np.array(grades, np.int64), np.array(numbers, np.int64)
    if problem is not None:
        dedupe_judgments(query, doc, grade_array, path, line_array)  # disagreeing grades above it come first
        raise problem
    if not queries:
        raise InputError("qrels file has no judgments", path)
    return query, doc, grade_array, line_array


def judgment_line(path: Path, qid: str, did: str) -> int | None:
    """Line of the first judgment (qid, did) in a TREC or BEIR qrels file (error paths only)."""
    for no, fields in field_lines(path, "qrels", len(_first_fields(path))):
        if len(fields) >= 3 and fields[0] == qid and fields[-2] == did:
            return no
    return None


def grade_line(path: Path, at_least: int) -> int | None:
    """Line of the first judgment whose grade is >= ``at_least`` (error paths only)."""
    for no, fields in field_lines(path, "qrels", len(_first_fields(path))):
        if fields and is_int(fields[-1]) and int(fields[-1]) >= at_least:
            return no
    return None


def _first_fields(path: Path) -> list[str]:
    first = first_text_line(path, "qrels", universal_newlines=True) or ""
    fields = split_fields(first, 4)
    return fields if len(fields) == 4 else split_fields(first, 3)


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
    first = split_fields(first_line, 6)
    # Ids are dictionary-encoded while parsing (one hash pass, no million-string column);
    # the tag is the first line's (the fast reader still checks that every line has 6 fields).
    ids = pa.dictionary(pa.int32(), pa.string())
    names = ["q", "q0", "d", "rank", "s", "tag"]
    # the fast reader only with 6 fields on the first line: it would take e.g. 7 fields as 6
    table = read_fast(path, names, {"q": ids, "d": ids, "s": pa.float64()}, delimiter) if len(first) == 6 else None
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
            raise InputError(f"expected 6 columns (qid Q0 docid rank score tag), found {len(fields)}", path, no)
        if not (fields[0] and fields[2]):
            raise InputError("empty query or document id (two tabs in a row?)", path, no)
        if not is_float(fields[4]):
            raise InputError(f"score {fields[4]!r} is not a finite number", path, no)
        key = (fields[0], fields[2])
        if key in seen:
            raise InputError(f"document {fields[2]!r} is listed twice for query {fields[0]!r} "
                             f"(first on line {seen[key]})", path, no)
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


def score_texts(scores: NDArray[np.floating]) -> list[str]:
    """The scores as text that gives their ranking back under any tie rule: when every score is
    a float32 value (the built-in retrievers' scores) 9 significant digits, which tell every
    two float32 values apart in their order (and are what runs always held); else every score
    as the shortest text that reads back as the same float64 (``repr``), so 1 + 1e-9 stays
    apart from 1 and 1e300 stays finite. One rule per file: mixing the two could reorder
    a float32 score and a float64 one within half a float32 step of it."""
    values = np.asarray(scores, dtype=np.float64)
    with np.errstate(over="ignore"):  # 1e300 as float32 is inf: not a float32 value, as intended
        narrowed = values.astype(np.float32).astype(np.float64)
    if np.array_equal(narrowed, values):
        return np.char.mod("%.9g", values).tolist()
    return [repr(v) for v in values.tolist()]


def write_run(path: str | Path, query_ids: list[str], doc_ids: list[str], doc_idx: NDArray[np.integer],
              scores: NDArray[np.floating], tag: str = "pipeline") -> None:
    """Write a Ranking-like pair of arrays as a TREC run (rank 1 first; -1 entries skipped),
    atomically (``.gz``: gzip), columns and ids as ``pipeline.io.formats`` says.

    Scores keep the ranking they had (:func:`score_texts`); a score that is not a finite
    number is refused (InputError naming the query and document). The tag is
    one TREC field: whitespace in it becomes ``_`` (``bm25-none-k10 k1=1.5`` ->
    ``bm25-none-k10_k1=1.5``).
    """
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
    values = np.asarray(scores)[valid]
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise InputError(f"cannot write the run: query {qids[bad]!r}, document {docs[bad]!r} has the score "
                         f"{float(values[bad])}, not a finite number", path)
    text = score_texts(values)
    lines = [separator.join((q, "Q0", d, str(r), s, tag)) + "\n"
             for q, d, r, s in zip(qids.tolist(), docs.tolist(), (cols + 1).tolist(), text)]
    with atomic_open(path, "wb") as fh:
        out = gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) if path.suffix == ".gz" else fh
        out.write("".join(lines).encode("utf-8"))
        if out is not fh:
            out.close()

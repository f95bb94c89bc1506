"""TREC and BEIR qrels: read strictly (:func:`read_qrels`), one rule for repeated judgments
(:func:`dedupe_judgments`), and the line of a judgment for error messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.formats.arrow import from_numpy, to_numpy
from pipeline.io.formats.parsing import (clean_ids, dictionary_codes, field_lines, first_line_of, first_occurrence,
                                         grade_problem, has_duplicate, is_int, read_fast, split_fields)
from pipeline.io.readers import first_text_line

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
            raise InputError(
                "3-column qrels must be BEIR TSV with the header "
                f"'query-id<TAB>corpus-id<TAB>score', found {' | '.join(first)!r}",
                path,
                1,
            )
        return ["q", "d", "g"]
    if len(first) == 4:
        return ["q", "it", "d", "g"]
    raise InputError(
        f"qrels line has {len(first)} columns; expected 4 (TREC: qid iter docid grade) "
        "or 3 (BEIR TSV with header)",
        path,
        1,
    )


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
    return dedupe_judgments(
        table["q"].combine_chunks(),
        table["d"].combine_chunks(),
        grades,
        path,
        lambda: _parse_qrels_slowly(path, n_fields)[3],
    )


def _fast_grades(column: pa.ChunkedArray) -> NDArray[np.int64] | None:
    """The grades as int64 when every one is a plain ASCII integer that fits; else None (the
    line-by-line reader then names the bad line)."""
    if len(column) and not pc.all(pc.match_substring_regex(column, r"^-?[0-9]+$")).as_py():
        return None
    try:
        return to_numpy(column.cast(pa.int64())).astype(np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def dedupe_judgments(
    query: pa.Array,
    doc: pa.Array,
    grades: NDArray[np.int64],
    where: Path | str,
    positions: NDArray[np.int64] | Callable[[], NDArray[np.int64]],
    position_name: str = "on line",
) -> QrelsFile:
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
        raise InputError(
            f"query {query[row].as_py()!r} judges document {doc[row].as_py()!r} twice with different grades "
            f"({grades[prev]} {position_name} {lines[prev]}, {grades[row]} here)",
            where,
            int(lines[row]),
        )
    keep = ~dup
    rows = from_numpy(np.flatnonzero(keep))
    return QrelsFile(query.take(rows), doc.take(rows), grades[keep], n_dup)


def _parse_qrels_slowly(
    path: Path, n_fields: int
) -> tuple[pa.Array, pa.Array, NDArray[np.int64], NDArray[np.int64]]:
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
        grade_text = fields[-1]
        bad = grade_problem(grade_text)
        if bad is not None:
            problem = InputError(bad, path, no)
            break
        queries.append(fields[0])
        docs.append(fields[1 if n_fields == 3 else 2])
        grades.append(int(grade_text))
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

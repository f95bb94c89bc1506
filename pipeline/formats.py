"""TREC and BEIR interchange formats: qrels and run files, read strictly, written plainly.

Readers take the fast path (pyarrow's CSV reader) and, when anything looks wrong, re-read the
file line by line (``pipeline.readers``) to report the first bad line by number: the common
case pays nothing for good error messages. Both paths drop a UTF-8 byte order mark and split
lines on ``\n``, ``\r\n`` and a bare ``\r``, so they give the same answer for the same bytes.

- qrels: TREC ``qid iter docid grade`` (whitespace separated) or a BEIR ``qrels/*.tsv``
  (header ``query-id<TAB>corpus-id<TAB>score``). Identical duplicate judgments are dropped
  and counted; duplicates whose grades disagree are an error (:func:`dedupe_judgments`, the
  one rule for judgments from any source).
- run: TREC ``qid Q0 docid rank score tag``. A document listed twice for one query is an
  error. ``.gz`` is accepted for both.

Tie rules: the order of a query's documents whose scores are equal. Every consumer of a run
(``python -m pipeline.score --tie-break``, ``retriever=run_file``'s ``tie_break``) uses
these names; all sort by score descending first, then by

- ``file_order``: the run file's line order (old name in the scorer: ``score``);
- ``doc_index``: the document's index in the corpus ascending, the project's rule for its
  own retrievers (needs a corpus: ``retriever=run_file`` only);
- ``docid_desc``: the document id descending, by code point: trec_eval's own re-sort, so
  metrics then equal trec_eval's exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.readers import first_text_line, require_file, text_lines

BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")

TIE_BREAKS = ("file_order", "doc_index", "docid_desc")  # see the module docstring
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
class QrelsFile:
    """Judgments in file order (identical duplicates removed)."""

    query: pa.Array  # string
    doc: pa.Array  # string
    grades: NDArray[np.int64]
    n_duplicates: int = 0  # identical repeated judgments that were dropped

    @property
    def query_ids(self) -> NDArray[np.object_]:
        return self.query.to_numpy(zero_copy_only=False)

    @property
    def doc_ids(self) -> NDArray[np.object_]:
        return self.doc.to_numpy(zero_copy_only=False)


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
        return self.query_dict.to_numpy(zero_copy_only=False)[self.query_codes]

    @property
    def doc_ids(self) -> NDArray[np.object_]:
        return self.doc_dict.to_numpy(zero_copy_only=False)[self.doc_codes]


def _check_exists(path: str | Path, what: str) -> tuple[Path, str]:
    """The path and its first non-blank line; InputError when missing, unreadable or empty."""
    path = require_file(path, what)
    first = first_text_line(path, what, universal_newlines=True)
    if first is None:
        raise InputError(f"{what} file is empty", path)
    return path, first


def _lines(path: Path, what: str) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, whitespace-split fields) for every non-blank line."""
    for no, line in text_lines(path, what, universal_newlines=True):
        fields = line.split()
        if fields:
            yield no, fields


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _is_float(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return bool(np.isfinite(value))


def _read_fast(path: Path, names: list[str], types: dict[str, pa.DataType], delimiter: str) -> pa.Table | None:
    """pyarrow's multithreaded CSV reader; None when the file is not in the plain layout
    (runs of spaces, trailing blanks, bad values...): the caller then parses line by line."""
    try:
        return pa_csv.read_csv(
            path,
            read_options=pa_csv.ReadOptions(column_names=names),
            parse_options=pa_csv.ParseOptions(
                delimiter=delimiter, quote_char=False, double_quote=False, escape_char=False, ignore_empty_lines=True
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types=types, null_values=[], strings_can_be_null=False, include_columns=list(types)
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError, OSError, EOFError):
        return None


def _codes(array: pa.Array | pa.ChunkedArray) -> tuple[NDArray[np.int64], pa.Array]:
    encoded = pc.dictionary_encode(array)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.unify_dictionaries().combine_chunks() if encoded.num_chunks else encoded.combine_chunks()
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), encoded.dictionary


def _first_occurrence(key: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each row, the first row with the same key (itself when the key is new)."""
    n = len(key)
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    starts = np.ones(n, np.bool_)
    starts[1:] = sorted_key[1:] != sorted_key[:-1]
    first = np.empty(n, np.int64)
    first[order] = order[np.maximum.accumulate(np.where(starts, np.arange(n), 0))] if n else order
    return first


def _first_duplicate(key: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Mask of rows whose key already occurred on an earlier row."""
    return _first_occurrence(key) != np.arange(len(key))


# --------------------------------------------------------------------------- qrels


def read_qrels(path: str | Path) -> QrelsFile:
    """Read TREC or BEIR qrels; see the module docstring for the rules."""
    path, first_line = _check_exists(path, "qrels")
    first = first_line.split()
    if len(first) != 4 and len(first_line.split("\t")) == 3:  # BEIR ids may hold spaces
        first = [f.strip() for f in first_line.split("\t")]
    if len(first) == 3:
        if tuple(f.lower() for f in first) != BEIR_QRELS_HEADER:
            raise InputError(
                "3-column qrels must be BEIR TSV with the header "
                f"'query-id<TAB>corpus-id<TAB>score', found {' | '.join(first)!r}",
                path,
                1,
            )
        names = ["q", "d", "g"]
    elif len(first) == 4:
        names = ["q", "it", "d", "g"]
    else:
        raise InputError(
            f"qrels line has {len(first)} columns; expected 4 (TREC: qid iter docid grade) "
            "or 3 (BEIR TSV with header)",
            path,
            1,
        )
    n_fields = len(names)
    delimiter = "\t" if "\t" in first_line else " "
    table = _read_fast(path, names, {"q": pa.string(), "d": pa.string(), "g": pa.int64()}, delimiter)
    if table is not None and n_fields == 3:
        table = table.slice(1)  # the header line
    if table is None:
        query, doc, grades, lines = _parse_qrels_slowly(path, n_fields)
        return dedupe_judgments(query, doc, grades, path, lines)
    # Line numbers are only needed to report disagreeing grades: read them then.
    return dedupe_judgments(
        table["q"].combine_chunks(),
        table["d"].combine_chunks(),
        table["g"].to_numpy().astype(np.int64),
        path,
        lambda: _parse_qrels_slowly(path, n_fields)[3],
    )


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
    q_codes, _ = _codes(query)
    d_codes, d_dict = _codes(doc)
    first = _first_occurrence(q_codes * max(len(d_dict), 1) + d_codes)
    dup = first != np.arange(len(first))
    n_dup = int(dup.sum())
    if not n_dup:
        return QrelsFile(query, doc, grades, 0)
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
    return QrelsFile(query.filter(pa.array(keep)), doc.filter(pa.array(keep)), grades[keep], n_dup)


def _parse_qrels_slowly(
    path: Path, n_fields: int
) -> tuple[pa.Array, pa.Array, NDArray[np.int64], NDArray[np.int64]]:
    """Line by line, any whitespace layout: (query, doc, grades, line numbers). The first bad
    line raises InputError: a malformed line, or disagreeing grades on an earlier one."""
    queries: list[str] = []
    docs: list[str] = []
    grades: list[int] = []
    numbers: list[int] = []
    lines = _lines(path, "qrels")
    if n_fields == 3:
        next(lines, None)  # header, already checked
    problem: InputError | None = None
    for no, fields in lines:
        if len(fields) != n_fields:
            problem = InputError(f"expected {n_fields} columns, found {len(fields)}", path, no)
            break
        grade_text = fields[-1]
        if not _is_int(grade_text):
            problem = InputError(f"grade {grade_text!r} is not an integer", path, no)
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
    for no, fields in _lines(path, "qrels"):
        if len(fields) >= 3 and fields[0] == qid and fields[-2] == did:
            return no
    return None


# --------------------------------------------------------------------------- runs


def read_run(path: str | Path) -> RunFile:
    """Read a TREC run (``qid Q0 docid rank score tag``), rows in file order."""
    path, first_line = _check_exists(path, "run")
    delimiter = "\t" if "\t" in first_line else " "
    names = ["q", "q0", "d", "rank", "s", "tag"]
    table = _read_fast(path, names, {"q": pa.string(), "d": pa.string(), "s": pa.float64(), "tag": pa.string()}, delimiter)
    if table is not None and len(first_line.split()) != 6:
        table = None  # e.g. a 7-field first line that the fast reader took as 6
    scores = None if table is None else table["s"].to_numpy()
    if scores is None or not np.isfinite(scores).all():
        query, doc, scores, tag = _parse_run_slowly(path)
    else:
        query, doc = table["q"], table["d"]
        tag = str(table["tag"][0]) if table.num_rows else ""
    q_codes, q_dict = _codes(query)
    d_codes, d_dict = _codes(doc)
    # A document listed twice for one query makes every metric ambiguous: refuse it.
    if _first_duplicate(q_codes * max(len(d_dict), 1) + d_codes).any():
        _parse_run_slowly(path)  # raises with the line number
    return RunFile(q_codes, q_dict, d_codes, d_dict, np.ascontiguousarray(scores, np.float64), tag)


def _parse_run_slowly(path: Path) -> tuple[pa.Array, pa.Array, NDArray[np.float64], str]:
    seen: dict[tuple[str, str], int] = {}
    queries: list[str] = []
    docs: list[str] = []
    scores: list[float] = []
    tag = ""
    for no, fields in _lines(path, "run"):
        if len(fields) != 6:
            raise InputError(
                f"expected 6 columns (qid Q0 docid rank score tag), found {len(fields)}", path, no
            )
        if not _is_float(fields[4]):
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
    return pa.array(queries, pa.string()), pa.array(docs, pa.string()), np.array(scores, np.float64), tag


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
    ``bm25-none-k10_k1=1.5``).
    """
    import re

    import pandas as pd  # writing is off the scorer's hot path

    tag = re.sub(r"\s+", "_", tag.strip()) or "pipeline"
    path = Path(path)
    valid = doc_idx >= 0
    q_rows, cols = np.nonzero(valid)
    docs = np.asarray(doc_ids, dtype=object)[doc_idx[valid]]
    qids = np.asarray(query_ids, dtype=object)[q_rows]
    frame = pd.DataFrame(
        {
            "qid": qids,
            "q0": "Q0",
            "docid": docs,
            "rank": cols + 1,
            "score": np.char.mod("%.9g", scores[valid].astype(np.float64)),
            "tag": tag,
        }
    )
    tmp = path.with_name(path.name + ".tmp")
    frame.to_csv(
        tmp, sep=" ", header=False, index=False, quoting=3, compression="gzip" if path.suffix == ".gz" else None
    )
    tmp.replace(path)

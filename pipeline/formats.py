"""TREC and BEIR interchange formats: qrels and run files, read strictly, written plainly.

Readers take the fast path (pyarrow's CSV reader) and, when anything looks wrong, re-read the
file line by line to report the first bad line by number: the common case pays nothing for
good error messages.

- qrels: TREC ``qid iter docid grade`` (whitespace separated) or a BEIR ``qrels/*.tsv``
  (header ``query-id<TAB>corpus-id<TAB>score``). Identical duplicate judgments are dropped
  and counted; duplicates whose grades disagree are an error.
- run: TREC ``qid Q0 docid rank score tag``. A document listed twice for one query is an
  error. ``.gz`` is accepted for both.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from numpy.typing import NDArray

from pipeline.errors import InputError

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


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _check_exists(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{what} file not found", path)
    if path.is_dir():
        raise InputError(f"{what} path is a folder, expected a file", path)
    try:
        with _open_text(path) as fh:
            for line in fh:
                if line.strip():
                    return path
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} file ({exc})", path) from None
    raise InputError(f"{what} file is empty", path)


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, whitespace-split fields) for every non-blank line."""
    try:
        with _open_text(path) as fh:
            for no, line in enumerate(fh, start=1):
                fields = line.split()
                if fields:
                    yield no, fields
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path) from None


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


def _first_line(path: Path) -> str:
    with _open_text(path) as fh:
        for line in fh:
            if line.strip():
                return line.rstrip("\r\n")
    return ""


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


def _first_duplicate(key: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Mask of rows whose key already occurred on an earlier row."""
    order = np.argsort(key, kind="stable")
    dup_sorted = np.zeros(len(key), np.bool_)
    dup_sorted[1:] = key[order][1:] == key[order][:-1]
    dup = np.zeros(len(key), np.bool_)
    dup[order] = dup_sorted
    return dup


# --------------------------------------------------------------------------- qrels


def read_qrels(path: str | Path) -> QrelsFile:
    """Read TREC or BEIR qrels; see the module docstring for the rules."""
    path = _check_exists(path, "qrels")
    first_line = _first_line(path)
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
        query, doc, grades = _parse_qrels_slowly(path, n_fields)
    else:
        query = table["q"].combine_chunks()
        doc = table["d"].combine_chunks()
        grades = table["g"].to_numpy().astype(np.int64)

    q_codes, _ = _codes(query)
    d_codes, d_dict = _codes(doc)
    dup = _first_duplicate(q_codes * max(len(d_dict), 1) + d_codes)
    n_dup = int(dup.sum())
    if n_dup:  # rare: let the line-by-line reader say whether the grades disagree
        _parse_qrels_slowly(path, n_fields)
        keep = pa.array(~dup)
        query, doc, grades = query.filter(keep), doc.filter(keep), grades[~dup]
    return QrelsFile(query, doc, grades, n_dup)


def _parse_qrels_slowly(path: Path, n_fields: int) -> tuple[pa.Array, pa.Array, NDArray[np.int64]]:
    """Line by line: any whitespace layout; the first bad line raises InputError."""
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    queries: list[str] = []
    docs: list[str] = []
    grades: list[int] = []
    lines = _lines(path)
    if n_fields == 3:
        next(lines, None)  # header, already checked
    for no, fields in lines:
        if len(fields) != n_fields:
            raise InputError(f"expected {n_fields} columns, found {len(fields)}", path, no)
        grade_text = fields[-1]
        if not _is_int(grade_text):
            raise InputError(f"grade {grade_text!r} is not an integer", path, no)
        qid, docid = fields[0], fields[1 if n_fields == 3 else 2]
        grade = int(grade_text)
        if (qid, docid) in seen and seen[(qid, docid)][1] != grade:
            prev_no, prev_grade = seen[(qid, docid)]
            raise InputError(
                f"query {qid!r} judges document {docid!r} twice with different grades "
                f"({prev_grade} on line {prev_no}, {grade} here)",
                path,
                no,
            )
        seen.setdefault((qid, docid), (no, grade))
        queries.append(qid)
        docs.append(docid)
        grades.append(grade)
    if not queries:
        raise InputError("qrels file has no judgments", path)
    return pa.array(queries, pa.string()), pa.array(docs, pa.string()), np.array(grades, np.int64)


# --------------------------------------------------------------------------- runs


def read_run(path: str | Path) -> RunFile:
    """Read a TREC run (``qid Q0 docid rank score tag``), rows in file order."""
    path = _check_exists(path, "run")
    first_line = _first_line(path)
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
    for no, fields in _lines(path):
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

    Scores are written with 9 significant digits so float32 values round-trip.
    """
    import pandas as pd  # writing is off the scorer's hot path

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

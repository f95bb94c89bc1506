"""TREC and BEIR interchange formats: qrels and run files, read strictly, written plainly.

Readers take the fast path (pandas' C parser) and, when anything looks wrong, re-read the
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
import pandas as pd
from numpy.typing import NDArray

from pipeline.errors import InputError

BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class QrelsFile:
    query_ids: NDArray[np.object_]  # str per judgment
    doc_ids: NDArray[np.object_]
    grades: NDArray[np.int64]
    n_duplicates: int = 0  # identical repeated judgments that were dropped


@dataclass(frozen=True)
class RunFile:
    """One row per line of a TREC run, in file order."""

    query_ids: NDArray[np.object_]
    doc_ids: NDArray[np.object_]
    scores: NDArray[np.float64]
    tag: str = ""


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
    with _open_text(path) as fh:
        for no, line in enumerate(fh, start=1):
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


def _first_fields(path: Path) -> list[str]:
    with _open_text(path) as fh:
        for line in fh:
            if line.strip():
                return line.rstrip("\r\n").split("\t") if "\t" in line else line.split()
    return []


# --------------------------------------------------------------------------- qrels


def read_qrels(path: str | Path) -> QrelsFile:
    """Read TREC or BEIR qrels; see the module docstring for the rules."""
    path = _check_exists(path, "qrels")
    first = [f.strip() for f in _first_fields(path)]
    if len(first) == 3:
        if tuple(f.lower() for f in first) != BEIR_QRELS_HEADER:
            raise InputError(
                "3-column qrels must be BEIR TSV with the header "
                f"'query-id<TAB>corpus-id<TAB>score', found {' | '.join(first)!r}",
                path,
                1,
            )
        frame = _read_table(path, n_cols=3, skip_header=True, cols=(0, 1, 2))
        n_fields, grade_col = 3, 2
    elif len(first) == 4:
        frame = _read_table(path, n_cols=4, skip_header=False, cols=(0, 2, 3))
        n_fields, grade_col = 4, 3
    else:
        raise InputError(
            f"qrels line has {len(first)} columns; expected 4 (TREC: qid iter docid grade) "
            "or 3 (BEIR TSV with header)",
            path,
            1,
        )
    if frame is None or not _grades_ok(frame[2]):
        _scan_qrels(path, n_fields, grade_col)  # raises with the line number
        raise AssertionError("unreachable")  # pragma: no cover
    query_ids = frame[0].to_numpy(dtype=object)
    doc_ids = frame[1].to_numpy(dtype=object)
    grades = frame[2].astype(np.int64).to_numpy()

    pair = pd.MultiIndex.from_arrays([query_ids, doc_ids])
    dup = pair.duplicated()
    n_dup = int(dup.sum())
    if n_dup:
        first_grade = pd.Series(grades, index=pair).groupby(level=[0, 1]).transform("first").to_numpy()
        if np.any(first_grade[dup] != grades[dup]):
            _scan_qrels(path, n_fields, grade_col)
        keep = ~dup
        query_ids, doc_ids, grades = query_ids[keep], doc_ids[keep], grades[keep]
    return QrelsFile(query_ids, doc_ids, grades, n_dup)


def _grades_ok(column: pd.Series) -> bool:
    try:
        column.astype(np.int64)  # rejects "1.5", "1.0", "x" (int() rules)
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def _read_table(path: Path, n_cols: int, skip_header: bool, cols: tuple[int, ...]) -> pd.DataFrame | None:
    """Fast read of a whitespace-separated table as strings; None if the shape is off."""
    try:
        frame = pd.read_csv(
            path,
            sep=r"\s+",
            header=None,
            names=list(range(n_cols)),  # no usecols: it would hide lines with extra fields
            dtype=str,
            skiprows=1 if skip_header else 0,
            engine="c",
            quoting=3,  # csv.QUOTE_NONE: ids may contain quotes
            na_filter=False,
            compression="infer",
            encoding="utf-8",
        )
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError):
        return None
    if (frame[n_cols - 1] == "").any():  # a short line: fewer fields than expected
        return None
    frame = frame[list(cols)]
    frame.columns = range(len(cols))
    return frame


def _scan_qrels(path: Path, n_fields: int, grade_col: int) -> None:
    """Slow path: find the first bad qrels line and raise InputError naming it."""
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    lines = _lines(path)
    if n_fields == 3:
        next(lines, None)  # header, already checked
    for no, fields in lines:
        if len(fields) != n_fields:
            raise InputError(f"expected {n_fields} columns, found {len(fields)}", path, no)
        grade_text = fields[grade_col]
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
    raise InputError("could not parse the qrels file", path)


# --------------------------------------------------------------------------- runs


def read_run(path: str | Path) -> RunFile:
    """Read a TREC run (``qid Q0 docid rank score tag``), rows in file order."""
    path = _check_exists(path, "run")
    first = _first_fields(path)
    if len(first) != 6:
        _scan_run(path)
    frame = _read_table(path, n_cols=6, skip_header=False, cols=(0, 2, 4, 5))
    if frame is None:
        _scan_run(path)
        raise AssertionError("unreachable")  # pragma: no cover
    try:
        scores = frame[2].astype(np.float64).to_numpy()
    except ValueError:
        scores = None
    if scores is None or not np.isfinite(scores).all():
        _scan_run(path)
    query_ids = frame[0].to_numpy(dtype=object)
    doc_ids = frame[1].to_numpy(dtype=object)
    # A document listed twice for one query makes every metric ambiguous: refuse it.
    codes_q, _ = pd.factorize(query_ids)
    codes_d, uniq_d = pd.factorize(doc_ids)
    key = codes_q.astype(np.int64) * max(len(uniq_d), 1) + codes_d
    if len(np.unique(key)) != len(key):
        _scan_run(path)
    tag = str(frame[3].iloc[0]) if len(frame) else ""
    return RunFile(query_ids, doc_ids, scores, tag)


def _scan_run(path: Path) -> None:
    seen: dict[tuple[str, str], int] = {}
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
    raise InputError("could not parse the run file", path)


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
    path = Path(path)
    n_q, depth = doc_idx.shape
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

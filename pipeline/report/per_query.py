"""Reading a job's ``per_query.csv`` for a comparison: the evaluated queries' scores.

A query counts when its ``evaluated`` column is true (else, in an older table, when
``n_relevant`` > 0; else every row). Errors name the file (or the MLflow artifact it came
from) and the line: a missing column, a duplicate query id, a value that is not a finite
number.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Sequence

from pipeline.errors import InputError
from pipeline.metrics import parse_key


def read_per_query(path: Path, metrics: Sequence[str], source: str | None = None) -> dict[str, dict[str, float]]:
    """``{metric: {query_id: value}}`` of the evaluated queries of a ``per_query.csv``.

    Errors name ``source`` (default: the file) and the line."""
    path = Path(path)
    where = source or str(path)
    header = _header(path)
    wanted = [c for c in ("query_id", "evaluated", "n_relevant", *metrics) if c in header] if header else None
    table = _read_columns(path, wanted, where)
    columns = set(header if wanted is not None else table.column_names)
    _check_columns(columns, metrics, where)
    ids = [str(q) for q in table.column("query_id").to_pylist()]
    keep = _evaluated(table, columns, len(ids))
    _check_unique(ids, where)
    return {metric: _scores(metric, ids, table.column(metric).to_pylist(), keep, where) for metric in metrics}


def _header(path: Path) -> list[str] | None:
    """The column names of the file's first line; None when it cannot be read (pyarrow's
    read then says what is wrong with the file)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            return next(csv.reader(fh), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def _read_columns(path: Path, wanted: list[str] | None, where: str) -> Any:
    """The table with only the ``wanted`` columns converted (a job's table has a column per
    metric and K: converting the few used ones is most of the saving); None: every column."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    try:
        return pa_csv.read_csv(path, convert_options=pa_csv.ConvertOptions(
            column_types={"query_id": pa.string()}, strings_can_be_null=False, include_columns=wanted))
    except FileNotFoundError:
        raise InputError("per-query table not found", where) from None
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(f"unreadable per-query table ({exc})", where) from None


def _check_columns(columns: set[str], metrics: Sequence[str], where: str) -> None:
    """A query id column and every metric; a missing metric's error lists the K the table has."""
    if "query_id" not in columns:
        raise InputError("no query_id column: not a per_query.csv", where, 1)
    absent = [m for m in metrics if m not in columns]
    if absent:
        family, _ = parse_key(absent[0])
        have = sorted((c for c in columns if c.startswith(f"{family}_at_")), key=lambda c: int(c.rsplit("_", 1)[1]))
        span = f" (it has {have[0]} .. {have[-1]})" if have else ""
        raise InputError(f"no column {absent[0]}{span}", where, 1)


def _check_unique(ids: Sequence[str], where: str) -> None:
    seen: dict[str, int] = {}
    for row, qid in enumerate(ids):
        if qid in seen:
            raise InputError(f"query {qid!r} appears twice (first on line {seen[qid] + 2})", where, row + 2)
        seen[qid] = row


def _evaluated(table: Any, columns: set[str], n_rows: int) -> list[bool]:
    """Which rows count: ``evaluated``, else ``n_relevant`` > 0, else all."""
    if "evaluated" in columns:
        raw = table.column("evaluated").to_pylist()
        return [v is True or str(v).strip().lower() in ("true", "1") for v in raw]
    if "n_relevant" in columns:
        return [float(v or 0) > 0 for v in table.column("n_relevant").to_pylist()]
    return [True] * n_rows


def _scores(metric: str, ids: Sequence[str], values: Sequence[Any], keep: Sequence[bool],
            where: str) -> dict[str, float]:
    """``{query_id: value}`` of the rows that count; each value a finite number."""
    scores: dict[str, float] = {}
    for row, (qid, value, counts) in enumerate(zip(ids, values, keep)):
        if not counts:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise InputError(f"{metric} of query {qid!r} is not a finite number ({value!r})", where, row + 2)
        scores[qid] = number
    return scores

"""Qrels and runs held in memory: ``{qid: {docid: value}}`` dicts and pandas DataFrames,
read into the same ``QrelsFile`` / ``RunFile`` a file gives, with the file readers' rules
(``pipeline.io.formats``): ids are non-empty strings (integers are taken as their decimal
text), grades integers that fit 64 bits, scores finite numbers; a judgment repeated with the
same grade is dropped, with another grade an error; a document listed twice for one query is
an error. DataFrame columns: PyTerrier's ``qid``, ``docno``, ``label`` / ``score`` (or
ir_measures' ``query_id``, ``doc_id``, ``relevance`` / ``score``).

Order: a dict's insertion order (query by query, then document by document) or a
DataFrame's row order is the run's "file order", which the tie rule ``file_order`` keeps
for tied scores. Errors name the dict or DataFrame, the entry (1-based) or the query and
document at fault.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Sequence, Union

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.formats import QrelsFile, RunFile, dedupe_judgments, read_qrels, read_run
from pipeline.io.formats.arrow import dictionary_codes, first_occurrence, has_duplicate

#: What qrels and a run may be: a file, ``{qid: {docid: value}}`` or a pandas DataFrame.
Source = Union[str, os.PathLike, Mapping[Any, Mapping[Any, Any]], Any]
#: DataFrame columns: PyTerrier's names first, then ir_measures'.
COLUMNS = {"qid": ("qid", "query_id"), "docno": ("docno", "doc_id"), "score": ("score",),
           "label": ("label", "relevance")}


def is_path(value: Any) -> bool:
    """Whether ``value`` names a file (a str or a path), not data."""
    return isinstance(value, (str, os.PathLike))


def where(source: Any, what: str) -> str:
    """How errors name ``source``: the file, or "run dict" / "qrels DataFrame"."""
    return str(source) if is_path(source) else f"{what} {'dict' if isinstance(source, Mapping) else 'DataFrame'}"


def _frame_column(frame: Any, name: str, what: str) -> Any:
    for column in COLUMNS[name]:
        if column in frame.columns:
            return frame[column]
    names = " or ".join(repr(c) for c in COLUMNS[name])
    raise InputError(f"no {names} column (PyTerrier: qid, docno, {'label' if what == 'qrels' else 'score'}); "
                     f"it has {', '.join(map(str, frame.columns)) or 'no columns'}", f"{what} DataFrame")


def _ids(values: Sequence[Any], kind: str, where: str) -> pa.Array:
    """Ids as strings: str, or int (not bool); anything else is an InputError naming the row."""
    out = []
    for row, v in enumerate(values):
        if isinstance(v, str) and v:
            out.append(v)
        elif isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            out.append(str(int(v)))
        else:
            raise InputError(f"{kind} id {v!r} (entry {row + 1}) is not a non-empty string or an integer", where)
    return pa.array(out, pa.string())


def _numbers(values: Sequence[Any], kind: str, where: str, keys: tuple[Sequence[Any], Sequence[Any]],
             integer: bool) -> NDArray:
    """Finite numbers (integers for grades); InputError naming the query and document."""
    for row, v in enumerate(values):
        ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
        ok = ok and math.isfinite(v) and (not integer or float(v).is_integer())
        if ok and integer and not -(2**63) <= int(v) < 2**63:
            ok = False
        if not ok:
            wanted = "an integer" if integer else "a finite number"
            raise InputError(f"{kind} {v!r} of query {keys[0][row]!r}, document {keys[1][row]!r} is not {wanted}",
                             where)
    return np.array([int(v) for v in values] if integer else values, dtype=np.int64 if integer else np.float64)


def _rows(source: Any, value: str, what: str) -> tuple[list[Any], list[Any], list[Any], str]:
    """(query ids, document ids, values, where) of a dict or DataFrame, in its order."""
    if isinstance(source, Mapping):
        where = f"{what} dict"
        qids, dids, vals = [], [], []
        for qid, docs in source.items():
            if not isinstance(docs, Mapping):
                raise InputError(f"query {qid!r} maps to {type(docs).__name__}, not a {{docid: {value}}} dict", where)
            for did, v in docs.items():
                qids.append(qid)
                dids.append(did)
                vals.append(v)
        return qids, dids, vals, where
    if hasattr(source, "columns") and hasattr(source, "iloc"):
        where = f"{what} DataFrame"
        columns = [_frame_column(source, name, what) for name in ("qid", "docno", value)]
        q, d, v = (c.tolist() for c in columns)
        return q, d, v, where
    raise InputError(f"{what} must be a path, a {{qid: {{docid: {value}}}}} dict or a pandas DataFrame, "
                     f"got {type(source).__name__}")


def read_qrels_source(qrels: Source) -> QrelsFile:
    """Judgments from a file, a ``{qid: {docid: grade}}`` dict or a DataFrame (``qid``,
    ``docno``, ``label``), with the rules of ``pipeline.io.formats``: integer grades, the same
    judgment twice dropped, twice with different grades an error."""
    if is_path(qrels):
        return read_qrels(qrels)
    qids, dids, grades, where = _rows(qrels, "label", "qrels")
    if not qids:
        raise InputError("qrels has no judgments", where)
    values = _numbers(grades, "grade", where, (qids, dids), integer=True)
    query, doc = _ids(qids, "query", where), _ids(dids, "document", where)
    return dedupe_judgments(query, doc, values, where, np.arange(1, len(qids) + 1), position_name="in entry")


def read_run_source(run: Source, tag: str = "") -> RunFile:
    """A run from a file, a ``{qid: {docid: score}}`` dict or a DataFrame (``qid``, ``docno``,
    ``score``), rows in its order (the "file order" of the tie rules); a document listed
    twice for one query is an error, as in a run file."""
    if is_path(run):
        return read_run(run)
    qids, dids, scores, where = _rows(run, "score", "run")
    if not qids:
        raise InputError("run is empty", where)
    values = _numbers(scores, "score", where, (qids, dids), integer=False)
    q_codes, q_dict = dictionary_codes(_ids(qids, "query", where))
    d_codes, d_dict = dictionary_codes(_ids(dids, "document", where))
    key = q_codes * max(len(d_dict), 1) + d_codes
    if has_duplicate(key):
        first = first_occurrence(key)
        row = int(np.flatnonzero(first != np.arange(len(key)))[0])
        raise InputError(f"document {dids[row]!r} is listed twice for query {qids[row]!r} (entries "
                         f"{int(first[row]) + 1} and {row + 1})", where)
    return RunFile(q_codes, q_dict, d_codes, d_dict, values, tag)

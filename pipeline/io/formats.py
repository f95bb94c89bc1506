"""TREC and BEIR interchange formats: qrels and run files, read strictly, written plainly.

Readers take the fast path (pyarrow's CSV reader) and, when anything looks wrong, re-read the
file line by line (``pipeline.io.readers``) to report the first bad line by number: the common
case pays nothing for good error messages. Both paths drop a UTF-8 byte order mark and split
lines on ``\n``, ``\r\n`` and a bare ``\r``, so they give the same answer for the same bytes.

- qrels: TREC ``qid iter docid grade`` (whitespace separated) or a BEIR ``qrels/*.tsv``
  (header ``query-id<TAB>corpus-id<TAB>score``). Identical duplicate judgments are dropped
  and counted; duplicates whose grades disagree are an error (:func:`dedupe_judgments`, the
  one rule for judgments from any source).
- run: TREC ``qid Q0 docid rank score tag``. A document listed twice for one query is an
  error. ``.gz`` is accepted for both, and ``-`` (standard input) or a pipe for either.

Fields. A line is split on tabs when it holds exactly the expected number of tab-separated
fields (6 for a run, 4 for TREC qrels, 3 for BEIR qrels), each field then stripped of
surrounding whitespace: so ids may contain spaces in tab-separated files (BEIR ids often
do). Any other line is split on runs of whitespace (Python's ``str.split()``). Ids are
never empty. A grade is an ASCII integer (``[+-]?[0-9]+``) that fits 64 bits; a score is an
ASCII decimal number (``1``, ``-0.5``, ``.5``, ``1e-3``) that is finite as a 64-bit float.

Writing (:func:`write_run`): columns are separated by one space, or by one tab when some
query or document id contains whitespace, so that every id reads back as it was written
(by this module, and by any reader that splits on tabs). An id that cannot round-trip is
refused with :class:`InputError` naming it: an empty id, one with a tab, line break or
leading/trailing whitespace, or one with a lone surrogate (``"\\ud800"``, which JSON allows
and UTF-8 cannot encode). The file is written to a temporary name and renamed: a failed
write leaves nothing behind.

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
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.readers import buffered, first_text_line, require_file, text_lines

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
        return to_numpy(self.query)

    @property
    def doc_ids(self) -> NDArray[np.object_]:
        return to_numpy(self.doc)


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


_FLOAT_TYPES = {"halffloat": np.float16, "float": np.float32, "double": np.float64}


def to_numpy(values: pa.Array | pa.ChunkedArray, fill: int | float | None = None) -> NDArray:
    """An integer, float or string arrow array as numpy (strings: an object array); nulls of
    a number array become ``fill`` when it is given.

    pyarrow's own ``to_numpy``, ``fill_null`` and ``pa.array(ndarray)`` import pandas on first
    use (0.5-0.8 s of every ``python -m pipeline.score``): numbers are read from the data
    buffer instead (a copy), strings through Python objects; other types take pyarrow's way."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    kind = values.type
    n, start = len(values), values.offset
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        dtype = np.dtype(_FLOAT_TYPES.get(str(kind), str(kind)))
        if not n:
            return np.empty(0, dtype)
        validity, data = values.buffers()
        out = np.frombuffer(data, dtype, n, start * dtype.itemsize).copy()
        if values.null_count and fill is not None:
            valid = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[start : start + n]
            out[valid == 0] = fill
            return out
        if not values.null_count:
            return out
    elif values.null_count == 0:
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            out = np.empty(len(values), dtype=object)
            out[:] = values.to_pylist()
            return out
    return values.to_numpy(zero_copy_only=False)


def from_numpy(values: NDArray[np.integer] | NDArray[np.floating]) -> pa.Array:
    """A 1-d integer or float numpy array as arrow (a copy), without pandas (see to_numpy)."""
    values = np.ascontiguousarray(values)
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values.copy())])


def arrow_array(values: Sequence[Any] | NDArray, type: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, type)`` without pandas (see :func:`to_numpy`), for what tables hold:
    a numpy array of numbers or booleans, or a sequence of str, int, float or bool (None:
    null); an arrow array is returned as it is (cast to ``type``). Anything else takes
    ``pa.array``."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if type is None or values.type.equals(type) else values.cast(type)
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "biuf":
        if values.dtype.kind == "b":
            bits = np.packbits(values, bitorder="little")
            out = pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
        else:
            out = from_numpy(values)
        return out if type is None or out.type.equals(type) else out.cast(type)
    items = values.tolist() if isinstance(values, np.ndarray) and values.ndim == 1 else list(values)
    kinds = {_python_type(v) for v in items if v is not None}
    valid = np.array([v is not None for v in items], np.bool_)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    n_null = int(len(items) - valid.sum())
    if not kinds:  # empty, or only None
        return pa.nulls(len(items), pa.null() if type is None else type)
    if kinds <= {str} and (type is None or type.equals(pa.string())):
        encoded = [v.encode("utf-8") if v is not None else b"" for v in items]
        offsets = np.zeros(len(items) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        if offsets[-1] < 2**31:
            return pa.Array.from_buffers(pa.string(), len(items), [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                                    pa.py_buffer(b"".join(encoded))], n_null)
    elif kinds == {bool} and (type is None or type.equals(pa.bool_())):
        bits = np.packbits(np.array([bool(v) for v in items], np.bool_), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(items), [validity, pa.py_buffer(bits)], n_null)
    elif kinds and kinds <= {int, float}:
        dtype = np.float64 if float in kinds else np.int64
        filled = np.array([v if v is not None else 0 for v in items], dtype)
        out = pa.Array.from_buffers(pa.from_numpy_dtype(filled.dtype), len(items),
                                    [validity, pa.py_buffer(filled)], n_null)
        return out if type is None or out.type.equals(type) else out.cast(type)
    return pa.array(items, type)


def _python_type(value: Any) -> type:
    """``type(value)``, numpy scalars as the Python type they stand for."""
    if isinstance(value, np.generic):
        return _python_type(value.item())
    return value.__class__


def _check_exists(path: str | Path, what: str) -> tuple[Path, str]:
    """The path and its first non-blank line; InputError when missing, unreadable or empty."""
    path = require_file(path, what)
    first = first_text_line(path, what, universal_newlines=True)
    if first is None:
        raise InputError(f"{what} file is empty", path)
    return path, first


def split_fields(line: str, n_fields: int | None = None) -> list[str]:
    """The fields of one line: tab-separated when it holds exactly ``n_fields`` of them (each
    stripped), else split on runs of whitespace (the module docstring's rule)."""
    if n_fields is not None and "\t" in line:
        fields = line.split("\t")
        if len(fields) == n_fields:
            return [f.strip() for f in fields]
    return line.split()


def _lines(path: Path, what: str, n_fields: int | None = None) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, fields) for every non-blank line (see :func:`split_fields`)."""
    for no, line in text_lines(path, what, universal_newlines=True):
        fields = split_fields(line, n_fields)
        if fields:
            yield no, fields


_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_INT64 = (-(2**63), 2**63 - 1)
#: Every character ``str.split()`` splits on (the fast reader must not accept ids holding one):
#: the characters with ``str.isspace()``, written out (scanning all of Unicode at import took
#: 0.5 s of every command); tests/pipeline/test_readers.py checks the list against Python's.
_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
               "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WS_CLASS = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in _WHITESPACE) + "]"


def _is_int(text: str) -> bool:
    return _INT.fullmatch(text) is not None


def _int_problem(text: str) -> str | None:
    """Why ``text`` is not a grade (None when it is one)."""
    if not _is_int(text):
        return f"grade {text!r} is not an integer"
    if not _INT64[0] <= int(text) <= _INT64[1]:
        return f"grade {text} does not fit a 64-bit integer"
    return None


def _is_float(text: str) -> bool:
    if _FLOAT.fullmatch(text) is None:
        return False
    return bool(np.isfinite(float(text)))


def _clean_ids(array: pa.Array | pa.ChunkedArray, delimiter: str) -> bool:
    """True when the fast reader's ids are what the line-by-line rule would give: non-empty,
    and without whitespace (space-separated) or surrounding whitespace (tab-separated)."""
    values = pc.unique(array)
    if len(values) == 0:
        return True
    pattern = _WS_CLASS if delimiter == " " else f"^{_WS_CLASS}|{_WS_CLASS}$"
    # "^$": the empty id, in the regex (a Python scalar operand would make pyarrow import pandas)
    return not pc.any(pc.match_substring_regex(values, "^$|" + pattern)).as_py()


def _read_fast(path: Path, names: list[str], types: dict[str, pa.DataType], delimiter: str) -> pa.Table | None:
    """pyarrow's multithreaded CSV reader; None when the file is not in the plain layout
    (runs of spaces, trailing blanks, bad values...): the caller then parses line by line."""
    data = buffered(path)
    try:
        return pa_csv.read_csv(
            path if data is None else pa.BufferReader(data),
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
    """(code of each value, the distinct values in order of first occurrence)."""
    encoded = array if pa.types.is_dictionary(array.type) else pc.dictionary_encode(array)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.unify_dictionaries().combine_chunks() if encoded.num_chunks else encoded.combine_chunks()
    return to_numpy(encoded.indices).astype(np.int64), encoded.dictionary


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


def _has_duplicate(key: NDArray[np.int64]) -> bool:
    """Whether some key occurs twice: one unstable sort, 3-4x faster than
    :func:`_first_occurrence`, which only the files that have duplicates then pay."""
    ordered = np.sort(key)
    return bool((ordered[1:] == ordered[:-1]).any())


# --------------------------------------------------------------------------- qrels


def read_qrels(path: str | Path) -> QrelsFile:
    """Read TREC or BEIR qrels; see the module docstring for the rules."""
    path, first_line = _check_exists(path, "qrels")
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
    table = _read_fast(path, names, {"q": pa.string(), "d": pa.string(), "g": pa.string()}, delimiter)
    if table is not None and n_fields == 3:
        table = table.slice(1)  # the header line
    grades = None if table is None else _fast_grades(table["g"])
    if table is None or grades is None or not _clean_ids(table["q"], delimiter) or not _clean_ids(table["d"], delimiter):
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
    q_codes, _ = _codes(query)
    d_codes, d_dict = _codes(doc)
    key = q_codes * max(len(d_dict), 1) + d_codes
    if not _has_duplicate(key):
        return QrelsFile(query, doc, grades, 0)
    first = _first_occurrence(key)
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
    lines = _lines(path, "qrels", n_fields)
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
        bad = _int_problem(grade_text)
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
    for no, fields in _lines(path, "qrels", len(_first_fields(path))):
        if len(fields) >= 3 and fields[0] == qid and fields[-2] == did:
            return no
    return None


def grade_line(path: Path, at_least: int) -> int | None:
    """Line of the first judgment whose grade is >= ``at_least`` (error paths only)."""
    for no, fields in _lines(path, "qrels", len(_first_fields(path))):
        if fields and _is_int(fields[-1]) and int(fields[-1]) >= at_least:
            return no
    return None


def _first_fields(path: Path) -> list[str]:
    first = first_text_line(path, "qrels", universal_newlines=True) or ""
    fields = split_fields(first, 4)
    return fields if len(fields) == 4 else split_fields(first, 3)


# --------------------------------------------------------------------------- runs


def read_run(path: str | Path) -> RunFile:
    """Read a TREC run (``qid Q0 docid rank score tag``), rows in file order."""
    path, first_line = _check_exists(path, "run")
    delimiter = "\t" if "\t" in first_line else " "
    names = ["q", "q0", "d", "rank", "s", "tag"]
    first = split_fields(first_line, 6)
    # Ids are dictionary-encoded while parsing (one hash pass, no million-string column);
    # the tag is the first line's (the fast reader still checks that every line has 6 fields).
    ids = pa.dictionary(pa.int32(), pa.string())
    table = None
    if len(first) == 6:  # else e.g. a 7-field first line that the fast reader would take as 6
        table = _read_fast(path, names, {"q": ids, "d": ids, "s": pa.float64()}, delimiter)
    scores = None
    if table is not None:
        (q_codes, q_dict), (d_codes, d_dict) = _codes(table["q"]), _codes(table["d"])
        if _clean_ids(q_dict, delimiter) and _clean_ids(d_dict, delimiter):
            scores = to_numpy(table["s"])  # else ids the line-by-line rule splits or strips differently
    if scores is None or not np.isfinite(scores).all():
        query, doc, scores, tag = _parse_run_slowly(path)
        q_codes, q_dict = _codes(query)
        d_codes, d_dict = _codes(doc)
    else:
        tag = first[5]
    # A document listed twice for one query makes every metric ambiguous: refuse it.
    if _has_duplicate(q_codes * max(len(d_dict), 1) + d_codes):
        _parse_run_slowly(path)  # raises with the line number
    return RunFile(q_codes, q_dict, d_codes, d_dict, np.ascontiguousarray(scores, np.float64), tag)


def _parse_run_slowly(path: Path) -> tuple[pa.Array, pa.Array, NDArray[np.float64], str]:
    seen: dict[tuple[str, str], int] = {}
    queries: list[str] = []
    docs: list[str] = []
    scores: list[float] = []
    tag = ""
    for no, fields in _lines(path, "run", 6):
        if len(fields) != 6:
            raise InputError(
                f"expected 6 columns (qid Q0 docid rank score tag), found {len(fields)}", path, no
            )
        if not (fields[0] and fields[2]):
            raise InputError("empty query or document id (two tabs in a row?)", path, no)
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


def _check_writable_id(value: str, what: str, path: Path) -> None:
    """InputError unless ``value`` reads back unchanged from a (tab-separated) run file."""
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
    whitespace; an id that cannot round-trip is an InputError (the module docstring). The
    file is written atomically (``.gz``: gzip).
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
            _check_writable_id(value, what, path)
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

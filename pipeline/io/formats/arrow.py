"""pyarrow without pandas, and what the qrels and run readers share: fields, values, the fast
reader (pyarrow's CSV reader) and the checks (:func:`clean_ids`, ...) that tell when its answer
may differ from the line-by-line rule (:func:`split_fields`, :func:`field_lines`).

pyarrow's own ``to_numpy``, ``fill_null`` and ``pa.array(ndarray)`` import pandas on first
use, a cost every ``python -m pipeline.cli score`` would pay for nothing: numbers are read from
an array's data buffer instead, strings go through Python objects, and anything else takes
pyarrow's own way. ``tests/test_lazy_imports.py`` checks that the results are pyarrow's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.readers import buffered, first_text_line, require_file, text_lines

_FLOAT_TYPES = {"halffloat": np.float16, "float": np.float32, "double": np.float64}


def to_numpy(values: pa.Array | pa.ChunkedArray, fill: int | float | None = None) -> NDArray:
    """An integer, float or string arrow array as numpy (strings: an object array); nulls of
    a number array become ``fill`` when it is given. Numbers are copied from the data buffer."""
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


_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_INT64 = (-(2**63), 2**63 - 1)
#: Every character ``str.split()`` splits on (the fast reader must not accept ids holding one):
#: the characters with ``str.isspace()``, written out because finding them by scanning all of
#: Unicode would be paid at the import of every command; tests/pipeline/test_readers.py checks
#: the list against Python's.
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
              "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WS_CLASS = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE) + "]"


def first_line_of(path: str | Path, what: str) -> tuple[Path, str]:
    """The path and its first non-blank line; InputError when missing, unreadable or empty."""
    path = require_file(path, what)
    first = first_text_line(path, what, universal_newlines=True)
    if first is None:
        raise InputError(f"{what} file is empty", path)
    return path, first


def split_fields(line: str, n_fields: int | None = None) -> list[str]:
    """The fields of one line: tab-separated when it holds exactly ``n_fields`` of them (each
    stripped), else split on runs of whitespace (the rule of ``pipeline.io.formats``)."""
    if n_fields is not None and "\t" in line:
        fields = line.split("\t")
        if len(fields) == n_fields:
            return [f.strip() for f in fields]
    return line.split()


def field_lines(path: Path, what: str, n_fields: int | None = None) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, fields) for every non-blank line (see :func:`split_fields`)."""
    for no, line in text_lines(path, what, universal_newlines=True):
        fields = split_fields(line, n_fields)
        if fields:
            yield no, fields


def is_int(text: str) -> bool:
    """Whether ``text`` is an ASCII integer (``[+-]?[0-9]+``), of any size."""
    return _INT.fullmatch(text) is not None


def grade_problem(text: str) -> str | None:
    """Why ``text`` is not a grade (None when it is one: an integer that fits 64 bits)."""
    if not is_int(text):
        return f"grade {text!r} is not an integer"
    if not _INT64[0] <= int(text) <= _INT64[1]:
        return f"grade {text} does not fit a 64-bit integer"
    return None


def is_float(text: str) -> bool:
    """Whether ``text`` is an ASCII decimal number that is finite as a 64-bit float."""
    return _FLOAT.fullmatch(text) is not None and bool(np.isfinite(float(text)))


def clean_ids(array: pa.Array | pa.ChunkedArray, delimiter: str) -> bool:
    """True when the fast reader's ids are what the line-by-line rule would give: non-empty,
    and without whitespace (space-separated) or surrounding whitespace (tab-separated)."""
    values = pc.unique(array)
    if len(values) == 0:
        return True
    pattern = _WS_CLASS if delimiter == " " else f"^{_WS_CLASS}|{_WS_CLASS}$"
    # "^$": the empty id, in the regex (a Python scalar operand would make pyarrow import pandas)
    return not pc.any(pc.match_substring_regex(values, "^$|" + pattern)).as_py()


def read_fast(path: Path, names: list[str], types: dict[str, pa.DataType], delimiter: str) -> pa.Table | None:
    """pyarrow's multithreaded CSV reader; None when the file is not in the plain layout
    (runs of spaces, trailing blanks, bad values...): the caller then parses line by line."""
    data = buffered(path)
    try:
        return pa_csv.read_csv(
            path if data is None else pa.BufferReader(data), read_options=pa_csv.ReadOptions(column_names=names),
            parse_options=pa_csv.ParseOptions(delimiter=delimiter, quote_char=False, double_quote=False,
                                              escape_char=False, ignore_empty_lines=True),
            convert_options=pa_csv.ConvertOptions(column_types=types, null_values=[], strings_can_be_null=False,
                                                  include_columns=list(types)))
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError, OSError, EOFError):
        return None


def dictionary_codes(array: pa.Array | pa.ChunkedArray) -> tuple[NDArray[np.int64], pa.Array]:
    """(code of each value, the distinct values in order of first occurrence)."""
    encoded = array if pa.types.is_dictionary(array.type) else pc.dictionary_encode(array)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.unify_dictionaries().combine_chunks() if encoded.num_chunks else encoded.combine_chunks()
    return to_numpy(encoded.indices).astype(np.int64), encoded.dictionary


def first_occurrence(key: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each row, the first row with the same key (itself when the key is new)."""
    n = len(key)
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    starts = np.ones(n, np.bool_)
    starts[1:] = sorted_key[1:] != sorted_key[:-1]
    first = np.empty(n, np.int64)
    first[order] = order[np.maximum.accumulate(np.where(starts, np.arange(n), 0))] if n else order
    return first


def has_duplicate(key: NDArray[np.int64]) -> bool:
    """Whether some key occurs twice: one unstable sort, cheaper than the stable sort of
    :func:`first_occurrence`, which only the files that have duplicates then pay."""
    ordered = np.sort(key)
    return bool((ordered[1:] == ordered[:-1]).any())

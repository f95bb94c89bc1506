"""Bridges between pyarrow and numpy that never import pandas.

pyarrow's own ``to_numpy``, ``fill_null`` and ``pa.array(ndarray)`` import pandas on first
use, a cost every ``python -m pipeline.score`` would pay for nothing: numbers are read from
an array's data buffer instead, strings go through Python objects, and anything else takes
pyarrow's own way. ``tests/test_lazy_imports.py`` checks that the results are pyarrow's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

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

"""Cache keys: one canonical JSON spelling per key, and the digests that name entries."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence, Set
from typing import Any

import numpy as np


def canonical(obj: Any) -> Any:
    """A JSON-able copy of ``obj`` with one spelling per value (see :func:`digest`); what a
    cache entry records as its key, and compares with the key asked for."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        if not math.isfinite(value):
            return repr(value)  # JSON has no inf/nan; keep them distinct from each other
        return value
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, Mapping):  # also OmegaConf DictConfig
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"cache keys need string dict keys, got {k!r}")
            out[k] = canonical(v)
        return out
    if isinstance(obj, Set):
        return sorted(canonical(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return canonical(obj.tolist())
    if isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):  # also ListConfig
        return [canonical(v) for v in obj]
    raise TypeError(f"cannot use a {type(obj).__name__} in a cache key: {obj!r}")


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys: equal keys give equal text."""
    return json.dumps(canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(obj: Any) -> str:
    """sha256 hex of the canonical JSON of ``obj``.

    Dicts (any ``Mapping``, so OmegaConf configs too) are sorted by key; tuples and lists
    are the same; numpy scalars count as Python numbers; paths as strings. ``1`` and ``1.0``
    differ (retrievers store floats as floats). Anything else raises ``TypeError`` rather
    than being hashed by its ``repr``.
    """
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def texts_digest(ids: Sequence[str], texts: Sequence[str]) -> str:
    """sha256 of (id, text) pairs in order: changes when any id, text or the order changes."""
    h = hashlib.sha256()
    for i, t in zip(ids, texts, strict=True):
        for part in (str(i), str(t)):
            data = part.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))  # length-prefixed: no ambiguity
            h.update(data)
    return h.hexdigest()

"""Arrays cached by key: ``arrays/<digest>.npy`` and its record ``arrays/<digest>.json``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.io.cache.keys import canonical, digest
from pipeline.io.cache.store import (DamagedEntry, LegacyEntry, all_finite, check_shape, content_hash, discard,
                                     load_verified, read_meta, save_array, save_json, stored_hash, write_entry)

log = logging.getLogger(__name__)

ARRAYS = "arrays"


def load_or_compute_array(
    cache_dir: str | Path | None,
    key: Mapping[str, Any],
    compute: Callable[[], NDArray],
    *,
    shape: Sequence[int | None] | None = None,
    finite: bool = False,
) -> tuple[NDArray, bool]:
    """The array cached under ``key``, or ``compute()`` stored there. Returns (array, hit).

    ``shape``: the shape the caller expects, ``None`` for a dimension it does not know
    (e.g. ``(n_texts, None)``); ``finite``: every value must be finite. A cached array is
    returned only when its content hash, dtype and these match; a computed one that fails
    them is returned but not cached. ``cache_dir=None`` disables caching.
    """
    if cache_dir is None:
        return np.asarray(compute()), False
    name = digest(key)
    folder = Path(cache_dir) / ARRAYS
    meta, data = folder / f"{name}.json", folder / f"{name}.npy"
    if meta.exists():
        try:
            stored = read_meta(meta)
            if stored.get("key") == canonical(key):
                expected_hash = stored_hash(stored, "array")
                array = load_verified(data, expected_hash, str(stored.get("dtype")))
                check_shape(data, array.shape, shape)
                if finite and not all_finite(array):
                    raise DamagedEntry(data, "non-finite values")
                log.debug("cache hit %s", data)
                return array, True
            log.warning("cache entry %s holds another key (digest collision?); recomputing", meta)
        except LegacyEntry as why:
            log.info("cache entry %s predates verified caches (%s); recomputing", meta, why)
            discard(meta)
        except DamagedEntry as bad:
            log.warning("cache file %s is unreadable or damaged: %s; discarding and recomputing", bad.path, bad)
            discard(meta)
    array = np.ascontiguousarray(compute())
    try:
        check_shape(data, array.shape, shape)
        if finite and not all_finite(array):
            raise DamagedEntry(data, "non-finite values")
    except DamagedEntry as bad:
        log.warning("computed array for %s not cached: %s", data, bad)
        return array, False
    record = {"key": key, "shape": list(array.shape), "dtype": str(array.dtype), "hash": {"array": content_hash(array)}}
    if write_entry(cache_dir, [(data, lambda: save_array(data, array)), (meta, lambda: save_json(meta, record))]):
        log.debug("cache write %s", data)
    return array, False

"""On-disk caches in safe formats, keyed by a digest of everything that shaped them.

A leaf module (no Hydra, no MLflow): the app passes a directory (``outputs/cache``), a key
(a JSON-able dict) and a function that computes the value when the cache has no entry.

- Arrays are stored as ``.npy`` (``allow_pickle=False``) and keys as ``.json``; nothing is
  ever pickled.
- Every file is written to a temporary name in the same folder and renamed
  (``os.replace``), so a reader never sees half a file and concurrent writers of the same
  entry (a parallel Hydra launcher) simply let the last one win. The key's JSON file is
  written last: it is the entry's commit marker.
- A damaged entry is logged and recomputed, never trusted.

Layout under ``cache_dir``::

    arrays/<digest>.npy  arrays/<digest>.json                       load_or_compute_array
    rankings/<base>-d<depth>.doc_idx.npy  .scores.npy  .json        load_or_compute_ranking_arrays

where ``digest`` is the sha256 of the key's canonical JSON and ``base`` the digest of the
key without its ``depth``, so a deeper ranking can serve a shallower request.

Only plain arrays go in and out: ``retrievers.base.load_or_compute_ranking`` wraps the
ranking pair in its ``Ranking`` (this module does not import ``retrievers``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

log = logging.getLogger(__name__)

ARRAYS = "arrays"
RANKINGS = "rankings"


# --------------------------------------------------------------------------- keys


def _canonical(obj: Any) -> Any:
    """A JSON-able copy of ``obj`` with one spelling per value (see :func:`digest`)."""
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
            out[k] = _canonical(v)
        return out
    if isinstance(obj, Set):
        return sorted(_canonical(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return _canonical(obj.tolist())
    if isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):  # also ListConfig
        return [_canonical(v) for v in obj]
    raise TypeError(f"cannot use a {type(obj).__name__} in a cache key: {obj!r}")


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys: equal keys give equal text."""
    return json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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


# --------------------------------------------------------------------------- atomic writes


def _atomic_write(path: Path, write: Callable[[Any], None], mode: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save_array(path: str | Path, array: NDArray) -> None:
    """Write ``array`` as ``.npy`` (no pickle) via a temporary file and a rename."""
    array = np.asarray(array)
    if array.dtype.hasobject:
        raise TypeError("object arrays would need pickle; cache numeric arrays only")
    _atomic_write(Path(path), lambda fh: np.save(fh, array, allow_pickle=False), "wb")


def load_array(path: str | Path) -> NDArray:
    return np.load(Path(path), allow_pickle=False)


def save_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON via a temporary file and a rename."""
    text = json.dumps(_canonical(obj), sort_keys=True, indent=1, ensure_ascii=False)
    _atomic_write(Path(path), lambda fh: fh.write(text), "w")


def load_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# --------------------------------------------------------------------------- arrays


def load_or_compute_array(
    cache_dir: str | Path | None, key: Mapping[str, Any], compute: Callable[[], NDArray]
) -> tuple[NDArray, bool]:
    """The array cached under ``key``, or ``compute()`` stored there. Returns (array, hit).

    ``cache_dir=None`` disables caching (always computes, never writes).
    """
    if cache_dir is None:
        return np.asarray(compute()), False
    name = digest(key)
    folder = Path(cache_dir) / ARRAYS
    meta, data = folder / f"{name}.json", folder / f"{name}.npy"
    if meta.exists():
        try:
            if load_json(meta).get("key") == _canonical(key):
                array = load_array(data)
                log.debug("cache hit %s", data)
                return array, True
            log.warning("cache entry %s holds another key (digest collision?); recomputing", meta)
        except (OSError, ValueError, EOFError) as err:
            log.warning("cache entry %s is unreadable (%s); recomputing", data, err)
    array = np.asarray(compute())
    save_array(data, array)
    save_json(meta, {"key": key, "shape": list(array.shape), "dtype": str(array.dtype)})
    log.debug("cache write %s", data)
    return array, False


# --------------------------------------------------------------------------- rankings


def _ranking_paths(folder: Path, base: str, depth: int) -> tuple[Path, Path, Path]:
    stem = f"{base}-d{depth}"
    return folder / f"{stem}.json", folder / f"{stem}.doc_idx.npy", folder / f"{stem}.scores.npy"


def _cached_depths(folder: Path, base: str) -> list[int]:
    depths = []
    for meta in folder.glob(f"{base}-d*.json"):
        tail = meta.name[len(base) + 2 : -len(".json")]
        if tail.isdigit():
            depths.append(int(tail))
    return sorted(depths)


RankingArrays = tuple[NDArray[np.int64], NDArray[np.float32]]  # doc_idx, scores: [n_queries, depth] each


def _ranking_shape(doc_idx: NDArray, scores: NDArray) -> tuple[int, int]:
    if doc_idx.ndim != 2 or doc_idx.shape != scores.shape:
        raise ValueError(f"ranking arrays must be 2-D and of one shape, got {doc_idx.shape} and {scores.shape}")
    return doc_idx.shape  # type: ignore[return-value]


def _read_ranking(folder: Path, base: str, depth: int, key_rest: Any) -> RankingArrays | None:
    meta, idx_path, score_path = _ranking_paths(folder, base, depth)
    try:
        stored = load_json(meta)
        if stored.get("key_without_depth") != key_rest or stored.get("depth") != depth:
            log.warning("cache entry %s holds another key (digest collision?); ignoring it", meta)
            return None
        doc_idx, scores = load_array(idx_path), load_array(score_path)
        stored_depth = _ranking_shape(doc_idx, scores)[1]
    except (OSError, ValueError, EOFError) as err:
        log.warning("cache entry %s is unreadable (%s); ignoring it", meta, err)
        return None
    if stored_depth != depth:
        log.warning("cache entry %s has depth %d, expected %d; ignoring it", meta, stored_depth, depth)
        return None
    return doc_idx, scores


def load_or_compute_ranking_arrays(
    cache_dir: str | Path | None,
    key: Mapping[str, Any],
    compute: Callable[[], RankingArrays],
    *,
    reuse_deeper: bool = False,
) -> tuple[RankingArrays, bool]:
    """The ranking arrays (doc_idx, scores) cached under ``key``, or ``compute()``'s stored
    there. Returns ((doc_idx, scores), hit); both arrays are [n_queries, depth].

    ``key`` should hold everything that shaped the ranking: the collection digest, the
    retriever's ``cache_key()`` and the ``depth`` (an int). With ``reuse_deeper=True``, a
    cached ranking with the same key but a larger depth serves the request (its first
    ``depth`` columns). That is right only for a retriever whose ranking at depth d is the
    prefix of its ranking at any D > d: pass ``getattr(retriever, "prefix_stable", False)``
    (True for bm25, exact/flat dense and run_file; False for hnsw and hybrid, whose
    candidates depend on the depth asked). ``cache_dir=None`` disables caching. Stored as
    int64 and float32; ``retrievers.base.load_or_compute_ranking`` is the same for Rankings.
    """
    if cache_dir is None:
        return compute(), False
    if "depth" not in key or isinstance(key["depth"], bool) or not isinstance(key["depth"], (int, np.integer)):
        raise ValueError("a ranking cache key needs an integer 'depth'")
    depth = int(key["depth"])
    rest = {k: v for k, v in key.items() if k != "depth"}
    key_rest = _canonical(rest)
    base = digest(rest)
    folder = Path(cache_dir) / RANKINGS
    if folder.exists():
        candidates = [d for d in _cached_depths(folder, base) if d == depth or (reuse_deeper and d > depth)]
        for cached_depth in candidates:  # smallest first: the least to read
            found = _read_ranking(folder, base, cached_depth, key_rest)
            if found is not None:
                log.debug("ranking cache hit (depth %d for %d)", cached_depth, depth)
                if cached_depth == depth:
                    return found, True
                doc_idx, scores = found
                return (np.ascontiguousarray(doc_idx[:, :depth]), np.ascontiguousarray(scores[:, :depth])), True
    doc_idx, scores = computed = compute()
    n_queries, computed_depth = _ranking_shape(doc_idx, scores)
    if computed_depth != depth:
        raise ValueError(f"compute() returned depth {computed_depth}, the key says {depth}")
    meta, idx_path, score_path = _ranking_paths(folder, base, depth)
    save_array(idx_path, doc_idx.astype(np.int64, copy=False))
    save_array(score_path, scores.astype(np.float32, copy=False))
    save_json(meta, {"key_without_depth": rest, "depth": depth, "n_queries": n_queries})
    log.debug("ranking cache write %s", meta)
    return computed, False

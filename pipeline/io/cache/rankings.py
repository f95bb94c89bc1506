"""Rankings cached by key: ``rankings/<base>-d<depth>.doc_idx.npy``, ``.scores.npy`` and ``.json``.

``base`` is the digest of the key without its ``depth``, so that a deeper ranking of the same
retriever on the same collection can serve a shallower request (``reuse_deeper``). Only plain
arrays go in and out: ``retrievers.base.load_or_compute_ranking`` wraps them in its
``Ranking`` (this package does not import ``retrievers``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.io.cache.keys import canonical, digest
from pipeline.io.cache.store import (DamagedEntry, LegacyEntry, check_shape, content_hash, discard, load_verified,
                                     read_meta, save_array, save_json, stored_hash, write_entry)

log = logging.getLogger(__name__)

RANKINGS = "rankings"

RankingArrays = tuple[NDArray[np.int64], NDArray[np.float32]]  # doc_idx, scores: [n_queries, depth] each


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


def _ranking_shape(doc_idx: NDArray, scores: NDArray) -> tuple[int, int]:
    if doc_idx.ndim != 2 or doc_idx.shape != scores.shape:
        raise ValueError(f"ranking arrays must be 2-D and of one shape, got {doc_idx.shape} and {scores.shape}")
    return doc_idx.shape  # type: ignore[return-value]


def ranking_problem(doc_idx: NDArray, scores: NDArray, n_docs: int | None = None) -> str | None:
    """What is wrong with a ranking pair, or None: indices in [-1, n_docs), scores finite
    for documents and -inf for -1, -1 only after a row's documents, scores non-increasing."""
    if doc_idx.size == 0:
        return None
    low, high = int(doc_idx.min()), int(doc_idx.max())
    if low < -1:
        return f"document index {low} < -1"
    if n_docs is not None and high >= n_docs:
        return f"document index {high} >= {n_docs} documents"
    found = doc_idx >= 0
    if not np.isfinite(scores[found]).all():
        return "a non-finite score for a retrieved document"
    if not (scores[~found] == -np.inf).all():
        return "a score other than -inf where the index is -1"
    if (found[:, 1:] & ~found[:, :-1]).any():
        return "a document after a -1 in a row"
    if not (scores[:, 1:] <= scores[:, :-1]).all():
        return "scores not in descending order in a row"
    return None


def _read_ranking(folder: Path, base: str, depth: int, key_rest: Any,
                  n_queries: int | None, n_docs: int | None) -> RankingArrays | None:
    """The entry of depth ``depth``, verified; None (with a warning or info line, the entry
    discarded when it is damaged) when it cannot be used."""
    meta, idx_path, score_path = _ranking_paths(folder, base, depth)
    try:
        stored = read_meta(meta)
        if stored.get("key_without_depth") != key_rest or stored.get("depth") != depth:
            log.warning("cache entry %s holds another key (digest collision?); ignoring it", meta)
            return None
        idx_hash, score_hash = stored_hash(stored, "doc_idx"), stored_hash(stored, "scores")
        doc_idx = load_verified(idx_path, idx_hash, "int64")
        scores = load_verified(score_path, score_hash, "float32")
        try:
            shape = _ranking_shape(doc_idx, scores)
        except ValueError as err:
            raise DamagedEntry(score_path, f"unreadable ({err})") from None
        check_shape(idx_path, shape, (stored.get("n_queries"), depth))
        check_shape(idx_path, shape, (n_queries, depth))
        stored_docs = stored.get("n_docs")
        if n_docs is not None and stored_docs is not None and stored_docs != n_docs:
            raise DamagedEntry(meta, f"written for {stored_docs} documents, the collection has {n_docs}")
        problem = ranking_problem(doc_idx, scores, n_docs if n_docs is not None else stored_docs)
        if problem:
            raise DamagedEntry(idx_path, problem)
    except LegacyEntry as why:
        log.info("cache entry %s predates verified caches (%s); recomputing", meta, why)
        discard(meta)
        return None
    except DamagedEntry as bad:
        log.warning("cache file %s is unreadable or damaged: %s; discarding it", bad.path, bad)
        discard(meta)
        return None
    return doc_idx, scores


def _cached_ranking(folder: Path, base: str, depth: int, key_rest: Any, reuse_deeper: bool,
                    n_queries: int | None, n_docs: int | None) -> RankingArrays | None:
    """The first usable entry of depth ``depth`` (or, with ``reuse_deeper``, more), cut to
    ``depth`` columns; None when there is none."""
    if not folder.is_dir():
        return None
    candidates = [d for d in _cached_depths(folder, base) if d == depth or (reuse_deeper and d > depth)]
    for cached_depth in candidates:  # smallest first: the least to read
        found = _read_ranking(folder, base, cached_depth, key_rest, n_queries, n_docs)
        if found is not None:
            log.debug("ranking cache hit (depth %d for %d)", cached_depth, depth)
            if cached_depth == depth:
                return found
            doc_idx, scores = found
            return np.ascontiguousarray(doc_idx[:, :depth]), np.ascontiguousarray(scores[:, :depth])
    return None


def _store_ranking(cache_dir: str | Path, folder: Path, base: str, depth: int, rest: Mapping[str, Any],
                   computed: RankingArrays, n_queries: int | None, n_docs: int | None) -> None:
    """Write a computed ranking as the entry of ``depth``, unless it fails the checks a
    cached one must pass (then a warning, and nothing is written)."""
    doc_idx, scores = computed
    computed_queries, computed_depth = _ranking_shape(doc_idx, scores)
    if computed_depth != depth:
        raise ValueError(f"compute() returned depth {computed_depth}, the key says {depth}")
    meta, idx_path, score_path = _ranking_paths(folder, base, depth)
    idx64 = np.ascontiguousarray(doc_idx, dtype=np.int64)
    scores32 = np.ascontiguousarray(scores, dtype=np.float32)
    problem = ranking_problem(idx64, scores32, n_docs)
    if n_queries is not None and computed_queries != n_queries:
        problem = f"{computed_queries} rows for {n_queries} queries"
    if problem:
        log.warning("computed ranking for %s not cached: %s", meta, problem)
        return
    record = {
        "key_without_depth": rest, "depth": depth, "n_queries": computed_queries, "n_docs": n_docs,
        "hash": {"doc_idx": content_hash(idx64), "scores": content_hash(scores32)},
    }
    if write_entry(cache_dir, [
        (idx_path, lambda: save_array(idx_path, idx64)),
        (score_path, lambda: save_array(score_path, scores32)),
        (meta, lambda: save_json(meta, record)),
    ]):
        log.debug("ranking cache write %s", meta)


def load_or_compute_ranking_arrays(
    cache_dir: str | Path | None,
    key: Mapping[str, Any],
    compute: Callable[[], RankingArrays],
    *,
    reuse_deeper: bool = False,
    n_queries: int | None = None,
    n_docs: int | None = None,
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

    ``n_queries`` and ``n_docs`` (the collection's, where the caller knows them) are
    checked against a cached entry along with its content hashes (see ``pipeline.io.cache``);
    an entry that fails is a warning naming the file, and is recomputed.
    """
    if cache_dir is None:
        return compute(), False
    if "depth" not in key or isinstance(key["depth"], bool) or not isinstance(key["depth"], (int, np.integer)):
        raise ValueError("a ranking cache key needs an integer 'depth'")
    depth = int(key["depth"])
    rest = {k: v for k, v in key.items() if k != "depth"}
    base = digest(rest)
    folder = Path(cache_dir) / RANKINGS
    found = _cached_ranking(folder, base, depth, canonical(rest), reuse_deeper, n_queries, n_docs)
    if found is not None:
        return found, True
    computed = compute()
    _store_ranking(cache_dir, folder, base, depth, rest, computed, n_queries, n_docs)
    return computed, False

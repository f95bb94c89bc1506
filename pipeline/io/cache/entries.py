"""The kinds of cache entry: an array, a ranking (a deeper one can serve a shallower request;
:func:`load_or_compute_ranking` wraps its arrays in a ``Ranking``),
a built file, and per-text embeddings (:class:`TextEmbeddingStore`, one shard per encoding call
that had texts to encode; a lookup reads the shards until every text asked for is found)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.io.cache.store import (HASH_ALGO, DamagedEntry, LegacyEntry, all_finite, canonical, check_shape,
                                     content_hash, digest, discard, file_hash, load_verified, read_meta, save_array,
                                     save_json, stored_hash, write_entry)
from pipeline.ranking import Ranking

log = logging.getLogger(__name__)


@contextmanager
def _unusable_discarded(meta: Path, what: str, then: str) -> Iterator[None]:
    """Reading the cache entry of ``meta``: one this process cannot verify (an info line) or a
    damaged one (a warning) is discarded, and the block ends without it."""
    try:
        yield
    except LegacyEntry as why:
        log.info("%s %s predates this version's verified caches (%s); %s", what, meta, why, then)
        discard(meta)
    except DamagedEntry as bad:
        log.warning("cache file %s (%s) is unreadable or damaged: %s; %s", bad.path, what, bad, then)
        discard(meta)

ARRAYS = "arrays"
RANKINGS = "rankings"
FILES = "files"
TEXTS = "texts"


def load_or_compute_array(cache_dir: str | Path | None, key: Mapping[str, Any], compute: Callable[[], NDArray], *,
                          shape: Sequence[int | None] | None = None, finite: bool = False) -> tuple[NDArray, bool]:
    """The array cached under ``key``, or ``compute()`` stored there. Returns (array, hit).

    ``shape``: the shape the caller expects, ``None`` for a dimension it does not know
    (e.g. ``(n_texts, None)``); ``finite``: every value must be finite. A cached array is
    returned only when its content hash, dtype and these match; a computed one that fails
    them is returned but not cached. ``cache_dir=None`` disables caching.
    """
    if cache_dir is None:
        return np.asarray(compute()), False
    stem = Path(cache_dir) / ARRAYS / digest(key)
    meta, data = stem.with_suffix(".json"), stem.with_suffix(".npy")
    if meta.exists():
        with _unusable_discarded(meta, "cache entry", "recomputing"):
            stored = read_meta(meta)
            if stored.get("key") == canonical(key):
                array = load_verified(data, stored_hash(stored, "array"), str(stored.get("dtype")))
                check_shape(data, array.shape, shape)
                if finite and not all_finite(array):
                    raise DamagedEntry(data, "non-finite values")
                log.debug("cache hit %s", data)
                return array, True
            log.warning("cache entry %s holds another key (digest collision?); recomputing", meta)
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


RankingArrays = tuple[NDArray[np.int64], NDArray[np.floating]]  # doc_idx, scores: [n_queries, depth] each
#: The dtypes a ranking's scores are cached in: float32 (the built-in retrievers'), float64
#: (user retrievers' and run files' scores, kept exactly); an entry says which ("scores_dtype").
SCORE_DTYPES = ("float32", "float64")


def _ranking_paths(folder: Path, base: str, depth: int) -> tuple[Path, Path, Path]:
    stem = f"{base}-d{depth}"
    return folder / f"{stem}.json", folder / f"{stem}.doc_idx.npy", folder / f"{stem}.scores.npy"


def _cached_depths(folder: Path, base: str) -> list[int]:
    tails = (meta.name[len(base) + 2 : -len(".json")] for meta in folder.glob(f"{base}-d*.json"))
    return sorted(int(tail) for tail in tails if tail.isdigit())


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


def _read_ranking(folder: Path, base: str, depth: int, key_rest: Any, n_queries: int | None,
                  n_docs: int | None, extra: dict[str, Any] | None = None) -> RankingArrays | None:
    """The entry of depth ``depth``, verified; None (with a warning or info line, the entry
    discarded when it is damaged) when it cannot be used. ``extra`` receives what the entry
    stored with the ranking (its ``extra``: e.g. the latency measured when it was computed)."""
    meta, idx_path, score_path = _ranking_paths(folder, base, depth)
    with _unusable_discarded(meta, "cache entry", "recomputing"):
        stored = read_meta(meta)
        if stored.get("key_without_depth") != key_rest or stored.get("depth") != depth:
            log.warning("cache entry %s holds another key (digest collision?); ignoring it", meta)
            return None
        idx_hash, score_hash = stored_hash(stored, "doc_idx"), stored_hash(stored, "scores")
        score_dtype = stored.get("scores_dtype", "float32")  # entries written before float64 existed: float32
        if score_dtype not in SCORE_DTYPES:
            raise DamagedEntry(meta, f"scores_dtype {score_dtype!r}")
        doc_idx, scores = load_verified(idx_path, idx_hash, "int64"), load_verified(score_path, score_hash, score_dtype)
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
        if extra is not None and isinstance(stored.get("extra"), dict):
            extra.update(stored["extra"])
        return doc_idx, scores
    return None


def _cached_ranking(folder: Path, base: str, depth: int, key_rest: Any, reuse_deeper: bool,
                    n_queries: int | None, n_docs: int | None,
                    extra: dict[str, Any] | None = None) -> RankingArrays | None:
    """The first usable entry of depth ``depth`` (or, with ``reuse_deeper``, more), cut to
    ``depth`` columns; None when there is none."""
    if not folder.is_dir():
        return None
    candidates = [d for d in _cached_depths(folder, base) if d == depth or (reuse_deeper and d > depth)]
    for cached_depth in candidates:  # smallest first: the least to read
        found = _read_ranking(folder, base, cached_depth, key_rest, n_queries, n_docs, extra)
        if found is not None:
            log.debug("ranking cache hit (depth %d for %d)", cached_depth, depth)
            if cached_depth == depth:
                return found
            doc_idx, scores = found
            return np.ascontiguousarray(doc_idx[:, :depth]), np.ascontiguousarray(scores[:, :depth])
    return None


def _store_ranking(cache_dir: str | Path, folder: Path, base: str, depth: int, rest: Mapping[str, Any],
                   computed: RankingArrays, n_queries: int | None, n_docs: int | None,
                   extra: Mapping[str, Any] | None = None) -> None:
    """Write a computed ranking as the entry of ``depth``, unless it fails the checks a
    cached one must pass (then a warning, and nothing is written)."""
    doc_idx, scores = computed
    computed_queries, computed_depth = _ranking_shape(doc_idx, scores)
    if computed_depth != depth:
        raise ValueError(f"compute() returned depth {computed_depth}, the key says {depth}")
    meta, idx_path, score_path = _ranking_paths(folder, base, depth)
    dtype = np.float32 if np.asarray(scores).dtype == np.float32 else np.float64
    idx64, scores_out = np.ascontiguousarray(doc_idx, np.int64), np.ascontiguousarray(scores, dtype)
    problem = ranking_problem(idx64, scores_out, n_docs)
    if n_queries is not None and computed_queries != n_queries:
        problem = f"{computed_queries} rows for {n_queries} queries"
    if problem:
        log.warning("computed ranking for %s not cached: %s", meta, problem)
        return
    record = {"key_without_depth": rest, "depth": depth, "n_queries": computed_queries, "n_docs": n_docs,
              "hash": {"doc_idx": content_hash(idx64), "scores": content_hash(scores_out)}}
    if dtype == np.float64:  # (float32 entries stay as they were written before: no new key)
        record["scores_dtype"] = "float64"
    if extra:  # what the caller keeps with the ranking (the latency measured computing it)
        record["extra"] = dict(extra)
    if write_entry(cache_dir, [(idx_path, lambda: save_array(idx_path, idx64)),
                               (score_path, lambda: save_array(score_path, scores_out)),
                               (meta, lambda: save_json(meta, record))]):
        log.debug("ranking cache write %s", meta)


def load_or_compute_ranking_arrays(
    cache_dir: str | Path | None, key: Mapping[str, Any], compute: Callable[[], RankingArrays], *,
    reuse_deeper: bool = False, n_queries: int | None = None, n_docs: int | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[RankingArrays, bool]:
    """The ranking arrays (doc_idx, scores) cached under ``key``, or ``compute()``'s stored
    there (as int64, and float32 or float64 as computed). Returns ((doc_idx, scores), hit); both are [n_queries, depth].

    ``key`` should hold everything that shaped the ranking: the collection digest, the
    retriever's ``cache_key()`` and the ``depth`` (an int). With ``reuse_deeper=True``, a
    cached ranking with the same key but a larger depth serves the request (its first
    ``depth`` columns). That is right only for a retriever whose ranking at depth d is the
    prefix of its ranking at any D > d: pass ``getattr(retriever, "prefix_stable", False)``
    (True for bm25, exact/flat dense and run_file; False for hnsw and hybrid, whose
    candidates depend on the depth asked). ``n_queries`` and ``n_docs`` (the collection's,
    where the caller knows them) are checked against a cached entry along with its content
    hashes. ``cache_dir=None`` disables caching.

    ``extra``: a JSON-able dict kept with the entry. On a miss, whatever it holds after
    ``compute()`` returns (the caller fills it while computing) is written into the entry's
    JSON; on a hit it is filled with what the entry kept (nothing for entries written without).
    """
    if cache_dir is None:
        return compute(), False
    if "depth" not in key or isinstance(key["depth"], bool) or not isinstance(key["depth"], (int, np.integer)):
        raise ValueError("a ranking cache key needs an integer 'depth'")
    depth = int(key["depth"])
    rest = {k: v for k, v in key.items() if k != "depth"}
    base = digest(rest)
    folder = Path(cache_dir) / RANKINGS
    found = _cached_ranking(folder, base, depth, canonical(rest), reuse_deeper, n_queries, n_docs, extra)
    if found is not None:
        return found, True
    computed = compute()
    _store_ranking(cache_dir, folder, base, depth, rest, computed, n_queries, n_docs, extra)
    return computed, False


def load_or_compute_ranking(cache_dir: str | Path | None, key: Mapping[str, Any], compute: Callable[[], Ranking], *,
                            reuse_deeper: bool = False, n_queries: int | None = None,
                            n_docs: int | None = None, extra: dict[str, Any] | None = None) -> tuple[Ranking, bool]:
    """The Ranking cached under ``key``, or ``compute()`` stored there. Returns (ranking, hit).

    :func:`load_or_compute_ranking_arrays` with Rankings (``pipeline.ranking``): ``key`` holds the
    collection digest, the retriever's ``cache_key()`` and the ``depth``; ``reuse_deeper``
    lets a deeper cached ranking of a ``prefix_stable`` retriever serve the request;
    ``n_queries`` and ``n_docs`` (the collection's) let a cached entry be checked against
    them (rows, index range) besides its content hashes; ``cache_dir=None`` disables caching;
    ``extra`` is kept with the entry (filled by ``compute`` on a miss, from the entry on a hit).
    """
    computed: list[Ranking] = []

    def compute_arrays() -> tuple[NDArray[np.int64], NDArray[np.floating]]:
        computed.append(compute())
        return computed[0].doc_idx, computed[0].scores

    (doc_idx, scores), hit = load_or_compute_ranking_arrays(cache_dir, key, compute_arrays, reuse_deeper=reuse_deeper,
                                                            n_queries=n_queries, n_docs=n_docs, extra=extra)
    return (computed[0] if computed else Ranking(doc_idx, scores)), hit


def load_or_build_file(cache_dir: str | Path | None, key: Mapping[str, Any], name: str,
                       build: Callable[[Path], None]) -> tuple[Path, bool]:
    """A file built once per ``key`` (an exported model, ...). Returns (path, hit).

    ``build(path)`` writes the file in a temporary folder; it is then renamed to
    ``files/<digest of key>/<name>`` and its JSON marker (key, size, content hash) written
    last. A cached file is used only when its marker's key, size and hash match. ``cache_dir=None``
    or a folder that cannot be written: built into a temporary folder of this process."""
    if cache_dir is not None:
        folder = Path(cache_dir) / FILES / digest(key)
        target, meta = folder / name, folder / f"{name}.json"
        if meta.exists() and _verified(target, meta, key):
            return target, True
        built = _build_into_cache(cache_dir, folder, name, key, build)
        if built is not None:
            return built, False
    tmp = Path(tempfile.mkdtemp(prefix="rag-eval-build-"))
    build(tmp / name)
    return tmp / name, False


def _verified(target: Path, meta: Path, key: Mapping[str, Any]) -> bool:
    """Whether the cached ``target`` is the file its marker records (key, size, content
    hash); when it is not, a warning (info for an unverifiable one) and the marker is removed."""
    with _unusable_discarded(meta, "cached file", "building it again"):
        stored = read_meta(meta)
        if stored.get("key") != canonical(key):
            raise DamagedEntry(meta, "holds another key")
        expected = stored_hash(stored, "file")
        try:
            size = target.stat().st_size
        except OSError as err:
            raise DamagedEntry(target, f"unreadable ({err})") from None
        if size != stored.get("size"):
            raise DamagedEntry(target, f"{size} bytes, {stored.get('size')} recorded")
        if file_hash(target) != expected:
            raise DamagedEntry(target, "content hash mismatch (the file changed after it was written)")
        return True
    return False


def _build_into_cache(cache_dir: str | Path, folder: Path, name: str, key: Mapping[str, Any],
                      build: Callable[[Path], None]) -> Path | None:
    """Build in a temporary folder inside ``folder``, then commit: the file renamed into
    place, its marker written last. Returns where the file is (outside the cache when it
    could not be committed), or None when ``folder`` cannot be written (one warning)."""
    target, meta = folder / name, folder / f"{name}.json"
    made: list[Path] = []

    def make_tmp() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        made.append(Path(tempfile.mkdtemp(dir=folder, prefix=f".{name}.", suffix=".tmp")))

    if not write_entry(cache_dir, [(folder, make_tmp)]):  # a folder that cannot be written: one warning
        return None
    tmp = made[0]
    try:
        built = tmp / name
        build(built)
        record = {"key": key, "size": built.stat().st_size, "hash": {"file": file_hash(built)}}
        if write_entry(cache_dir, [(target, lambda: os.replace(built, target)),
                                   (meta, lambda: save_json(meta, record))]):
            return target
        if built.exists():  # could not be committed: keep it outside the cache
            keep = Path(tempfile.mkdtemp(prefix="rag-eval-build-")) / name
            shutil.move(built, keep)
            return keep
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return None


class TextEmbeddingStore:
    """Embeddings kept per text: the rows of texts already encoded under ``key`` (the model's
    identity, backend and settings) are read back; only the others need encoding. Every shard
    is verified when read: its key, the content hashes of both arrays, shapes, finite values."""

    def __init__(self, cache_dir: str | Path, key: Mapping[str, Any]):
        self.cache_dir = Path(cache_dir)
        self.key = canonical(key)
        self.folder = self.cache_dir / TEXTS / digest({"key": self.key, "text_hash": HASH_ALGO})

    def _read_shard(self, meta: Path) -> tuple[NDArray[np.uint64], NDArray[np.float32]] | None:
        stem = meta.name[: -len(".json")]
        hashes_path, emb_path = meta.with_name(f"{stem}.hashes.npy"), meta.with_name(f"{stem}.emb.npy")
        with _unusable_discarded(meta, "text cache shard", "discarding it"):
            stored = read_meta(meta)
            if stored.get("key") != self.key:
                log.warning("text cache shard %s holds another key (digest collision?); ignoring it", meta)
                return None
            hashes = load_verified(hashes_path, stored_hash(stored, "hashes"), "uint64")
            emb = load_verified(emb_path, stored_hash(stored, "embeddings"), "float32")
            n = stored.get("n")
            check_shape(hashes_path, hashes.shape, (n, 2))
            check_shape(emb_path, emb.shape, (n, stored.get("dim")))
            if not all_finite(emb):
                raise DamagedEntry(emb_path, "non-finite values")
            return hashes, emb
        return None

    def lookup(self, hashes: NDArray[np.uint64]) -> tuple[NDArray[np.float32] | None, NDArray[np.bool_], int]:
        """(embeddings [n, dim] with zero rows for texts not found, or None when none was
        found; the found mask; the number of shards read)."""
        n = hashes.shape[0]
        found = np.zeros(n, dtype=bool)
        if n == 0:
            return None, found, 0
        wanted: dict[bytes, list[int]] = {}
        for i, row in enumerate(hashes):
            wanted.setdefault(row.tobytes(), []).append(i)
        try:
            shards = sorted(self.folder.glob("*.json"))
        except OSError:
            shards = []
        out: NDArray[np.float32] | None = None
        read = 0
        for meta in shards:
            if not wanted:
                break
            shard = self._read_shard(meta)
            if shard is None:
                continue
            read += 1
            shard_hashes, emb = shard
            if out is None:
                out = np.zeros((n, emb.shape[1]), np.float32)
            elif emb.shape[1] != out.shape[1]:
                log.warning("text cache shard %s has dim %d, others %d; ignoring it", meta, emb.shape[1], out.shape[1])
                continue
            for j, row in enumerate(shard_hashes):
                rows = wanted.pop(row.tobytes(), None)
                if rows is not None:
                    out[rows] = emb[j]
                    found[rows] = True
        return (out if found.any() else None), found, read

    def add(self, hashes: NDArray[np.uint64], embeddings: NDArray[np.float32]) -> bool:
        """Store ``embeddings[i]`` for the text of ``hashes[i]`` (one new shard). Returns
        whether it was written (not when empty, non-finite or the folder is not writable)."""
        hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
        emb = np.ascontiguousarray(embeddings, dtype=np.float32)
        if hashes.shape[0] == 0:
            return False
        if hashes.ndim != 2 or hashes.shape[1] != 2 or emb.ndim != 2 or emb.shape[0] != hashes.shape[0]:
            raise ValueError(f"hashes {hashes.shape} and embeddings {emb.shape} do not match")
        if not all_finite(emb):
            log.warning("embeddings with non-finite values not added to the text cache %s", self.folder)
            return False
        stem = content_hash(hashes).split(":", 1)[1][:32]  # the same texts give the same shard name
        meta = self.folder / f"{stem}.json"
        hashes_path, emb_path = self.folder / f"{stem}.hashes.npy", self.folder / f"{stem}.emb.npy"
        record = {"key": self.key, "n": int(hashes.shape[0]), "dim": int(emb.shape[1]),
                  "hash": {"hashes": content_hash(hashes), "embeddings": content_hash(emb)}}
        return write_entry(self.cache_dir, [(emb_path, lambda: save_array(emb_path, emb)),
                                            (hashes_path, lambda: save_array(hashes_path, hashes)),
                                            (meta, lambda: save_json(meta, record))])

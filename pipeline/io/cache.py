"""On-disk caches in safe formats, keyed by a digest of everything that shaped them.

A leaf module (no Hydra, no MLflow): the app passes a directory (``outputs/cache``), a key
(a JSON-able dict) and a function that computes the value when the cache has no entry.

- Arrays are stored as ``.npy`` (``allow_pickle=False``) and keys as ``.json``; nothing is
  ever pickled.
- Every file is written to a temporary name in the same folder and renamed
  (``os.replace``), so a reader never sees half a file and concurrent writers of the same
  entry (a parallel Hydra launcher) simply let the last one win. The key's JSON file is
  written last: it is the entry's commit marker.
- Every entry is verified when read. Its JSON records a content hash of each array
  (xxh3_128 of dtype, shape and bytes; blake2b where ``xxhash`` is missing) and the
  shapes it was written with; reading checks the hash, the shape the caller expects
  (queries, depth, documents, embedding dim), and for rankings that indices lie in
  [-1, n_docs), scores are finite (-inf exactly where the index is -1) and each row is
  ordered best first with its -1 padding at the end. A failed check is a warning that names
  the file; the entry is discarded (its JSON removed) and recomputed, never trusted.
  Entries written before hashes existed are treated as missing (an info line).
- Files are created with the mode a plain ``open`` would give (0666 minus the umask).
- A cache folder that cannot be written (read-only disk, full disk, a path through a
  file) is one warning per folder naming it and the OS error; the computed value is
  returned all the same.

Layout under ``cache_dir``::

    arrays/<digest>.npy  arrays/<digest>.json                       load_or_compute_array
    rankings/<base>-d<depth>.doc_idx.npy  .scores.npy  .json        load_or_compute_ranking_arrays
    texts/<digest>/<shard>.hashes.npy  .emb.npy  .json               TextEmbeddingStore (per-text rows)
    files/<digest>/<name>  <name>.json                               load_or_build_file (ONNX exports)

where ``digest`` is the sha256 of the key's canonical JSON and ``base`` the digest of the
key without its ``depth``, so a deeper ranking can serve a shallower request.

Verification costs about 0.4 ms per 8 MB array with xxh3 (``benchmarks/cache.py``).

Only plain arrays go in and out: ``retrievers.base.load_or_compute_ranking`` wraps the
ranking pair in its ``Ranking`` (this module does not import ``retrievers``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

try:  # ~20x faster than blake2b on large arrays; blake2b where it is missing
    import xxhash
except ImportError:  # pragma: no cover - xxhash is a dependency
    xxhash = None

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


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc``); else
    set and restored under a lock (``os.umask`` has no read-only form)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _atomic_write(path: Path, write: Callable[[Any], None], mode: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
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


# --------------------------------------------------------------------------- verification


HASH_ALGO = "xxh3_128" if xxhash is not None else "blake2b_128"


def content_hash(array: NDArray) -> str:
    """``"<algo>:<hex>"`` of an array's dtype, shape and C-order bytes."""
    array = np.ascontiguousarray(array)
    h = xxhash.xxh3_128() if xxhash is not None else hashlib.blake2b(digest_size=16)
    h.update(f"{array.dtype.str}{array.shape}".encode("ascii"))
    h.update(memoryview(array).cast("B") if array.size else b"")
    return f"{HASH_ALGO}:{h.hexdigest()}"


class _Damaged(Exception):
    """A cache file that does not match its record; ``str`` says how."""

    def __init__(self, path: Path, problem: str):
        super().__init__(problem)
        self.path = path


class _Legacy(Exception):
    """An entry written before content hashes (or with a hash this process cannot compute)."""


def _stored_hash(meta: Mapping[str, Any], name: str) -> str:
    hashes = meta.get("hash")
    value = hashes.get(name) if isinstance(hashes, Mapping) else None
    if not isinstance(value, str):
        raise _Legacy("no content hash")
    if value.split(":", 1)[0] != HASH_ALGO:
        raise _Legacy(f"hashed with {value.split(':', 1)[0]}, this process uses {HASH_ALGO}")
    return value


def _load_verified(path: Path, expected_hash: str, dtype: str) -> NDArray:
    """The array in ``path``; raises ``_Damaged`` unless it is the one that was written."""
    try:
        array = load_array(path)
    except (OSError, ValueError, EOFError) as err:
        raise _Damaged(path, f"unreadable ({err})") from None
    if str(array.dtype) != dtype:
        raise _Damaged(path, f"dtype {array.dtype}, expected {dtype}")
    if content_hash(array) != expected_hash:
        raise _Damaged(path, "content hash mismatch (the file changed after it was written)")
    return array


def _check_shape(path: Path, shape: tuple[int, ...], expected: Sequence[int | None] | None) -> None:
    if expected is None:
        return
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected)):
        want = "x".join("?" if e is None else str(e) for e in expected)
        raise _Damaged(path, f"shape {'x'.join(map(str, shape))}, expected {want}")


def _all_finite(array: NDArray) -> bool:
    """Whether every value is finite: one float sum (NaN and inf propagate), the exact
    elementwise check only when that sum is not finite (it may just have overflowed)."""
    if array.dtype.kind not in "fc" or array.size == 0:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(array.sum()):
            return True
    return bool(np.isfinite(array).all())


def _discard(meta: Path) -> None:
    """Remove an entry's commit marker, so that nobody reads the entry again."""
    try:
        meta.unlink()
    except OSError:
        pass


_UNWRITABLE_WARNED: set[str] = set()


def _write_entry(cache_dir: str | Path, writes: Sequence[tuple[Path, Callable[[], None]]]) -> bool:
    """Run ``writes`` in order (the JSON marker last). An ``OSError`` is one warning per
    cache folder (naming it and the error) and ``False``: the caller keeps its value."""
    try:
        for _, write in writes:
            write()
        return True
    except OSError as err:
        folder = os.fspath(cache_dir)
        if folder not in _UNWRITABLE_WARNED:
            _UNWRITABLE_WARNED.add(folder)
            log.warning("cache folder %s is not writable (%s: %s); going on without caching",
                        folder, type(err).__name__, err)
        else:
            log.debug("cache write to %s failed: %s", folder, err)
        return False


def _read_meta(meta: Path) -> dict[str, Any]:
    try:
        stored = load_json(meta)
    except (OSError, ValueError) as err:
        raise _Damaged(meta, f"unreadable ({err})") from None
    if not isinstance(stored, dict):
        raise _Damaged(meta, f"unreadable (a JSON {type(stored).__name__}, not an object)")
    return stored


# --------------------------------------------------------------------------- arrays


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
            stored = _read_meta(meta)
            if stored.get("key") == _canonical(key):
                expected_hash = _stored_hash(stored, "array")
                array = _load_verified(data, expected_hash, str(stored.get("dtype")))
                _check_shape(data, array.shape, shape)
                if finite and not _all_finite(array):
                    raise _Damaged(data, "non-finite values")
                log.debug("cache hit %s", data)
                return array, True
            log.warning("cache entry %s holds another key (digest collision?); recomputing", meta)
        except _Legacy as why:
            log.info("cache entry %s predates verified caches (%s); recomputing", meta, why)
            _discard(meta)
        except _Damaged as bad:
            log.warning("cache file %s is unreadable or damaged: %s; discarding and recomputing", bad.path, bad)
            _discard(meta)
    array = np.ascontiguousarray(compute())
    try:
        _check_shape(data, array.shape, shape)
        if finite and not _all_finite(array):
            raise _Damaged(data, "non-finite values")
    except _Damaged as bad:
        log.warning("computed array for %s not cached: %s", data, bad)
        return array, False
    record = {"key": key, "shape": list(array.shape), "dtype": str(array.dtype), "hash": {"array": content_hash(array)}}
    if _write_entry(cache_dir, [(data, lambda: save_array(data, array)), (meta, lambda: save_json(meta, record))]):
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
    meta, idx_path, score_path = _ranking_paths(folder, base, depth)
    try:
        stored = _read_meta(meta)
        if stored.get("key_without_depth") != key_rest or stored.get("depth") != depth:
            log.warning("cache entry %s holds another key (digest collision?); ignoring it", meta)
            return None
        idx_hash, score_hash = _stored_hash(stored, "doc_idx"), _stored_hash(stored, "scores")
        doc_idx = _load_verified(idx_path, idx_hash, "int64")
        scores = _load_verified(score_path, score_hash, "float32")
        try:
            shape = _ranking_shape(doc_idx, scores)
        except ValueError as err:
            raise _Damaged(score_path, f"unreadable ({err})") from None
        _check_shape(idx_path, shape, (stored.get("n_queries"), depth))
        _check_shape(idx_path, shape, (n_queries, depth))
        stored_docs = stored.get("n_docs")
        if n_docs is not None and stored_docs is not None and stored_docs != n_docs:
            raise _Damaged(meta, f"written for {stored_docs} documents, the collection has {n_docs}")
        problem = ranking_problem(doc_idx, scores, n_docs if n_docs is not None else stored_docs)
        if problem:
            raise _Damaged(idx_path, problem)
    except _Legacy as why:
        log.info("cache entry %s predates verified caches (%s); recomputing", meta, why)
        _discard(meta)
        return None
    except _Damaged as bad:
        log.warning("cache file %s is unreadable or damaged: %s; discarding it", bad.path, bad)
        _discard(meta)
        return None
    return doc_idx, scores


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
    checked against a cached entry along with its content hashes (see the module
    docstring); an entry that fails is a warning naming the file, and is recomputed.
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
    if folder.is_dir():
        candidates = [d for d in _cached_depths(folder, base) if d == depth or (reuse_deeper and d > depth)]
        for cached_depth in candidates:  # smallest first: the least to read
            found = _read_ranking(folder, base, cached_depth, key_rest, n_queries, n_docs)
            if found is not None:
                log.debug("ranking cache hit (depth %d for %d)", cached_depth, depth)
                if cached_depth == depth:
                    return found, True
                doc_idx, scores = found
                return (np.ascontiguousarray(doc_idx[:, :depth]), np.ascontiguousarray(scores[:, :depth])), True
    doc_idx, scores = computed = compute()
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
        return computed, False
    record = {
        "key_without_depth": rest, "depth": depth, "n_queries": computed_queries, "n_docs": n_docs,
        "hash": {"doc_idx": content_hash(idx64), "scores": content_hash(scores32)},
    }
    if _write_entry(cache_dir, [
        (idx_path, lambda: save_array(idx_path, idx64)),
        (score_path, lambda: save_array(score_path, scores32)),
        (meta, lambda: save_json(meta, record)),
    ]):
        log.debug("ranking cache write %s", meta)
    return computed, False


# --------------------------------------------------------------------------- per-text embeddings
# Layout: texts/<digest of the store key>/<shard>.hashes.npy  <shard>.emb.npy  <shard>.json
# One shard per encoding call that had texts to encode (only those); a lookup reads the
# shards, each verified like any entry, until every text asked for is found.

TEXTS = "texts"
FILES = "files"


def text_hashes(texts: Sequence[str]) -> NDArray[np.uint64]:
    """xxh3_128 (blake2b-128 where xxhash is missing) of each text's UTF-8 bytes, as an
    ``[n, 2]`` uint64 array: one row per text, equal rows for equal texts."""
    if xxhash is not None:
        raw = b"".join(xxhash.xxh3_128_digest(str(t).encode("utf-8")) for t in texts)
    else:  # pragma: no cover - xxhash is a dependency
        raw = b"".join(hashlib.blake2b(str(t).encode("utf-8"), digest_size=16).digest() for t in texts)
    return np.frombuffer(raw, dtype=np.uint64).reshape(len(texts), 2).copy()


class TextEmbeddingStore:
    """Embeddings kept per text: the rows of texts already encoded under ``key`` (the model's
    identity, backend and settings) are read back; only the others need encoding.

    ``lookup(hashes)`` -> (embeddings with zero rows where missing, found mask, shards read);
    ``add(hashes, embeddings)`` stores new rows as one shard (arrays, then the JSON marker,
    each atomically). Every shard is verified when read (its key, the content hashes of both
    arrays, shapes, finite values); a damaged one is a warning, discarded and never trusted.
    """

    def __init__(self, cache_dir: str | Path, key: Mapping[str, Any]):
        self.cache_dir = Path(cache_dir)
        self.key = _canonical(key)
        self.folder = self.cache_dir / TEXTS / digest({"key": self.key, "text_hash": HASH_ALGO})

    def _shards(self) -> list[Path]:
        try:
            return sorted(self.folder.glob("*.json"))
        except OSError:
            return []

    def _read_shard(self, meta: Path) -> tuple[NDArray[np.uint64], NDArray[np.float32]] | None:
        stem = meta.name[: -len(".json")]
        hashes_path, emb_path = meta.with_name(f"{stem}.hashes.npy"), meta.with_name(f"{stem}.emb.npy")
        try:
            stored = _read_meta(meta)
            if stored.get("key") != self.key:
                log.warning("text cache shard %s holds another key (digest collision?); ignoring it", meta)
                return None
            hashes = _load_verified(hashes_path, _stored_hash(stored, "hashes"), "uint64")
            emb = _load_verified(emb_path, _stored_hash(stored, "embeddings"), "float32")
            n = stored.get("n")
            _check_shape(hashes_path, hashes.shape, (n, 2))
            _check_shape(emb_path, emb.shape, (n, stored.get("dim")))
            if not _all_finite(emb):
                raise _Damaged(emb_path, "non-finite values")
            return hashes, emb
        except _Legacy as why:
            log.info("text cache shard %s cannot be verified (%s); discarding it", meta, why)
        except _Damaged as bad:
            log.warning("text cache file %s is unreadable or damaged: %s; discarding it", bad.path, bad)
        _discard(meta)
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
        out: NDArray[np.float32] | None = None
        read = 0
        for meta in self._shards():
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
        if not _all_finite(emb):
            log.warning("embeddings with non-finite values not added to the text cache %s", self.folder)
            return False
        stem = content_hash(hashes).split(":", 1)[1][:32]  # the same texts give the same shard name
        meta = self.folder / f"{stem}.json"
        hashes_path, emb_path = self.folder / f"{stem}.hashes.npy", self.folder / f"{stem}.emb.npy"
        record = {"key": self.key, "n": int(hashes.shape[0]), "dim": int(emb.shape[1]),
                  "hash": {"hashes": content_hash(hashes), "embeddings": content_hash(emb)}}
        return _write_entry(self.cache_dir, [
            (emb_path, lambda: save_array(emb_path, emb)),
            (hashes_path, lambda: save_array(hashes_path, hashes)),
            (meta, lambda: save_json(meta, record)),
        ])


# --------------------------------------------------------------------------- built files


def file_hash(path: str | Path) -> str:
    """``"<algo>:<hex>"`` of a file's bytes (xxh3_128, blake2b-128 where xxhash is missing)."""
    h = xxhash.xxh3_128() if xxhash is not None else hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return f"{HASH_ALGO}:{h.hexdigest()}"


def load_or_build_file(cache_dir: str | Path | None, key: Mapping[str, Any], name: str,
                       build: Callable[[Path], None]) -> tuple[Path, bool]:
    """A file built once per ``key`` (an exported model, ...). Returns (path, hit).

    ``build(path)`` writes the file at ``path`` (a temporary folder); it is then renamed to
    ``files/<digest of key>/<name>`` under ``cache_dir`` and its JSON marker (key, size,
    content hash) written last. A cached file is used only when its marker's key matches and
    its size and hash are those recorded; else it is built again. ``cache_dir=None`` or a
    folder that cannot be written: built into a temporary folder of this process."""
    if cache_dir is not None:
        folder = Path(cache_dir) / FILES / digest(key)
        target, meta = folder / name, folder / f"{name}.json"
        if meta.exists():
            try:
                stored = _read_meta(meta)
                if stored.get("key") != _canonical(key):
                    raise _Damaged(meta, "holds another key")
                expected = _stored_hash(stored, "file")
                try:
                    size = target.stat().st_size
                except OSError as err:
                    raise _Damaged(target, f"unreadable ({err})") from None
                if size != stored.get("size"):
                    raise _Damaged(target, f"{size} bytes, {stored.get('size')} recorded")
                if file_hash(target) != expected:
                    raise _Damaged(target, "content hash mismatch (the file changed after it was written)")
                return target, True
            except _Legacy as why:
                log.info("cached file %s cannot be verified (%s); building it again", meta, why)
            except _Damaged as bad:
                log.warning("cached file %s is unreadable or damaged: %s; building it again", bad.path, bad)
            _discard(meta)
        made: list[Path] = []

        def make_tmp() -> None:
            folder.mkdir(parents=True, exist_ok=True)
            made.append(Path(tempfile.mkdtemp(dir=folder, prefix=f".{name}.", suffix=".tmp")))

        _write_entry(cache_dir, [(folder, make_tmp)])  # a folder that cannot be written: one warning
        if made:
            tmp = made[0]
            try:
                built = tmp / name
                build(built)
                record = {"key": key, "size": built.stat().st_size, "hash": {"file": file_hash(built)}}
                if _write_entry(cache_dir, [(target, lambda: os.replace(built, target)),
                                            (meta, lambda: save_json(meta, record))]):
                    return target, False
                if built.exists():  # could not be committed: keep it outside the cache
                    keep = Path(tempfile.mkdtemp(prefix="rag-eval-build-")) / name
                    shutil.move(built, keep)
                    return keep, False
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix="rag-eval-build-"))
    build(tmp / name)
    return tmp / name, False

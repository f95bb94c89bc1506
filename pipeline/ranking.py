"""The Ranking every retriever returns, and the functions that make one (numpy only).

A Ranking holds, for each query (row), the indices of the retrieved documents into the
collection's ``doc_ids`` and their scores, best first: ordered by score descending, then by
document index ascending (the project's tie rule). ``-1`` marks "nothing here" (a query
that got fewer than ``depth`` results); its score is ``-inf``. The helpers that make Rankings
(from dense scores, from (query, document, score) rows, padded) live here, once; the cached
Ranking is ``pipeline.io.cache.load_or_compute_ranking``.

The computing tier: a core type below its users (the retrievers, the run-file reader, the
pools, the stages, the API), importing numpy and the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Ranking:
    """Each query's retrieved documents (indices into the collection's ``doc_ids``) and
    their scores, best first; ``-1`` / ``-inf`` where a query got fewer than ``depth``."""

    doc_idx: NDArray[np.int64]  # [n_queries, depth], -1 = nothing
    scores: NDArray[np.floating]  # [n_queries, depth], -inf where doc_idx == -1; float32 or float64

    def __post_init__(self) -> None:
        if self.doc_idx.shape != self.scores.shape or self.doc_idx.ndim != 2:
            raise ValueError(f"Ranking arrays must be 2-D and of one shape, got {self.doc_idx.shape} "
                             f"and {self.scores.shape}")

    @property
    def n_queries(self) -> int:
        return int(self.doc_idx.shape[0])

    @property
    def depth(self) -> int:
        return int(self.doc_idx.shape[1])

    def head(self, depth: int) -> "Ranking":
        """The first ``depth`` columns (a view)."""
        return Ranking(self.doc_idx[:, :depth], self.scores[:, :depth])

    @classmethod
    def empty(cls, n_queries: int, depth: int, dtype: Any = np.float32) -> "Ranking":
        """Nothing retrieved: every entry -1, every score -inf (float32, or ``dtype``)."""
        return cls(np.full((n_queries, depth), -1, np.int64), np.full((n_queries, depth), -np.inf, dtype))


def padded(doc_idx: NDArray[np.integer], scores: NDArray[np.floating], depth: int) -> Ranking:
    """The Ranking of ``doc_idx`` and ``scores`` widened to ``depth`` columns with -1 / -inf
    (as they are when already that wide or wider)."""
    n_q, width = doc_idx.shape
    if width >= depth:
        return Ranking(doc_idx, scores)
    out = Ranking.empty(n_q, depth, scores.dtype)
    out.doc_idx[:, :width] = doc_idx
    out.scores[:, :width] = scores
    return out


def rows_to_ranking(query: NDArray[np.integer], doc: NDArray[np.integer], scores: NDArray[np.floating],
                    n_queries: int, depth: int | None = None, tie: NDArray | None = None) -> Ranking:
    """(query, document, score) rows -> a Ranking [n_queries, depth], -1 / -inf padded.

    ``query`` holds row indices 0..n_queries-1 (drop other rows first), ``doc`` document
    indices. Each query's rows are ordered by score descending, then by ``tie`` ascending
    (default: the rows' own order, so ties keep the input's order), and the first ``depth``
    are kept (None: as deep as the query with the most rows, at least 1). The Ranking keeps
    the scores as given: float32 stays float32 (hybrid's fused scores), anything else is
    float64 (a run file's scores: never narrowed, so 1e300 stays finite and 1 + 1e-9 stays
    apart from 1).
    Rows usually arrive grouped by query in rank order: that is checked before any sort.
    """
    query = np.asarray(query, dtype=np.int64)
    doc = np.asarray(doc, dtype=np.int64)
    key = np.asarray(scores)
    n = len(query)
    order = np.argsort(query, kind="stable")
    q, s = query[order], key[order]
    t = order if tie is None else np.asarray(tie)[order]
    same_query = q[1:] == q[:-1]
    misplaced = (s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (t[1:] < t[:-1]))
    if np.any(same_query & misplaced):
        order = np.lexsort((np.arange(n) if tie is None else tie, -key, query))
        q = query[order]
    counts = np.bincount(q, minlength=n_queries)
    width = max(int(counts.max(initial=0)), 1) if depth is None else depth
    pos = np.arange(n) - (np.cumsum(counts) - counts)[q]
    keep = pos < width
    out = Ranking.empty(n_queries, width, np.float32 if key.dtype == np.float32 else np.float64)
    out.doc_idx[q[keep], pos[keep]] = doc[order][keep]
    out.scores[q[keep], pos[keep]] = key[order][keep]
    return out


def top_k(scores: NDArray[np.floating], depth: int) -> Ranking:
    """Top ``depth`` of a dense [n_queries, n_docs] score matrix, score desc then index asc.

    ``argpartition`` picks the candidates, then only ``depth`` items per row are sorted.
    Ties at the cut-off boundary are resolved by index too: every document whose score
    equals the boundary score is considered before the lowest indices are kept.
    """
    scores = np.asarray(scores, dtype=np.float32)
    n_q, n_d = scores.shape
    d = min(depth, n_d)
    if d == 0:
        return Ranking.empty(n_q, depth)
    if d < n_d:
        part = np.argpartition(-scores, d - 1, axis=1)[:, :d]
        cand_scores = np.take_along_axis(scores, part, axis=1)
        kth = cand_scores.min(axis=1, keepdims=True)
        # Any document tied with the boundary score might have a smaller index than the
        # one argpartition happened to keep: re-select among all of them where that occurs.
        n_tied_total = (scores == kth).sum(axis=1)
        n_tied_kept = (cand_scores == kth).sum(axis=1)
        rows = np.nonzero(n_tied_total > n_tied_kept)[0]
        for r in rows:  # rare: only rows with a tie straddling the cut-off
            order = np.lexsort((np.arange(n_d), -scores[r]))[:d]
            part[r] = order
        cand_scores = np.take_along_axis(scores, part, axis=1)
    else:
        part = np.broadcast_to(np.arange(n_d), (n_q, n_d)).copy()
        cand_scores = scores
    order = np.lexsort((part, -cand_scores), axis=1)
    doc_idx = np.take_along_axis(part, order, axis=1).astype(np.int64)
    top_scores = np.take_along_axis(cand_scores, order, axis=1).astype(np.float32)
    return padded(doc_idx, top_scores, depth)


def top_of_row(labels: NDArray[np.integer], scores: NDArray[np.floating], depth: int) -> tuple[NDArray, NDArray]:
    """:func:`top_k`'s rule for one row given as (label, score) pairs, e.g. the documents that
    match a query and their scores: the best ``depth``, score desc then label asc.

    ``argpartition`` picks the candidates; where labels tied with the cut-off score were left
    out, they are chosen by label, so the result does not depend on which of them
    ``argpartition`` kept. Returns (labels, scores) in rank order, at most ``depth`` long."""
    if depth <= 0:
        return labels[:0], scores[:0]
    if len(labels) > depth:
        part = np.argpartition(-scores, depth - 1)[:depth]
        kth = scores[part].min()
        if np.count_nonzero(scores == kth) > np.count_nonzero(scores[part] == kth):
            above = np.flatnonzero(scores > kth)
            tied = np.flatnonzero(scores == kth)
            part = np.concatenate([above, tied[np.argsort(labels[tied], kind="stable")[: depth - len(above)]]])
        labels, scores = labels[part], scores[part]
    order = np.lexsort((labels, -scores))
    return labels[order], scores[order]

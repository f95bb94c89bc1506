"""The Ranking every retriever returns and the Retriever protocol.

A Ranking holds, for each query (row), the indices of the retrieved documents into the
collection's ``doc_ids`` and their scores, best first: ordered by score descending, then by
document index ascending (the project's tie rule). ``-1`` marks "nothing here" (a query
that got fewer than ``depth`` results); its score is ``-inf``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Ranking:
    doc_idx: NDArray[np.int64]  # [n_queries, depth], -1 = nothing
    scores: NDArray[np.float32]  # [n_queries, depth], -inf where doc_idx == -1

    def __post_init__(self) -> None:
        if self.doc_idx.shape != self.scores.shape or self.doc_idx.ndim != 2:
            raise ValueError(
                f"Ranking arrays must be 2-D and of one shape, got {self.doc_idx.shape} and {self.scores.shape}"
            )

    @property
    def n_queries(self) -> int:
        return int(self.doc_idx.shape[0])

    @property
    def depth(self) -> int:
        return int(self.doc_idx.shape[1])

    def head(self, depth: int) -> "Ranking":
        """The first ``depth`` columns (a view)."""
        return Ranking(self.doc_idx[:, :depth], self.scores[:, :depth])


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
        return Ranking(np.full((n_q, depth), -1, np.int64), np.full((n_q, depth), -np.inf, np.float32))
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
    if d < depth:
        pad = depth - d
        doc_idx = np.concatenate([doc_idx, np.full((n_q, pad), -1, np.int64)], axis=1)
        top_scores = np.concatenate([top_scores, np.full((n_q, pad), -np.inf, np.float32)], axis=1)
    return Ranking(doc_idx, top_scores)


@runtime_checkable
class Retriever(Protocol):
    """Index a corpus once, then search queries to a depth.

    Implementations are configured by Hydra (``conf/retriever/*.yaml``) but know nothing of
    it: texts and ids in, arrays out.
    """

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None: ...

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking: ...

    def cache_key(self) -> dict:
        """Every setting that shapes the ranking (for the on-disk cache key)."""
        ...

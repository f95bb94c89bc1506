"""Hybrid retrieval: fuse the rankings of two retrievers (e.g. BM25 and a dense model).

Each side retrieves ``candidate_depth`` documents (at least the requested depth); the
candidate lists are fused per query and the top ``depth`` kept, ordered by fused score
(as float32) descending, then document index ascending.

- ``fusion: rrf`` — reciprocal rank fusion (Cormack, Clarke & Büttcher 2009, SIGIR):
  score(d) = sum over the lists that contain d of 1 / (rrf_k + rank(d)), rank 1-based.
- ``fusion: convex`` — a convex combination of normalized scores (Bruch, Gai & Ingber 2023,
  "An Analysis of Fusion Functions for Hybrid Retrieval", TOIS):
  score(d) = alpha * n1(d) + (1 - alpha) * n2(d), where n is the side's score normalized per
  query over its candidate list: ``minmax`` (s - min) / (max - min), or ``zscore``
  (s - mean) / std (population std). A document missing from one side's list gets 0 from
  that side, and a list whose scores are all equal normalizes to 0 — both as ranx does
  (ranx ``fuse(norm="min-max"|"zmuv", method="wsum")``), so the numbers can be checked
  against it. Note that under ``zscore`` 0 is the candidates' mean, not their floor.

Both sides are full retrievers configured on their own (Hydra instantiates the nested
``first`` and ``second`` configs); ``index`` indexes both.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.ranking import Ranking, rows_to_ranking
from retrievers.base import Retriever

log = logging.getLogger(__name__)

FUSIONS = ("rrf", "convex")
NORMALIZATIONS = ("minmax", "zscore")


def rrf_contributions(ranking: Ranking, rrf_k: float) -> NDArray[np.float64]:
    """1 / (rrf_k + rank) per entry (rank 1-based), 0 where there is no document."""
    ranks = np.arange(1, ranking.depth + 1, dtype=np.float64)
    contrib = np.broadcast_to(1.0 / (rrf_k + ranks), ranking.doc_idx.shape).copy()
    contrib[ranking.doc_idx < 0] = 0.0
    return contrib


def normalize_scores(ranking: Ranking, normalization: str) -> NDArray[np.float64]:
    """Per-query normalized scores over each row's documents (0 where there is none)."""
    valid = ranking.doc_idx >= 0
    s = np.where(valid, ranking.scores.astype(np.float64), np.nan)
    out = np.zeros(s.shape, np.float64)
    has = valid.any(axis=1)
    if not has.any():
        return out
    with np.errstate(invalid="ignore", divide="ignore"):
        if normalization == "minmax":
            lo = np.nanmin(s[has], axis=1, keepdims=True)
            span = np.nanmax(s[has], axis=1, keepdims=True) - lo
            norm = (s[has] - lo) / np.where(span > 0, span, np.inf)  # all equal -> 0
        elif normalization == "zscore":
            mean = np.nanmean(s[has], axis=1, keepdims=True)
            std = np.nanstd(s[has], axis=1, keepdims=True)
            norm = (s[has] - mean) / np.where(std > 0, std, np.inf)  # all equal -> 0
        else:
            raise ValueError(f"unknown normalization {normalization!r}; choose one of {', '.join(NORMALIZATIONS)}")
    out[has] = np.where(valid[has], norm, 0.0)
    return out


def fuse(rankings: Sequence[Ranking], contributions: Sequence[NDArray[np.float64]], depth: int) -> Ranking:
    """Sum each document's contributions over the rankings, per query; keep the top ``depth``.

    Only documents present in at least one ranking are candidates. Fused scores are rounded
    to float32 before sorting, so the stored scores follow the tie rule exactly.
    """
    n_q = rankings[0].n_queries
    rows, docs, vals = [], [], []
    for ranking, contrib in zip(rankings, contributions, strict=True):
        if ranking.n_queries != n_q:
            raise ValueError("rankings to fuse must have the same queries")
        r, c = np.nonzero(ranking.doc_idx >= 0)
        rows.append(r)
        docs.append(ranking.doc_idx[r, c])
        vals.append(contrib[r, c])
    rows_a, docs_a, vals_a = np.concatenate(rows), np.concatenate(docs), np.concatenate(vals)
    if len(rows_a) == 0 or depth == 0:
        return Ranking.empty(n_q, depth)
    n_docs = int(docs_a.max()) + 1
    pair, inverse = np.unique(rows_a * n_docs + docs_a, return_inverse=True)
    fused = np.bincount(inverse, weights=vals_a, minlength=len(pair)).astype(np.float32)
    q, d = pair // n_docs, pair % n_docs
    return rows_to_ranking(q, d, fused, n_q, depth, tie=d)


class HybridRetriever:
    """Fusion of two retrievers' rankings (see the module docstring).

    Args:
        first, second: the two retrievers (Hydra instantiates them from nested configs).
        fusion: ``rrf`` or ``convex``.
        rrf_k: the RRF constant (60 in Cormack et al. 2009).
        alpha: weight of ``first`` in the convex combination (``second`` gets 1 - alpha).
        normalization: ``minmax`` or ``zscore`` (convex fusion only).
        candidate_depth: documents taken from each side (at least the requested depth).
    """

    prefix_stable = False  # with depth > candidate_depth the candidate lists grow with depth

    def __init__(self, first: Retriever, second: Retriever, fusion: str = "rrf", rrf_k: float = 60.0,
                 alpha: float = 0.5, normalization: str = "minmax", candidate_depth: int = 100):
        if fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {fusion!r}; choose one of {', '.join(FUSIONS)}")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"unknown normalization {normalization!r}; choose one of {', '.join(NORMALIZATIONS)}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if rrf_k < 0:
            raise ValueError(f"rrf_k must be >= 0, got {rrf_k}")
        if candidate_depth < 1:
            raise ValueError(f"candidate_depth must be >= 1, got {candidate_depth}")
        self.first = first
        self.second = second
        self.fusion = fusion
        self.rrf_k = float(rrf_k)
        self.alpha = float(alpha)
        self.normalization = normalization
        self.candidate_depth = int(candidate_depth)

    def cache_key(self) -> dict[str, Any]:
        key: dict[str, Any] = {"retriever": "hybrid", "fusion": self.fusion, "candidate_depth": self.candidate_depth,
                               "first": self.first.cache_key(), "second": self.second.cache_key()}
        if self.fusion == "rrf":
            key["rrf_k"] = self.rrf_k
        else:
            key["alpha"] = self.alpha
            key["normalization"] = self.normalization
        return key

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None:
        self.first.index(doc_ids, doc_texts)
        self.second.index(doc_ids, doc_texts)
        reports = [getattr(r, "encode_report", None) or {} for r in (self.first, self.second)]
        self.encode_report = {"passages": sum(r.get("passages", 0) for r in reports),
                              "seconds": sum(r.get("seconds", 0.0) for r in reports)}

    def index_size(self) -> dict[str, int]:
        """Both retrievers' index sizes, summed (``retrievers.cost``)."""
        out: dict[str, int] = {}
        for part in (self.first, self.second):
            size = part.index_size() if callable(getattr(part, "index_size", None)) else {}
            for key, value in size.items():
                out[key] = out.get(key, 0) + int(value)
        return out

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        n_cand = max(self.candidate_depth, depth)
        a = self.first.search(query_ids, query_texts, n_cand)
        b = self.second.search(query_ids, query_texts, n_cand)
        return self.fuse(a, b, depth)

    def fuse(self, a: Ranking, b: Ranking, depth: int) -> Ranking:
        """Fuse two candidate rankings of the same queries into one of ``depth``."""
        if self.fusion == "rrf":
            contrib = [rrf_contributions(a, self.rrf_k), rrf_contributions(b, self.rrf_k)]
        else:
            contrib = [
                self.alpha * normalize_scores(a, self.normalization),
                (1.0 - self.alpha) * normalize_scores(b, self.normalization),
            ]
        return fuse([a, b], contrib, depth)

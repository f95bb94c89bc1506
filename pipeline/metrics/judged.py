"""Incomplete judgments: judged_at_K (ir_measures ``Judged@K``), bpref (Buckley & Voorhees 2004;
trec_eval ``bpref``), condensed lists (Sakai 2007; trec_eval ``-J``) and the warning a run
prints when too few of its top documents are judged.

A document is judged for a query when the qrels give it a grade >= 0 for that query (0
included); a negative grade, or no grade, makes it unjudged. ``lookup`` below is always
``grade_matrix(doc_idx, qrels, unjudged=UNJUDGED)``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from pipeline.metrics.grades import UNJUDGED
from pipeline.metrics.table import JUDGED_WARN_BELOW, JUDGED_WARN_K


def condense(doc_idx: NDArray[np.integer], lookup: NDArray[np.integer]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The condensed lists (Sakai 2007; trec_eval ``-J``): each ranking without its unjudged
    documents, the judged ones moved up in their order, -1 (and :data:`UNJUDGED`) after them.

    ``lookup`` is ``grade_matrix(doc_idx, qrels, unjudged=UNJUDGED)``; returns the condensed
    ``doc_idx`` and ``lookup``, of the same shape.
    """
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    lookup = np.asarray(lookup, dtype=np.int64)
    unjudged = lookup < 0
    order = np.argsort(unjudged, axis=1, kind="stable")  # judged first, each group in rank order
    moved = np.take_along_axis(unjudged, order, axis=1)
    docs = np.where(moved, -1, np.take_along_axis(doc_idx, order, axis=1))
    return docs, np.where(moved, UNJUDGED, np.take_along_axis(lookup, order, axis=1))


def judged_at_k(doc_idx: NDArray[np.integer], lookup: NDArray[np.integer], k_max: int,
                judged_so_far: NDArray[np.integer] | None = None) -> NDArray[np.float64]:
    """judged_at_K for K = 1..k_max: [n_queries, k_max].

    (# judged documents in the top K) / (# documents retrieved in the top K), as ir_measures'
    ``Judged@K``: the denominator is K unless the ranking holds fewer documents (then their
    number); 0 for a query that retrieved nothing (ir_measures gives it no value). Retrieved
    documents come first in each row, -1 after. ``lookup`` as for :func:`condense`;
    ``judged_so_far`` may pass its row-wise cumulative count of judged documents.
    """
    n_q, depth = np.shape(doc_idx)
    if judged_so_far is None:
        judged_so_far = np.cumsum(np.asarray(lookup)[:, :k_max] >= 0, axis=1, dtype=np.int64)
    counts = judged_so_far[:, :k_max]
    if counts.shape[1] < k_max:  # beyond the ranking the count stays
        last = counts[:, -1:] if depth else np.zeros((n_q, 1), np.int64)
        counts = np.concatenate([counts, np.broadcast_to(last, (n_q, k_max - counts.shape[1]))], axis=1)
    ranks = np.arange(1, k_max + 1, dtype=np.float64)
    out = counts / ranks  # rankings at least k_max long: the denominator is K
    # shorter rankings (their k_max-th slot is empty): the denominator is min(K, # retrieved)
    short = np.flatnonzero(np.asarray(doc_idx)[:, k_max - 1] < 0) if depth >= k_max else np.arange(n_q)
    if len(short):
        n_ret = np.count_nonzero(np.asarray(doc_idx)[short] >= 0, axis=1)
        out[short] = counts[short] / np.maximum(np.minimum(ranks, n_ret[:, None]), 1)  # 0 / 1 when none
    return out


def judged_warning(means: dict[str, float]) -> str | None:
    """The warning a run prints when the mean judged_at_10 is below 0.9, else None.

    Unjudged documents count as not relevant, so a retriever whose top 10 is mostly unjudged
    (one that took no part in the pooling) scores too low on every metric but bpref and the
    condensed-list (``judged_only``) ones.
    """
    value = means.get(f"judged_at_{JUDGED_WARN_K}")
    if value is None or value >= JUDGED_WARN_BELOW:
        return None
    return (f"warning: judged_at_{JUDGED_WARN_K} = {value:.4f} < {JUDGED_WARN_BELOW} ({value:.1%} of the top "
            f"{JUDGED_WARN_K} documents are judged): the numbers for this retriever are biased low; pool it "
            "(judge its unjudged top documents); bpref and judged_only=true score judged documents only")


def bpref(rel: NDArray[np.bool_], cum_rel: NDArray[np.int64], R: NDArray[np.int64], N: NDArray[np.int64],
          judged_so_far: NDArray[np.integer] | None, depth: int) -> NDArray[np.float64]:
    """bpref per query at full depth, trec_eval's ``bpref`` (m_bpref.c) term for term.

    bpref = (1 / R) * sum over the retrieved relevant documents r of 1 - min(n_r, R) / min(N, R),
    n_r = judged non-relevant documents above r, N = judged non-relevant documents of the
    query; unjudged documents are skipped; 0 when R = 0. n_r is (judged documents up to r)
    - (relevant ones up to r), read only at the relevant ranks, and the terms are added in
    rank order (``bincount``), as trec_eval adds them.

    ``rel`` [n_queries, width] flags the relevant documents of the scored list (width >= the
    ranking's ``depth``; columns beyond it are padding) and ``cum_rel`` counts them row by row;
    ``R`` and ``N`` are per query; ``judged_so_far`` counts the judged documents of the list row
    by row (None: a condensed list, all judged).
    """
    n_q, width = rel.shape
    if depth == 0:
        return np.zeros(n_q)
    cells = np.flatnonzero(rel[:, :depth] if depth < width else rel)  # row-major: rank order in each row
    rows, cols = np.divmod(cells, min(depth, width))
    judged = cols + 1 if judged_so_far is None else np.take(judged_so_far, rows * judged_so_far.shape[1] + cols)
    above = judged - np.take(cum_rel, rows * width + cols)
    r = R[rows]
    terms = 1.0 - np.minimum(above, r) / np.maximum(np.minimum(N[rows], r), 1)
    return np.bincount(rows, weights=terms, minlength=n_q) / np.maximum(R, 1)

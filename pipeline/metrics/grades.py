"""Relevance judgments (:class:`Qrels`) and what every metric computes from them: the
(queries x depth) grade matrix of a ranking, the ideal grades of each query, R and N (judged
relevant and non-relevant documents per query), gains and discounts, and the measures of
incomplete judgments (judged_at_K, bpref, condensed lists). ``lookup`` below is always
``grade_matrix(doc_idx, qrels, unjudged=UNJUDGED)``; judged means graded >= 0 (``pipeline.metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

Gain = Literal["exp", "linear"]


@dataclass(frozen=True)
class Qrels:
    """Relevance judgments as parallel integer arrays. ``doc_idx == -1`` marks a judged document
    that is not in the corpus: it still counts in R and in the ideal DCG (as trec_eval does) but
    can never be retrieved."""

    query_idx: NDArray[np.int64]
    doc_idx: NDArray[np.int64]
    grade: NDArray[np.int64]

    def __post_init__(self) -> None:
        n = len(self.query_idx)
        if len(self.doc_idx) != n or len(self.grade) != n:
            raise ValueError("Qrels arrays must have one length")


#: ``grade_matrix`` uses a dense (query x judged document) table while it has at most this many
#: cells, else sorted keys and ``searchsorted`` (tests lower it to exercise that path).
DENSE_CELLS = 1 << 28
#: Cells of the dense table built at once (it is built for a chunk of queries at a time).
DENSE_CHUNK = 1 << 24
#: ``grade_matrix(..., unjudged=UNJUDGED)`` marks unjudged documents and empty slots with it.
UNJUDGED = -1


def grade_matrix(doc_idx: NDArray[np.integer], qrels: Qrels, unjudged: int = 0) -> NDArray[np.int64]:
    """Grade of every retrieved document: [n_queries, depth], ``unjudged`` where unjudged or empty.

    ``unjudged`` = 0 (default) gives the grades the metrics use; :data:`UNJUDGED` (-1) tells
    judged documents (>= 0) from unjudged ones and empty slots (a negative grade counts as unjudged).

    Vectorized lookup: documents are first mapped to a compact index over the judged documents
    (unjudged ones drop out at once); then a dense (query x judged doc) table, built in chunks of
    queries, answers each cell with one gather. When that table would be too large, judgments
    keyed ``query * n_judged + doc`` are sorted once and found with ``searchsorted``.
    """
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    n_q, depth = doc_idx.shape
    known = qrels.doc_idx >= 0
    if n_q == 0 or depth == 0 or not known.any():
        return np.full((n_q, depth), unjudged, np.int64)
    q_j = qrels.query_idx[known].astype(np.int64)
    d_j = qrels.doc_idx[known].astype(np.int64)
    if unjudged > 0:
        raise ValueError(f"unjudged must be <= 0, got {unjudged}")
    g_j = qrels.grade[known].astype(np.int64)
    g_j = np.where(g_j >= 0, g_j, unjudged)
    n_docs = int(max(doc_idx.max(initial=-1), d_j.max())) + 1
    is_judged = np.zeros(n_docs, np.bool_)
    is_judged[d_j] = True
    judged_docs = np.flatnonzero(is_judged)
    n_judged = len(judged_docs)
    compact = np.full(n_docs + 1, -1, np.int64)  # last slot: the -1 of empty cells
    compact[judged_docs] = np.arange(n_judged)
    d_compact = compact[d_j]
    cell = compact[doc_idx]  # -1: unjudged document or empty slot
    if n_q * n_judged <= DENSE_CELLS:
        return _lookup_in_tables(cell, q_j, d_compact, g_j, n_judged, unjudged)
    out = np.full(cell.shape, unjudged, np.int64)
    keys = q_j * n_judged + d_compact
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_grades = keys[order], g_j[order]
    hit_cells = np.nonzero(cell >= 0)
    lookup = hit_cells[0] * n_judged + cell[hit_cells]
    pos = np.minimum(np.searchsorted(sorted_keys, lookup), len(sorted_keys) - 1)
    out[hit_cells] = np.where(sorted_keys[pos] == lookup, sorted_grades[pos], unjudged)
    return out


def _lookup_in_tables(cell: NDArray[np.int64], q_j: NDArray[np.int64], d_j: NDArray[np.int64],
                      g_j: NDArray[np.int64], n_judged: int, unjudged: int) -> NDArray[np.int64]:
    """``grade_matrix`` by dense (query x judged document) tables, a chunk of queries at a time.
    ``cell`` [n_queries, depth] holds each slot's compact judged-document index (-1: unjudged
    or empty); judgment i grades compact document ``d_j[i]`` for query ``q_j[i]`` with ``g_j[i]``."""
    n_q, depth = cell.shape
    # The table holds grade - unjudged (>= 0) and 0 for everything else, so it starts as
    # zeros (no fill pass); the gather adds ``unjudged`` back while it widens to int64.
    stored = g_j - unjudged
    out = np.empty((n_q, depth), np.int64)  # every row is written below
    dtype = np.int8 if 0 <= stored.min() and stored.max() <= np.iinfo(np.int8).max else np.int64
    chunk = max(1, DENSE_CHUNK // n_judged)
    order = np.argsort(q_j, kind="stable")
    q_sorted = q_j[order]
    for start in range(0, n_q, chunk):
        stop = min(n_q, start + chunk)
        lo, hi = np.searchsorted(q_sorted, [start, stop])
        sel = order[lo:hi]
        table = np.zeros((stop - start, n_judged + 1), dtype)  # column n_judged: unjudged, empty
        table[q_j[sel] - start, d_j[sel]] = stored[sel]
        c = cell[start:stop]
        c = np.where(c < 0, n_judged, c)
        if unjudged == 0:
            out[start:stop] = np.take_along_axis(table, c, axis=1)
        else:
            np.add(np.take_along_axis(table, c, axis=1), unjudged, out=out[start:stop], dtype=np.int64)
    return out


def ideal_matrix(qrels: Qrels, n_queries: int, depth: int) -> NDArray[np.int64]:
    """Every judged grade of each query (clipped at 0) sorted descending, zero-padded to depth.
    Grades are small integers, so the sort is a count: the ideal grade at position p is the
    number of levels g >= 1 for which the query has more than p judgments of grade >= g."""
    out = np.zeros((n_queries, depth), np.int64)
    if len(qrels.grade) == 0 or depth == 0:
        return out
    grades = np.maximum(qrels.grade, 0)
    top = int(grades.max())
    if top == 0:
        return out
    if top > 64:  # unusual grade scales: sort instead of counting
        order = np.lexsort((-grades, qrels.query_idx))
        q, g = qrels.query_idx[order], grades[order]
        pos = np.arange(len(q)) - np.searchsorted(q, q, side="left")
        keep = pos < depth
        out[q[keep], pos[keep]] = g[keep]
        return out
    counts = np.bincount(qrels.query_idx * (top + 1) + grades, minlength=n_queries * (top + 1))
    at_least = np.cumsum(counts.reshape(n_queries, top + 1)[:, ::-1], axis=1)[:, ::-1]  # [q, g]: # grades >= g
    positions = np.arange(depth)
    for level in range(1, top + 1):
        out += positions[None, :] < at_least[:, level, None]
    return out


def n_relevant(qrels: Qrels, n_queries: int, relevance_level: int = 1) -> NDArray[np.int64]:
    """R per query: judged documents with grade >= relevance_level (in the corpus or not)."""
    rel = qrels.grade >= relevance_level
    return np.bincount(qrels.query_idx[rel], minlength=n_queries).astype(np.int64)


def n_nonrelevant(qrels: Qrels, n_queries: int, relevance_level: int = 1) -> NDArray[np.int64]:
    """N per query (bpref): judged documents with 0 <= grade < relevance_level (in the corpus or not)."""
    grades = np.asarray(qrels.grade, dtype=np.int64)
    nonrel = grades.view(np.uint64) < relevance_level  # one comparison: negative grades wrap to huge values
    return np.bincount(qrels.query_idx[nonrel], minlength=n_queries).astype(np.int64)


#: The smallest grade whose exponential gain 2^g - 1 overflows a 64-bit float.
EXP_GAIN_LIMIT = 1024


def gain_values(grades: NDArray[np.integer], gain: Gain = "exp") -> NDArray[np.float64]:
    """gain(rel): ``exp`` = 2^rel - 1 (Burges et al. 2005), ``linear`` = rel (trec_eval). With ``exp``
    a grade >= 1024 (:data:`EXP_GAIN_LIMIT`) has no finite gain in float64: ValueError rather than
    an infinite gain and NaN metrics (use ``linear`` for such scales)."""
    grades = np.maximum(np.asarray(grades), 0)
    if gain == "exp":
        if grades.size and grades.max() >= EXP_GAIN_LIMIT:
            raise ValueError(f"grade {int(grades.max())} is too large for gain=exp (2^{int(grades.max())} - 1 "
                             "overflows a 64-bit float); use gain=linear")
        return np.exp2(grades.astype(np.float64)) - 1.0
    if gain == "linear":
        return grades.astype(np.float64)
    raise ValueError(f"gain must be 'exp' or 'linear', got {gain!r}")


def check_gain_overflow(qrels: Qrels, n_queries: int, gain: Gain = "exp") -> None:
    """ValueError when some query's gains cannot be summed in float64 (``exp`` gain only). Every
    DCG, ideal DCG and context-utility sum of a query is at most the sum of the gains of all its
    judged documents (each document is retrieved once, discounts and weights are <= 1 relative to
    it), so that sum being finite keeps every metric finite. Without this check a large grade
    gives an infinite ideal DCG and nDCG silently becomes 0 or NaN."""
    if gain != "exp" or not len(qrels.grade):
        return
    grades = np.maximum(np.asarray(qrels.grade), 0)
    top = int(grades.max())
    if top >= EXP_GAIN_LIMIT:
        gain_values(np.array([top]), gain)  # raises with the grade
    if top < 1000 and len(grades) < 1 << 24:  # fewer than 2^24 gains below 2^1000 each cannot overflow
        return
    with np.errstate(over="ignore"):
        totals = np.bincount(qrels.query_idx, weights=np.exp2(grades.astype(np.float64)) - 1.0,
                             minlength=n_queries)
    if not np.all(np.isfinite(totals)):
        query = int(np.flatnonzero(~np.isfinite(totals))[0])
        worst = int(grades[qrels.query_idx == query].max())
        raise ValueError(f"the judged grades of query #{query} (up to {worst}) sum to more than a 64-bit float "
                         "holds with gain=exp (2^g - 1 per document); use gain=linear")


def discounts(depth: int) -> NDArray[np.float64]:
    """The DCG discount 1 / log2(i + 1) for ranks i = 1..depth (Järvelin & Kekäläinen 2002)."""
    return 1.0 / np.log2(np.arange(2, depth + 2, dtype=np.float64))


def condense(doc_idx: NDArray[np.integer], lookup: NDArray[np.integer]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The condensed lists (Sakai 2007; trec_eval ``-J``): each ranking without its unjudged
    documents, the judged ones moved up in their order, -1 (and :data:`UNJUDGED`) after them:
    the condensed ``doc_idx`` and ``lookup``, of the same shape."""
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    lookup = np.asarray(lookup, dtype=np.int64)
    unjudged = lookup < 0
    order = np.argsort(unjudged, axis=1, kind="stable")  # judged first, each group in rank order
    moved = np.take_along_axis(unjudged, order, axis=1)
    docs = np.where(moved, -1, np.take_along_axis(doc_idx, order, axis=1))
    return docs, np.where(moved, UNJUDGED, np.take_along_axis(lookup, order, axis=1))


def judged_at_k(doc_idx: NDArray[np.integer], lookup: NDArray[np.integer], k_max: int,
                judged_so_far: NDArray[np.integer] | None = None) -> NDArray[np.float64]:
    """judged_at_K for K = 1..k_max, [n_queries, k_max]: (# judged documents in the top K) /
    (# documents retrieved in the top K), as ir_measures' ``Judged@K``: the denominator is K unless
    the ranking holds fewer documents (then their number); 0 for a query that retrieved nothing
    (ir_measures gives it no value). Retrieved documents come first in each row, -1 after.
    ``judged_so_far`` may pass the row-wise cumulative count of judged documents of ``lookup``."""
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


def bpref(rel: NDArray[np.bool_], cum_rel: NDArray[np.int64], R: NDArray[np.int64], N: NDArray[np.int64],
          judged_so_far: NDArray[np.integer] | None, depth: int) -> NDArray[np.float64]:
    """bpref per query at full depth, trec_eval's ``bpref`` (m_bpref.c) term for term.

    bpref = (1 / R) * sum over the retrieved relevant documents r of 1 - min(n_r, R) / min(N, R),
    n_r = judged non-relevant documents above r, N = judged non-relevant documents of the query;
    unjudged documents are skipped; 0 when R = 0. n_r is (judged documents up to r) - (relevant
    ones up to r), read only at the relevant ranks, and the terms are added in rank order
    (``bincount``), as trec_eval adds them. ``rel`` [n_queries, width] flags the relevant
    documents of the scored list (width >= the ranking's ``depth``; columns beyond it are padding)
    and ``cum_rel`` counts them row by row; ``judged_so_far`` counts the judged documents of the
    list row by row (None: a condensed list, all judged).
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

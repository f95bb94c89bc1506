"""Relevance judgments (:class:`Qrels`) and the grade lookups every metric starts from: the
(queries x depth) grade matrix of a ranking, the ideal grades of each query, and R and N
(judged relevant and non-relevant documents per query).

Grades are the integers of the qrels; unjudged documents and empty slots have grade 0 (or
:data:`UNJUDGED`, when the caller must tell them from judged documents); negative grades mark
a document in the pool but not judged (trec_eval's convention) and count as unjudged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Qrels:
    """Relevance judgments as parallel integer arrays.

    ``doc_idx == -1`` marks a judged document that is not in the corpus: it still counts in
    R and in the ideal DCG (as trec_eval does) but can never be retrieved.
    """

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
    judged documents (>= 0) from unjudged ones and empty slots. A negative grade in the qrels
    (in the pool, not judged: trec_eval's convention) counts as unjudged, so it becomes 0 by
    default.

    Vectorized lookup: documents are first mapped to a compact index over the judged
    documents (unjudged ones drop out at once); then a dense (query x judged doc) table,
    built in chunks of queries, answers each cell with one gather. When that table would be
    too large, judgments keyed ``query * n_judged + doc`` are sorted once and found with
    ``searchsorted``.
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
    return _lookup_by_search(cell, q_j, d_compact, g_j, n_judged, unjudged)


def _lookup_in_tables(cell: NDArray[np.int64], q_j: NDArray[np.int64], d_j: NDArray[np.int64],
                      g_j: NDArray[np.int64], n_judged: int, unjudged: int) -> NDArray[np.int64]:
    """``grade_matrix`` by dense (query x judged document) tables, a chunk of queries at a time.

    ``cell`` [n_queries, depth] holds each slot's compact judged-document index (-1: unjudged
    or empty); judgment i grades compact document ``d_j[i]`` for query ``q_j[i]`` with ``g_j[i]``.
    """
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


def _lookup_by_search(cell: NDArray[np.int64], q_j: NDArray[np.int64], d_j: NDArray[np.int64],
                      g_j: NDArray[np.int64], n_judged: int, unjudged: int) -> NDArray[np.int64]:
    """``grade_matrix`` when the dense tables would be too large: judgments keyed
    ``query * n_judged + doc`` are sorted once and every judged slot is found by ``searchsorted``
    (arguments as for :func:`_lookup_in_tables`)."""
    out = np.full(cell.shape, unjudged, np.int64)
    keys = q_j * n_judged + d_j
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_grades = keys[order], g_j[order]
    hit_cells = np.nonzero(cell >= 0)
    lookup = hit_cells[0] * n_judged + cell[hit_cells]
    pos = np.minimum(np.searchsorted(sorted_keys, lookup), len(sorted_keys) - 1)
    out[hit_cells] = np.where(sorted_keys[pos] == lookup, sorted_grades[pos], unjudged)
    return out


def ideal_matrix(qrels: Qrels, n_queries: int, depth: int) -> NDArray[np.int64]:
    """Every judged grade of each query (clipped at 0) sorted descending, zero-padded to depth.

    Grades are small integers, so the sort is a count: the ideal grade at position p is the
    number of levels g >= 1 for which the query has more than p judgments of grade >= g.
    """
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

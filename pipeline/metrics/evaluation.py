"""Every metric of the definition card at every cut-off K = 1..k_max, in one vectorized pass.

The definition card (docs/metrics.md) in code. Inputs are arrays: a ranking ``doc_idx``
[n_queries, depth] (-1 = nothing retrieved there) and :class:`Qrels`. We build the
(queries x depth) grade matrix once with a sorted-key lookup, and every metric at every K
is then a cumulative sum or a division away. No per-query Python loops, no rounding.

Conventions shared by every metric (and written in docs/metrics.md):

- Grades are the integers of the qrels; unjudged documents and empty slots have grade 0;
  negative grades count as 0. A document is relevant when grade >= ``relevance_level``
  (which must be >= 1, so an unjudged document is never relevant).
- R is the number of judged documents with grade >= ``relevance_level``, including judged
  documents that are not in the corpus (as trec_eval counts them).
- The ideal ranking for nDCG is every judged grade of the query sorted descending.
- Means are over queries with R > 0 (``n_queries``); judged queries with R = 0 are left out
  and counted (``n_queries_no_relevant``). A judged query that retrieved nothing scores 0.
- Order inside the ranking is the caller's: the ranking is scored as given.
- A document is judged for a query when the qrels give it a grade >= 0 for that query (0
  included). A negative grade marks a document that is in the pool but not judged (trec_eval's
  convention, e.g. for infAP samples): it counts as unjudged, as does any document the
  query's qrels do not list. ``judged_at_K`` and ``bpref`` (Buckley & Voorhees 2004) measure
  and resist incomplete judgments; ``judged_only`` scores condensed lists (Sakai 2007):
  every ranking without its unjudged documents, as ``trec_eval -J`` does.

Sources: trec_eval 9.0.8 (``P``, ``recall``, ``map_cut``, ``ndcg_cut``, ``recip_rank``,
``map``, ``bpref``, ``-J``), Järvelin & Kekäläinen 2002 (CG/DCG/nDCG), Burges et al. 2005
(exponential gain), ir_measures (``Judged@K``), Sakai 2007 (condensed lists).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
from numpy.typing import NDArray

from pipeline.metrics.gains import Gain, check_gain_overflow, discounts, gain_values
from pipeline.metrics.grades import UNJUDGED, Qrels, grade_matrix, ideal_matrix, n_nonrelevant, n_relevant
from pipeline.metrics.judged import bpref, condense, judged_at_k


@dataclass
class Evaluation:
    """Per-query values of every metric family at K = 1..k_max, plus ``mrr``/``map``/``bpref`` at full depth.

    ``at_k[family]`` is [n_queries, k_max]; column K-1 holds the value at cut-off K.
    ``judged_only``: scored on condensed lists (unjudged documents removed; judged_at_K excepted).
    """

    k_max: int
    at_k: dict[str, NDArray[np.float64]]
    full: dict[str, NDArray[np.float64]]  # "mrr", "map", "bpref": [n_queries]
    n_relevant: NDArray[np.int64]
    extra_at_k: dict[str, NDArray[np.float64]] = field(default_factory=dict)
    judged_only: bool = False

    @property
    def evaluated(self) -> NDArray[np.bool_]:
        """Queries that count in the means: those with at least one relevant document."""
        return self.n_relevant > 0

    @property
    def n_queries(self) -> int:
        return int(self.evaluated.sum())

    @property
    def n_queries_no_relevant(self) -> int:
        return int((~self.evaluated).sum())

    def families(self) -> list[str]:
        return [*self.at_k, *self.extra_at_k]

    def values(self, family: str) -> NDArray[np.float64]:
        return self.at_k[family] if family in self.at_k else self.extra_at_k[family]

    def add(self, family: str, values: NDArray[np.float64]) -> None:
        """Attach another per-query [n_queries, k_max] family (e.g. context_utility)."""
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (len(self.n_relevant), self.k_max):
            raise ValueError(f"{family}: expected shape {(len(self.n_relevant), self.k_max)}, got {values.shape}")
        self.extra_at_k[family] = values

    def curve(self, family: str) -> NDArray[np.float64]:
        """Mean over evaluated queries at every K = 1..k_max (zeros if none is evaluated)."""
        mask = self.evaluated
        if not mask.any():
            return np.zeros(self.k_max)
        values = self.values(family)
        # Every query evaluated (the usual case): no copy of the rows; the same sum, row by row.
        return (values if mask.all() else values[mask]).mean(axis=0)

    def means(self, ks: Iterable[int] | None = None) -> dict[str, float]:
        """``{family}_at_{K}`` for each K in ``ks`` (default: every K), ``mrr``, ``map``, counts."""
        ks = range(1, self.k_max + 1) if ks is None else list(ks)
        for k in ks:
            if not 1 <= k <= self.k_max:
                raise ValueError(f"K={k} is outside 1..k_max={self.k_max}")
        mask = self.evaluated
        out: dict[str, float] = {}
        for family in self.families():
            curve = self.curve(family)
            for k in ks:
                out[f"{family}_at_{k}"] = float(curve[k - 1])
        for name, values in self.full.items():
            out[name] = float(values[mask].mean()) if mask.any() else 0.0
        out["n_queries"] = self.n_queries
        out["n_queries_no_relevant"] = self.n_queries_no_relevant
        return out

    def per_query(self, query_ids: Iterable[str], ks: Iterable[int] | None = None) -> dict[str, Any]:
        """The per-query table as columns (``pandas.DataFrame(ev.per_query(ids))`` makes it a
        frame): ``query_id``, every family at every K (or at ``ks``), ``mrr``, ``map``, R and
        whether it counts."""
        table: dict[str, Any] = {"query_id": list(query_ids)}
        cutoffs = range(1, self.k_max + 1) if ks is None else sorted(set(ks))
        for family in self.families():
            values = self.values(family)
            table.update((f"{family}_at_{k}", values[:, k - 1]) for k in cutoffs)
        table.update(self.full)
        table["n_relevant"] = self.n_relevant
        table["evaluated"] = self.evaluated
        return table


def evaluate(
    doc_idx: NDArray[np.integer],
    qrels: Qrels,
    k_max: int,
    gain: Gain = "exp",
    relevance_level: int = 1,
    lookup: NDArray[np.integer] | None = None,
    judged_only: bool = False,
    judged_metrics: bool = True,
) -> Evaluation:
    """Every metric of the definition card at every K = 1..k_max, for every query.

    ``doc_idx`` is [n_queries, depth] in rank order (row q = query index q of ``qrels``),
    -1 where nothing was retrieved (after the retrieved documents). ``k_max`` may exceed
    ``depth``: the missing ranks are empty (precision keeps K as its denominator, like
    trec_eval's ``P``).

    Definitions: :data:`TABLE` (the definition card); ``mrr``, ``map`` and ``bpref`` are
    given at full depth (the ranking's ``depth``).

    ``judged_only``: score the condensed lists (:func:`condense`, trec_eval ``-J``);
    judged_at_K stays that of the ranking as given. ``judged_metrics=False`` leaves out
    judged_at_K and bpref (their cost is measured by benchmarks/metrics.py). ``lookup`` may
    pass ``grade_matrix(doc_idx, qrels, unjudged=UNJUDGED)`` when the caller has it already.
    """
    doc_idx, lookup = _checked_inputs(doc_idx, qrels, k_max, gain, relevance_level, lookup)
    n_q, depth = doc_idx.shape
    judged = judged_so_far = None
    if judged_metrics:
        judged_so_far = np.cumsum(lookup >= 0, axis=1, dtype=np.int32)  # of the ranking as given
        judged = judged_at_k(doc_idx, lookup, k_max, judged_so_far)
    if judged_only:
        doc_idx, lookup = condense(doc_idx, lookup)
    grades = np.zeros((n_q, max(depth, k_max)), np.int64)
    np.maximum(lookup, 0, out=grades[:, :depth])
    R = n_relevant(qrels, n_q, relevance_level)
    rel = grades >= relevance_level
    cum_rel = np.cumsum(rel, axis=1, dtype=np.int64)
    at_k, full = _binary_families(rel, cum_rel, R, k_max)
    at_k.update(_graded_families(grades[:, :k_max], qrels, k_max, gain))
    if judged is not None:
        at_k["judged"] = judged
        full["bpref"] = bpref(rel, cum_rel, R, n_nonrelevant(qrels, n_q, relevance_level),
                              None if judged_only else judged_so_far, depth)
    return Evaluation(k_max=k_max, at_k=at_k, full=full, n_relevant=R, judged_only=judged_only)


def _checked_inputs(doc_idx: NDArray[np.integer], qrels: Qrels, k_max: int, gain: Gain, relevance_level: int,
                    lookup: NDArray[np.integer] | None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``doc_idx`` and its grade lookup as int64 arrays of one shape; ValueError for a bad argument
    (and for grades whose exponential gains overflow)."""
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    if relevance_level < 1:
        raise ValueError(f"relevance_level must be >= 1, got {relevance_level}")
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    if doc_idx.ndim != 2:
        raise ValueError(f"doc_idx must be 2-D [n_queries, depth], got shape {doc_idx.shape}")
    check_gain_overflow(qrels, doc_idx.shape[0], gain)
    if lookup is None:
        lookup = grade_matrix(doc_idx, qrels, unjudged=UNJUDGED)
    lookup = np.asarray(lookup, np.int64)
    if lookup.shape != doc_idx.shape:
        raise ValueError(f"lookup must have the shape of doc_idx {doc_idx.shape}, got {lookup.shape}")
    return doc_idx, lookup


def _binary_families(rel: NDArray[np.bool_], cum_rel: NDArray[np.int64], R: NDArray[np.int64],
                     k_max: int) -> tuple[dict[str, NDArray[np.float64]], dict[str, NDArray[np.float64]]]:
    """precision, recall, hit_rate, mrr and map at K = 1..k_max, and mrr and map at full depth.

    ``rel`` [n_queries, width >= k_max] flags the relevant documents of the scored list and
    ``cum_rel`` counts them row by row. A query with R = 0 has no document with grade >=
    relevance_level (>= 1), so every family here is 0 for it without masking.
    """
    n_q, width = rel.shape
    R_safe = np.maximum(R, 1).astype(np.float64)[:, None]
    ranks = np.arange(1, width + 1, dtype=np.float64)
    precision_all = cum_rel / ranks
    ap_sum = np.cumsum(np.where(rel, precision_all, 0.0), axis=1)
    any_rel = rel.any(axis=1)
    # 1-based rank of the first relevant document; width + 1 when there is none
    first = np.where(any_rel, rel.argmax(axis=1) + 1, width + 1)
    rr = np.where(any_rel, 1.0 / first, 0.0)

    at_k: dict[str, NDArray[np.float64]] = {}
    at_k["precision"] = precision_all[:, :k_max]
    at_k["recall"] = cum_rel[:, :k_max] / R_safe
    at_k["hit_rate"] = (cum_rel[:, :k_max] > 0).astype(np.float64)
    at_k["mrr"] = np.where(first[:, None] <= np.arange(1, k_max + 1), rr[:, None], 0.0)
    at_k["map"] = ap_sum[:, :k_max] / R_safe
    full = {"mrr": rr, "map": ap_sum[:, -1] / R_safe[:, 0] if width else np.zeros(n_q)}
    return at_k, full


def _graded_families(head: NDArray[np.int64], qrels: Qrels, k_max: int, gain: Gain) -> dict[str, NDArray[np.float64]]:
    """cg, dcg and ndcg at K = 1..k_max from ``head``, the grades of the top k_max (clipped at 0);
    the ideal DCG is that of every judged grade of the query sorted descending."""
    disc = discounts(k_max)
    dcg = np.cumsum(gain_values(head, gain) * disc, axis=1)
    idcg = np.cumsum(gain_values(ideal_matrix(qrels, head.shape[0], k_max), gain) * disc, axis=1)
    return {
        "cg": np.cumsum(head, axis=1, dtype=np.float64),
        "dcg": dcg,
        "ndcg": np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0),
    }

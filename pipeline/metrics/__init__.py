"""Exact, vectorized IR metrics for every cut-off K = 1..k_max in one pass.

The definition card (README "Metric definitions") in code. Inputs are arrays: a ranking ``doc_idx``
[n_queries, depth] (-1 = nothing retrieved there) and :class:`Qrels`. We build the
(queries x depth) grade matrix once with a sorted-key lookup, and every metric at every K
is then a cumulative sum or a division away. No per-query Python loops, no rounding.

Conventions shared by every metric (and written in the README):

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

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

import numpy as np
from numpy.typing import NDArray

Gain = Literal["exp", "linear"]

@dataclass(frozen=True)
class Family:
    """One metric family: the single source of its name, label, bounds and definition.

    ``stage`` says what a family is computed on: ``ranking`` (``evaluate``, the retriever's
    order) or ``placed`` (the context order, added by the caller, e.g. context utility).
    ``full_depth`` names the family's value at the ranking's full depth, when it has one
    (``mrr``, ``map``, ``bpref``); ``at_k`` is False for a family that has only that value (no
    ``<name>_at_K`` keys, no curve: ``bpref``). ``definition`` is the row of the definition
    card; ``{gain}`` in it is replaced by the gain in use.
    """

    name: str
    label: str  # for figures: "nDCG@K"
    bounded: bool  # within [0, 1]
    curve: bool  # logged as the stepped metric curve/<name> (step = K)
    definition: str
    source: str
    stage: Literal["ranking", "placed"] = "ranking"
    full_depth: str | None = None
    at_k: bool = True

    @property
    def key(self) -> str:
        """How the definition card names it: ``ndcg_at_K``, or ``bpref`` for a full-depth-only family."""
        return f"{self.name}_at_K" if self.at_k else self.name


#: Every metric family, in the order of the per-query table. Adding a metric is one row here
#: and its computation (in ``evaluate`` for ``ranking`` families).
TABLE: tuple[Family, ...] = (
    Family("precision", "precision@K", True, True,
           "(# relevant in top K) / K; K is the denominator even if fewer were retrieved", "trec_eval `P`"),
    Family("recall", "recall@K", True, True, "(# relevant in top K) / R", "trec_eval `recall`"),
    Family("hit_rate", "hit rate@K", True, False, "1 if any relevant document is in the top K, else 0",
           "success@K"),
    Family("mrr", "MRR@K", True, True,
           "1 / rank of the first relevant document within K, else 0; `mrr` = the same at full depth",
           "trec_eval `recip_rank`", full_depth="mrr"),
    Family("map", "MAP@K", True, True,
           "sum over relevant ranks i <= K of precision_at_i, divided by R (trec_eval `map_cut`); "
           "`map` = at full depth", "trec_eval `map_cut`, `map`", full_depth="map"),
    Family("cg", "CG@K", False, False, "sum of rel_i for i <= K", "Järvelin & Kekäläinen 2002"),
    Family("dcg", "DCG@K", False, False, "sum of gain(rel_i) / log2(i + 1), gain = {gain}",
           "Järvelin & Kekäläinen 2002; Burges et al. 2005 (exponential gain)"),
    Family("ndcg", "nDCG@K", True, True,
           "dcg_at_K / idcg_at_K; idcg = the DCG of all judged grades of the query sorted descending, "
           "cut at K; 0 when idcg is 0", "trec_eval `ndcg_cut`; ranx `ndcg_burges` (exp gain)"),
    Family("context_utility", "context utility@K", True, True,
           "sum of gain(rel at slot i) * w(i) over the placed top K, divided by the same sum for the best "
           "judged documents in the best slots (w = the attention curve stretched over K slots); 1 = the "
           "strongest evidence sits where the model looks; chunked runs: the placed chunks, each with its document's "
           "grade, over every chunk of the judged documents", "this project (pipeline/context/placement.py)",
           stage="placed"),
    Family("context_precision", "context precision@K", True, False,
           "(# of the top K chunks whose document is relevant) / K: the share of the context from relevant "
           "documents (a chunk's grade is its document's); logged by chunked or budgeted runs only",
           "this project (pipeline/context/chunking.py)", stage="placed"),
    Family("context_recall", "context recall@K", True, False,
           "(# distinct relevant documents with a chunk in the top K) / R; logged by chunked or budgeted runs "
           "only", "this project (pipeline/context/chunking.py)", stage="placed"),
    Family("judged", "judged@K", True, True,
           "(# judged documents in the top K) / (# documents retrieved in the top K), i.e. / K unless the "
           "ranking is shorter; 0 when nothing was retrieved; judged = graded >= 0 for the query (0 "
           "included); always on the ranking as retrieved, also with `judged_only`",
           "ir_measures `Judged@K`"),
    Family("bpref", "bpref", True, False,
           "(1 / R) * sum over the judged relevant documents retrieved (full depth) of "
           "1 - min(n, R) / min(N, R), n = # judged non-relevant documents ranked above it, N = # judged "
           "non-relevant documents of the query (0 <= grade < relevance_level); unjudged documents are "
           "skipped; 0 when R = 0", "Buckley & Voorhees 2004; trec_eval `bpref`",
           full_depth="bpref", at_k=False),
)

FAMILY: dict[str, Family] = {f.name: f for f in TABLE}
#: Families computed by ``evaluate`` at every K, in the order of the per-query table.
FAMILIES = tuple(f.name for f in TABLE if f.stage == "ranking" and f.at_k)
#: Every family a run reports at a cut-off (the ranking's and the placed context's).
RUN_FAMILIES = tuple(f.name for f in TABLE if f.at_k)
#: Families of ``evaluate`` bounded by [0, 1] at every K (cg and dcg are not).
BOUNDED = tuple(f.name for f in TABLE if f.bounded and f.stage == "ranking" and f.at_k)
#: The K-sweep curves a run logs as ``curve/<family>`` (step = K).
CURVES = tuple(f.name for f in TABLE if f.curve)
#: Values at the ranking's full depth: ``mrr``, ``map``, ``bpref``.
FULL_DEPTH = tuple(f.full_depth for f in TABLE if f.full_depth)
#: A run warns when the mean judged_at_K at this K is below this share (``judged_warning``).
JUDGED_WARN_K = 10
JUDGED_WARN_BELOW = 0.9
#: Cut-offs reported besides a run's own k (those <= k_max), so runs with different k compare.
STANDARD_KS = (1, 3, 5, 10, 20, 50, 100)
LABELS = {f.name: f.label for f in TABLE}

_METRIC_KEY = re.compile(r"^(?P<family>[a-z_]+)_at_(?P<k>[0-9]+)$")


def parse_key(key: str) -> tuple[str, int | None]:
    """``"ndcg_at_10"`` -> ("ndcg", 10); ``"mrr"``/``"map"`` -> (name, None). ValueError otherwise."""
    if key in FULL_DEPTH:
        return key, None
    match = _METRIC_KEY.match(key)
    if not match or match["family"] not in FAMILY or not FAMILY[match["family"]].at_k:
        choices = ", ".join(f"{f}_at_K" for f in RUN_FAMILIES)
        raise ValueError(f"{key!r} is not a metric: use {', '.join(FULL_DEPTH)} or one of {choices}")
    return match["family"], int(match["k"])


def report_ks(k: int, k_max: int, extra: Iterable[int | None] = ()) -> list[int]:
    """The cut-offs a run reports: its k, the standard ones up to k_max, and any extra."""
    return sorted({k, *(c for c in STANDARD_KS if c <= k_max), *(e for e in extra if e is not None)})


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


#: The smallest grade whose exponential gain 2^g - 1 overflows a 64-bit float.
EXP_GAIN_LIMIT = 1024


def gain_values(grades: NDArray[np.integer], gain: Gain = "exp") -> NDArray[np.float64]:
    """gain(rel): ``exp`` = 2^rel - 1 (Burges et al. 2005), ``linear`` = rel (trec_eval).

    With ``exp`` a grade >= 1024 (:data:`EXP_GAIN_LIMIT`) has no finite gain in float64:
    ValueError rather than an infinite gain and NaN metrics (use ``linear`` for such scales).
    """
    grades = np.maximum(np.asarray(grades), 0)
    if gain == "exp":
        if grades.size and grades.max() >= EXP_GAIN_LIMIT:
            raise ValueError(
                f"grade {int(grades.max())} is too large for gain=exp (2^{int(grades.max())} - 1 overflows a "
                "64-bit float); use gain=linear"
            )
        return np.exp2(grades.astype(np.float64)) - 1.0
    if gain == "linear":
        return grades.astype(np.float64)
    raise ValueError(f"gain must be 'exp' or 'linear', got {gain!r}")


def check_gain_overflow(qrels: Qrels, n_queries: int, gain: Gain = "exp") -> None:
    """ValueError when some query's gains cannot be summed in float64 (``exp`` gain only).

    Every DCG, ideal DCG and context-utility sum of a query is at most the sum of the gains of
    all its judged documents (each document is retrieved once, discounts and weights are
    <= 1 relative to it), so that sum being finite keeps every metric finite. Without this
    check a large grade gives an infinite ideal DCG and nDCG silently becomes 0 or NaN.
    """
    if gain != "exp" or not len(qrels.grade):
        return
    grades = np.maximum(np.asarray(qrels.grade), 0)
    top = int(grades.max())
    if top >= EXP_GAIN_LIMIT:
        gain_values(np.array([top]), gain)  # raises with the grade
    if top < 1000:  # at most 2^24 judgments per query below 2^1000 each: cannot overflow
        if len(grades) < 1 << 24:
            return
    with np.errstate(over="ignore"):
        totals = np.bincount(qrels.query_idx, weights=np.exp2(grades.astype(np.float64)) - 1.0,
                             minlength=n_queries)
    if not np.all(np.isfinite(totals)):
        query = int(np.flatnonzero(~np.isfinite(totals))[0])
        worst = int(grades[qrels.query_idx == query].max())
        raise ValueError(
            f"the judged grades of query #{query} (up to {worst}) sum to more than a 64-bit float holds "
            "with gain=exp (2^g - 1 per document); use gain=linear"
        )


def discounts(depth: int) -> NDArray[np.float64]:
    """1 / log2(i + 1) for ranks i = 1..depth."""
    return 1.0 / np.log2(np.arange(2, depth + 2, dtype=np.float64))


#: Dense lookup tables are used while queries x judged documents stays under this many cells.
_DENSE_CELLS = 1 << 28
_DENSE_CHUNK = 1 << 24
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
    if n_q * n_judged <= _DENSE_CELLS:
        # The table holds grade - unjudged (>= 0) and 0 for everything else, so it starts as
        # zeros (no fill pass); the gather adds ``unjudged`` back while it widens to int64.
        stored = g_j - unjudged
        out = np.empty((n_q, depth), np.int64)  # every row is written below
        dtype = np.int8 if 0 <= stored.min() and stored.max() <= np.iinfo(np.int8).max else np.int64
        chunk = max(1, _DENSE_CHUNK // n_judged)
        order = np.argsort(q_j, kind="stable")
        q_sorted = q_j[order]
        for start in range(0, n_q, chunk):
            stop = min(n_q, start + chunk)
            lo, hi = np.searchsorted(q_sorted, [start, stop])
            sel = order[lo:hi]
            table = np.zeros((stop - start, n_judged + 1), dtype)  # column n_judged: unjudged, empty
            table[q_j[sel] - start, d_compact[sel]] = stored[sel]
            c = cell[start:stop]
            c = np.where(c < 0, n_judged, c)
            if unjudged == 0:
                out[start:stop] = np.take_along_axis(table, c, axis=1)
            else:
                np.add(np.take_along_axis(table, c, axis=1), unjudged, out=out[start:stop], dtype=np.int64)
        return out
    out = np.full((n_q, depth), unjudged, np.int64)
    keys = q_j * n_judged + d_compact
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
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    if relevance_level < 1:
        raise ValueError(f"relevance_level must be >= 1, got {relevance_level}")
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    if doc_idx.ndim != 2:
        raise ValueError(f"doc_idx must be 2-D [n_queries, depth], got shape {doc_idx.shape}")
    n_q, depth = doc_idx.shape
    width = max(depth, k_max)
    check_gain_overflow(qrels, n_q, gain)

    if lookup is None:
        lookup = grade_matrix(doc_idx, qrels, unjudged=UNJUDGED)
    lookup = np.asarray(lookup, np.int64)
    if lookup.shape != doc_idx.shape:
        raise ValueError(f"lookup must have the shape of doc_idx {doc_idx.shape}, got {lookup.shape}")
    judged = judged_so_far = None
    if judged_metrics:
        judged_so_far = np.cumsum(lookup >= 0, axis=1, dtype=np.int32)  # of the ranking as given
        judged = judged_at_k(doc_idx, lookup, k_max, judged_so_far)
    if judged_only:
        doc_idx, lookup = condense(doc_idx, lookup)
    grades = np.zeros((n_q, width), np.int64)
    np.maximum(lookup, 0, out=grades[:, :depth])
    R = n_relevant(qrels, n_q, relevance_level)
    R_safe = np.maximum(R, 1).astype(np.float64)[:, None]
    ranks = np.arange(1, width + 1, dtype=np.float64)

    rel = grades >= relevance_level
    cum_rel = np.cumsum(rel, axis=1, dtype=np.int64)
    precision_all = cum_rel / ranks
    ap_sum = np.cumsum(np.where(rel, precision_all, 0.0), axis=1)
    any_rel = rel.any(axis=1)
    # 1-based rank of the first relevant document; width + 1 when there is none
    first = np.where(any_rel, rel.argmax(axis=1) + 1, width + 1)
    rr = np.where(any_rel, 1.0 / first, 0.0)

    # A query with R = 0 has no document with grade >= relevance_level (>= 1), so every
    # binary family below is 0 for it without masking.
    at_k: dict[str, NDArray[np.float64]] = {}
    at_k["precision"] = precision_all[:, :k_max]
    at_k["recall"] = cum_rel[:, :k_max] / R_safe
    at_k["hit_rate"] = (cum_rel[:, :k_max] > 0).astype(np.float64)
    at_k["mrr"] = np.where(first[:, None] <= np.arange(1, k_max + 1), rr[:, None], 0.0)
    at_k["map"] = ap_sum[:, :k_max] / R_safe

    disc = discounts(k_max)
    head = grades[:, :k_max]
    at_k["cg"] = np.cumsum(head, axis=1, dtype=np.float64)
    dcg = np.cumsum(gain_values(head, gain) * disc, axis=1)
    idcg = np.cumsum(gain_values(ideal_matrix(qrels, n_q, k_max), gain) * disc, axis=1)
    at_k["dcg"] = dcg
    at_k["ndcg"] = np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0)

    full = {"mrr": rr, "map": ap_sum[:, -1] / R_safe[:, 0] if width else np.zeros(n_q)}
    if judged is not None:
        at_k["judged"] = judged
        full["bpref"] = _bpref(rel, cum_rel, R, n_nonrelevant(qrels, n_q, relevance_level),
                               None if judged_only else judged_so_far, depth)
    return Evaluation(k_max=k_max, at_k=at_k, full=full, n_relevant=R, judged_only=judged_only)


def _bpref(rel: NDArray[np.bool_], cum_rel: NDArray[np.int64], R: NDArray[np.int64], N: NDArray[np.int64],
           judged_so_far: NDArray[np.integer] | None, depth: int) -> NDArray[np.float64]:
    """bpref per query at full depth, trec_eval's ``bpref`` (m_bpref.c) term for term.

    bpref = (1 / R) * sum over the retrieved relevant documents r of 1 - min(n_r, R) / min(N, R),
    n_r = judged non-relevant documents above r, N = judged non-relevant documents of the
    query; unjudged documents are skipped; 0 when R = 0. n_r is (judged documents up to r)
    - (relevant ones up to r), read only at the relevant ranks, and the terms are added in
    rank order (``bincount``), as trec_eval adds them. ``rel``/``cum_rel`` are over the scored
    list; ``judged_so_far`` counts its judged documents (None: a condensed list, all judged).
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


def definition_card(gain: Gain, relevance_level: int, tie_rule: str, judged_only: bool = False) -> str:
    """The metric definitions a run used, as Markdown (logged with every run), from :data:`TABLE`."""
    gain_text = "2^rel - 1 (`gain: exp`)" if gain == "exp" else "rel (`gain: linear`, as trec_eval)"
    rows = "\n".join(f"| `{f.key}` | {f.definition.format(gain=gain_text)} |" for f in TABLE)
    if judged_only:
        lists = ("**This run scored condensed lists (`judged_only: true`)**: unjudged documents were removed "
                 "from each ranking before scoring (Sakai 2007; trec_eval `-J`, pytrec_eval "
                 "`judged_docs_only_flag=True`), so every metric but `judged_at_K` describes the judged "
                 "documents only, in their order; `context_utility_at_K` places the condensed top K. Such "
                 "numbers are not comparable with those of runs that scored the full rankings.")
    else:
        lists = ("Full rankings (`judged_only: false`): unjudged documents count as not relevant. With "
                 "`judged_only: true` they are removed from each ranking before scoring (condensed lists: "
                 "Sakai 2007; trec_eval `-J`).")
    return f"""# Metric definitions used by this run

Grades are the integers of the qrels; unjudged documents have grade 0; negative grades
count as 0. A document is relevant when grade >= {relevance_level} (`relevance_level`).
rel_i is the grade at rank i (1-based); R is the number of relevant judged documents
(judged documents missing from the corpus included, as trec_eval counts them). A document
is judged for a query when the qrels give it a grade >= 0 for that query (0 included); a
negative grade marks a document in the pool but not judged (trec_eval's convention) and
counts as unjudged.

| key | definition |
|---|---|
{rows}

- {lists}
- A run warns when the mean `judged_at_{JUDGED_WARN_K}` is below {JUDGED_WARN_BELOW}: unjudged documents in
  the top ranks bias the other metrics low for this retriever; pool it.
- Retrieval metrics are computed on the retriever's order; `context_utility_at_K` on the
  placed order.
- Chunked runs (`chunker` other than `none`; README, "Chunking and token budgets"): the
  retrieval metrics score the document ranking folded from the chunk ranking
  (`chunker.fold`: `maxp` = a document's best chunk score, `sump` = the sum of its retrieved
  chunks' scores, `firstp` = its first chunk's score; Dai & Callan 2019), so they compare with
  unchunked runs. The context families (`context_*`) score the top K chunks, each with its
  document's grade; `context_utility_at_K`'s ideal is then every chunk of the judged
  documents with its document's grade, sorted descending.
- Token budgets (chunked runs, or any run with `budget`): the context under B tokens is the
  longest prefix of the chunk ranking whose tokens sum to <= B (n chunks, placed by the
  reorder strategy under the attention curve over n slots). Per B: `n_chunks_budget_B` (mean
  n), `tokens_budget_B` (mean tokens used), `context_precision_budget_B` (share of the n chunks
  from relevant documents; 0 when n = 0), `context_recall_budget_B` (distinct relevant
  documents in the context / R), `relevant_token_share_budget_B` (tokens of chunks from relevant
  documents / tokens in the context; 0 when empty), `context_utility_budget_B` (as
  `context_utility_at_K` with K = n); each also a stepped metric `budget/<name>` with step = B.
- Means are over the queries with at least one relevant document (`n_queries`); judged
  queries without one are left out and counted (`n_queries_no_relevant`). A judged query
  that retrieved nothing scores 0.
- Order: {tie_rule}
- With `gain: linear` the numbers equal trec_eval (`P_K`, `recall_K`, `ndcg_cut_K`,
  `map_cut_K`, `recip_rank`, `map`, `bpref`; with `judged_only`, the same under `-J`); with
  `gain: exp` nDCG equals ranx `ndcg_burges`; `judged_at_K` equals ir_measures `Judged@K`
  (which counts negative grades as judged).
"""

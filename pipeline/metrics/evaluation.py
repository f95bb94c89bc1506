"""The metric families, one row each (the single source of names, labels, bounds and definitions),
the metric keys and the definition card built from them, the judged_at_K warning, and
:func:`evaluate`: every ``ranking`` family at every cut-off K = 1..k_max in one vectorized pass.

``ndcg_at_10`` is family ``ndcg`` at cut-off K = 10; ``mrr``, ``map`` and ``bpref`` name a
family's value at the ranking's full depth. MLflow rejects ``@`` in keys, so keys never use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

import numpy as np
from numpy.typing import NDArray

from pipeline.metrics.grades import (UNJUDGED, Gain, Qrels, bpref, check_gain_overflow, condense, discounts,
                                     gain_values, grade_matrix, ideal_matrix, judged_at_k, n_nonrelevant, n_relevant)


@dataclass(frozen=True)
class Family:
    """One metric family. ``stage`` says what it is computed on: ``ranking`` (``evaluate``, the
    retriever's order) or ``placed`` (the context order, added by the caller, e.g. context utility).
    ``full_depth`` names the family's value at the ranking's full depth, when it has one (``mrr``,
    ``map``, ``bpref``); ``at_k`` is False for a family that has only that value (no ``<name>_at_K``
    keys, no curve: ``bpref``). ``definition`` is the row of the definition card; ``{gain}`` in it
    is replaced by the gain in use."""

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
    Family("hit_rate", "hit rate@K", True, False, "1 if any relevant document is in the top K, else 0", "success@K"),
    Family("mrr", "MRR@K", True, True, "1 / rank of the first relevant document within K, else 0; `mrr` = the same "
           "at full depth", "trec_eval `recip_rank`", full_depth="mrr"),
    Family("map", "MAP@K", True, True, "sum over relevant ranks i <= K of precision_at_i, divided by R (trec_eval "
           "`map_cut`); `map` = at full depth", "trec_eval `map_cut`, `map`", full_depth="map"),
    Family("cg", "CG@K", False, False, "sum of rel_i for i <= K", "Järvelin & Kekäläinen 2002"),
    Family("dcg", "DCG@K", False, False, "sum of gain(rel_i) / log2(i + 1), gain = {gain}",
           "Järvelin & Kekäläinen 2002; Burges et al. 2005 (exponential gain)"),
    Family("ndcg", "nDCG@K", True, True, "dcg_at_K / idcg_at_K; idcg = the DCG of all judged grades of the query "
           "sorted descending, cut at K; 0 when idcg is 0", "trec_eval `ndcg_cut`; ranx `ndcg_burges` (exp gain)"),
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
           "included); always on the ranking as retrieved, also with `judged_only`", "ir_measures `Judged@K`"),
    Family("bpref", "bpref", True, False,
           "(1 / R) * sum over the judged relevant documents retrieved (full depth) of "
           "1 - min(n, R) / min(N, R), n = # judged non-relevant documents ranked above it, N = # judged "
           "non-relevant documents of the query (0 <= grade < relevance_level); unjudged documents are "
           "skipped; 0 when R = 0", "Buckley & Voorhees 2004; trec_eval `bpref`", full_depth="bpref", at_k=False),
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
#: A run warns when the mean judged_at_K is below this share (``judged_warning``): at a job's own k,
#: else at this K.
JUDGED_WARN_K = 10
JUDGED_WARN_BELOW = 0.9
#: Cut-offs reported besides a run's own k (those <= k_max), so runs with different k compare.
STANDARD_KS = (1, 3, 5, 10, 20, 50, 100)
LABELS = {f.name: f.label for f in TABLE}

#: Context metrics a chunked or budgeted run computes per token budget B, as ``<name>_budget_<B>``
#: (means, per-query columns, stepped ``budget/<name>``); ``pipeline.chunkers`` computes them.
BUDGET_FAMILIES = ("context_precision", "context_recall", "context_utility", "relevant_token_share", "n_chunks",
                   "tokens")

_METRIC_KEY = re.compile(r"^(?P<family>[a-z_]+)_at_(?P<k>[0-9]+|k)$")
_BUDGET_KEY = re.compile(r"^(?P<family>[a-z_]+)_budget_(?P<budget>[0-9]+)$")


@dataclass(frozen=True)
class MetricKey:
    """A metric key a job computes per query, parsed (:func:`metric_key`).

    ``ndcg_at_10``: family ``ndcg``, ``k`` 10. ``mrr``, ``map``, ``bpref``: the family at full
    depth (``k`` and ``budget`` None). ``ndcg_at_k``: ``relative``, the job's own cut-off (a
    sweep over k compares each job at its k: :meth:`at`). ``context_recall_budget_512``:
    ``budget`` 512, the context that fits in 512 tokens (chunked or budgeted runs)."""

    key: str
    family: str
    k: int | None = None
    budget: int | None = None
    relative: bool = False

    @property
    def full_depth(self) -> bool:
        """Whether the value is taken at the ranking's full depth (its cut-off is the run's depth)."""
        return self.k is None and self.budget is None and not self.relative

    @property
    def placed(self) -> bool:
        """Whether it scores the placed context (needs a job; a run file has only the ranking)."""
        return self.budget is not None or (self.family in FAMILY and FAMILY[self.family].stage == "placed")

    def at(self, k: int) -> str:
        """The key a job with cut-off ``k`` logs: ``ndcg_at_k`` -> ``ndcg_at_<k>``; others as they are."""
        return f"{self.family}_at_{int(k)}" if self.relative else self.key


def metric_key(key: str) -> MetricKey:
    """Parse any per-query metric key of a job: ``<family>_at_<K>``, ``<family>_at_k`` (the
    job's own k), ``mrr``/``map``/``bpref``, or ``<budget family>_budget_<B>``. ValueError
    naming the accepted forms otherwise."""
    if key in FULL_DEPTH:
        return MetricKey(key, key)
    match = _METRIC_KEY.match(key)
    if match and match["family"] in FAMILY and FAMILY[match["family"]].at_k:
        if match["k"] == "k":
            return MetricKey(key, match["family"], relative=True)
        return MetricKey(key, match["family"], k=int(match["k"]))  # K's range is the caller's to check
    match = _BUDGET_KEY.match(key)
    if match and match["family"] in BUDGET_FAMILIES and int(match["budget"]) >= 1:
        return MetricKey(key, match["family"], budget=int(match["budget"]))
    choices = ", ".join(f"{f}_at_K" for f in RUN_FAMILIES)
    raise ValueError(f"{key!r} is not a metric: use {', '.join(FULL_DEPTH)}, one of {choices} (K a number, or k: "
                     f"each job at its own k), or one of {', '.join(f'{f}_budget_B' for f in BUDGET_FAMILIES)} "
                     "(B tokens, chunked or budgeted runs)")


def parse_key(key: str) -> tuple[str, int | None]:
    """``"ndcg_at_10"`` -> ("ndcg", 10); ``"mrr"``/``"map"`` -> (name, None). ValueError otherwise,
    also for the keys only :func:`metric_key` reads (``ndcg_at_k``, ``context_recall_budget_512``)."""
    parsed = metric_key(key)
    if parsed.relative or parsed.budget is not None:
        raise ValueError(f"{key!r} is not a metric at a fixed cut-off K or at full depth")
    return parsed.family, parsed.k


def report_ks(k: int, k_max: int, extra: Iterable[int | None] = ()) -> list[int]:
    """The cut-offs a run reports: its k, the standard ones up to k_max, and any extra."""
    return sorted({k, *(c for c in STANDARD_KS if c <= k_max), *(e for e in extra if e is not None)})


def judged_warning(means: dict[str, float], k: int = JUDGED_WARN_K) -> str | None:
    """The warning a run prints when the mean judged_at_k is below 0.9, else None. ``k``: the
    cut-off that matters, a job's own k (the chunks its generator reads); 10 where there is no
    such k (``pipeline.score``, ``pipeline.evaluate``). Unjudged documents count as not relevant,
    so a retriever whose top k is mostly unjudged (one that took no part in the pooling) scores
    too low on every metric but bpref and the ``judged_only`` ones."""
    value = means.get(f"judged_at_{k}")
    if value is None or value >= JUDGED_WARN_BELOW or means.get("n_queries") == 0:
        return None  # a mean over no query is no share of anything (``unevaluable`` says why)
    return (f"warning: judged_at_{k} = {value:.4f} < {JUDGED_WARN_BELOW} ({value:.1%} of the top "
            f"{k} documents are judged): the numbers for this retriever are biased low; pool it "
            "(judge its unjudged top documents); bpref and judged_only=true score judged documents only")


def unevaluable(qrels: Qrels, n_queries: int, relevance_level: int) -> str | None:
    """Why no query can be evaluated, or None when one can. A query counts in the means when
    it has a judged document graded >= ``relevance_level`` (R > 0); when none has, every mean
    would be a 0 computed from nothing, so callers refuse the run with this message (how many
    queries have judgments, the largest grade)."""
    grade = np.asarray(qrels.grade, np.int64)
    if (grade >= relevance_level).any():
        return None
    if not len(grade):
        return f"no query can be evaluated: the qrels hold no judgment for any of the {n_queries} queries"
    judged = len(np.unique(np.asarray(qrels.query_idx)))
    return (f"no query can be evaluated: none of the {judged} queries with judgments has a document graded >= "
            f"relevance_level {relevance_level} (the largest grade is {int(grade.max())}); every metric would be 0 "
            "from no query (lower relevance_level, or check the qrels)")


#: What every metric shares: grades, relevance, R, judged (``{level}``: the relevance level, as
#: the card or docs/metrics.md states it). Written here once, with :data:`MEANS` and :data:`TABLE`'s definitions:
#: every run's ``definition_card.md`` and docs/metrics.md are generated from them
#: (``tests/pipeline/test_metric_docs.py``).
GRADES = """Grades are the integers of the qrels; unjudged documents have grade 0; negative grades
count as 0. A document is relevant when grade >= {level}.
rel_i is the grade at rank i (1-based); R is the number of relevant judged documents
(judged documents missing from the corpus included, as trec_eval counts them). A document
is judged for a query when the qrels give it a grade >= 0 for that query (0 included); a
negative grade marks a document in the pool but not judged (trec_eval's convention) and
counts as unjudged."""

#: Which queries a mean is over (a bullet of the card and of docs/metrics.md).
MEANS = """Means are over the queries with at least one relevant document (`n_queries`); judged
queries without one are left out and counted (`n_queries_no_relevant`). A judged query
that retrieved nothing scores 0."""


def definitions_table(gain_text: str, sources: bool = False) -> str:
    """The families of :data:`TABLE` as a Markdown table (``| key | definition |``, and the
    ``source`` column with ``sources``), ``{gain}`` in a definition replaced by ``gain_text``."""
    head = "| key | definition | source |\n|---|---|---|" if sources else "| key | definition |\n|---|---|"
    rows = [f"| `{f.key}` | {f.definition.format(gain=gain_text)} |" + (f" {f.source} |" if sources else "")
            for f in TABLE]
    return "\n".join([head, *rows])


def definition_card(gain: Gain, relevance_level: int, tie_rule: str, judged_only: bool = False,
                    k: int = JUDGED_WARN_K) -> str:
    """The metric definitions a run used, as Markdown, logged with every run and built from
    :data:`TABLE` so the card and the code cannot drift. ``k``: the run's k, the cut-off of its
    judged-coverage warning (:func:`judged_warning`)."""
    gain_text = "2^rel - 1 (`gain: exp`)" if gain == "exp" else "rel (`gain: linear`, as trec_eval)"
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

{GRADES.format(level=f"{relevance_level} (`relevance_level`)")}

{definitions_table(gain_text)}

- {lists}
- A run warns when the mean `judged_at_{k}` is below {JUDGED_WARN_BELOW}: unjudged documents in
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
- {MEANS.replace(chr(10), chr(10) + "  ")}
- Order: {tie_rule}
- With `gain: linear` the numbers equal trec_eval (`P_K`, `recall_K`, `ndcg_cut_K`,
  `map_cut_K`, `recip_rank`, `map`, `bpref`; with `judged_only`, the same under `-J`); with
  `gain: exp` nDCG equals ranx `ndcg_burges`; `judged_at_K` equals ir_measures `Judged@K`
  (which counts negative grades as judged).
"""


@dataclass
class Evaluation:
    """Per-query values of every metric family at K = 1..k_max, plus ``mrr``/``map``/``bpref`` at full depth.
    ``at_k[family]`` is [n_queries, k_max]; column K-1 holds the value at cut-off K.
    ``judged_only``: scored on condensed lists (unjudged documents removed; judged_at_K excepted)."""

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
        """The per-query table as columns (``pandas.DataFrame(ev.per_query(ids))`` makes it a frame):
        ``query_id``, every family at every K (or at ``ks``), ``mrr``, ``map``, R and whether it counts."""
        table: dict[str, Any] = {"query_id": list(query_ids)}
        cutoffs = range(1, self.k_max + 1) if ks is None else sorted(set(ks))
        for family in self.families():
            values = self.values(family)
            table.update((f"{family}_at_{k}", values[:, k - 1]) for k in cutoffs)
        table.update(self.full)
        table["n_relevant"] = self.n_relevant
        table["evaluated"] = self.evaluated
        return table


def evaluate(doc_idx: NDArray[np.integer], qrels: Qrels, k_max: int, gain: Gain = "exp", relevance_level: int = 1,
             lookup: NDArray[np.integer] | None = None, judged_only: bool = False,
             judged_metrics: bool = True) -> Evaluation:
    """Every metric of the definition card (:data:`TABLE`) at every K = 1..k_max, for every query;
    ``mrr``, ``map`` and ``bpref`` at full depth (the ranking's ``depth``).

    ``doc_idx`` is [n_queries, depth] in rank order (row q = query index q of ``qrels``),
    -1 where nothing was retrieved (after the retrieved documents). ``k_max`` may exceed
    ``depth``: the missing ranks are empty (precision keeps K as its denominator, like
    trec_eval's ``P``). ``judged_only``: score the condensed lists (:func:`condense`, trec_eval
    ``-J``); judged_at_K stays that of the ranking as given. ``judged_metrics=False`` leaves out
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
    check_gain_overflow(qrels, doc_idx.shape[0], gain)  # ValueError when exponential gains overflow
    lookup = np.asarray(grade_matrix(doc_idx, qrels, unjudged=UNJUDGED) if lookup is None else lookup, np.int64)
    if lookup.shape != doc_idx.shape:
        raise ValueError(f"lookup must have the shape of doc_idx {doc_idx.shape}, got {lookup.shape}")
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
    head = grades[:, :k_max]  # cg, dcg, ndcg; the ideal DCG is that of every judged grade sorted descending
    disc = discounts(k_max)
    dcg = np.cumsum(gain_values(head, gain) * disc, axis=1)
    idcg = np.cumsum(gain_values(ideal_matrix(qrels, n_q, k_max), gain) * disc, axis=1)
    at_k["cg"] = np.cumsum(head, axis=1, dtype=np.float64)
    at_k["dcg"] = dcg
    at_k["ndcg"] = np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0)
    if judged is not None:
        at_k["judged"] = judged
        full["bpref"] = bpref(rel, cum_rel, R, n_nonrelevant(qrels, n_q, relevance_level),
                              None if judged_only else judged_so_far, depth)
    return Evaluation(k_max=k_max, at_k=at_k, full=full, n_relevant=R, judged_only=judged_only)


def _binary_families(rel: NDArray[np.bool_], cum_rel: NDArray[np.int64], R: NDArray[np.int64],
                     k_max: int) -> tuple[dict[str, NDArray[np.float64]], dict[str, NDArray[np.float64]]]:
    """precision, recall, hit_rate, mrr and map at K = 1..k_max, and mrr and map at full depth.
    ``rel`` [n_queries, width >= k_max] flags the relevant documents of the scored list and
    ``cum_rel`` counts them row by row. A query with R = 0 has no document with grade >=
    relevance_level (>= 1), so every family here is 0 for it without masking."""
    n_q, width = rel.shape
    R_safe = np.maximum(R, 1).astype(np.float64)[:, None]
    ranks = np.arange(1, width + 1, dtype=np.float64)
    precision_all = cum_rel / ranks
    ap_sum = np.cumsum(np.where(rel, precision_all, 0.0), axis=1)
    any_rel = rel.any(axis=1)
    # 1-based rank of the first relevant document; width + 1 when there is none
    first = np.where(any_rel, rel.argmax(axis=1) + 1, width + 1)
    rr = np.where(any_rel, 1.0 / first, 0.0)
    at_k = {"precision": precision_all[:, :k_max], "recall": cum_rel[:, :k_max] / R_safe,
            "hit_rate": (cum_rel[:, :k_max] > 0).astype(np.float64),
            "mrr": np.where(first[:, None] <= np.arange(1, k_max + 1), rr[:, None], 0.0),
            "map": ap_sum[:, :k_max] / R_safe}
    full = {"mrr": rr, "map": ap_sum[:, -1] / R_safe[:, 0] if width else np.zeros(n_q)}
    return at_k, full

"""The definition card: the metric definitions a run used, as Markdown, logged with every run
and built from :data:`pipeline.metrics.table.TABLE` so the card and the code cannot drift."""

from __future__ import annotations

from pipeline.metrics.gains import Gain
from pipeline.metrics.table import JUDGED_WARN_BELOW, JUDGED_WARN_K, TABLE


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

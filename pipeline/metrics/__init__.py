"""Exact, vectorized IR metrics for every cut-off K = 1..k_max in one pass: the definition card
(docs/metrics.md) in code. Inputs are arrays: a ranking ``doc_idx`` [n_queries, depth] (-1 =
nothing retrieved there) and :class:`Qrels`; ``evaluate`` builds the (queries x depth) grade
matrix once, and every metric at every K is then a cumulative sum or a division away. No
per-query Python loops, no rounding. Modules: ``grades`` (qrels, grade lookups, gains,
incomplete judgments) and ``evaluation`` (families, keys, the definition card, :func:`evaluate`).

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

from pipeline.metrics.evaluation import (BOUNDED, BUDGET_FAMILIES, CURVES, FAMILIES, FAMILY, FULL_DEPTH,
                                         JUDGED_WARN_BELOW, JUDGED_WARN_K, LABELS, RUN_FAMILIES, STANDARD_KS, TABLE,
                                         Evaluation, Family, MetricKey, definition_card, evaluate, judged_warning,
                                         metric_key, parse_key, report_ks, unevaluable)
from pipeline.metrics.grades import (EXP_GAIN_LIMIT, UNJUDGED, Gain, Qrels, bpref, check_gain_overflow, condense,
                                     discounts, gain_values, grade_matrix, ideal_matrix, judged_at_k, n_nonrelevant,
                                     n_relevant)

__all__ = ["BOUNDED", "BUDGET_FAMILIES", "CURVES", "EXP_GAIN_LIMIT", "FAMILIES", "FAMILY", "FULL_DEPTH",
           "JUDGED_WARN_BELOW", "JUDGED_WARN_K", "LABELS", "RUN_FAMILIES", "STANDARD_KS", "TABLE", "UNJUDGED", "Evaluation",
           "Family", "Gain", "MetricKey", "Qrels", "bpref", "check_gain_overflow", "condense", "definition_card",
           "discounts", "evaluate", "gain_values", "grade_matrix", "ideal_matrix", "judged_at_k", "judged_warning",
           "metric_key", "n_nonrelevant", "n_relevant", "parse_key", "report_ks", "unevaluable"]

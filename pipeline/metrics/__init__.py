"""Exact, vectorized IR metrics for every cut-off K = 1..k_max in one pass: the definition card
(docs/metrics.md) in code. Inputs are arrays: a ranking ``doc_idx`` [n_queries, depth] (-1 =
nothing retrieved there) and :class:`Qrels`; ``evaluate`` builds the (queries x depth) grade
matrix once, and every metric at every K is then a cumulative sum or a division away. No
per-query Python loops, no rounding. Modules: ``grades`` (qrels, grade lookups, gains,
incomplete judgments) and ``evaluation`` (families, keys, the definition card, :func:`evaluate`).

The definitions are written once, here in code: what every metric shares (grades, relevance,
R, judged: :data:`GRADES`; which queries a mean is over: :data:`MEANS`) and each family's
definition and source (:data:`TABLE`). Every run's ``definition_card.md`` and the generated
parts of docs/metrics.md are built from them (``tests/pipeline/test_metric_docs.py``).

Sources: trec_eval 9.0.8 (``P``, ``recall``, ``map_cut``, ``ndcg_cut``, ``recip_rank``,
``map``, ``bpref``, ``-J``), Järvelin & Kekäläinen 2002 (CG/DCG/nDCG), Burges et al. 2005
(exponential gain), ir_measures (``Judged@K``), Sakai 2007 (condensed lists).
"""

from __future__ import annotations

from pipeline.metrics.evaluation import (BOUNDED, BUDGET_FAMILIES, CURVES, FAMILIES, FAMILY, FULL_DEPTH, GRADES,
                                         JUDGED_WARN_BELOW, JUDGED_WARN_K, LABELS, MEANS, RUN_FAMILIES, STANDARD_KS,
                                         TABLE, Evaluation, Family, MetricKey, definition_card, definitions_table, evaluate,
                                         judged_warning, metric_key, parse_key, report_ks, unevaluable)
from pipeline.metrics.grades import (EXP_GAIN_LIMIT, UNJUDGED, Gain, Qrels, bpref, check_gain_overflow, condense,
                                     discounts, gain_values, grade_matrix, ideal_matrix, judged_at_k, n_nonrelevant,
                                     n_relevant)

__all__ = ["BOUNDED", "BUDGET_FAMILIES", "CURVES", "EXP_GAIN_LIMIT", "FAMILIES", "FAMILY", "FULL_DEPTH", "GRADES",
           "JUDGED_WARN_BELOW", "JUDGED_WARN_K", "LABELS", "MEANS", "RUN_FAMILIES", "STANDARD_KS", "TABLE", "UNJUDGED", "Evaluation",
           "Family", "Gain", "MetricKey", "Qrels", "bpref", "check_gain_overflow", "condense", "definition_card",
           "definitions_table",
           "discounts", "evaluate", "gain_values", "grade_matrix", "ideal_matrix", "judged_at_k", "judged_warning",
           "metric_key", "n_nonrelevant", "n_relevant", "parse_key", "report_ks", "unevaluable"]

"""Exact, vectorized IR metrics for every cut-off K = 1..k_max in one pass.

The definition card (docs/metrics.md) in code. Inputs are arrays: a ranking
``doc_idx`` [n_queries, depth] (-1 = nothing retrieved there) and :class:`Qrels`; ``evaluate``
builds the (queries x depth) grade matrix once, and every metric at every K is then a
cumulative sum or a division away. No per-query Python loops, no rounding. A computing
package: numpy and the standard library only.

- ``table``: the metric families (names, labels, bounds, definitions) and metric keys;
- ``grades``: :class:`Qrels`, the grade matrix of a ranking, ideal grades, R and N;
- ``gains``: gain(rel) (exp or linear), DCG discounts, the overflow check;
- ``judged``: incomplete judgments: judged_at_K, bpref, condensed lists, the warning;
- ``evaluation``: :func:`evaluate` and its result, :class:`Evaluation`; its docstring states
  the conventions every metric shares and their sources (trec_eval, papers);
- ``card``: the definition card a run logs.
"""

from __future__ import annotations

from pipeline.metrics.card import definition_card
from pipeline.metrics.evaluation import Evaluation, evaluate
from pipeline.metrics.gains import EXP_GAIN_LIMIT, Gain, check_gain_overflow, discounts, gain_values
from pipeline.metrics.grades import UNJUDGED, Qrels, grade_matrix, ideal_matrix, n_nonrelevant, n_relevant
from pipeline.metrics.judged import bpref, condense, judged_at_k, judged_warning
from pipeline.metrics.table import (BOUNDED, CURVES, FAMILIES, FAMILY, FULL_DEPTH, JUDGED_WARN_BELOW, JUDGED_WARN_K,
                                    LABELS, RUN_FAMILIES, STANDARD_KS, TABLE, Family, parse_key, report_ks)

__all__ = ["BOUNDED", "CURVES", "EXP_GAIN_LIMIT", "FAMILIES", "FAMILY", "FULL_DEPTH", "JUDGED_WARN_BELOW",
           "JUDGED_WARN_K", "LABELS", "RUN_FAMILIES", "STANDARD_KS", "TABLE", "UNJUDGED", "Evaluation", "Family",
           "Gain", "Qrels", "bpref", "check_gain_overflow", "condense", "definition_card", "discounts", "evaluate",
           "gain_values", "grade_matrix", "ideal_matrix", "judged_at_k", "judged_warning", "n_nonrelevant",
           "n_relevant", "parse_key", "report_ks"]

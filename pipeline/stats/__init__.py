"""Statistics for comparing retrieval systems on the same queries ("decide with confidence").

A computing package: it imports numpy, scipy and the standard library only, so any stage
(the comparison CLI, sweep summaries, notebooks) can use it without pulling in the pipeline;
scipy is imported inside the functions that need it. Every input is a per-query score matrix
``[n_systems, n_queries]`` (:func:`align` builds one from per-system dictionaries).

- ``inputs``: the score matrix, its checks, and the conventions every statistic shares
  (paired designs, ties, Monte Carlo p-values, random streams) with their sources;
- ``bootstrap``: paired bootstrap means and percentile/BCa intervals (= scipy's);
- ``normal``: the normal CDF and its inverse from the standard library (BCa without scipy);
- ``paired``: paired t, Wilcoxon, sign and randomization tests, effect sizes, wins/ties/losses;
- ``tukey``: randomized Tukey HSD over all pairs of systems;
- ``multiplicity``: Holm, Bonferroni and Benjamini-Hochberg adjustments, within and across reports;
- ``sensitivity``: power, minimum detectable difference, queries needed;
- ``ties``: optimistic and pessimistic values under score ties;
- ``reports``: the report dataclasses; ``comparison``: :func:`compare`, :func:`compare_metrics`
  and :func:`tied_with_best`.

See docs/statistics.md.
"""

from __future__ import annotations

from pipeline.stats.bootstrap import bootstrap_ci, bootstrap_means, ci_from_distribution
from pipeline.stats.comparison import compare, compare_metrics, tied_with_best
from pipeline.stats.inputs import (CORRECTIONS, PAIRED_TESTS, TIE_TOLERANCE, Aligned, CiMethod, Correction, Test,
                                   align)
from pipeline.stats.multiplicity import adjust_pvalues, adjust_report
from pipeline.stats.normal import ndtr, ndtri
from pipeline.stats.paired import (EXACT_MAX_N, effect_sizes, paired_t_test, randomization_test, sign_test,
                                   wilcoxon_test, wins_ties_losses)
from pipeline.stats.reports import BaselineComparison, Comparison, SystemSummary
from pipeline.stats.sensitivity import minimum_detectable_difference, power_paired_t, queries_needed
from pipeline.stats.ties import tie_bounds, tie_spread_flag
from pipeline.stats.tukey import tukey_hsd, tukey_hsd_stack

__all__ = ["CORRECTIONS", "EXACT_MAX_N", "PAIRED_TESTS", "TIE_TOLERANCE", "Aligned", "BaselineComparison", "CiMethod",
           "Comparison", "Correction", "SystemSummary", "Test", "adjust_pvalues", "adjust_report", "align",
           "bootstrap_ci", "bootstrap_means", "ci_from_distribution", "compare", "compare_metrics", "effect_sizes",
           "minimum_detectable_difference", "ndtr", "ndtri", "paired_t_test", "power_paired_t", "queries_needed",
           "randomization_test", "sign_test", "tie_bounds", "tie_spread_flag", "tied_with_best", "tukey_hsd",
           "tukey_hsd_stack", "wilcoxon_test", "wins_ties_losses"]

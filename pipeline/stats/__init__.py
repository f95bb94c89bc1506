"""Statistics for comparing retrieval systems on the same queries ("decide with confidence").

A computing package: numpy, scipy and the standard library only, so any stage (the comparison
CLI, sweep summaries, notebooks) can use it without pulling in the pipeline; scipy is imported
inside the functions that need it. Every input is a per-query score matrix ``[n_systems,
n_queries]`` whose columns are the same queries in the same order (:func:`align` builds one from
per-system dictionaries). Every computation is vectorized over systems and over
resamples/permutations: resampled means are a matrix product of a resample-count matrix with the
score matrix. Modules: ``inputs``, ``bootstrap``, ``significance`` (paired tests, Tukey HSD, p-value
adjustment), ``sensitivity`` (power, score ties), ``comparison`` (the reports), ``verdicts`` (one
Tukey inference with simultaneous intervals, the best set and the four words better / worse /
equivalent / inconclusive against a practical margin), ``factors`` (an answer per factor of a
sweep) and ``anova`` (ANOVA with topics as blocks).

Conventions (each function's docstring gives the formula and its source):

- Paired designs throughout: a bootstrap resample draws query indices once and applies
  them to every system; a sign flip or a row permutation acts on whole queries.
- Bootstrap: ``n_resamples`` (default 10,000) draws of n query indices with replacement,
  in the exact order of ``scipy.stats.bootstrap`` given ``rng=np.random.default_rng(seed)``
  (``rng.integers(0, n, (n_resamples, n))``), so our percentile and BCa intervals equal
  scipy's. Efron & Tibshirani 1993, ch. 13-14; BCa eq. 14.14-14.15.
- Two-sided tests; a difference is significant when its (adjusted) p <= alpha.
- Differences with ``|d| <= TIE_TOLERANCE`` are ties: zero for the sign test and Wilcoxon,
  a tie in wins/ties/losses. When every difference is zero, every p-value is 1 (scipy
  returns NaN for the t-test and Wilcoxon there).
- Monte Carlo p-values are ``(count(|T*| >= |T|) + 1) / (B + 1)`` (Phipson & Smyth 2010),
  never 0; exact enumeration gives ``count / 2^n``. Statistics equal to the observed one
  within floating-point rounding (``1e-10`` of the scale of the data) count as ">=".
- Random streams: the bootstrap uses ``np.random.default_rng(seed)`` (scipy's order);
  the randomization test and randomized Tukey HSD use independent streams spawned from
  ``np.random.SeedSequence(seed)`` (spawn keys 1 and 2), so adding one test never changes
  another's numbers.
- Results are JSON-ready: plain ``float``/``int``/``str``/``list``/``dict``.

Sources: Efron & Tibshirani 1993 (bootstrap, BCa); Smucker, Allan & Carterette 2007
(randomization vs t vs Wilcoxon vs sign test in IR); Carterette 2012 and Sakai 2018
(randomized Tukey HSD); Holm 1979; Benjamini & Hochberg 1995; Sakai 2016 and Webber,
Moffat & Zobel 2008 (topic-set size, power); McSherry & Najork 2008 (score ties);
Lakens 2013 (d_z, Hedges' correction); Hsu 1996 (multiple comparisons with the best);
Schuirmann 1987, Lakens 2017, Wellek 2010 (equivalence, non-inferiority); Montgomery 2017 and
Sakai 2014 (ANOVA with blocks, standardised effect sizes). See docs/statistics.md.
"""

from __future__ import annotations

from pipeline.stats.anova import AnovaTable, anova_blocks
from pipeline.stats.bootstrap import bootstrap_ci, bootstrap_means, ci_from_distribution
from pipeline.stats.comparison import (BaselineComparison, Comparison, SystemSummary, adjust_report, compare,
                                       compare_metrics, tied_with_best)
from pipeline.stats.factors import (DEPTH_FACTORS, FACTOR_WORDS, MONOTONE_FAMILIES, FactorAnswer, answer_factors,
                                    pays_for_depth)
from pipeline.stats.inputs import (CORRECTIONS, PAIRED_TESTS, TIE_TOLERANCE, Aligned, CiMethod, Correction, Test, align,
                                   distinct_rows, ndtr, ndtri)
from pipeline.stats.sensitivity import (minimum_detectable_difference, power_paired_t, queries_needed, tie_bounds,
                                        tie_spread_flag)
from pipeline.stats.significance import (EXACT_MAX_N, adjust_pvalues, effect_sizes, paired_t_test, randomization_test,
                                         sign_test, tukey_hsd, tukey_hsd_stack, tukey_pvalues, tukey_ranges,
                                         wilcoxon_test, wins_ties_losses)
from pipeline.stats.verdicts import (DEFAULT_MARGIN, METHOD, WORDS, Inference, PairVerdict, check_margin,
                                     critical_range, infer, word)

__all__ = ["CORRECTIONS", "DEFAULT_MARGIN", "DEPTH_FACTORS", "EXACT_MAX_N", "FACTOR_WORDS", "METHOD",
           "MONOTONE_FAMILIES", "PAIRED_TESTS", "TIE_TOLERANCE", "WORDS", "Aligned", "AnovaTable",
           "BaselineComparison", "CiMethod", "Comparison", "Correction", "FactorAnswer", "Inference", "PairVerdict",
           "SystemSummary", "Test", "adjust_pvalues", "adjust_report", "align", "anova_blocks", "answer_factors",
           "bootstrap_ci", "bootstrap_means", "check_margin", "ci_from_distribution", "compare", "compare_metrics",
           "critical_range", "distinct_rows", "effect_sizes", "infer", "minimum_detectable_difference", "ndtr",
           "ndtri", "paired_t_test", "pays_for_depth", "power_paired_t", "queries_needed", "randomization_test",
           "sign_test", "tie_bounds", "tie_spread_flag", "tied_with_best", "tukey_hsd", "tukey_hsd_stack",
           "tukey_pvalues", "tukey_ranges", "wilcoxon_test", "wins_ties_losses", "word"]

"""Multiple comparisons: p-values adjusted by Holm (1979), Bonferroni or Benjamini & Hochberg
(1995), alone or across every baseline comparison of several reports.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.inputs import CORRECTIONS, PAIRED_TESTS, Correction, check_options
from pipeline.stats.reports import Comparison


def adjust_pvalues(p: ArrayLike, method: Correction = "holm") -> NDArray[np.float64]:
    """Adjust p-values for multiple comparisons along the last axis.

    holm (Holm 1979): sort ascending, adj_(i) = max_{j<=i} min(1, (m - j + 1) p_(j));
    bonferroni: min(1, m p); fdr_bh (Benjamini & Hochberg 1995): adj_(i) = min_{j>=i}
    min(1, m p_(j) / j); none: unchanged. Equals statsmodels' ``multipletests``.
    """
    if method not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got {method!r}")
    p = np.asarray(p, dtype=np.float64)
    if p.size == 0:
        return p.copy()
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("p-values must lie in [0, 1]")
    if method == "none":
        return p.copy()
    m = p.shape[-1]
    if method == "bonferroni":
        return np.minimum(p * m, 1.0)
    order = np.argsort(p, axis=-1, kind="stable")
    ps = np.take_along_axis(p, order, axis=-1)
    ranks = np.arange(1, m + 1)
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum((m - ranks + 1) * ps, 1.0), axis=-1)
    else:
        adj = np.minimum.accumulate((m / ranks * ps)[..., ::-1], axis=-1)[..., ::-1]
        adj = np.minimum(adj, 1.0)
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=-1)
    return out


def adjust_report(comparisons: Sequence[Comparison], correction: Correction | None = None) -> list[Comparison]:
    """Adjust every test's p-values across all baseline comparisons of all given reports.

    Each test (t, Wilcoxon, sign, randomization) is its own family of size
    sum(len(c.vs_baseline)); ``correction`` defaults to the first report's. Returns new
    reports with ``p_adjusted``, ``correction`` and ``significant`` replaced.
    """
    comparisons = list(comparisons)
    if not comparisons:
        return []
    correction = correction or comparisons[0].correction
    for c in comparisons:
        check_options(c.test, correction, c.alpha)
    adjusted = {
        name: adjust_pvalues([v.p[name] for c in comparisons for v in c.vs_baseline], correction)
        for name in PAIRED_TESTS
    }
    out, k = [], 0
    for c in comparisons:
        vs = []
        for v in c.vs_baseline:
            p_adj = {name: float(adjusted[name][k]) for name in PAIRED_TESTS}
            vs.append(
                dataclasses.replace(v, p_adjusted=p_adj, significant=bool(p_adj[c.test] <= c.alpha))
            )
            k += 1
        out.append(dataclasses.replace(c, vs_baseline=vs, correction=correction))
    return out

"""Significance tests: paired t, Wilcoxon signed-rank, sign and Fisher's randomization tests,
effect sizes and wins/ties/losses on rows of per-query differences d = system - baseline
(vectorized over rows); randomized Tukey HSD over all pairs of systems; p-value adjustment for
multiple comparisons.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.inputs import (CHUNK_CELLS, CORRECTIONS, REL_TOL, TIE_TOLERANCE, Correction, as_matrix,
                                   random_stream, scale)

#: The randomization test enumerates all 2^n sign flips up to this many queries.
EXACT_MAX_N = 20


def paired_t_test(diffs: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Two-sided paired t-test on each row of differences: ``(t, p)``.

    t = mean(d) / (sd(d, ddof=1) / sqrt(n)), p = 2 P(T_{n-1} >= |t|) (Student 1908),
    = ``scipy.stats.ttest_rel``. All-zero differences give t = 0, p = 1 (scipy: NaN);
    constant non-zero differences give t = +-inf, p = 0.
    """
    d = as_matrix(diffs)
    n = d.shape[1]
    mean = d.mean(axis=1)
    sd = d.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / (sd / math.sqrt(n))
    zero = np.abs(mean) <= TIE_TOLERANCE * scale(d)
    t = np.where((sd == 0) & zero, 0.0, t)
    t = np.where((sd == 0) & ~zero, np.copysign(np.inf, mean), t)
    import scipy.stats  # noqa: PLC0415 (slow import: only where needed)
    p = 2 * scipy.stats.t.sf(np.abs(t), n - 1)
    return t, np.minimum(p, 1.0)


def wins_ties_losses(diffs: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per row: queries with d > tol, |d| <= tol, d < -tol (tol = ``TIE_TOLERANCE``)."""
    d = as_matrix(diffs)
    wins = np.count_nonzero(d > TIE_TOLERANCE, axis=1)
    losses = np.count_nonzero(d < -TIE_TOLERANCE, axis=1)
    return wins, d.shape[1] - wins - losses, losses


def sign_test(diffs: ArrayLike) -> NDArray[np.float64]:
    """Two-sided sign test: wins ~ Binomial(wins + losses, 1/2), ties left out.

    p = min(1, 2 * P(X <= min(wins, losses))), which is ``scipy.stats.binomtest(wins,
    wins + losses, 0.5).pvalue`` (symmetric null). No non-tied query: p = 1.
    """
    wins, _, losses = wins_ties_losses(diffs)
    m = wins + losses
    import scipy.stats  # noqa: PLC0415
    p = 2 * scipy.stats.binom.cdf(np.minimum(wins, losses), np.maximum(m, 1), 0.5)
    return np.where(m == 0, 1.0, np.minimum(p, 1.0))


def wilcoxon_test(diffs: ArrayLike) -> NDArray[np.float64]:
    """Two-sided Wilcoxon signed-rank test per row = ``scipy.stats.wilcoxon(d)`` (defaults).

    zero_method 'wilcox': zero differences (|d| <= ``TIE_TOLERANCE``) are dropped before
    ranking (Wilcoxon 1945); tied |d| get mid-ranks; scipy picks the exact null
    distribution for small samples without ties and the normal approximation otherwise.
    A row with no non-zero difference has p = 1 (scipy: NaN or an error).
    """
    import scipy.stats  # noqa: PLC0415
    d = as_matrix(diffs)
    d = np.where(np.abs(d) <= TIE_TOLERANCE, 0.0, d)
    p = np.ones(d.shape[0])
    for i, row in enumerate(d):
        if np.count_nonzero(row):
            p[i] = scipy.stats.wilcoxon(row).pvalue
    return p


def effect_sizes(diffs: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Paired effect sizes per row: Cohen's d_z and Hedges' g_z.

    d_z = mean(d) / sd(d, ddof=1) (Cohen 1988; Lakens 2013, eq. 6);
    g_z = d_z * J, J = 1 - 3 / (4 df - 1), df = n - 1 (Hedges 1981's approximate
    small-sample correction; Lakens 2013, eq. 4). sd = 0 gives 0 when the mean is 0, else
    +-inf.
    """
    d = as_matrix(diffs)
    n = d.shape[1]
    mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        dz = mean / sd
    zero = np.abs(mean) <= TIE_TOLERANCE * scale(d)
    dz = np.where(sd == 0, np.where(zero, 0.0, np.copysign(np.inf, mean)), dz)
    j = 1 - 3 / (4 * (n - 1) - 1) if n > 1 else 1.0
    return dz, dz * j


def randomization_test(diffs: ArrayLike, *, n_permutations: int = 10_000, seed: int | None = 0,
                       exact_max_n: int = EXACT_MAX_N) -> NDArray[np.float64]:
    """Fisher's paired randomization test (two-sided) on the mean difference, per row.

    Under H0 each query's difference is equally likely +d or -d: T* = mean(s * d) for
    signs s in {-1, 1}^n (Fisher 1935; Smucker, Allan & Carterette 2007). With n <=
    ``exact_max_n`` all 2^n sign vectors are enumerated (bit matrix), p = #{|T*| >= |T|} / 2^n;
    otherwise ``n_permutations`` random sign vectors (stream 1 of ``seed``), shared by all
    rows, p = (#{|T*| >= |T|} + 1) / (B + 1). Computed on sums: sum(s*d) = 2 b@d - sum(d)
    for the 0/1 bits b.
    """
    d = as_matrix(diffs)
    k, n = d.shape
    total = d.sum(axis=1)
    threshold = np.abs(total) - REL_TOL * np.maximum(np.abs(d).sum(axis=1), 1.0)
    count = np.zeros(k, dtype=np.int64)
    rows = max(1, CHUNK_CELLS // n)
    dt = d.T
    if n <= exact_max_n:
        masks = np.arange(1 << n, dtype=np.int64)
        for start in range(0, 1 << n, rows):
            bits = ((masks[start : start + rows, None] >> np.arange(n)) & 1).astype(np.float64)
            stat = np.abs(2 * (bits @ dt) - total)
            count += np.count_nonzero(stat >= threshold, axis=0)
        return count / float(1 << n)
    if n_permutations < 1:
        raise ValueError("n_permutations must be >= 1")
    rng = random_stream(seed, 1)
    for start in range(0, n_permutations, rows):
        b = min(rows, n_permutations - start)
        bits = rng.integers(0, 2, (b, n), dtype=np.int8).astype(np.float64)
        stat = np.abs(2 * (bits @ dt) - total)
        count += np.count_nonzero(stat >= threshold, axis=0)
    return (count + 1) / (n_permutations + 1)


def tukey_hsd(matrix: ArrayLike, *, n_permutations: int = 10_000, seed: int | None = 0) -> NDArray[np.float64]:
    """Randomized Tukey HSD p-values for every pair of systems, ``[n_systems, n_systems]``.

    For each of B trials, each query's scores are permuted across systems (independently
    per query; stream 2 of ``seed``), and the range max_s mean*_s - min_s mean*_s is kept.
    p(i, j) = (#{range* >= |mean_i - mean_j|} + 1) / (B + 1); the diagonal is 1. The max
    over all systems makes the p-values family-wise (Carterette 2012; Sakai 2018, sec. 4.4),
    so they need no further correction. With two systems this is the randomization test.
    """
    return tukey_hsd_stack(as_matrix(matrix)[None], n_permutations, seed)[0]


def tukey_hsd_stack(x: NDArray[np.float64], n_permutations: int, seed: int | None) -> NDArray[np.float64]:
    """:func:`tukey_hsd` for a stack ``[n_metrics, n_systems, n_queries]``, one set of permutations."""
    return tukey_pvalues(x, tukey_ranges(x, n_permutations, seed))


def tukey_pvalues(x: NDArray[np.float64], ranges: NDArray[np.float64]) -> NDArray[np.float64]:
    """The p-values of :func:`tukey_hsd` for a stack ``[n_metrics, n_systems, n_queries]`` given the
    permuted ranges ``[n_metrics, B]`` of :func:`tukey_ranges`: p = (#{range* >= gap - tol} + 1) / (B + 1)."""
    m, s, _ = x.shape
    b = ranges.shape[1]
    if s < 2:
        return np.ones((m, s, s))
    means = x.mean(axis=2)
    gap = np.abs(means[:, :, None] - means[:, None, :])
    tol = tukey_tolerance(x)
    count = np.empty((m, s, s), dtype=np.int64)
    for i in range(m):
        r = np.sort(ranges[i])
        count[i] = b - np.searchsorted(r, (gap[i] - tol[i]).ravel(), side="left").reshape(s, s)
    p = (count + 1) / (b + 1)
    p[:, np.arange(s), np.arange(s)] = 1.0
    return p


def tukey_tolerance(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per metric of a stack ``[n_metrics, n_systems, n_queries]``: the rounding tolerance with which
    a permuted range counts as ">=" the observed gap (``REL_TOL`` times the data's scale)."""
    return REL_TOL * scale(x.reshape(x.shape[0], -1))


def tukey_ranges(x: NDArray[np.float64], n_permutations: int, seed: int | None) -> NDArray[np.float64]:
    """The permutation distribution of the range of :func:`tukey_hsd`: ``[n_metrics, B]``, trial b's
    max_s mean*_s - min_s mean*_s, unsorted, in the order drawn from stream 2 of ``seed`` (all zero
    with fewer than two systems). Shared by the p-values and the critical range of
    ``pipeline.stats.verdicts``, so both come from the same permutations."""
    if n_permutations < 1:
        raise ValueError("n_permutations must be >= 1")
    m, s, n = x.shape
    ranges = np.zeros((m, n_permutations))
    if s < 2:
        return ranges
    rng = random_stream(seed, 2)
    # A query on which every system scores the same (on every metric) adds the same to every
    # system's sum under any permutation, so it never changes the range: leave it out of the
    # permutations. Exact, and it matters: in a sweep over placement and k every job has the
    # same ranking, so on a ranking metric every query is such a query.
    varying = (x != x[:, :1, :]).any(axis=(0, 1))
    nv = int(varying.sum())
    if nv:
        xv = x[:, :, varying]
        # rows of (query, system) -> all metrics, so one gather serves every metric
        table = np.ascontiguousarray(xv.transpose(2, 1, 0).reshape(nv * s, m))
        base = (np.arange(nv, dtype=np.intp) * s)[:, None]
        ident = np.broadcast_to(np.arange(s, dtype=np.intp), (nv, s))
        rows = max(1, CHUNK_CELLS // (nv * s * m))
        for start in range(0, n_permutations, rows):
            b = min(rows, n_permutations - start)
            perm = rng.permuted(np.broadcast_to(ident, (b, nv, s)), axis=2)
            perm += base
            sums = table[perm].sum(axis=1)  # [b, s, m]
            ranges[:, start : start + b] = (sums.max(axis=1) - sums.min(axis=1)).T / n
    return ranges


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

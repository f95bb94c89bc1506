"""Paired tests of one system against another on the same queries, one row of per-query
differences d = system - baseline at a time (vectorized over rows): the paired t-test, the
Wilcoxon signed-rank and sign tests, Fisher's randomization test, effect sizes and
wins/ties/losses. Smucker, Allan & Carterette 2007 compare these tests for IR.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.inputs import CHUNK_CELLS, REL_TOL, TIE_TOLERANCE, as_matrix, random_stream, scale

#: The randomization test enumerates all 2^n sign flips up to this many queries.
EXACT_MAX_N = 20


def _as_diffs(diffs: ArrayLike) -> NDArray[np.float64]:
    return as_matrix(diffs)


def paired_t_test(diffs: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Two-sided paired t-test on each row of differences: ``(t, p)``.

    t = mean(d) / (sd(d, ddof=1) / sqrt(n)), p = 2 P(T_{n-1} >= |t|) (Student 1908),
    = ``scipy.stats.ttest_rel``. All-zero differences give t = 0, p = 1 (scipy: NaN);
    constant non-zero differences give t = +-inf, p = 0.
    """
    d = _as_diffs(diffs)
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


def _snap(d: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.where(np.abs(d) <= TIE_TOLERANCE, 0.0, d)


def wins_ties_losses(diffs: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per row: queries with d > tol, |d| <= tol, d < -tol (tol = ``TIE_TOLERANCE``)."""
    d = _as_diffs(diffs)
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
    d = _snap(_as_diffs(diffs))
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
    d = _as_diffs(diffs)
    n = d.shape[1]
    mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        dz = mean / sd
    zero = np.abs(mean) <= TIE_TOLERANCE * scale(d)
    dz = np.where(sd == 0, np.where(zero, 0.0, np.copysign(np.inf, mean)), dz)
    j = 1 - 3 / (4 * (n - 1) - 1) if n > 1 else 1.0
    return dz, dz * j


def randomization_test(
    diffs: ArrayLike,
    *,
    n_permutations: int = 10_000,
    seed: int | None = 0,
    exact_max_n: int = EXACT_MAX_N,
) -> NDArray[np.float64]:
    """Fisher's paired randomization test (two-sided) on the mean difference, per row.

    Under H0 each query's difference is equally likely +d or -d: T* = mean(s * d) for
    signs s in {-1, 1}^n (Fisher 1935; Smucker, Allan & Carterette 2007). With n <=
    ``exact_max_n`` all 2^n sign vectors are enumerated (bit matrix), p = #{|T*| >= |T|} / 2^n;
    otherwise ``n_permutations`` random sign vectors (stream 1 of ``seed``), shared by all
    rows, p = (#{|T*| >= |T|} + 1) / (B + 1). Computed on sums: sum(s*d) = 2 b@d - sum(d)
    for the 0/1 bits b.
    """
    d = _as_diffs(diffs)
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

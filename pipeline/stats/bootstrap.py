"""Paired bootstrap: resampled means of every system on the same resampled queries, and their
percentile and BCa confidence intervals (Efron & Tibshirani 1993, ch. 13-14; BCa eq.
14.14-14.15), drawn in ``scipy.stats.bootstrap``'s order so the intervals equal scipy's.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.inputs import CHUNK_CELLS, REL_TOL, CiMethod, as_matrix, ndtr, ndtri, scale


def bootstrap_means(matrix: ArrayLike, *, n_resamples: int = 10_000, seed: int | None = 0) -> NDArray[np.float64]:
    """Paired bootstrap distribution of each row's mean, ``[n_systems, n_resamples]``.

    Resample b draws n query indices with replacement, ``rng.integers(0, n, (B, n))`` with
    ``rng = np.random.default_rng(seed)`` (drawn in chunks of rows, which yields the same
    stream), the order of ``scipy.stats.bootstrap``; the same indices serve every system.
    Mean*_b = counts_b @ x / n, where counts_b[j] is how often query j was drawn.
    """
    x = as_matrix(matrix)
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    n = x.shape[1]
    rng = np.random.default_rng(seed)
    out = np.empty((x.shape[0], n_resamples))
    rows = max(1, CHUNK_CELLS // n)
    xt = x.T / n
    for start in range(0, n_resamples, rows):
        b = min(rows, n_resamples - start)
        idx = rng.integers(0, n, (b, n))
        idx += np.arange(b)[:, None] * n
        counts = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)
        out[:, start : start + b] = (counts.astype(np.float64) @ xt).T
    return out


def _quantile_rows(sorted_rows: NDArray[np.float64], q: NDArray[np.float64]) -> NDArray[np.float64]:
    """Linear-interpolation quantile (numpy's default, Hyndman & Fan type 7), one q per row."""
    b = sorted_rows.shape[1]
    h = np.clip(q, 0.0, 1.0) * (b - 1)
    lo = np.floor(h).astype(np.intp)
    hi = np.minimum(lo + 1, b - 1)
    rows = np.arange(sorted_rows.shape[0])
    a, c = sorted_rows[rows, lo], sorted_rows[rows, hi]
    return a + (h - lo) * (c - a)


def ci_from_distribution(x: NDArray[np.float64], boot: NDArray[np.float64], method: CiMethod,
                         confidence: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Percentile or BCa interval of each row's mean from its bootstrap distribution.

    Percentile: the alpha/2 and 1 - alpha/2 quantiles of the bootstrap means.
    BCa (Efron & Tibshirani 1993, eq. 14.14-14.15, as scipy.stats.bootstrap):
    z0 = Phi^-1((#{theta* < theta} + #{theta* <= theta}) / 2B);
    a = sum(U^3) / (6 (sum U^2)^(3/2)), U_i = (n-1)(mean_j theta_(j) - theta_(i)) from the
    jackknife means theta_(i) = (sum x - x_i) / (n-1);
    alpha_1,2 = Phi(z0 + (z0 + z) / (1 - a (z0 + z))) at z = Phi^-1(alpha/2), Phi^-1(1-alpha/2).
    A row whose scores are all equal has the interval [mean, mean] (scipy: NaN).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if method not in ("BCa", "percentile"):
        raise ValueError(f"method must be 'BCa' or 'percentile', got {method!r}")
    alpha = (1 - confidence) / 2
    theta = x.mean(axis=1)
    k, n = x.shape
    nb = boot.shape[1]
    if method == "percentile":
        q_lo = np.full(k, alpha)
        q_hi = np.full(k, 1 - alpha)
    else:
        tol = REL_TOL * scale(x)
        below = np.count_nonzero(boot < (theta - tol)[:, None], axis=1)
        at_or_below = np.count_nonzero(boot <= (theta + tol)[:, None], axis=1)
        z0 = ndtri((below + at_or_below) / (2 * nb))
        jack = (x.sum(axis=1, keepdims=True) - x) / (n - 1)
        u = (n - 1) * (jack.mean(axis=1, keepdims=True) - jack)
        with np.errstate(invalid="ignore", divide="ignore"):
            a_hat = (u**3).sum(axis=1) / (6 * (u**2).sum(axis=1) ** 1.5)
            z_lo, z_hi = ndtri(alpha), ndtri(1 - alpha)
            q_lo = ndtr(z0 + (z0 + z_lo) / (1 - a_hat * (z0 + z_lo)))
            q_hi = ndtr(z0 + (z0 + z_hi) / (1 - a_hat * (z0 + z_hi)))
    flat = np.ptp(x, axis=1) == 0
    q_lo = np.where(flat, 0.5, q_lo)
    q_hi = np.where(flat, 0.5, q_hi)
    s = np.sort(boot, axis=1)
    return np.where(flat, theta, _quantile_rows(s, q_lo)), np.where(flat, theta, _quantile_rows(s, q_hi))


def bootstrap_ci(matrix: ArrayLike, *, method: CiMethod = "BCa", confidence: float = 0.95, n_resamples: int = 10_000,
                 seed: int | None = 0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Paired-bootstrap CI of each row's mean: ``(low, high)``, each ``[n_systems]``.

    Equals ``scipy.stats.bootstrap((row,), np.mean, method=method, n_resamples=B,
    rng=np.random.default_rng(seed))`` for every row (same resamples, same formulas),
    up to floating-point rounding; see :func:`bootstrap_means`, :func:`ci_from_distribution`.
    For a CI of a difference pass the row of paired differences.
    """
    x = as_matrix(matrix)
    return ci_from_distribution(x, bootstrap_means(x, n_resamples=n_resamples, seed=seed), method, confidence)

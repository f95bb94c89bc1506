"""How far a comparison can be trusted: the paired t-test's power, the smallest difference it
detects and the queries it needs (topic-set size design); and the spread of a metric over the
orders of documents with equal scores, flagged when it exceeds the sampling uncertainty.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

def power_paired_t(delta: ArrayLike, sd: ArrayLike, n: ArrayLike, *, alpha: float = 0.05) -> NDArray[np.float64]:
    """Power of the two-sided paired t-test at level alpha for a true mean difference delta.

    With df = n - 1, noncentrality lambda = delta sqrt(n) / sd and c = t_{1-alpha/2, df}:
    power = P(T' > c) + P(T' < -c), T' ~ noncentral t(df, lambda) (scipy.stats.nct);
    Cohen 1988, ch. 2; Sakai 2016.
    """
    delta, sd, n = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (delta, sd, n)))
    if (n < 2).any() or (sd < 0).any():
        raise ValueError("need n >= 2 and sd >= 0")
    df = n - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        nc = np.where(sd > 0, np.abs(delta) * np.sqrt(n) / sd, np.where(delta == 0, 0.0, np.inf))
    import scipy.stats  # noqa: PLC0415
    c = scipy.stats.t.ppf(1 - alpha / 2, df)
    finite = np.isfinite(nc)
    ncf = np.where(finite, nc, 0.0)
    # nc >= 0, so the lower tail is tiny; scipy's nct.cdf returns NaN there for large nc
    lower = np.nan_to_num(scipy.stats.nct.cdf(-c, df, ncf), nan=0.0)
    power = np.minimum(scipy.stats.nct.sf(c, df, ncf) + lower, 1.0)
    return np.where(finite, power, 1.0)


def minimum_detectable_difference(sd: ArrayLike, n: int, *, alpha: float = 0.05,
                                  power: float = 0.8) -> NDArray[np.float64]:
    """Smallest true mean difference the paired t-test detects with the given power.

    Solves power_paired_t(delta, sd, n) = power for delta (root of the noncentral-t power,
    Sakai 2016; Webber, Moffat & Zobel 2008). For context, the normal approximation is
    (z_{1-alpha/2} + z_power) * sd / sqrt(n), e.g. 2.80 sd / sqrt(n) at 0.05 and 0.8; the
    t-based value is a little larger at small n. sd = 0 gives 0.
    """
    if n < 2:
        raise ValueError("need n >= 2 queries")
    if not (0 < alpha < 1 and alpha / 2 < power < 1):
        raise ValueError("need 0 < alpha < 1 and alpha/2 < power < 1")
    sd_arr = np.asarray(sd, dtype=np.float64)
    if (sd_arr < 0).any() or not np.isfinite(sd_arr).all():
        raise ValueError("sd must be finite and >= 0")

    import scipy.stats  # noqa: PLC0415
    from scipy.optimize import brentq  # noqa: PLC0415
    def one(s: float) -> float:
        if s == 0:
            return 0.0
        # effect size in sd units; the normal approximation is a close starting bracket
        f = lambda e: float(power_paired_t(e, 1.0, n, alpha=alpha)) - power  # noqa: E731
        hi = 2 * (scipy.stats.norm.ppf(1 - alpha / 2) + scipy.stats.norm.ppf(power)) / math.sqrt(n)
        while f(hi) < 0:
            hi *= 2
        return s * brentq(f, 0.0, hi, xtol=1e-12, rtol=1e-12)

    return np.vectorize(one, otypes=[np.float64])(sd_arr)


def queries_needed(delta: float, sd: float, *, alpha: float = 0.05, power: float = 0.8, max_n: int = 10**7) -> int:
    """Smallest number of queries n >= 2 at which the paired t-test has at least the given power
    to detect a true mean difference ``delta`` when differences have standard deviation ``sd``
    (topic-set size design, Sakai 2016). Starts at the normal approximation
    ((z_{1-alpha/2} + z_power) sd / delta)^2 and steps to the exact noncentral-t answer.
    """
    if not delta > 0 or not math.isfinite(delta):
        raise ValueError(f"delta must be a positive number, got {delta}")
    if sd < 0 or not math.isfinite(sd):
        raise ValueError(f"sd must be finite and >= 0, got {sd}")
    if sd == 0:
        return 2
    import scipy.stats  # noqa: PLC0415
    z = scipy.stats.norm.ppf(1 - alpha / 2) + scipy.stats.norm.ppf(power)
    n = max(2, math.ceil((z * sd / delta) ** 2))
    if n > max_n:
        raise ValueError(f"more than {max_n} queries needed")
    pw = lambda k: float(power_paired_t(delta, sd, k, alpha=alpha))  # noqa: E731
    while pw(n) < power:
        n = n + max(1, n // 100)
        if n > max_n:
            raise ValueError(f"more than {max_n} queries needed")
    while n > 2 and pw(n - 1) >= power:
        n -= 1
    return n


def tie_bounds(scores: ArrayLike, grades: ArrayLike,
               metric: Callable[[NDArray[np.int64]], ArrayLike]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Optimistic and pessimistic per-query values of a metric over all orders of tied documents.

    ``scores`` and ``grades`` are ``[n_queries, depth]`` (the retrieved documents' scores,
    -inf for an empty slot, and their grades). Documents are ranked by score descending;
    within a group of equal scores the optimistic order puts higher grades first and the
    pessimistic order lower grades first (McSherry & Najork 2008). ``metric`` maps a
    reordered grade matrix to per-query values; for metrics that never fall when a higher
    grade moves up (P@K, R@K, nDCG@K, RR, AP) these are the maximum and minimum over every
    order of the ties. A tie group cut by the retrieval depth is only partly seen: pass a
    ranking deep enough to hold whole groups.
    """
    s = np.asarray(scores, dtype=np.float64)
    g = np.asarray(grades)
    if s.ndim != 2 or s.shape != g.shape:
        raise ValueError(f"scores {s.shape} and grades {g.shape} must be equal 2-D shapes")
    if np.isnan(s).any():
        raise ValueError("scores must not be NaN (use -inf for empty slots)")
    g = g.astype(np.int64)
    best = np.lexsort((-g, -s), axis=-1)
    worst = np.lexsort((g, -s), axis=-1)
    opt = np.asarray(metric(np.take_along_axis(g, best, axis=-1)), dtype=np.float64)
    pes = np.asarray(metric(np.take_along_axis(g, worst, axis=-1)), dtype=np.float64)
    if opt.shape != (s.shape[0],) or pes.shape != (s.shape[0],):
        raise ValueError("metric must return one value per query")
    return opt, pes


def tie_spread_flag(optimistic_mean: ArrayLike, pessimistic_mean: ArrayLike, ci_low: ArrayLike,
                    ci_high: ArrayLike) -> NDArray[np.bool_] | bool:
    """True where the tie spread (optimistic mean - pessimistic mean) exceeds half the CI width,
    i.e. score ties alone move the mean by more than its sampling uncertainty."""
    spread = np.asarray(optimistic_mean, dtype=np.float64) - np.asarray(pessimistic_mean, dtype=np.float64)
    half = (np.asarray(ci_high, dtype=np.float64) - np.asarray(ci_low, dtype=np.float64)) / 2
    flag = spread > half
    return bool(flag) if flag.ndim == 0 else flag

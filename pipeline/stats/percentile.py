"""Percentiles of one sample with percentile-bootstrap confidence intervals (a job's
per-query retrieval latencies: ``pipeline.cost``).

A percentile is not a mean, so the paired resample-count trick of ``bootstrap`` does not apply:
each resample's percentiles are computed on the resampled values themselves. Resamples are drawn
in ``scipy.stats.bootstrap``'s order, ``rng.integers(0, n, (n_resamples, n))`` with
``rng = np.random.default_rng(seed)`` (in chunks of rows, the same stream), so the interval
equals ``scipy.stats.bootstrap(..., method="percentile")`` with the same statistic and rng.
Efron & Tibshirani 1993, ch. 13 (the percentile interval); Hyndman & Fan 1996, type 7 (numpy's
default linear interpolation) for every percentile.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.inputs import CHUNK_CELLS


def percentiles_with_ci(values: ArrayLike, qs: Sequence[float], *, n_resamples: int = 2000, seed: int | None = 0,
                        confidence: float = 0.95) -> dict[float, tuple[float, float, float]]:
    """``{q: (estimate, ci_low, ci_high)}`` for each percentile ``q`` (0..100) of ``values``.

    The interval is the percentile bootstrap's: the ``(1 - confidence) / 2`` and ``(1 +
    confidence) / 2`` quantiles of the resampled percentiles. A sample whose values are all
    equal (a batch's per-query share: one batch time over its queries) has the interval
    [value, value] without resampling (scipy warns and returns NaN there); a sample of one
    value too. Empty ``values``: ValueError."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("no values to take percentiles of")
    if not np.isfinite(x).all():
        raise ValueError("values must be finite")
    if n_resamples < 1 or not 0 < confidence < 1:
        raise ValueError("n_resamples must be >= 1 and confidence in (0, 1)")
    q = np.asarray(qs, dtype=np.float64)
    estimate = np.percentile(x, q)
    if x.size == 1 or np.ptp(x) == 0:
        return {float(p): (float(e), float(e), float(e)) for p, e in zip(q, estimate)}
    boot = resampled_percentiles(x, q, n_resamples, seed)
    alpha = (1 - confidence) / 2
    low = np.percentile(boot, 100 * alpha, axis=1)
    high = np.percentile(boot, 100 * (1 - alpha), axis=1)
    return {float(p): (float(e), float(lo), float(hi)) for p, e, lo, hi in zip(q, estimate, low, high)}


def resampled_percentiles(x: NDArray[np.float64], q: NDArray[np.float64], n_resamples: int,
                          seed: int | None) -> NDArray[np.float64]:
    """``[len(q), n_resamples]``: the percentiles ``q`` of each bootstrap resample of ``x``,
    the resamples drawn in scipy's order."""
    n = x.size
    rng = np.random.default_rng(seed)
    out = np.empty((len(q), n_resamples))
    rows = max(1, CHUNK_CELLS // n)
    for start in range(0, n_resamples, rows):
        b = min(rows, n_resamples - start)
        sample = x[rng.integers(0, n, (b, n))]
        out[:, start:start + b] = np.percentile(sample, q, axis=1)
    return out

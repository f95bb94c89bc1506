"""Score ties: the best and worst value a metric can take over every order of documents with
equal scores (McSherry & Najork 2008), and a flag for when that spread exceeds the sampling
uncertainty of the mean.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray


def tie_bounds(
    scores: ArrayLike,
    grades: ArrayLike,
    metric: Callable[[NDArray[np.int64]], ArrayLike],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
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


def tie_spread_flag(
    optimistic_mean: ArrayLike, pessimistic_mean: ArrayLike, ci_low: ArrayLike, ci_high: ArrayLike
) -> NDArray[np.bool_] | bool:
    """True where the tie spread (optimistic mean - pessimistic mean) exceeds half the CI width,
    i.e. score ties alone move the mean by more than its sampling uncertainty."""
    spread = np.asarray(optimistic_mean, dtype=np.float64) - np.asarray(pessimistic_mean, dtype=np.float64)
    half = (np.asarray(ci_high, dtype=np.float64) - np.asarray(ci_low, dtype=np.float64)) / 2
    flag = spread > half
    return bool(flag) if flag.ndim == 0 else flag

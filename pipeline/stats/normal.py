"""The standard normal CDF and its inverse, elementwise, from the standard library.

BCa intervals need only these two functions; taking them from ``statistics.NormalDist`` and
``math.erfc`` rather than from scipy means a job that logs its objective's bootstrap interval
never imports scipy.stats, which is slow to import (the statistical tests that need scipy
import it inside the function that runs them).
"""

from __future__ import annotations

import math
import statistics

import numpy as np
from numpy.typing import ArrayLike, NDArray

_NORMAL = statistics.NormalDist()


def ndtr(x: ArrayLike) -> NDArray[np.float64]:
    """The standard normal CDF (= scipy.special.ndtr), elementwise."""
    return 0.5 * np.vectorize(math.erfc, otypes=[np.float64])(-np.asarray(x, np.float64) / math.sqrt(2.0))


def ndtri(p: ArrayLike) -> NDArray[np.float64]:
    """The inverse of the standard normal CDF (= scipy.special.ndtri): -inf at 0, inf at 1."""
    def one(v: float) -> float:
        if math.isnan(v):
            return math.nan
        if v <= 0.0:
            return -math.inf
        if v >= 1.0:
            return math.inf
        return _NORMAL.inv_cdf(v)

    return np.vectorize(one, otypes=[np.float64])(np.asarray(p, np.float64))

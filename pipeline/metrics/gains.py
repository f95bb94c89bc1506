"""Gains and discounts: gain(rel) = 2^rel - 1 (``exp``, Burges et al. 2005) or rel (``linear``,
trec_eval), the DCG discount 1 / log2(i + 1) (Järvelin & Kekäläinen 2002), and the check that a
query's gains cannot overflow a 64-bit float.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from pipeline.metrics.grades import Qrels

Gain = Literal["exp", "linear"]


#: The smallest grade whose exponential gain 2^g - 1 overflows a 64-bit float.
EXP_GAIN_LIMIT = 1024


def gain_values(grades: NDArray[np.integer], gain: Gain = "exp") -> NDArray[np.float64]:
    """gain(rel): ``exp`` = 2^rel - 1 (Burges et al. 2005), ``linear`` = rel (trec_eval).

    With ``exp`` a grade >= 1024 (:data:`EXP_GAIN_LIMIT`) has no finite gain in float64:
    ValueError rather than an infinite gain and NaN metrics (use ``linear`` for such scales).
    """
    grades = np.maximum(np.asarray(grades), 0)
    if gain == "exp":
        if grades.size and grades.max() >= EXP_GAIN_LIMIT:
            raise ValueError(
                f"grade {int(grades.max())} is too large for gain=exp (2^{int(grades.max())} - 1 overflows a "
                "64-bit float); use gain=linear"
            )
        return np.exp2(grades.astype(np.float64)) - 1.0
    if gain == "linear":
        return grades.astype(np.float64)
    raise ValueError(f"gain must be 'exp' or 'linear', got {gain!r}")


def check_gain_overflow(qrels: Qrels, n_queries: int, gain: Gain = "exp") -> None:
    """ValueError when some query's gains cannot be summed in float64 (``exp`` gain only).

    Every DCG, ideal DCG and context-utility sum of a query is at most the sum of the gains of
    all its judged documents (each document is retrieved once, discounts and weights are
    <= 1 relative to it), so that sum being finite keeps every metric finite. Without this
    check a large grade gives an infinite ideal DCG and nDCG silently becomes 0 or NaN.
    """
    if gain != "exp" or not len(qrels.grade):
        return
    grades = np.maximum(np.asarray(qrels.grade), 0)
    top = int(grades.max())
    if top >= EXP_GAIN_LIMIT:
        gain_values(np.array([top]), gain)  # raises with the grade
    if top < 1000:  # at most 2^24 judgments per query below 2^1000 each: cannot overflow
        if len(grades) < 1 << 24:
            return
    with np.errstate(over="ignore"):
        totals = np.bincount(qrels.query_idx, weights=np.exp2(grades.astype(np.float64)) - 1.0,
                             minlength=n_queries)
    if not np.all(np.isfinite(totals)):
        query = int(np.flatnonzero(~np.isfinite(totals))[0])
        worst = int(grades[qrels.query_idx == query].max())
        raise ValueError(
            f"the judged grades of query #{query} (up to {worst}) sum to more than a 64-bit float holds "
            "with gain=exp (2^g - 1 per document); use gain=linear"
        )


def discounts(depth: int) -> NDArray[np.float64]:
    """1 / log2(i + 1) for ranks i = 1..depth."""
    return 1.0 / np.log2(np.arange(2, depth + 2, dtype=np.float64))

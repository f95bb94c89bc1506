"""The BM25 variants: one idf and one tf component per variant, chosen by name.

Scoring follows the formulas of bm25s (Lù 2024), which follow Kamphuis et al. 2020,
"Which BM25 Do You Mean? A Large-Scale Reproducibility Study of Scoring Variants" (ECIR):

=========  =======================================  ==================================================
method     idf(t)                                   tf component (tf, L = k1 * (1 - b + b * dl/avgdl))
=========  =======================================  ==================================================
robertson  log(max(1, (N - df + .5) / (df + .5)))   tf / (L + tf)                 Robertson & Zaragoza 2009
lucene     log(1 + (N - df + .5) / (df + .5))       tf / (L + tf)                 Lucene >= 8
atire      log(N / df)                              (k1 + 1) tf / (L + tf)        Trotman et al. 2012
bm25l      log((N + 1) / (df + .5))                 (k1 + 1)(c + d) / (k1 + c + d), c = tf k1 / L (*)
                                                                                  Lv & Zhai 2011 (BM25L)
bm25+      log((N + 1) / df)                        (k1 + 1) tf / (L + tf) + d    Lv & Zhai 2011 (BM25+)
=========  =======================================  ==================================================

``d`` is ``delta``; (*) that is, c = tf / (1 - b + b dl/avgdl). BM25L and BM25+ give a
document a positive weight for a query term it does not contain (the tf component at
tf = 0); that part is the same for every document, so the weight matrix stores
``weight(tf) - weight(0)`` and the constant is added back per query (``WITH_DELTA``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray


def idf_robertson(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """Robertson & Zaragoza 2009, floored at 0 (terms in over half the documents weigh nothing)."""
    return np.log(np.maximum((n_docs - df + 0.5) / (df + 0.5), 1.0))


def idf_lucene(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """Lucene's idf, always positive (Kamphuis et al. 2020)."""
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


def idf_atire(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """ATIRE (Trotman, Jia & Crane 2012): plain log(N / df)."""
    return np.log(n_docs / df)


def idf_bm25l(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """BM25L (Lv & Zhai 2011, "When documents are very long, BM25 fails!", SIGIR)."""
    return np.log((n_docs + 1.0) / (df + 0.5))


def idf_bm25plus(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """BM25+ (Lv & Zhai 2011, "Lower-bounding term frequency normalization", CIKM)."""
    return np.log((n_docs + 1.0) / df)


def tfc_robertson(tf, len_norm, k1: float, delta: float):
    """tf / (tf + k1 (1 - b + b dl/avgdl)): Robertson & Zaragoza 2009 without the (k1+1) factor."""
    return tf / (k1 * len_norm + tf)


def tfc_atire(tf, len_norm, k1: float, delta: float):
    """(k1 + 1) tf / (tf + k1 (1 - b + b dl/avgdl)): the classic Okapi form (ATIRE, rank_bm25)."""
    return tf * (k1 + 1.0) / (k1 * len_norm + tf)


def tfc_bm25l(tf, len_norm, k1: float, delta: float):
    """BM25L: c = tf / (1 - b + b dl/avgdl); (k1 + 1)(c + delta) / (k1 + c + delta) (Lv & Zhai 2011)."""
    c = tf / len_norm
    return (k1 + 1.0) * (c + delta) / (k1 + c + delta)


def tfc_bm25plus(tf, len_norm, k1: float, delta: float):
    """BM25+: the Okapi tf component plus delta, so any occurrence beats none (Lv & Zhai 2011)."""
    return tf * (k1 + 1.0) / (k1 * len_norm + tf) + delta


#: method name -> (idf function, tf component function)
VARIANTS: dict[str, tuple[Callable, Callable]] = {
    "robertson": (idf_robertson, tfc_robertson),
    "lucene": (idf_lucene, tfc_robertson),
    "atire": (idf_atire, tfc_atire),
    "bm25l": (idf_bm25l, tfc_bm25l),
    "bm25+": (idf_bm25plus, tfc_bm25plus),
}
WITH_DELTA = ("bm25l", "bm25+")  # variants that score absent terms (and use delta)

"""Attention curves: how much a generator uses each slot 1..k of its context.

Each curve is a plain function ``curve(k, **params) -> float64[k]``; entry ``i - 1`` is the
weight of slot ``i`` (higher = the generator uses that slot more). Only ratios of weights
matter to ``context_utility`` (it divides by the best achievable sum under the same curve),
so curves are not normalised. The config group ``conf/attention`` registers each one with
``_partial_: true``, so ``hydra.utils.instantiate(cfg.attention)`` gives a callable ``curve(k)``.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

# Liu et al. 2023, "Lost in the Middle: How Language Models Use Long Contexts" (TACL 2024, arXiv:2307.03172),
# GPT-3.5-Turbo (0613), 20 documents: accuracy by position of the answer document (Table 6, Appendix G; Figure 5;
# see liu2023). 57.2 / 55.4 at positions 5 / 15 are the same table's, as reproduced in a structured summary of
# the paper (TACL 2024 vol. 12 pp. 157-173).
LIU2023_POSITIONS: NDArray[np.float64] = np.array([1.0, 5.0, 10.0, 15.0, 20.0])
LIU2023_ACCURACY: NDArray[np.float64] = np.array([0.758, 0.572, 0.538, 0.554, 0.632])
LIU2023_N_DOCUMENTS = 20


def check_k(k: int, *, empty_ok: bool = False) -> int:
    """K, the number of context slots, as an int; ValueError unless it is valid.

    The bound: K is an integer (a Python or numpy int, not a bool) and K >= 1, a context
    holds at least one chunk. ``empty_ok=True`` also lets K = 0 through, for the functions
    whose answer for an empty context is well defined and empty (a placement: the
    permutation of nothing; ``context_utility`` with ``k_max = 0``: no columns).
    """
    minimum = 0 if empty_ok else 1
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < minimum:
        raise ValueError(f"K (the number of context slots) must be an integer >= {minimum}, got {k!r}")
    return int(k)


def _slot_fraction(k: int, slots: NDArray[np.int64] | None = None) -> NDArray[np.float64]:
    """(i - 1) / (k - 1) for slots i = 1..k: 0 at the first slot, 1 at the last (k = 1: [0]).
    ``slots`` (0-based, each < k): only those slots, in that order; every slot when None."""
    i = np.arange(k, dtype=np.float64) if slots is None else np.asarray(slots, dtype=np.float64)
    if k == 1:
        return np.zeros(len(i))
    return i / (k - 1)


def liu2023(k: int, slots: NDArray[np.int64] | None = None) -> NDArray[np.float64]:
    """GPT-3.5-Turbo's accuracy by answer position (Liu et al. 2023), stretched over k slots.

    Source: Liu et al. 2023, "Lost in the Middle" (TACL 2024), multi-document QA with 20
    documents, GPT-3.5-Turbo, accuracy with the answer document at position 1, 5, 10, 15, 20:
    75.8%, 57.2%, 53.8%, 55.4%, 63.2% (Table 6, Appendix G; positions 1, 10, 20 are the ones
    quoted in docs/metrics.md, "Context placement").

    Slot i of k maps to paper position p(i) = 1 + 19 (i - 1) / (k - 1) (k = 1: p = 1), and
    the weight is the accuracy interpolated linearly between the five measured positions
    (``np.interp``). Weights are raw accuracies as fractions, not normalised: at k = 20 the
    slots 1, 5, 10, 15, 20 get exactly 0.758, 0.572, 0.538, 0.554, 0.632.
    """
    k = check_k(k)
    position = 1.0 + (LIU2023_N_DOCUMENTS - 1) * _slot_fraction(k, slots)
    return np.interp(position, LIU2023_POSITIONS, LIU2023_ACCURACY)


def flat(k: int, slots: NDArray[np.int64] | None = None) -> NDArray[np.float64]:
    """Every slot used equally: w(i) = 1. Under it every placement scores the same."""
    k = check_k(k)
    return np.ones(k if slots is None else len(slots))


def log(k: int, slots: NDArray[np.int64] | None = None) -> NDArray[np.float64]:
    """The DCG position discount w(i) = 1 / log2(i + 1) (Järvelin and Kekäläinen 2002).

    With this curve and no reordering, context utility equals nDCG@K.
    """
    k = check_k(k)
    i = np.arange(k, dtype=np.float64) if slots is None else np.asarray(slots, dtype=np.float64)
    return 1.0 / np.log2(i + 2.0)


def u_shape(k: int, start: float = 1.0, end: float = 0.85, floor: float = 0.7, power: float = 2.0, center: float = 0.5,
            slots: NDArray[np.int64] | None = None) -> NDArray[np.float64]:
    """A parametric U: high at both ends of the context, lowest at ``center``.

    With x = (i - 1) / (k - 1) the relative slot position (x = 0 for k = 1) and c = center:

        w(x) = floor + (start - floor) * ((c - x) / c) ** power          for x <= c
        w(x) = floor + (end - floor) * ((x - c) / (1 - c)) ** power      for x >  c

    so w(0) = start, w(1) = end and w(c) = floor (the minimum, reached when a slot lands on
    c). ``power`` sets how fast weight falls from the ends (1 = a V, larger = a flatter
    bottom). The curve is stretched over the k slots, so it is recomputed for every K.
    The defaults roughly follow Liu et al. 2023's GPT-3.5-Turbo curve divided by its first
    value (1, 0.83 at the end, 0.71 in the middle); they are a shape, not a measurement.

    Requires floor > 0 (weights positive), start >= floor, end >= floor, power > 0 and
    0 < center < 1.
    """
    k = check_k(k)
    if not floor > 0:
        raise ValueError(f"attention u_shape: floor must be > 0, got {floor}")
    if not (start >= floor and end >= floor):
        raise ValueError(f"attention u_shape: start ({start}) and end ({end}) must be >= floor ({floor})")
    if not power > 0:
        raise ValueError(f"attention u_shape: power must be > 0, got {power}")
    if not 0 < center < 1:
        raise ValueError(f"attention u_shape: center must lie strictly between 0 and 1, got {center}")
    x = _slot_fraction(k, slots)
    left = floor + (start - floor) * (np.clip(center - x, 0.0, None) / center) ** power
    right = floor + (end - floor) * (np.clip(x - center, 0.0, None) / (1.0 - center)) ** power
    return np.where(x <= center, left, right)


#: The built-in curves. Each takes ``slots=`` (0-based slot numbers < k) and then returns the
#: weights of those slots only, equal bit for bit to ``curve(k)[slots]``; and each is
#: valley-shaped along the slots (non-increasing, then non-decreasing; monotone and flat curves
#: included), so the m largest weights of ``curve(k)`` lie among its first m and last m slots.
#: ``placement.context_utility`` uses both facts to do O(m) work per K instead of O(K).
VALLEY_CURVES = frozenset({liu2023, flat, log, u_shape})


def unwrap(fn: object) -> tuple[object, dict]:
    """The function under ``fn`` and its keyword parameters: ``fn`` itself and {} unless it is
    a functools.partial with keywords only (what Hydra's ``_partial_: true`` gives; calling
    the bare function skips the wrapper's per-call work)."""
    keywords: dict = {}
    while isinstance(fn, functools.partial) and not fn.args:
        keywords = {**fn.keywords, **keywords}
        fn = fn.func
    return fn, keywords


def is_valley(curve: object) -> bool:
    """True when ``curve`` is one of :data:`VALLEY_CURVES`, bare or wrapped as :func:`unwrap` unwraps."""
    return unwrap(curve)[0] in VALLEY_CURVES

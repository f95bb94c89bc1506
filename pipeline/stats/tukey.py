"""Randomized Tukey HSD (Carterette 2012; Sakai 2018): p-values for every pair of systems at
once, family-wise by construction, from permutations of each query's scores across systems.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.inputs import CHUNK_CELLS, REL_TOL, as_matrix, random_stream, scale


def tukey_hsd(
    matrix: ArrayLike, *, n_permutations: int = 10_000, seed: int | None = 0
) -> NDArray[np.float64]:
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
    if n_permutations < 1:
        raise ValueError("n_permutations must be >= 1")
    m, s, n = x.shape
    means = x.mean(axis=2)
    if s < 2:
        return np.ones((m, s, s))
    rng = random_stream(seed, 2)
    # A query on which every system scores the same (on every metric) adds the same to every
    # system's sum under any permutation, so it never changes the range: leave it out of the
    # permutations. Exact, and it matters: in a sweep over placement and k every job has the
    # same ranking, so on a ranking metric every query is such a query.
    varying = (x != x[:, :1, :]).any(axis=(0, 1))
    nv = int(varying.sum())
    ranges = np.zeros((m, n_permutations))
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
    gap = np.abs(means[:, :, None] - means[:, None, :])
    tol = REL_TOL * scale(x.reshape(m, -1))[:, None, None]
    count = np.empty((m, s, s), dtype=np.int64)
    for i in range(m):
        r = np.sort(ranges[i])
        count[i] = n_permutations - np.searchsorted(r, (gap[i] - tol[i]).ravel(), side="left").reshape(s, s)
    p = (count + 1) / (n_permutations + 1)
    p[:, np.arange(s), np.arange(s)] = 1.0
    return p

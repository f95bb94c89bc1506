"""The score matrix every statistic takes (:func:`align`), the checks of its inputs, the constants
all statistics share, and the standard normal CDF and its inverse. Those two come from the
standard library, not scipy: BCa intervals need only them, so a job that logs its objective's
bootstrap interval never imports scipy.stats, which is slow to import (the tests that need scipy
import it inside the function that runs them).
"""

from __future__ import annotations

import math
import statistics
from typing import Literal, Mapping, NamedTuple, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

CiMethod = Literal["BCa", "percentile"]
Correction = Literal["holm", "bonferroni", "fdr_bh", "none"]
Test = Literal["t", "wilcoxon", "sign", "fisher", "tukey"]

#: |difference| at or below this is a tie (sign test, Wilcoxon, wins/ties/losses).
TIE_TOLERANCE = 1e-12
#: Names of the paired tests run against the baseline, in report order.
PAIRED_TESTS = ("t", "wilcoxon", "sign", "fisher")
#: The multiple-comparison corrections :func:`pipeline.stats.adjust_pvalues` knows.
CORRECTIONS = ("holm", "bonferroni", "fdr_bh", "none")
#: Cells per chunk of resample/permutation work (bounds memory to tens of MB).
CHUNK_CELLS = 1 << 22
#: Statistics within this share of the data's scale (:func:`scale`) of the observed one count
#: as equal to it: the same value computed in another order must not change a p-value.
REL_TOL = 1e-10


def distinct_rows(matrix: ArrayLike) -> NDArray[np.int64]:
    """Per row of ``[n_systems, n_queries]``, the index of the first row with the same per-query
    values (every |difference| <= :data:`TIE_TOLERANCE`): rows that share it are one result
    counted once (exact ties: a sweep over k or placement scores one ranking several times).
    Identical rows have identical tests against any other row, so a multiple-comparison family
    counts each distinct result once (``compare_metrics``, ``tied_with_best``)."""
    x = as_matrix(matrix)
    first = np.arange(x.shape[0], dtype=np.int64)
    for i in range(1, x.shape[0]):
        for j in range(i):
            if first[j] == j and np.all(np.abs(x[i] - x[j]) <= TIE_TOLERANCE):
                first[i] = j
                break
    return first


class Aligned(NamedTuple):
    """A score matrix with its labels: ``matrix[i, j]`` is system ``names[i]`` on query ``query_ids[j]``."""

    names: list[str]
    query_ids: list[str]
    matrix: NDArray[np.float64]


def align(per_system: Mapping[str, Mapping[str, float] | tuple[Sequence[str], ArrayLike]], *,
          missing: Literal["error", "zero"] = "error", query_ids: Sequence[str] | None = None) -> Aligned:
    """Align per-query scores of several systems on query id.

    ``per_system`` maps a system name to ``{query_id: score}`` or to ``(query_ids, scores)``.
    The queries are ``query_ids`` when given (e.g. the judged queries, in that order),
    otherwise the sorted union over systems. A query missing from a system is a
    ``ValueError`` naming the system and a few query ids, unless ``missing="zero"``, which
    scores it 0 (trec_eval's ``-c``). A system's query outside ``query_ids`` is an error
    too: nothing is dropped silently.
    """
    if missing not in ("error", "zero"):
        raise ValueError(f"missing must be 'error' or 'zero', got {missing!r}")
    if not per_system:
        raise ValueError("no systems to align")
    tables: dict[str, dict[str, float]] = {}
    for name, scores in per_system.items():
        if isinstance(scores, Mapping):
            table = {str(q): float(v) for q, v in scores.items()}
        else:
            try:
                ids, values = scores
            except (TypeError, ValueError):
                raise ValueError(f"system {name!r}: expected a mapping or (query_ids, scores)") from None
            ids = [str(q) for q in ids]
            values = np.asarray(values, dtype=np.float64).ravel()
            if len(ids) != len(values):
                raise ValueError(f"system {name!r}: {len(ids)} query ids but {len(values)} scores")
            table = dict(zip(ids, values.tolist()))
            if len(table) != len(ids):
                dup = sorted({q for q in ids if ids.count(q) > 1})[:5]
                raise ValueError(f"system {name!r}: duplicate query ids {dup}")
        bad = [q for q, v in table.items() if not math.isfinite(v)]
        if bad:
            raise ValueError(f"system {name!r}: non-finite scores for queries {sorted(bad)[:5]}")
        tables[str(name)] = table
    if query_ids is None:
        qids = sorted(set().union(*(t.keys() for t in tables.values())))
    else:
        qids = [str(q) for q in query_ids]
        if len(set(qids)) != len(qids):
            raise ValueError("query_ids has duplicates")
        known = set(qids)
        for name, table in tables.items():
            extra = sorted(set(table) - known)
            if extra:
                raise ValueError(f"system {name!r}: {len(extra)} queries not in query_ids, e.g. {extra[:5]}")
    if not qids:
        raise ValueError("no queries to align")
    matrix = np.zeros((len(tables), len(qids)))
    for i, (name, table) in enumerate(tables.items()):
        absent = [q for q in qids if q not in table]
        if absent and missing == "error":
            raise ValueError(f"system {name!r} has no score for {len(absent)} of {len(qids)} queries, "
                             f"e.g. {absent[:5]} (pass missing='zero' to score them 0, as trec_eval -c)")
        matrix[i] = [table.get(q, 0.0) for q in qids]
    return Aligned(list(tables), qids, matrix)


def as_matrix(matrix: ArrayLike, *, min_queries: int = 2) -> NDArray[np.float64]:
    """``matrix`` as a float64 ``[n_systems, n_queries]`` array (a single row becomes one system);
    ValueError unless it is 2-D, finite, with at least one system and ``min_queries`` queries."""
    x = np.asarray(matrix, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"expected a [n_systems, n_queries] matrix, got shape {x.shape}")
    if x.shape[0] < 1 or x.shape[1] < min_queries:
        raise ValueError(f"need at least {min_queries} queries, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("scores must be finite (align() checks per system)")
    return x


def as_names(names: Sequence[str] | None, n: int) -> list[str]:
    """The names of ``n`` systems as strings (``system_0``, ... when None); ValueError unless
    there are ``n`` of them, all different."""
    if names is None:
        return [f"system_{i}" for i in range(n)]
    names = [str(s) for s in names]
    if len(names) != n:
        raise ValueError(f"{len(names)} names for {n} systems")
    if len(set(names)) != n:
        raise ValueError(f"system names must be unique: {names}")
    return names


def random_stream(seed: int | None, key: int) -> np.random.Generator:
    """Stream ``key`` spawned from ``seed`` (1: randomization test, 2: Tukey HSD), independent of
    the bootstrap's ``default_rng(seed)`` and of each other."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))


def scale(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per-row scale for rounding tolerances (never 0)."""
    return np.maximum(np.abs(x).max(axis=-1), 1.0)


def check_options(test: str, correction: str, alpha: float) -> None:
    """ValueError unless ``test`` is one of :data:`PAIRED_TESTS`, ``correction`` one of
    :data:`CORRECTIONS` and 0 < ``alpha`` < 1."""
    if test not in PAIRED_TESTS:
        raise ValueError(f"test must be one of {PAIRED_TESTS}, got {test!r}")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


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

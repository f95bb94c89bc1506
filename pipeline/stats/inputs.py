"""The score matrix every statistic takes, the checks of its inputs, and the conventions and
constants all of them share.

Every input is a per-query score matrix ``[n_systems, n_queries]`` whose columns are the
same queries in the same order (:func:`align` builds one from per-system dictionaries).
Every computation is vectorized over systems and over resamples/permutations: resampled
means are a matrix product of a resample-count matrix with the score matrix.

Conventions (each function's docstring gives the formula and its source):

- Paired designs throughout: a bootstrap resample draws query indices once and applies
  them to every system; a sign flip or a row permutation acts on whole queries.
- Bootstrap: ``n_resamples`` (default 10,000) draws of n query indices with replacement,
  in the exact order of ``scipy.stats.bootstrap`` given ``rng=np.random.default_rng(seed)``
  (``rng.integers(0, n, (n_resamples, n))``), so our percentile and BCa intervals equal
  scipy's. Efron & Tibshirani 1993, ch. 13-14; BCa eq. 14.14-14.15.
- Two-sided tests; a difference is significant when its (adjusted) p <= alpha.
- Differences with ``|d| <= TIE_TOLERANCE`` are ties: zero for the sign test and Wilcoxon,
  a tie in wins/ties/losses. When every difference is zero, every p-value is 1 (scipy
  returns NaN for the t-test and Wilcoxon there).
- Monte Carlo p-values are ``(count(|T*| >= |T|) + 1) / (B + 1)`` (Phipson & Smyth 2010),
  never 0; exact enumeration gives ``count / 2^n``. Statistics equal to the observed one
  within floating-point rounding (``1e-10`` of the scale of the data) count as ">=".
- Random streams: the bootstrap uses ``np.random.default_rng(seed)`` (scipy's order);
  the randomization test and randomized Tukey HSD use independent streams spawned from
  ``np.random.SeedSequence(seed)`` (spawn keys 1 and 2), so adding one test never changes
  another's numbers.
- Results are JSON-ready: plain ``float``/``int``/``str``/``list``/``dict``.

Sources: Efron & Tibshirani 1993 (bootstrap, BCa); Smucker, Allan & Carterette 2007
(randomization vs t vs Wilcoxon vs sign test in IR); Carterette 2012 and Sakai 2018
(randomized Tukey HSD); Holm 1979; Benjamini & Hochberg 1995; Sakai 2016 and Webber,
Moffat & Zobel 2008 (topic-set size, power); McSherry & Najork 2008 (score ties);
Lakens 2013 (d_z, Hedges' correction). See docs/statistics.md.
"""

from __future__ import annotations

import math
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


class Aligned(NamedTuple):
    """A score matrix with its labels: ``matrix[i, j]`` is system ``names[i]`` on query ``query_ids[j]``."""

    names: list[str]
    query_ids: list[str]
    matrix: NDArray[np.float64]


def align(
    per_system: Mapping[str, Mapping[str, float] | tuple[Sequence[str], ArrayLike]],
    *,
    missing: Literal["error", "zero"] = "error",
    query_ids: Sequence[str] | None = None,
) -> Aligned:
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
                raise ValueError(
                    f"system {name!r}: expected a mapping or (query_ids, scores)"
                ) from None
            ids = [str(q) for q in ids]
            values = np.asarray(values, dtype=np.float64).ravel()
            if len(ids) != len(values):
                raise ValueError(
                    f"system {name!r}: {len(ids)} query ids but {len(values)} scores"
                )
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
                raise ValueError(
                    f"system {name!r}: {len(extra)} queries not in query_ids, e.g. {extra[:5]}"
                )
    if not qids:
        raise ValueError("no queries to align")
    matrix = np.zeros((len(tables), len(qids)))
    for i, (name, table) in enumerate(tables.items()):
        absent = [q for q in qids if q not in table]
        if absent and missing == "error":
            raise ValueError(
                f"system {name!r} has no score for {len(absent)} of {len(qids)} queries, "
                f"e.g. {absent[:5]} (pass missing='zero' to score them 0, as trec_eval -c)"
            )
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

"""Statistics for comparing retrieval systems on the same queries ("decide with confidence").

A leaf module: it imports numpy, scipy and the standard library only, so any stage (the
comparison CLI, sweep summaries, notebooks) can use it without pulling in the pipeline.
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

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, NamedTuple, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

# scipy.stats takes ~1.4 s to import: it is imported inside the tests that need it, so a job
# that only logs its objective's bootstrap CI (BCa: the normal CDF and its inverse, from the
# standard library) does not pay for it.
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

__all__ = [
    "Aligned",
    "BaselineComparison",
    "Comparison",
    "SystemSummary",
    "adjust_pvalues",
    "adjust_report",
    "align",
    "bootstrap_ci",
    "bootstrap_means",
    "compare",
    "compare_metrics",
    "effect_sizes",
    "minimum_detectable_difference",
    "paired_t_test",
    "power_paired_t",
    "queries_needed",
    "randomization_test",
    "sign_test",
    "tie_bounds",
    "tie_spread_flag",
    "tied_with_best",
    "tukey_hsd",
    "wilcoxon_test",
    "wins_ties_losses",
]

CiMethod = Literal["BCa", "percentile"]
Correction = Literal["holm", "bonferroni", "fdr_bh", "none"]
Test = Literal["t", "wilcoxon", "sign", "fisher", "tukey"]

#: |difference| at or below this is a tie (sign test, Wilcoxon, wins/ties/losses).
TIE_TOLERANCE = 1e-12
#: The randomization test enumerates all 2^n sign flips up to this many queries.
EXACT_MAX_N = 20
#: Names of the paired tests run against the baseline, in report order.
PAIRED_TESTS = ("t", "wilcoxon", "sign", "fisher")
_CORRECTIONS = ("holm", "bonferroni", "fdr_bh", "none")
#: Cells per chunk of resample/permutation work (bounds memory to tens of MB).
_CHUNK_CELLS = 1 << 22
_REL_TOL = 1e-10


# --------------------------------------------------------------------------- input


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


def _as_matrix(matrix: ArrayLike, *, min_queries: int = 2) -> NDArray[np.float64]:
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


def _as_names(names: Sequence[str] | None, n: int) -> list[str]:
    if names is None:
        return [f"system_{i}" for i in range(n)]
    names = [str(s) for s in names]
    if len(names) != n:
        raise ValueError(f"{len(names)} names for {n} systems")
    if len(set(names)) != n:
        raise ValueError(f"system names must be unique: {names}")
    return names


def _stream(seed: int | None, key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))


def _scale(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per-row scale for rounding tolerances (never 0)."""
    return np.maximum(np.abs(x).max(axis=-1), 1.0)


# --------------------------------------------------------------------------- bootstrap


def bootstrap_means(
    matrix: ArrayLike, *, n_resamples: int = 10_000, seed: int | None = 0
) -> NDArray[np.float64]:
    """Paired bootstrap distribution of each row's mean, ``[n_systems, n_resamples]``.

    Resample b draws n query indices with replacement, ``rng.integers(0, n, (B, n))`` with
    ``rng = np.random.default_rng(seed)`` (drawn in chunks of rows, which yields the same
    stream), the order of ``scipy.stats.bootstrap``; the same indices serve every system.
    Mean*_b = counts_b @ x / n, where counts_b[j] is how often query j was drawn.
    """
    x = _as_matrix(matrix)
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    n = x.shape[1]
    rng = np.random.default_rng(seed)
    out = np.empty((x.shape[0], n_resamples))
    rows = max(1, _CHUNK_CELLS // n)
    xt = x.T / n
    for start in range(0, n_resamples, rows):
        b = min(rows, n_resamples - start)
        idx = rng.integers(0, n, (b, n))
        idx += np.arange(b)[:, None] * n
        counts = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)
        out[:, start : start + b] = (counts.astype(np.float64) @ xt).T
    return out


def _quantile_rows(sorted_rows: NDArray[np.float64], q: NDArray[np.float64]) -> NDArray[np.float64]:
    """Linear-interpolation quantile (numpy's default, Hyndman & Fan type 7), one q per row."""
    b = sorted_rows.shape[1]
    h = np.clip(q, 0.0, 1.0) * (b - 1)
    lo = np.floor(h).astype(np.intp)
    hi = np.minimum(lo + 1, b - 1)
    rows = np.arange(sorted_rows.shape[0])
    a, c = sorted_rows[rows, lo], sorted_rows[rows, hi]
    return a + (h - lo) * (c - a)


def _ci_from_distribution(
    x: NDArray[np.float64],
    boot: NDArray[np.float64],
    method: CiMethod,
    confidence: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Percentile or BCa interval of each row's mean from its bootstrap distribution.

    Percentile: the alpha/2 and 1 - alpha/2 quantiles of the bootstrap means.
    BCa (Efron & Tibshirani 1993, eq. 14.14-14.15, as scipy.stats.bootstrap):
    z0 = Phi^-1((#{theta* < theta} + #{theta* <= theta}) / 2B);
    a = sum(U^3) / (6 (sum U^2)^(3/2)), U_i = (n-1)(mean_j theta_(j) - theta_(i)) from the
    jackknife means theta_(i) = (sum x - x_i) / (n-1);
    alpha_1,2 = Phi(z0 + (z0 + z) / (1 - a (z0 + z))) at z = Phi^-1(alpha/2), Phi^-1(1-alpha/2).
    A row whose scores are all equal has the interval [mean, mean] (scipy: NaN).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if method not in ("BCa", "percentile"):
        raise ValueError(f"method must be 'BCa' or 'percentile', got {method!r}")
    alpha = (1 - confidence) / 2
    theta = x.mean(axis=1)
    k, n = x.shape
    nb = boot.shape[1]
    if method == "percentile":
        q_lo = np.full(k, alpha)
        q_hi = np.full(k, 1 - alpha)
    else:
        tol = _REL_TOL * _scale(x)
        below = np.count_nonzero(boot < (theta - tol)[:, None], axis=1)
        at_or_below = np.count_nonzero(boot <= (theta + tol)[:, None], axis=1)
        z0 = ndtri((below + at_or_below) / (2 * nb))
        jack = (x.sum(axis=1, keepdims=True) - x) / (n - 1)
        u = (n - 1) * (jack.mean(axis=1, keepdims=True) - jack)
        with np.errstate(invalid="ignore", divide="ignore"):
            a_hat = (u**3).sum(axis=1) / (6 * (u**2).sum(axis=1) ** 1.5)
            z_lo, z_hi = ndtri(alpha), ndtri(1 - alpha)
            q_lo = ndtr(z0 + (z0 + z_lo) / (1 - a_hat * (z0 + z_lo)))
            q_hi = ndtr(z0 + (z0 + z_hi) / (1 - a_hat * (z0 + z_hi)))
    flat = np.ptp(x, axis=1) == 0
    q_lo = np.where(flat, 0.5, q_lo)
    q_hi = np.where(flat, 0.5, q_hi)
    s = np.sort(boot, axis=1)
    low, high = _quantile_rows(s, q_lo), _quantile_rows(s, q_hi)
    low = np.where(flat, theta, low)
    high = np.where(flat, theta, high)
    return low, high


def bootstrap_ci(
    matrix: ArrayLike,
    *,
    method: CiMethod = "BCa",
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int | None = 0,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Paired-bootstrap CI of each row's mean: ``(low, high)``, each ``[n_systems]``.

    Equals ``scipy.stats.bootstrap((row,), np.mean, method=method, n_resamples=B,
    rng=np.random.default_rng(seed))`` for every row (same resamples, same formulas),
    up to floating-point rounding; see :func:`bootstrap_means`, :func:`_ci_from_distribution`.
    For a CI of a difference pass the row of paired differences.
    """
    x = _as_matrix(matrix)
    boot = bootstrap_means(x, n_resamples=n_resamples, seed=seed)
    return _ci_from_distribution(x, boot, method, confidence)


# --------------------------------------------------------------------------- paired tests


def _as_diffs(diffs: ArrayLike) -> NDArray[np.float64]:
    return _as_matrix(diffs)


def paired_t_test(diffs: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Two-sided paired t-test on each row of differences: ``(t, p)``.

    t = mean(d) / (sd(d, ddof=1) / sqrt(n)), p = 2 P(T_{n-1} >= |t|) (Student 1908),
    = ``scipy.stats.ttest_rel``. All-zero differences give t = 0, p = 1 (scipy: NaN);
    constant non-zero differences give t = +-inf, p = 0.
    """
    d = _as_diffs(diffs)
    n = d.shape[1]
    mean = d.mean(axis=1)
    sd = d.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / (sd / math.sqrt(n))
    zero = np.abs(mean) <= TIE_TOLERANCE * _scale(d)
    t = np.where((sd == 0) & zero, 0.0, t)
    t = np.where((sd == 0) & ~zero, np.copysign(np.inf, mean), t)
    import scipy.stats  # noqa: PLC0415 (slow import: only where needed)
    p = 2 * scipy.stats.t.sf(np.abs(t), n - 1)
    return t, np.minimum(p, 1.0)


def _snap(d: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.where(np.abs(d) <= TIE_TOLERANCE, 0.0, d)


def wins_ties_losses(diffs: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per row: queries with d > tol, |d| <= tol, d < -tol (tol = ``TIE_TOLERANCE``)."""
    d = _as_diffs(diffs)
    wins = np.count_nonzero(d > TIE_TOLERANCE, axis=1)
    losses = np.count_nonzero(d < -TIE_TOLERANCE, axis=1)
    return wins, d.shape[1] - wins - losses, losses


def sign_test(diffs: ArrayLike) -> NDArray[np.float64]:
    """Two-sided sign test: wins ~ Binomial(wins + losses, 1/2), ties left out.

    p = min(1, 2 * P(X <= min(wins, losses))), which is ``scipy.stats.binomtest(wins,
    wins + losses, 0.5).pvalue`` (symmetric null). No non-tied query: p = 1.
    """
    wins, _, losses = wins_ties_losses(diffs)
    m = wins + losses
    import scipy.stats  # noqa: PLC0415
    p = 2 * scipy.stats.binom.cdf(np.minimum(wins, losses), np.maximum(m, 1), 0.5)
    return np.where(m == 0, 1.0, np.minimum(p, 1.0))


def wilcoxon_test(diffs: ArrayLike) -> NDArray[np.float64]:
    """Two-sided Wilcoxon signed-rank test per row = ``scipy.stats.wilcoxon(d)`` (defaults).

    zero_method 'wilcox': zero differences (|d| <= ``TIE_TOLERANCE``) are dropped before
    ranking (Wilcoxon 1945); tied |d| get mid-ranks; scipy picks the exact null
    distribution for small samples without ties and the normal approximation otherwise.
    A row with no non-zero difference has p = 1 (scipy: NaN or an error).
    """
    import scipy.stats  # noqa: PLC0415
    d = _snap(_as_diffs(diffs))
    p = np.ones(d.shape[0])
    for i, row in enumerate(d):
        if np.count_nonzero(row):
            p[i] = scipy.stats.wilcoxon(row).pvalue
    return p


def effect_sizes(diffs: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Paired effect sizes per row: Cohen's d_z and Hedges' g_z.

    d_z = mean(d) / sd(d, ddof=1) (Cohen 1988; Lakens 2013, eq. 6);
    g_z = d_z * J, J = 1 - 3 / (4 df - 1), df = n - 1 (Hedges 1981's approximate
    small-sample correction; Lakens 2013, eq. 4). sd = 0 gives 0 when the mean is 0, else
    +-inf.
    """
    d = _as_diffs(diffs)
    n = d.shape[1]
    mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        dz = mean / sd
    zero = np.abs(mean) <= TIE_TOLERANCE * _scale(d)
    dz = np.where(sd == 0, np.where(zero, 0.0, np.copysign(np.inf, mean)), dz)
    j = 1 - 3 / (4 * (n - 1) - 1) if n > 1 else 1.0
    return dz, dz * j


def randomization_test(
    diffs: ArrayLike,
    *,
    n_permutations: int = 10_000,
    seed: int | None = 0,
    exact_max_n: int = EXACT_MAX_N,
) -> NDArray[np.float64]:
    """Fisher's paired randomization test (two-sided) on the mean difference, per row.

    Under H0 each query's difference is equally likely +d or -d: T* = mean(s * d) for
    signs s in {-1, 1}^n (Fisher 1935; Smucker, Allan & Carterette 2007). With n <=
    ``exact_max_n`` all 2^n sign vectors are enumerated (bit matrix), p = #{|T*| >= |T|} / 2^n;
    otherwise ``n_permutations`` random sign vectors (stream 1 of ``seed``), shared by all
    rows, p = (#{|T*| >= |T|} + 1) / (B + 1). Computed on sums: sum(s*d) = 2 b@d - sum(d)
    for the 0/1 bits b.
    """
    d = _as_diffs(diffs)
    k, n = d.shape
    total = d.sum(axis=1)
    threshold = np.abs(total) - _REL_TOL * np.maximum(np.abs(d).sum(axis=1), 1.0)
    count = np.zeros(k, dtype=np.int64)
    rows = max(1, _CHUNK_CELLS // n)
    dt = d.T
    if n <= exact_max_n:
        masks = np.arange(1 << n, dtype=np.int64)
        for start in range(0, 1 << n, rows):
            bits = ((masks[start : start + rows, None] >> np.arange(n)) & 1).astype(np.float64)
            stat = np.abs(2 * (bits @ dt) - total)
            count += np.count_nonzero(stat >= threshold, axis=0)
        return count / float(1 << n)
    if n_permutations < 1:
        raise ValueError("n_permutations must be >= 1")
    rng = _stream(seed, 1)
    for start in range(0, n_permutations, rows):
        b = min(rows, n_permutations - start)
        bits = rng.integers(0, 2, (b, n), dtype=np.int8).astype(np.float64)
        stat = np.abs(2 * (bits @ dt) - total)
        count += np.count_nonzero(stat >= threshold, axis=0)
    return (count + 1) / (n_permutations + 1)


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
    return _tukey_hsd_stack(_as_matrix(matrix)[None], n_permutations, seed)[0]


def _tukey_hsd_stack(x: NDArray[np.float64], n_permutations: int, seed: int | None) -> NDArray[np.float64]:
    """:func:`tukey_hsd` for a stack ``[n_metrics, n_systems, n_queries]``, one set of permutations."""
    if n_permutations < 1:
        raise ValueError("n_permutations must be >= 1")
    m, s, n = x.shape
    means = x.mean(axis=2)
    if s < 2:
        return np.ones((m, s, s))
    rng = _stream(seed, 2)
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
        rows = max(1, _CHUNK_CELLS // (nv * s * m))
        for start in range(0, n_permutations, rows):
            b = min(rows, n_permutations - start)
            perm = rng.permuted(np.broadcast_to(ident, (b, nv, s)), axis=2)
            perm += base
            sums = table[perm].sum(axis=1)  # [b, s, m]
            ranges[:, start : start + b] = (sums.max(axis=1) - sums.min(axis=1)).T / n
    gap = np.abs(means[:, :, None] - means[:, None, :])
    tol = _REL_TOL * _scale(x.reshape(m, -1))[:, None, None]
    count = np.empty((m, s, s), dtype=np.int64)
    for i in range(m):
        r = np.sort(ranges[i])
        count[i] = n_permutations - np.searchsorted(r, (gap[i] - tol[i]).ravel(), side="left").reshape(s, s)
    p = (count + 1) / (n_permutations + 1)
    p[:, np.arange(s), np.arange(s)] = 1.0
    return p


# --------------------------------------------------------------------------- multiplicity


def adjust_pvalues(p: ArrayLike, method: Correction = "holm") -> NDArray[np.float64]:
    """Adjust p-values for multiple comparisons along the last axis.

    holm (Holm 1979): sort ascending, adj_(i) = max_{j<=i} min(1, (m - j + 1) p_(j));
    bonferroni: min(1, m p); fdr_bh (Benjamini & Hochberg 1995): adj_(i) = min_{j>=i}
    min(1, m p_(j) / j); none: unchanged. Equals statsmodels' ``multipletests``.
    """
    if method not in _CORRECTIONS:
        raise ValueError(f"correction must be one of {_CORRECTIONS}, got {method!r}")
    p = np.asarray(p, dtype=np.float64)
    if p.size == 0:
        return p.copy()
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("p-values must lie in [0, 1]")
    if method == "none":
        return p.copy()
    m = p.shape[-1]
    if method == "bonferroni":
        return np.minimum(p * m, 1.0)
    order = np.argsort(p, axis=-1, kind="stable")
    ps = np.take_along_axis(p, order, axis=-1)
    ranks = np.arange(1, m + 1)
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum((m - ranks + 1) * ps, 1.0), axis=-1)
    else:
        adj = np.minimum.accumulate((m / ranks * ps)[..., ::-1], axis=-1)[..., ::-1]
        adj = np.minimum(adj, 1.0)
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=-1)
    return out


# --------------------------------------------------------------------------- sensitivity


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


def minimum_detectable_difference(
    sd: ArrayLike, n: int, *, alpha: float = 0.05, power: float = 0.8
) -> NDArray[np.float64]:
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


def queries_needed(
    delta: float, sd: float, *, alpha: float = 0.05, power: float = 0.8, max_n: int = 10**7
) -> int:
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


# --------------------------------------------------------------------------- score ties


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


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class SystemSummary:
    """One system's mean and its paired-bootstrap confidence interval."""

    name: str
    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class BaselineComparison:
    """One system against the baseline on one metric; d = system - baseline per query.

    ``p`` and ``p_adjusted`` map each test of ``PAIRED_TESTS`` to its two-sided p-value;
    ``significant`` is ``p_adjusted[test] <= alpha`` for the report's chosen test.
    """

    system: str
    baseline: str
    diff: float
    diff_ci_low: float
    diff_ci_high: float
    t: float
    p: dict[str, float]
    p_adjusted: dict[str, float]
    significant: bool
    d_z: float
    hedges_g: float
    wins: int
    ties: int
    losses: int
    sd_diff: float
    mdd: float
    n_needed: int | None


@dataclass(frozen=True)
class Comparison:
    """Everything :func:`compare` says about one metric. ``to_dict()`` is JSON-ready.

    ``tukey[a][b]`` is the randomized Tukey HSD p-value of systems a and b (family-wise
    over all pairs of this metric, never re-adjusted). ``sensitivity`` holds the pooled
    sd of the baseline differences, sqrt(mean(sd_diff^2)), the minimum detectable
    difference at this many queries, and the queries needed for ``delta`` when given.
    """

    metric: str
    n_queries: int
    baseline: str
    test: str
    correction: str
    alpha: float
    confidence: float
    ci_method: str
    n_resamples: int
    n_permutations: int
    seed: int | None
    systems: list[SystemSummary]
    vs_baseline: list[BaselineComparison]
    tukey: dict[str, dict[str, float]]
    sensitivity: dict[str, float | int | None]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check_options(test: str, correction: str, alpha: float) -> None:
    if test not in PAIRED_TESTS:
        raise ValueError(f"test must be one of {PAIRED_TESTS}, got {test!r}")
    if correction not in _CORRECTIONS:
        raise ValueError(f"correction must be one of {_CORRECTIONS}, got {correction!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def compare(matrix: ArrayLike, names: Sequence[str] | None = None, *, metric_name: str = "metric",
            **options: Any) -> Comparison:
    """Compare systems on one metric: ``matrix`` is ``[n_systems, n_queries]`` (see :func:`align`).

    Per system: mean and bootstrap CI. Per other system against ``baseline`` (a name or a
    row index): mean difference and its bootstrap CI, paired t, Wilcoxon, sign and
    randomization tests, their p-values adjusted by ``correction`` across this report's
    comparisons (use :func:`compare_metrics` or :func:`adjust_report` to adjust across
    several metrics), d_z and Hedges' g, wins/ties/losses, the minimum detectable
    difference and the queries needed for ``delta``. All pairs: randomized Tukey HSD.
    ``options`` are those of :func:`compare_metrics` (baseline, n_resamples, n_permutations,
    seed, correction, alpha, test, ci_method, confidence, delta, power, tukey).
    """
    return compare_metrics({metric_name: matrix}, names, **options)[0]


def compare_metrics(
    matrices: Mapping[str, ArrayLike],
    names: Sequence[str] | None = None,
    *,
    baseline: str | int = 0,
    n_resamples: int = 10_000,
    n_permutations: int = 10_000,
    seed: int | None = 0,
    correction: Correction = "holm",
    alpha: float = 0.05,
    test: Literal["t", "wilcoxon", "sign", "fisher"] = "fisher",
    ci_method: CiMethod = "BCa",
    confidence: float = 0.95,
    delta: float | None = None,
    power: float = 0.8,
    tukey: bool = True,
) -> list[Comparison]:
    """:func:`compare` for several metrics of the same systems and queries, one :class:`Comparison`
    per metric, with p-values adjusted across every comparison of every metric.

    All metrics share one set of bootstrap resamples, sign flips and row permutations (the
    same ones a single-metric call with this seed draws), computed in one vectorized pass.
    """
    _check_options(test, correction, alpha)
    if not matrices:
        raise ValueError("no metrics to compare")
    stack = [_as_matrix(m) for m in matrices.values()]
    shape = stack[0].shape
    for metric, x in zip(matrices, stack):
        if x.shape != shape:
            raise ValueError(f"metric {metric!r} has shape {x.shape}, expected {shape}")
    x = np.stack(stack)  # [m, s, n]
    n_metrics, s, n = x.shape
    names = _as_names(names, s)
    if isinstance(baseline, str):
        if baseline not in names:
            raise ValueError(f"baseline {baseline!r} is not one of {names}")
        b = names.index(baseline)
    else:
        b = int(baseline)
        if not 0 <= b < s:
            raise ValueError(f"baseline index {baseline} out of range for {s} systems")
    others = [i for i in range(s) if i != b]

    flat = x.reshape(n_metrics * s, n)
    boot = bootstrap_means(flat, n_resamples=n_resamples, seed=seed)
    lo, hi = _ci_from_distribution(flat, boot, ci_method, confidence)
    lo, hi = lo.reshape(n_metrics, s), hi.reshape(n_metrics, s)
    means = x.mean(axis=2)

    d = (x[:, others, :] - x[:, [b], :]).reshape(-1, n)  # [m * (s-1), n]
    rows = {"t": None, "wilcoxon": None, "sign": None, "fisher": None}
    comp: dict[str, NDArray] = {}
    if len(others):
        boot_d = (boot.reshape(n_metrics, s, -1)[:, others] - boot.reshape(n_metrics, s, -1)[:, [b]])
        dlo, dhi = _ci_from_distribution(d, boot_d.reshape(d.shape[0], -1), ci_method, confidence)
        t, rows["t"] = paired_t_test(d)
        rows["wilcoxon"] = wilcoxon_test(d)
        rows["sign"] = sign_test(d)
        rows["fisher"] = randomization_test(d, n_permutations=n_permutations, seed=seed)
        dz, g = effect_sizes(d)
        w, ti, lo_ = wins_ties_losses(d)
        sd = d.std(axis=1, ddof=1)
        mdd = minimum_detectable_difference(sd, n, alpha=alpha, power=power)
        comp = dict(dlo=dlo, dhi=dhi, t=t, dz=dz, g=g, w=w, ti=ti, l=lo_, sd=sd, mdd=mdd)
    tk = _tukey_hsd_stack(x, n_permutations, seed) if tukey else None

    reports = []
    k = 0
    for mi, metric in enumerate(matrices):
        systems = [
            SystemSummary(names[i], float(means[mi, i]), float(lo[mi, i]), float(hi[mi, i]))
            for i in range(s)
        ]
        vs = []
        for i in others:
            n_needed = None
            if delta is not None:
                n_needed = queries_needed(delta, float(comp["sd"][k]), alpha=alpha, power=power)
            p = {name: float(rows[name][k]) for name in PAIRED_TESTS}
            vs.append(
                BaselineComparison(
                    system=names[i],
                    baseline=names[b],
                    diff=float(means[mi, i] - means[mi, b]),
                    diff_ci_low=float(comp["dlo"][k]),
                    diff_ci_high=float(comp["dhi"][k]),
                    t=float(comp["t"][k]),
                    p=p,
                    p_adjusted=dict(p),
                    significant=False,
                    d_z=float(comp["dz"][k]),
                    hedges_g=float(comp["g"][k]),
                    wins=int(comp["w"][k]),
                    ties=int(comp["ti"][k]),
                    losses=int(comp["l"][k]),
                    sd_diff=float(comp["sd"][k]),
                    mdd=float(comp["mdd"][k]),
                    n_needed=n_needed,
                )
            )
            k += 1
        tukey_p = (
            {a: {c: float(tk[mi, ia, ic]) for ic, c in enumerate(names)} for ia, a in enumerate(names)}
            if tk is not None
            else {}
        )
        sens: dict[str, float | int | None] = {"alpha": alpha, "power": power, "delta": delta}
        if vs:
            pooled = float(np.sqrt(np.mean([v.sd_diff**2 for v in vs])))
            sens["sd_diff"] = pooled
            sens["mdd"] = float(minimum_detectable_difference(pooled, n, alpha=alpha, power=power))
            sens["n_needed"] = (
                queries_needed(delta, pooled, alpha=alpha, power=power) if delta is not None else None
            )
        reports.append(
            Comparison(
                metric=str(metric),
                n_queries=n,
                baseline=names[b],
                test=test,
                correction=correction,
                alpha=alpha,
                confidence=confidence,
                ci_method=ci_method,
                n_resamples=n_resamples,
                n_permutations=n_permutations,
                seed=seed,
                systems=systems,
                vs_baseline=vs,
                tukey=tukey_p,
                sensitivity=sens,
            )
        )
    return adjust_report(reports, correction)


def adjust_report(comparisons: Sequence[Comparison], correction: Correction | None = None) -> list[Comparison]:
    """Adjust every test's p-values across all baseline comparisons of all given reports.

    Each test (t, Wilcoxon, sign, randomization) is its own family of size
    sum(len(c.vs_baseline)); ``correction`` defaults to the first report's. Returns new
    reports with ``p_adjusted``, ``correction`` and ``significant`` replaced.
    """
    comparisons = list(comparisons)
    if not comparisons:
        return []
    correction = correction or comparisons[0].correction
    for c in comparisons:
        _check_options(c.test, correction, c.alpha)
    adjusted = {
        name: adjust_pvalues([v.p[name] for c in comparisons for v in c.vs_baseline], correction)
        for name in PAIRED_TESTS
    }
    out, k = [], 0
    for c in comparisons:
        vs = []
        for v in c.vs_baseline:
            p_adj = {name: float(adjusted[name][k]) for name in PAIRED_TESTS}
            vs.append(
                dataclasses.replace(v, p_adjusted=p_adj, significant=bool(p_adj[c.test] <= c.alpha))
            )
            k += 1
        out.append(dataclasses.replace(c, vs_baseline=vs, correction=correction))
    return out


def tied_with_best(
    matrix: ArrayLike,
    names: Sequence[str] | None = None,
    *,
    test: Test = "fisher",
    correction: Correction = "holm",
    alpha: float = 0.05,
    n_permutations: int = 10_000,
    seed: int | None = 0,
    higher_is_better: bool = True,
) -> list[str]:
    """Systems not significantly different from the best one (highest mean), the best first.

    Every other system is tested against the best with ``test``; p-values are adjusted by
    ``correction`` (Holm by default) across those comparisons, except for ``"tukey"``
    (randomized Tukey HSD), whose p-values are already family-wise. A system stays when
    its adjusted p > alpha. Used to mark the winners of a sweep.
    """
    x = _as_matrix(matrix)
    names = _as_names(names, x.shape[0])
    if test not in (*PAIRED_TESTS, "tukey"):
        raise ValueError(f"test must be one of {(*PAIRED_TESTS, 'tukey')}, got {test!r}")
    _check_options("t", correction, alpha)
    means = x.mean(axis=1)
    best = int(np.argmax(means) if higher_is_better else np.argmin(means))
    others = [i for i in range(x.shape[0]) if i != best]
    if not others:
        return [names[best]]
    if test == "tukey":
        p_adj = tukey_hsd(x, n_permutations=n_permutations, seed=seed)[best, others]
    else:
        d = x[others] - x[best]
        p = {
            "t": lambda: paired_t_test(d)[1],
            "wilcoxon": lambda: wilcoxon_test(d),
            "sign": lambda: sign_test(d),
            "fisher": lambda: randomization_test(d, n_permutations=n_permutations, seed=seed),
        }[test]()
        p_adj = adjust_pvalues(p, correction)
    return [names[best]] + [names[i] for i, q in zip(others, p_adj) if q > alpha]

"""Comparison reports (frozen dataclasses, JSON-ready): every system's mean and interval, every
other system against a baseline (paired tests, effect sizes, sensitivity), all pairs by
randomized Tukey HSD, for one metric or several, with p-values adjusted across reports; and the
systems tied with the best one (a sweep's winners).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.bootstrap import bootstrap_means, ci_from_distribution
from pipeline.stats.inputs import (PAIRED_TESTS, CiMethod, Correction, Test, as_matrix, as_names, check_options,
                                   distinct_rows)
from pipeline.stats.sensitivity import minimum_detectable_difference, queries_needed
from pipeline.stats.significance import (adjust_pvalues, effect_sizes, paired_t_test, randomization_test, sign_test,
                                  tukey_hsd, tukey_hsd_stack, wilcoxon_test, wins_ties_losses)


@dataclass(frozen=True)
class SystemSummary:
    """One system's mean and its paired-bootstrap confidence interval."""

    name: str
    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class BaselineComparison:
    """One system against the baseline on one metric; d = system - baseline per query. ``p`` and
    ``p_adjusted`` map each test of ``PAIRED_TESTS`` to its two-sided p-value; ``significant`` is
    ``p_adjusted[test] <= alpha`` for the report's chosen test."""

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
    #: The system whose per-query values this one repeats exactly (the baseline, or an earlier
    #: system): then it is no comparison of its own in the multiple-comparison family, and its
    #: adjusted p-values are that system's (1 for the baseline). None: a distinct result.
    same_as: str | None = None


@dataclass(frozen=True)
class Comparison:
    """Everything :func:`compare` says about one metric. ``to_dict()`` is JSON-ready.

    ``tukey[a][b]`` is the randomized Tukey HSD p-value of systems a and b (family-wise over all
    pairs of this metric, never re-adjusted). ``sensitivity`` holds the pooled sd of the baseline
    differences, sqrt(mean(sd_diff^2)), the minimum detectable difference at this many queries,
    and the queries needed for ``delta`` when given.
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
    #: The systems grouped by identical per-query values (``inputs.distinct_rows``), in order.
    distinct: list[list[str]] = dataclasses.field(default_factory=list)

    @property
    def n_family(self) -> int:
        """Comparisons this metric adds to the correction: the distinct results other than the baseline's."""
        return sum(v.same_as is None for v in self.vs_baseline)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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


def compare_metrics(matrices: Mapping[str, ArrayLike], names: Sequence[str] | None = None, *, baseline: str | int = 0,
                    n_resamples: int = 10_000, n_permutations: int = 10_000, seed: int | None = 0,
                    correction: Correction = "holm", alpha: float = 0.05,
                    test: Literal["t", "wilcoxon", "sign", "fisher"] = "fisher", ci_method: CiMethod = "BCa",
                    confidence: float = 0.95, delta: float | None = None, power: float = 0.8,
                    tukey: bool = True) -> list[Comparison]:
    """:func:`compare` for several metrics of the same systems and queries, one :class:`Comparison`
    per metric, with p-values adjusted across every comparison of every metric. All metrics share
    one set of bootstrap resamples, sign flips and row permutations (the same ones a single-metric
    call with this seed draws), computed in one vectorized pass."""
    check_options(test, correction, alpha)
    x = _stacked(matrices)  # [m, s, n]
    n_metrics, s, n = x.shape
    names = as_names(names, s)
    b = _baseline_index(baseline, names)
    others = [i for i in range(s) if i != b]

    flat = x.reshape(n_metrics * s, n)
    boot = bootstrap_means(flat, n_resamples=n_resamples, seed=seed)
    lo, hi = ci_from_distribution(flat, boot, ci_method, confidence)
    lo, hi = lo.reshape(n_metrics, s), hi.reshape(n_metrics, s)
    means = x.mean(axis=2)
    vs_all = _vs_baseline(x, boot, b, others, names, ci_method=ci_method, confidence=confidence,
                          n_permutations=n_permutations, seed=seed, alpha=alpha, power=power, delta=delta)
    tk = tukey_hsd_stack(x, n_permutations, seed) if tukey else None

    reports = []
    for mi, (metric, vs) in enumerate(zip(matrices, vs_all)):
        systems = [SystemSummary(names[i], float(means[mi, i]), float(lo[mi, i]), float(hi[mi, i])) for i in range(s)]
        first = distinct_rows(x[mi])
        same = {names[i]: names[b] if first[i] == first[b] else names[first[i]] for i in others
                if first[i] == first[b] or first[i] != i}
        vs = [dataclasses.replace(v, same_as=same.get(v.system)) for v in vs]
        groups = [[names[i] for i in range(s) if first[i] == j] for j in dict.fromkeys(first.tolist())]
        reports.append(Comparison(
            metric=str(metric), n_queries=n, baseline=names[b], test=test, correction=correction, alpha=alpha,
            confidence=confidence, ci_method=ci_method, n_resamples=n_resamples, n_permutations=n_permutations,
            seed=seed, systems=systems, vs_baseline=vs, tukey=_tukey_table(tk[mi], names) if tk is not None else {},
            sensitivity=_sensitivity(vs, n, alpha=alpha, power=power, delta=delta), distinct=groups))
    return adjust_report(reports, correction)


def _stacked(matrices: Mapping[str, ArrayLike]) -> NDArray[np.float64]:
    """The metrics' score matrices as one ``[n_metrics, n_systems, n_queries]`` array; ValueError
    when there is none or their shapes differ."""
    if not matrices:
        raise ValueError("no metrics to compare")
    stack = [as_matrix(m) for m in matrices.values()]
    shape = stack[0].shape
    for metric, x in zip(matrices, stack):
        if x.shape != shape:
            raise ValueError(f"metric {metric!r} has shape {x.shape}, expected {shape}")
    return np.stack(stack)


def _baseline_index(baseline: str | int, names: list[str]) -> int:
    """The row of the baseline, given by name or by index."""
    if isinstance(baseline, str):
        if baseline not in names:
            raise ValueError(f"baseline {baseline!r} is not one of {names}")
        return names.index(baseline)
    b = int(baseline)
    if not 0 <= b < len(names):
        raise ValueError(f"baseline index {baseline} out of range for {len(names)} systems")
    return b


def _vs_baseline(x: NDArray[np.float64], boot: NDArray[np.float64], b: int, others: list[int], names: list[str], *,
                 ci_method: CiMethod, confidence: float, n_permutations: int, seed: int | None, alpha: float,
                 power: float, delta: float | None) -> list[list[BaselineComparison]]:
    """Per metric of ``x`` [m, s, n], each other system against the baseline ``b``, every metric at
    once: rows of differences ordered metric by metric, then system by system. The CI of a
    difference reuses the systems' bootstrap means ``boot`` [m * s, B] (paired: the same resampled
    queries). Adjusted p-values and significance are placeholders: :func:`adjust_report` fills them in."""
    n_metrics, s, n = x.shape
    if not others:
        return [[] for _ in range(n_metrics)]
    d = (x[:, others, :] - x[:, [b], :]).reshape(-1, n)  # [m * (s-1), n]
    boot_by_system = boot.reshape(n_metrics, s, -1)
    boot_d = boot_by_system[:, others] - boot_by_system[:, [b]]
    ci_low, ci_high = ci_from_distribution(d, boot_d.reshape(d.shape[0], -1), ci_method, confidence)
    t, p_t = paired_t_test(d)
    p = {"t": p_t, "wilcoxon": wilcoxon_test(d), "sign": sign_test(d),
         "fisher": randomization_test(d, n_permutations=n_permutations, seed=seed)}
    d_z, hedges_g = effect_sizes(d)
    wins, ties, losses = wins_ties_losses(d)
    sd = d.std(axis=1, ddof=1)
    mdd = minimum_detectable_difference(sd, n, alpha=alpha, power=power)
    means = x.mean(axis=2)
    out: list[list[BaselineComparison]] = [[] for _ in range(n_metrics)]
    for k in range(d.shape[0]):
        mi, i = k // len(others), others[k % len(others)]
        sd_k = float(sd[k])
        p_k = {name: float(p[name][k]) for name in PAIRED_TESTS}
        out[mi].append(BaselineComparison(
            system=names[i], baseline=names[b], diff=float(means[mi, i] - means[mi, b]),
            diff_ci_low=float(ci_low[k]), diff_ci_high=float(ci_high[k]), t=float(t[k]), p=p_k,
            p_adjusted=dict(p_k), significant=False, d_z=float(d_z[k]), hedges_g=float(hedges_g[k]),
            wins=int(wins[k]), ties=int(ties[k]), losses=int(losses[k]), sd_diff=sd_k, mdd=float(mdd[k]),
            n_needed=None if delta is None else queries_needed(delta, sd_k, alpha=alpha, power=power)))
    return out


def _tukey_table(p: NDArray[np.float64], names: list[str]) -> dict[str, dict[str, float]]:
    """``table[a][b]``: the Tukey HSD p-value of systems a and b."""
    return {a: {c: float(p[ia, ic]) for ic, c in enumerate(names)} for ia, a in enumerate(names)}


def _sensitivity(vs: list[BaselineComparison], n: int, *, alpha: float, power: float,
                 delta: float | None) -> dict[str, float | int | None]:
    """The report's sensitivity: the pooled sd of the differences with the baseline,
    sqrt(mean(sd_diff^2)), the minimum detectable difference at n queries and the queries
    needed for ``delta`` (when given)."""
    sens: dict[str, float | int | None] = {"alpha": alpha, "power": power, "delta": delta}
    if vs:
        pooled = float(np.sqrt(np.mean([v.sd_diff**2 for v in vs])))
        sens["sd_diff"] = pooled
        sens["mdd"] = float(minimum_detectable_difference(pooled, n, alpha=alpha, power=power))
        sens["n_needed"] = queries_needed(delta, pooled, alpha=alpha, power=power) if delta is not None else None
    return sens


def adjust_report(comparisons: Sequence[Comparison], correction: Correction | None = None) -> list[Comparison]:
    """Adjust every test's p-values across all baseline comparisons of all given reports (Holm 1979,
    Bonferroni or Benjamini & Hochberg 1995). Each test (t, Wilcoxon, sign, randomization) is its
    own family of size sum(c.n_family): each distinct result other than the baseline's counts once
    per metric; a system that repeats another's per-query values (``same_as``) takes that
    system's adjusted p-values (the baseline's: its own, 1). ``correction`` defaults to the first
    report's. Returns new reports with ``p_adjusted``, ``correction`` and ``significant`` replaced."""
    comparisons = list(comparisons)
    if not comparisons:
        return []
    correction = correction or comparisons[0].correction
    for c in comparisons:
        check_options(c.test, correction, c.alpha)
    family = [v.p for c in comparisons for v in c.vs_baseline if v.same_as is None]
    adjusted = {name: adjust_pvalues([p[name] for p in family], correction) if family else np.zeros(0)
                for name in PAIRED_TESTS}
    out, k = [], 0
    for c in comparisons:
        vs: list[BaselineComparison] = []
        for v in c.vs_baseline:
            if v.same_as is None:
                p_adj = {name: float(adjusted[name][k]) for name in PAIRED_TESTS}
                k += 1
            else:  # the baseline's twin keeps its own p (1); another's twin takes that one's
                p_adj = next((dict(w.p_adjusted) for w in vs if w.system == v.same_as), dict(v.p))
            vs.append(dataclasses.replace(v, p_adjusted=p_adj, significant=bool(p_adj[c.test] <= c.alpha)))
        out.append(dataclasses.replace(c, vs_baseline=vs, correction=correction))
    return out


def tied_with_best(matrix: ArrayLike, names: Sequence[str] | None = None, *, test: Test = "fisher",
                   correction: Correction = "holm", alpha: float = 0.05, n_permutations: int = 10_000,
                   seed: int | None = 0, higher_is_better: bool = True) -> list[str]:
    """Systems not significantly different from the best one (highest mean), the best first.

    Every other distinct result (``inputs.distinct_rows``) is tested against the best with
    ``test``; p-values are adjusted by ``correction`` (Holm by default) across those
    comparisons, each distinct result once, except for ``"tukey"`` (randomized Tukey HSD),
    whose p-values are already family-wise. A system stays when its adjusted p > alpha; a
    system identical to the best is tied with it, one identical to another follows that one.
    Used to mark the winners of a sweep.
    """
    x = as_matrix(matrix)
    names = as_names(names, x.shape[0])
    if test not in (*PAIRED_TESTS, "tukey"):
        raise ValueError(f"test must be one of {(*PAIRED_TESTS, 'tukey')}, got {test!r}")
    check_options("t", correction, alpha)
    means = x.mean(axis=1)
    best = int(np.argmax(means) if higher_is_better else np.argmin(means))
    others = [i for i in range(x.shape[0]) if i != best]
    if not others:
        return [names[best]]
    if test == "tukey":
        p_adj = tukey_hsd(x, n_permutations=n_permutations, seed=seed)[best, others]
        return [names[best]] + [names[i] for i, q in zip(others, p_adj) if q > alpha]
    first = distinct_rows(x)
    tested = [i for i in others if first[i] == i and first[i] != first[best]]  # each distinct result once
    if tested:
        d = x[tested] - x[best]
        p = {"t": lambda: paired_t_test(d)[1], "wilcoxon": lambda: wilcoxon_test(d), "sign": lambda: sign_test(d),
             "fisher": lambda: randomization_test(d, n_permutations=n_permutations, seed=seed)}[test]()
        p_adj = dict(zip(tested, adjust_pvalues(p, correction)))
    else:
        p_adj = {}
    return [names[best]] + [names[i] for i in others if first[i] == first[best] or p_adj[int(first[i])] > alpha]

"""Tests of pipeline.stats: oracles (scipy, statsmodels, ranx, brute force), calibration by
simulation, and input errors.

Simulation tolerances are 4 binomial standard errors, sqrt(p (1 - p) / reps), around the
nominal rate; every simulation is seeded, so a pass is reproducible.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from pipeline import stats

STATS_PACKAGE = Path(stats.__file__).parent


def mc_tol(p: float, reps: int, sigmas: float = 4.0) -> float:
    return sigmas * math.sqrt(p * (1 - p) / reps)


# --------------------------------------------------------------------------- module


@pytest.mark.parametrize("path", sorted(STATS_PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_the_package_imports_only_numpy_scipy_stdlib_and_computing_modules(path):
    """The computing tier: numpy, scipy, the standard library and pipeline.{stats,metrics,context}."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports"
            modules.add(node.module)
    computing = ("pipeline.stats", "pipeline.metrics", "pipeline.context")
    bad = {m for m in modules
           if m.split(".")[0] not in (*sys.stdlib_module_names, "__future__", "numpy", "scipy")
           and not m.startswith(computing)}
    assert not bad, bad


# --------------------------------------------------------------------------- bootstrap


@pytest.mark.parametrize("method", ["percentile", "BCa"])
def test_bootstrap_ci_equals_scipy_given_the_same_resamples(method):
    rng = np.random.default_rng(3)
    x = rng.gamma(2.0, 0.2, size=(3, 37))  # skewed, continuous: no ties with the mean
    n_resamples, seed = 3000, 11
    low, high = stats.bootstrap_ci(x, method=method, n_resamples=n_resamples, seed=seed)
    boot = stats.bootstrap_means(x, n_resamples=n_resamples, seed=seed)
    for i, row in enumerate(x):
        ref = scipy.stats.bootstrap(
            (row,), np.mean, n_resamples=n_resamples, method=method, rng=np.random.default_rng(seed)
        )
        np.testing.assert_allclose(boot[i], ref.bootstrap_distribution, rtol=1e-12)
        assert low[i] == pytest.approx(ref.confidence_interval.low, rel=1e-10)
        assert high[i] == pytest.approx(ref.confidence_interval.high, rel=1e-10)


def test_bootstrap_chunks_draw_the_same_stream(monkeypatch):
    from pipeline.stats import bootstrap

    x = np.random.default_rng(0).random((2, 50))
    whole = stats.bootstrap_means(x, n_resamples=500, seed=5)
    monkeypatch.setattr(bootstrap, "CHUNK_CELLS", 50 * 7)  # chunks of 7 resamples
    # The same resamples: a different stream would move the means by far more than rounding.
    # Each chunk's matrix product may sum in another order (BLAS kernels depend on the shape).
    np.testing.assert_allclose(stats.bootstrap_means(x, n_resamples=500, seed=5), whole, rtol=1e-12, atol=0)


def test_bca_matches_a_direct_reimplementation_on_fixed_resamples():
    """Efron & Tibshirani eq. 14.14-14.15 written out per row, with its own jackknife."""
    rng = np.random.default_rng(8)
    x = rng.exponential(size=(2, 25))
    boot = rng.normal(x.mean(axis=1, keepdims=True), 0.2, size=(2, 999))
    low, high = stats.ci_from_distribution(x, boot, "BCa", 0.9)
    for i, row in enumerate(x):
        theta = row.mean()
        z0 = scipy.stats.norm.ppf((np.sum(boot[i] < theta) + np.sum(boot[i] <= theta)) / (2 * 999))
        jack = np.array([np.delete(row, j).mean() for j in range(len(row))])
        u = (len(row) - 1) * (jack.mean() - jack)
        a = np.sum(u**3) / (6 * np.sum(u**2) ** 1.5)
        q = [
            scipy.stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))
            for z in scipy.stats.norm.ppf([0.05, 0.95])
        ]
        assert [low[i], high[i]] == pytest.approx(np.quantile(boot[i], q), rel=1e-12)


def test_constant_scores_have_a_zero_width_interval():
    low, high = stats.bootstrap_ci(np.full((1, 10), 0.3), n_resamples=100)
    assert low[0] == high[0] == pytest.approx(0.3)


def test_bootstrap_percentile_coverage_is_close_to_95_percent():
    """The percentile interval under-covers slightly at moderate n (about 0.94 at n = 50 for
    normal data; Efron & Tibshirani 1993, sec. 13.3), so we accept [0.92, 0.97]."""
    reps, n = 4000, 50
    x = np.random.default_rng(21).normal(0.4, 0.2, size=(reps, n))
    low, high = stats.bootstrap_ci(x, method="percentile", n_resamples=1000, seed=1)
    coverage = np.mean((low <= 0.4) & (0.4 <= high))
    assert 0.92 <= coverage <= 0.97, coverage


# --------------------------------------------------------------------------- paired tests


def discrete_diffs(seed: int, k: int = 6, n: int = 40) -> np.ndarray:
    """Differences of P@10-like scores: many zeros and ties, as real metrics give."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 11, size=(k, n)) / 10
    b = rng.integers(0, 11, size=(k, n)) / 10
    return a - b


def test_paired_t_test_equals_scipy():
    rng = np.random.default_rng(1)
    a, b = rng.random((5, 30)), rng.random((5, 30))
    t, p = stats.paired_t_test(a - b)
    ref = scipy.stats.ttest_rel(a, b, axis=1)
    np.testing.assert_allclose(t, ref.statistic, rtol=1e-10)
    np.testing.assert_allclose(p, ref.pvalue, rtol=1e-10)


def test_wilcoxon_equals_scipy_with_zeros_and_ties():
    d = discrete_diffs(2)
    d[0, :30] = 0.0  # few non-zero differences: scipy's exact branch
    p = stats.wilcoxon_test(d)
    for i, row in enumerate(d):
        assert p[i] == pytest.approx(scipy.stats.wilcoxon(row).pvalue, rel=1e-12)
    rng = np.random.default_rng(4)
    cont = rng.normal(0.1, 1, size=(2, 15))  # no ties: exact distribution
    np.testing.assert_allclose(stats.wilcoxon_test(cont), [scipy.stats.wilcoxon(r).pvalue for r in cont])


def test_sign_test_equals_scipy_binomtest():
    d = discrete_diffs(3, k=8, n=25)
    w, t, l = stats.wins_ties_losses(d)
    assert (w + t + l == 25).all()
    p = stats.sign_test(d)
    for i in range(len(d)):
        assert p[i] == pytest.approx(scipy.stats.binomtest(w[i], w[i] + l[i], 0.5).pvalue, rel=1e-12)


def test_all_zero_differences_give_p_one_everywhere():
    d = np.zeros((1, 12))
    assert stats.paired_t_test(d)[1][0] == 1.0
    assert stats.wilcoxon_test(d)[0] == 1.0
    assert stats.sign_test(d)[0] == 1.0
    assert stats.randomization_test(d)[0] == 1.0
    assert stats.randomization_test(d, exact_max_n=0, n_permutations=50)[0] == 1.0
    assert stats.effect_sizes(d)[0][0] == 0.0


def test_effect_sizes_formula():
    d = np.array([[0.1, 0.3, -0.2, 0.4, 0.0, 0.25]])
    dz, g = stats.effect_sizes(d)
    expected = d.mean() / d.std(ddof=1)
    assert dz[0] == pytest.approx(expected)
    assert g[0] == pytest.approx(expected * (1 - 3 / (4 * 5 - 1)))


def brute_force_randomization(d: np.ndarray) -> float:
    observed = abs(d.sum())
    hits = sum(
        abs(np.dot(signs, d)) >= observed - 1e-9
        for signs in itertools.product((-1.0, 1.0), repeat=len(d))
    )
    return hits / 2 ** len(d)


def test_exact_randomization_test_equals_brute_force():
    d = discrete_diffs(5, k=4, n=10)
    d[1] = np.random.default_rng(0).normal(size=10)
    p = stats.randomization_test(d)
    for i, row in enumerate(d):
        assert p[i] == pytest.approx(brute_force_randomization(row), abs=1e-15)


def test_monte_carlo_randomization_agrees_with_exact():
    d = np.random.default_rng(6).normal(0.3, 1.0, size=(3, 14))
    exact = stats.randomization_test(d)
    b = 20_000
    mc = stats.randomization_test(d, exact_max_n=0, n_permutations=b, seed=2)
    for e, m in zip(exact, mc):
        assert abs(m - e) <= mc_tol(e, b) + 1 / b


def test_randomized_tukey_on_two_systems_agrees_with_fisher():
    rng = np.random.default_rng(7)
    x = rng.random((2, 40))
    x[1] += 0.08
    b = 5000
    tk = stats.tukey_hsd(x, n_permutations=b, seed=3)
    fisher = stats.randomization_test(x[1:] - x[:1], n_permutations=b, seed=3)[0]
    assert tk[0, 1] == tk[1, 0]
    assert tk[0, 0] == tk[1, 1] == 1.0
    assert abs(tk[0, 1] - fisher) <= 4 * math.sqrt(2 * fisher * (1 - fisher) / b) + 2 / b


def test_tukey_hsd_is_family_wise_under_the_null():
    """Under H0 (exchangeable systems), P(any pair significant) <= alpha."""
    reps, hits = 150, 0
    rng = np.random.default_rng(9)
    for r in range(reps):
        x = rng.random((1, 30)) + rng.normal(0, 0.3, size=(5, 30))
        p = stats.tukey_hsd_stack(x[None], 199, r)[0]
        hits += (p[np.triu_indices(5, 1)] <= 0.05).any()
    assert hits / reps <= 0.05 + mc_tol(0.05, reps)


# --------------------------------------------------------------------------- multiplicity


@pytest.mark.parametrize("method", ["holm", "bonferroni", "fdr_bh"])
def test_adjusted_p_values_equal_statsmodels(method):
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(10)
    p = np.concatenate([rng.random(30) ** 3, [0.01, 0.01, 0.2, 1.0, 0.0]])  # ties, edges
    np.testing.assert_allclose(stats.adjust_pvalues(p, method), multipletests(p, method=method)[1], rtol=1e-12)
    two = np.stack([p, p[::-1]])
    np.testing.assert_allclose(stats.adjust_pvalues(two, method)[1], multipletests(p[::-1], method=method)[1])


def test_adjust_rejects_bad_p_values():
    with pytest.raises(ValueError):
        stats.adjust_pvalues([0.1, float("nan")])
    with pytest.raises(ValueError):
        stats.adjust_pvalues([0.1, 1.5])
    with pytest.raises(ValueError):
        stats.adjust_pvalues([0.1], "sidak")


# --------------------------------------------------------------------------- calibration


def test_tests_reject_at_the_nominal_rate_under_the_null():
    reps, n = 2000, 25
    d = np.random.default_rng(12).normal(0, 1, size=(reps, n))
    t_rate = np.mean(stats.paired_t_test(d)[1] <= 0.05)
    w_rate = np.mean(stats.wilcoxon_test(d[:1000]) <= 0.05)
    tol = mc_tol(0.05, reps)
    assert abs(t_rate - 0.05) <= tol, t_rate
    assert abs(w_rate - 0.05) <= mc_tol(0.05, 1000), w_rate
    # Monte Carlo randomization test, small B: with B = 199 the +1 rule rejects exactly 5%
    reps_f = 1000
    f = [stats.randomization_test(d[i : i + 1], n_permutations=199, seed=i, exact_max_n=0)[0] for i in range(reps_f)]
    f_rate = np.mean(np.array(f) <= 0.05)
    assert abs(f_rate - 0.05) <= mc_tol(0.05, reps_f), f_rate


def test_holm_keeps_family_wise_error_across_20_systems():
    reps, n = 2000, 30
    rng = np.random.default_rng(13)
    x = rng.random((reps, 1, n)) + rng.normal(0, 0.2, size=(reps, 20, n))  # query effect + noise
    d = (x[:, 1:] - x[:, :1]).reshape(-1, n)
    p = stats.paired_t_test(d)[1].reshape(reps, 19)
    fwer = np.mean((stats.adjust_pvalues(p, "holm") <= 0.05).any(axis=1))
    assert fwer <= 0.05 + mc_tol(0.05, reps), fwer
    assert np.mean((p <= 0.05).any(axis=1)) > 0.3  # uncorrected would not hold it


# --------------------------------------------------------------------------- sensitivity


def test_power_equals_statsmodels():
    from statsmodels.stats.power import TTestPower

    for delta, sd, n in [(0.05, 0.2, 50), (0.02, 0.3, 200), (0.5, 1.0, 10)]:
        ref = TTestPower().power(effect_size=delta / sd, nobs=n, alpha=0.05, alternative="two-sided")
        assert stats.power_paired_t(delta, sd, n) == pytest.approx(ref, rel=1e-9)


def test_minimum_detectable_difference_and_queries_needed():
    from statsmodels.stats.power import TTestPower

    sd, n = 0.25, 50
    mdd = float(stats.minimum_detectable_difference(sd, n))
    assert stats.power_paired_t(mdd, sd, n) == pytest.approx(0.8, abs=1e-9)
    ref = TTestPower().solve_power(nobs=n, alpha=0.05, power=0.8, alternative="two-sided")
    assert mdd / sd == pytest.approx(ref, rel=1e-5)
    normal = (scipy.stats.norm.ppf(0.975) + scipy.stats.norm.ppf(0.8)) * sd / math.sqrt(n)
    assert normal < mdd < 1.05 * normal
    # MDD at n is detectable with n queries, not fewer (nudged off the root's rounding)
    assert stats.queries_needed(mdd * (1 + 1e-9), sd) == n
    assert stats.power_paired_t(0.03, sd, stats.queries_needed(0.03, sd)) >= 0.8
    assert stats.power_paired_t(0.03, sd, stats.queries_needed(0.03, sd) - 1) < 0.8
    assert stats.minimum_detectable_difference(0.0, 10) == 0.0


def test_simulated_power_at_the_minimum_detectable_difference_is_80_percent():
    reps, n, sd = 4000, 20, 1.0
    mdd = float(stats.minimum_detectable_difference(sd, n))
    d = np.random.default_rng(14).normal(mdd, sd, size=(reps, n))
    rate = np.mean(stats.paired_t_test(d)[1] <= 0.05)
    assert abs(rate - 0.8) <= mc_tol(0.8, reps), rate


# --------------------------------------------------------------------------- score ties


def make_metrics(n_relevant: np.ndarray, ideal: np.ndarray, k: int):
    """Small per-query metric functions of a grade matrix (relevant = grade >= 1)."""
    disc = 1 / np.log2(np.arange(2, k + 2))

    def dcg(g, gain):
        gv = (2.0 ** g - 1) if gain == "exp" else g.astype(float)
        return (gv[:, :k] * disc[: min(k, g.shape[1])]).sum(axis=1)

    def ndcg(gain):
        return lambda g: dcg(g, gain) / dcg(ideal, gain)

    def rr(g):
        rel = g >= 1
        first = np.where(rel.any(axis=1), rel.argmax(axis=1) + 1, np.inf)
        return 1 / first

    def ap(g):
        rel = (g >= 1).astype(float)
        prec = np.cumsum(rel, axis=1) / np.arange(1, g.shape[1] + 1)
        return (prec * rel).sum(axis=1) / n_relevant

    return {
        "precision": lambda g: (g[:, :k] >= 1).sum(axis=1) / k,
        "recall": lambda g: (g[:, :k] >= 1).sum(axis=1) / n_relevant,
        "ndcg_exp": ndcg("exp"),
        "ndcg_linear": ndcg("linear"),
        "rr": rr,
        "ap": ap,
    }


def all_tie_orders(scores: np.ndarray, grades: np.ndarray):
    """Every grade order reachable by reordering documents of equal score (one query)."""
    order = np.argsort(-scores, kind="stable")
    s, g = scores[order], grades[order]
    groups = [list(g[s == v]) for v in dict.fromkeys(s)]
    for combo in itertools.product(*(set(itertools.permutations(grp)) for grp in groups)):
        yield np.array([x for grp in combo for x in grp])


def test_tie_bounds_equal_brute_force_over_every_order():
    rng = np.random.default_rng(15)
    n_q, depth = 12, 7
    scores = rng.integers(0, 3, size=(n_q, depth)).astype(float)  # heavy ties
    scores[0] = -np.inf  # nothing retrieved
    grades = rng.integers(0, 3, size=(n_q, depth))
    grades[1] = 0
    n_relevant = np.maximum((grades >= 1).sum(axis=1) + 1, 1)  # one relevant not retrieved
    ideal = -np.sort(-np.concatenate([grades, np.ones((n_q, 1), int)], axis=1), axis=1)
    for name, metric in make_metrics(n_relevant, ideal, k=3).items():
        opt, pes = stats.tie_bounds(scores, grades, metric)
        for q in range(n_q):
            values = []
            for order in all_tie_orders(scores[q], grades[q]):
                g = grades.copy()
                g[q] = order  # the metric closes over per-query R and ideal grades
                values.append(metric(g)[q])
            assert opt[q] == pytest.approx(max(values)), (name, q)
            assert pes[q] == pytest.approx(min(values)), (name, q)
        assert (opt >= pes - 1e-15).all()


def test_tie_bounds_collapse_without_ties_and_flag():
    rng = np.random.default_rng(16)
    scores = rng.random((5, 6))
    grades = rng.integers(0, 2, size=(5, 6))
    opt, pes = stats.tie_bounds(scores, grades, lambda g: g[:, :3].mean(axis=1))
    np.testing.assert_array_equal(opt, pes)
    assert stats.tie_spread_flag(0.50, 0.44, 0.40, 0.50) is True  # spread 0.06 > 0.05
    assert stats.tie_spread_flag(0.50, 0.46, 0.40, 0.50) is False
    np.testing.assert_array_equal(
        stats.tie_spread_flag([0.5, 0.5], [0.44, 0.46], [0.4, 0.4], [0.5, 0.5]), [True, False]
    )
    with pytest.raises(ValueError):
        stats.tie_bounds(scores, grades[:, :3], lambda g: g[:, 0])
    with pytest.raises(ValueError):
        stats.tie_bounds(scores, grades, lambda g: g)  # not one value per query


# --------------------------------------------------------------------------- align


def test_align_by_query_id():
    aligned = stats.align({"a": {"q2": 0.5, "q1": 0.25}, "b": (["q1", "q2"], [1.0, 0.0])})
    assert aligned.names == ["a", "b"]
    assert aligned.query_ids == ["q1", "q2"]
    np.testing.assert_array_equal(aligned.matrix, [[0.25, 0.5], [1.0, 0.0]])
    names, qids, matrix = aligned  # a plain tuple too


def test_align_missing_queries_error_names_the_system_or_score_zero():
    runs = {"bm25": {"q1": 0.5, "q2": 0.1, "q3": 0.2}, "dense": {"q1": 0.4}}
    with pytest.raises(ValueError, match=r"'dense'.*2 of 3.*q2"):
        stats.align(runs)
    aligned = stats.align(runs, missing="zero")
    np.testing.assert_array_equal(aligned.matrix[1], [0.4, 0.0, 0.0])
    with pytest.raises(ValueError, match="not in query_ids"):
        stats.align(runs, query_ids=["q1", "q2"], missing="zero")
    aligned = stats.align(runs, query_ids=["q3", "q1", "q2", "q4"], missing="zero")
    assert aligned.query_ids == ["q3", "q1", "q2", "q4"]
    np.testing.assert_array_equal(aligned.matrix[0], [0.2, 0.5, 0.1, 0.0])


@pytest.mark.parametrize(
    "bad",
    [
        {"a": (["q1", "q1"], [0.1, 0.2])},
        {"a": (["q1"], [0.1, 0.2])},
        {"a": {"q1": float("nan")}},
        {},
    ],
)
def test_align_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        stats.align(bad)
    with pytest.raises(ValueError):
        stats.align({"a": {"q1": 1.0}}, missing="drop")


# --------------------------------------------------------------------------- compare


@pytest.fixture(scope="module")
def systems():
    rng = np.random.default_rng(17)
    base = rng.random(60)
    x = np.stack([base, base + 0.1 + rng.normal(0, 0.1, 60), base + rng.normal(0, 0.1, 60), base])
    return np.clip(x, 0, 1), ["bm25", "hybrid", "dense", "copy"]


def test_compare_report(systems):
    x, names = systems
    c = stats.compare(x, names, baseline="bm25", metric_name="ndcg_at_10", n_resamples=2000,
                      n_permutations=2000, delta=0.05)
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["metric"] == "ndcg_at_10" and d["baseline"] == "bm25" and d["n_queries"] == 60
    assert [s["name"] for s in d["systems"]] == names
    for s, row in zip(c.systems, x):
        assert s.ci_low <= s.mean <= s.ci_high
        assert s.mean == pytest.approx(row.mean())
    vs = {v.system: v for v in c.vs_baseline}
    assert set(vs) == {"hybrid", "dense", "copy"}
    hybrid, copy = vs["hybrid"], vs["copy"]
    assert hybrid.significant and hybrid.diff_ci_low > 0 and hybrid.wins > hybrid.losses
    assert not copy.significant and copy.ties == 60 and copy.p["fisher"] == 1.0
    assert copy.diff_ci_low == copy.diff_ci_high == 0.0
    # p-values equal the stand-alone functions; adjusted = Holm over the two distinct comparisons
    # ("copy" repeats the baseline: no comparison of its own, its p stays 1)
    dh = x[1] - x[0]
    assert hybrid.p["t"] == pytest.approx(scipy.stats.ttest_rel(x[1], x[0]).pvalue)
    assert hybrid.p["wilcoxon"] == pytest.approx(scipy.stats.wilcoxon(dh).pvalue)
    # a count of sign flips: exact, although the sums run in another order here (REL_TOL absorbs it)
    assert hybrid.p["fisher"] == stats.randomization_test(dh[None], n_permutations=2000)[0]
    assert copy.same_as == "bm25" and c.n_family == 2 and c.distinct == [["bm25", "copy"], ["hybrid"], ["dense"]]
    for test in stats.PAIRED_TESTS:
        p = [vs["hybrid"].p[test], vs["dense"].p[test]]
        assert [vs["hybrid"].p_adjusted[test], vs["dense"].p_adjusted[test]] == pytest.approx(stats.adjust_pvalues(p))
        assert copy.p_adjusted[test] == 1.0
    # the difference CI is scipy's bootstrap of the differences, same resamples
    ref = scipy.stats.bootstrap((dh,), np.mean, n_resamples=2000, method="BCa", rng=np.random.default_rng(0))
    assert hybrid.diff_ci_low == pytest.approx(ref.confidence_interval.low, rel=1e-9)
    assert hybrid.diff_ci_high == pytest.approx(ref.confidence_interval.high, rel=1e-9)
    assert hybrid.mdd == pytest.approx(float(stats.minimum_detectable_difference(dh.std(ddof=1), 60)))
    assert hybrid.n_needed == stats.queries_needed(0.05, dh.std(ddof=1))
    assert set(d["sensitivity"]) >= {"sd_diff", "mdd", "n_needed", "delta"}
    assert d["tukey"]["bm25"]["copy"] == 1.0 and d["tukey"]["bm25"]["hybrid"] < 0.05
    assert d["tukey"]["hybrid"]["bm25"] == d["tukey"]["bm25"]["hybrid"]


def test_compare_metrics_equals_per_metric_calls_and_adjusts_across_all(systems):
    x, names = systems
    mats = {"ndcg": x, "recall": x[:, ::-1] ** 2}
    kw = dict(n_resamples=500, n_permutations=500, seed=4)
    joint = stats.compare_metrics(mats, names, **kw)
    single = [stats.compare(m, names, metric_name=k, **kw) for k, m in mats.items()]
    # The joint call resamples and tests every metric in one pass: its matrix products have other
    # shapes, so BLAS may sum them in another order. Other resamples or sign flips would move
    # every number by far more than rounding; Tukey's p-values are counts (exact).
    for j, s in zip(joint, single):
        assert [v.name for v in j.systems] == [v.name for v in s.systems] and j.tukey == s.tukey
        for a, b in zip(j.systems, s.systems):
            assert [a.mean, a.ci_low, a.ci_high] == pytest.approx([b.mean, b.ci_low, b.ci_high], rel=1e-12, abs=0)
        for vj, vs in zip(j.vs_baseline, s.vs_baseline):
            assert vj.p.keys() == vs.p.keys()
            assert [vj.p[t] for t in vs.p] == pytest.approx([vs.p[t] for t in vs.p], rel=1e-12, abs=0)
            assert vj.diff_ci_low == pytest.approx(vs.diff_ci_low, rel=1e-12, abs=0)
    readjusted = [v.p_adjusted for c in stats.adjust_report(single) for v in c.vs_baseline]
    adjusted = [v.p_adjusted for c in joint for v in c.vs_baseline]
    assert [sorted(p) for p in readjusted] == [sorted(p) for p in adjusted]
    for r, a in zip(readjusted, adjusted):
        assert [a[t] for t in r] == pytest.approx([r[t] for t in r], rel=1e-12, abs=0)
    # the family: every distinct result other than the baseline's, once per metric ("copy" repeats
    # the baseline: p 1, outside the family)
    family = [v.p["fisher"] for c in single for v in c.vs_baseline if v.same_as is None]
    assert len(family) == sum(c.n_family for c in joint) == len(all_vs := [v for c in single for v in c.vs_baseline]) - 2
    assert [v.p_adjusted["fisher"] for c in joint for v in c.vs_baseline if v.same_as is None] == pytest.approx(
        stats.adjust_pvalues(family, "holm")
    )
    assert all(v.p_adjusted["fisher"] == 1.0 for v in all_vs if v.same_as is not None)


def test_tied_with_best(systems):
    x, names = systems
    assert stats.tied_with_best(x, names, n_permutations=2000) == ["hybrid"]
    y = np.stack([x[0], x[0] + 1e-3 * np.sin(np.arange(60)), x[0] - 0.2])
    tied = stats.tied_with_best(y, ["a", "b", "c"], test="t")
    assert set(tied) == {"a", "b"} and tied[0] == "b"
    assert set(stats.tied_with_best(y, ["a", "b", "c"], test="tukey", n_permutations=999)) == {"a", "b"}


def test_compare_rejects_bad_input(systems):
    x, names = systems
    with pytest.raises(ValueError, match="baseline"):
        stats.compare(x, names, baseline="nope")
    with pytest.raises(ValueError):
        stats.compare(x, names[:2])
    with pytest.raises(ValueError):
        stats.compare(x[:, :1], names)  # one query
    with pytest.raises(ValueError):
        stats.compare(np.where(x > 0.5, np.nan, x), names)
    with pytest.raises(ValueError):
        stats.compare(x, names, correction="fdr_by")
    with pytest.raises(ValueError):
        stats.compare_metrics({"a": x, "b": x[:, :10]}, names)
    with pytest.raises(ValueError):
        stats.queries_needed(0.0, 0.2)


# --------------------------------------------------------------------------- ranx


@pytest.mark.slow
def test_t_and_randomization_p_values_agree_with_ranx():
    """ranx's Fisher p is count/B with its own random stream, so it agrees with ours within
    Monte Carlo error; its t-test exactly (ranx runs uncompiled here: tests/conftest.py)."""
    from ranx import Qrels, Run, compare, evaluate

    rng = np.random.default_rng(18)
    n_q, n_docs = 80, 30
    qrels = Qrels({f"q{i}": {f"d{j}": 1 for j in rng.choice(n_docs, 3, replace=False)} for i in range(n_q)})
    runs = []
    for k, shift in enumerate([0.0, 0.15, 0.4]):
        rel = np.zeros((n_q, n_docs))
        for i in range(n_q):
            for j in qrels.to_dict()[f"q{i}"]:
                rel[i, int(j[1:])] = shift
        scores = rng.random((n_q, n_docs)) + rel
        runs.append(Run({f"q{i}": {f"d{j}": float(scores[i, j]) for j in range(n_docs)} for i in range(n_q)},
                        name=f"r{k}"))
    metric = "ndcg@10"
    x = np.stack([np.asarray(evaluate(qrels, r, metric, return_mean=False)) for r in runs])
    b_ranx = 4000
    student = compare(qrels, runs, metrics=[metric], stat_test="student", max_p=0.05)
    fisher = compare(qrels, runs, metrics=[metric], stat_test="fisher", n_permutations=b_ranx, max_p=0.05)
    b_ours = 10_000
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        key = frozenset([f"r{i}", f"r{j}"])
        d = (x[j] - x[i])[None]
        assert stats.paired_t_test(d)[1][0] == pytest.approx(student.comparisons[key][metric]["p_value"], rel=1e-9)
        ours = stats.randomization_test(d, n_permutations=b_ours)[0]
        theirs = fisher.comparisons[key][metric]["p_value"]
        p = max(ours, 1 / b_ours)
        assert abs(ours - theirs) <= 4 * math.sqrt(p * (1 - p) * (1 / b_ours + 1 / b_ranx)) + 2 / b_ranx


def test_tukey_hsd_leaves_out_the_queries_where_every_system_ties():
    """Such a query adds the same to every system's sum under any permutation: leaving it out
    of the permutations (what tukey_hsd_stack does) must not change a p-value, and systems
    that agree on every query (a sweep over placement: one ranking) get p = 1 at once."""
    rng = np.random.default_rng(21)
    x = rng.random((4, 25))
    x[2] += 0.45
    tied = np.repeat(rng.random((1, 15)), 4, axis=0)  # every system scores these queries alike
    at = np.sort(rng.choice(40, 15, replace=False))  # among the others, whose order is kept
    with_ties = np.empty((4, 40))
    with_ties[:, at], with_ties[:, np.setdiff1d(np.arange(40), at)] = tied, x
    p, p_ties = stats.tukey_hsd(x, n_permutations=2000, seed=5), stats.tukey_hsd(with_ties, n_permutations=2000, seed=5)
    np.testing.assert_array_equal(p, p_ties)  # counts: the means' rounding is within REL_TOL
    assert p[0, 2] < 0.05 and p[0, 1] > 0.05  # the test still sees the shifted system
    same = np.repeat(rng.random((1, 300)), 100, axis=0)
    np.testing.assert_array_equal(stats.tukey_hsd(same, n_permutations=10_000), np.ones((100, 100)))


def test_a_jobs_objective_interval_is_computed_once_per_values_and_seed(monkeypatch):
    """pipeline.stages.objective_ci: the BCa interval of the evaluated queries' objective, kept
    for the next job of the process with the same values and seed (a sweep over placement)."""
    from types import SimpleNamespace

    from pipeline import stages as run

    rng = np.random.default_rng(4)
    mrr = rng.random(50)
    evaluated = rng.random(50) > 0.2

    def ev(values):
        return SimpleNamespace(full={"mrr": values}, evaluated=evaluated, values=None)

    monkeypatch.setattr(run, "_CI_MEMO", {})
    calls = []
    original = stats.bootstrap_ci
    monkeypatch.setattr(stats, "bootstrap_ci", lambda *a, **kw: calls.append(kw["seed"]) or original(*a, **kw))
    first = run.objective_ci(ev(mrr), "mrr", seed=0)
    low, high = original(mrr[evaluated][None, :], method="BCa", n_resamples=run.CI_RESAMPLES, seed=0)
    assert first == {"mrr_ci_low": float(low[0]), "mrr_ci_high": float(high[0])}
    assert run.objective_ci(ev(mrr.copy()), "mrr", seed=0) == first and calls == [0]  # kept
    run.objective_ci(ev(mrr), "mrr", seed=1)
    changed = mrr.copy()
    changed[np.flatnonzero(evaluated)[0]] += 0.1
    assert run.objective_ci(ev(changed), "mrr", seed=0) != first and calls == [0, 1, 0]

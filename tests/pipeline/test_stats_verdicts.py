"""Tests of pipeline.stats.verdicts, factors and anova: the Tukey intervals agree with the Tukey
p-values exactly, the four words, the best set with twins, the per-factor answers, and the ANOVA
against statsmodels."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from pipeline import stats
from pipeline.stats import FACTOR_WORDS, anova_blocks, answer_factors, check_margin, infer, pays_for_depth, word
from pipeline.stats.verdicts import PairVerdict, critical_range


def sweep(rng: np.random.Generator, n: int = 52, shifts: dict | None = None) -> tuple:
    """A retriever x reorder x k grid with known effects: dense +0.2, hybrid +0.15, k +0.02 per step,
    lost_in_the_middle +0.005."""
    shifts = shifts or {"bm25": 0.0, "dense": 0.2, "hybrid": 0.15}
    q = rng.random(n) * 0.3
    names, rows, fac = [], [], {"retriever": {}, "reorder": {}, "k": {}}
    for r, base in shifts.items():
        rr = q + 0.3 + base + rng.normal(0, 0.1, n)
        for o in ("none", "lost_in_the_middle"):
            for j, k in enumerate(("3", "5", "10")):
                name = f"{r} {o} k{k}"
                names.append(name)
                fac["retriever"][name], fac["reorder"][name], fac["k"][name] = r, o, k
                rows.append(rr + 0.02 * j + (0.005 if o != "none" else 0.0) + rng.normal(0, 0.003, n))
    return np.array(rows), names, fac


# --------------------------------------------------------------------------- verdicts


def test_infer_uses_the_tukey_p_values_of_the_distinct_systems():
    rng = np.random.default_rng(0)
    x = rng.random((4, 30))
    x[1] += 0.3
    twins = np.vstack([x, x[2]])  # system 4 is system 2 again
    inf = infer(twins, list("abcde"), n_permutations=999, seed=7)
    p = stats.tukey_hsd(x, n_permutations=999, seed=7)
    np.testing.assert_array_equal(np.array(inf.p)[:4, :4], p)
    np.testing.assert_array_equal(np.array(inf.p)[4, :4], p[2])
    assert inf.p[2][4] == 1.0 and inf.distinct == [["a"], ["b"], ["c", "e"], ["d"]]
    assert inf.evidence["e"].to_dict() | {"a": "c"} == inf.evidence["c"].to_dict()


def test_tukey_hsd_keeps_its_values_after_the_split_into_ranges_and_p_values():
    """The permutations of tukey_hsd, written out plainly: stream 2 of the seed permutes each varying
    query's scores across systems; p = (#{range* >= gap - tol} + 1) / (B + 1)."""
    rng = np.random.default_rng(9)
    x = rng.integers(0, 3, (4, 12)) / 2
    x[:, 0] = 0.5  # a query on which every system ties (left out of the permutations)
    b, seed = 300, 11
    varying = (x != x[:1]).any(axis=0)
    gen = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2,)))
    perm = gen.permuted(np.broadcast_to(np.arange(4), (b, int(varying.sum()), 4)), axis=2)
    xv = x[:, varying]
    ranges = np.array([np.ptp([sum(xv[perm[t, q, s], q] for q in range(xv.shape[1])) for s in range(4)]) / 12
                       for t in range(b)])
    gap = np.abs(x.mean(1)[:, None] - x.mean(1)[None, :])
    expected = ((ranges[None, None, :] >= gap[:, :, None] - 1e-10).sum(axis=2) + 1) / (b + 1)
    np.fill_diagonal(expected, 1.0)
    np.testing.assert_array_equal(stats.tukey_hsd(x, n_permutations=b, seed=seed), expected)
    with pytest.raises(ValueError, match="unknown system"):
        infer(x, list("abcd"), n_permutations=b).pair("a", "z")


@pytest.mark.parametrize("discrete", [True, False])
def test_interval_excludes_zero_exactly_when_tukey_p_is_at_most_alpha(discrete):
    """On many random matrices, every pair: 0 outside diff +- HSD <=> p <= alpha, and the HSD is
    the critical range (the smallest gap called significant lies above it, the largest not below)."""
    rng = np.random.default_rng(1 if discrete else 2)
    checked = significant = 0
    for trial in range(60):
        s, n = int(rng.integers(2, 7)), int(rng.integers(2, 25))
        x = rng.integers(0, 4, (s, n)) / 3 if discrete else rng.normal(0, 1, (s, n))
        x[0] += rng.choice([0.0, 0.3, 1.0]) * (1 if discrete else 3)
        b, alpha = int(rng.choice([19, 99, 199, 500])), float(rng.choice([0.05, 0.1, 0.2]))
        inf = infer(x, [f"s{i}" for i in range(s)], n_permutations=b, seed=trial, alpha=alpha)
        for a, c in itertools.permutations(inf.names, 2):
            v = inf.pair(a, c)
            excludes = v.ci_low > 0 or v.ci_high < 0
            assert excludes == (v.p <= alpha), (trial, a, c, v)
            assert (v.word in ("better", "worse")) == excludes
            checked, significant = checked + 1, significant + excludes
    assert checked > 500 and 0.05 < significant / checked < 0.9  # both sides were exercised


def test_critical_range_follows_phipson_smyth():
    r = np.arange(1.0, 20.0)  # B = 19 ranges 1..19
    # p = (c + 1) / 20 <= 0.1 <=> c <= 1: significant when fewer than 2 ranges reach the gap
    assert critical_range(r, 0.0, 0.1) == 18.0
    assert critical_range(r, 0.0, 0.04) == math.inf  # alpha (B + 1) < 1: nothing is significant
    assert critical_range(np.zeros(99), 1e-10, 0.05) == 1e-10


def test_word_cases_and_margin_checks():
    assert word(0.02, 0.001, 0.04, 0.01) == "better"
    assert word(-0.02, -0.04, -0.001, 0.01) == "worse"
    assert word(0.006, 0.001, 0.009, 0.01) == "better"  # significant beats equivalent
    assert word(0.0, -0.009, 0.009, 0.01) == "equivalent"
    assert word(0.0, -0.01, 0.009, 0.01) == "inconclusive"  # the margin itself is not inside
    assert word(0.0, math.nan, 1.0, 0.01) == "inconclusive"
    assert check_margin(0.05) == 0.05
    for bad in (0, -0.01, math.nan, math.inf, "x", None, True):
        with pytest.raises(ValueError, match="margin must be a positive finite number"):
            check_margin(bad)


def test_infer_refuses_bad_input():
    x = np.random.default_rng(0).random((3, 10))
    with pytest.raises(ValueError, match="at least 2 queries"):
        infer(x[:, :1], list("abc"))
    with pytest.raises(ValueError, match="finite"):
        infer(np.where(x > 0.9, np.nan, x), list("abc"))
    with pytest.raises(ValueError, match="margin"):
        infer(x, list("abc"), margin=-1)
    with pytest.raises(ValueError, match="alpha"):
        infer(x, list("abc"), alpha=1.5)


def test_best_set_and_evidence_against_the_best():
    rng = np.random.default_rng(3)
    x = rng.normal(0.5, 0.1, (4, 80))
    x[1] += 0.2
    x[2] = x[1] + rng.normal(0.002, 0.003, 80)  # close to the best: could be the best
    x[3] = x[1]  # a twin of system 1
    inf = infer(x, ["bm25", "dense", "hybrid", "dense2"], metric="ndcg_at_10", n_permutations=999, margin=0.1)
    assert inf.best == "hybrid" and inf.best_set == ["hybrid", "dense", "dense2"]
    assert inf.evidence["bm25"].word == "worse" and inf.evidence["bm25"].p < 0.01
    assert inf.evidence["dense"].word == "equivalent" and inf.evidence["dense"].ci_low < 0 < inf.evidence["dense"].ci_high
    pair = inf.pair("dense", "dense2")
    assert (pair.diff, pair.ci_low, pair.ci_high, pair.p, pair.word, pair.ties) == (0.0, 0.0, 0.0, 1.0, "equivalent", 80)
    d = json.loads(json.dumps(inf.to_dict(), allow_nan=False))
    assert d["method"] == stats.METHOD and d["evidence"]["bm25"]["wins"] + d["evidence"]["bm25"]["losses"] == 80
    w, t, losses = stats.wins_ties_losses(x[0] - x[2])
    assert (inf.evidence["bm25"].wins, inf.evidence["bm25"].losses) == (int(w[0]), int(losses[0]))


def test_twins_within_rounding_are_one_system():
    x = np.random.default_rng(0).random((3, 20))
    x[2] = x[0] + 1e-13  # identical within TIE_TOLERANCE, means differ by rounding
    inf = infer(x, list("abc"), n_permutations=99)
    v = inf.pair("c", "a")
    assert inf.distinct == [["a", "c"], ["b"]] and (v.diff, v.ci_low, v.ci_high, v.word) == (0.0, 0.0, 0.0, "equivalent")


def test_one_distinct_system_and_infinite_hsd_are_json_ready():
    x = np.tile(np.linspace(0, 1, 5), (3, 1))
    inf = infer(x, list("abc"))
    assert inf.best_set == ["a", "b", "c"] and inf.hsd == 0.0 and inf.evidence["b"].word == "equivalent"
    y = np.random.default_rng(0).random((3, 30))
    d = infer(y, list("abc"), n_permutations=5).to_dict()  # (B + 1) alpha < 1: nothing can be significant
    assert d["hsd"] is None and d["evidence"]["b"]["ci_low"] is None and d["evidence"]["b"]["word"] == "inconclusive"
    json.dumps(d, allow_nan=False)


def test_phrases():
    v = PairVerdict("dense k5", "bm25 k10", 0.1935, 0.0831, 0.3044, 0.000999, 0.111, "better", False, 40, 2, 10, 52)
    assert v.phrase("ndcg_at_10") == ("dense k5 is better than bm25 k10 on ndcg_at_10 by 0.194 [0.083, 0.304] "
                                      "(p 0.001, 52 queries)")
    w = PairVerdict("bm25", "dense", -0.1935, -0.3044, -0.0831, 0.001, 0.111, "worse", False, 10, 2, 40, 52)
    assert w.phrase("M") == "bm25 is worse than dense on M by 0.194 [0.083, 0.304] (p 0.001, 52 queries)"
    e = PairVerdict("X", "Y", 0.003, -0.004, 0.009, 0.41, 0.007, "equivalent", True, 20, 12, 20, 52)
    assert e.phrase("M") == "X and Y are equivalent on M: +0.003 [-0.004, +0.009], inside ±0.01 (p 0.41, 52 queries)"
    i = PairVerdict("X", "Y", 0.012, -0.030, 0.054, 0.62, 0.042, "inconclusive", False, 20, 12, 20, 52)
    assert i.phrase("M") == ("X vs Y on M is inconclusive: +0.012 [-0.030, +0.054] (p 0.62, 52 queries; "
                             "detectable difference 0.042)")
    b = PairVerdict("X", "Y", 0.006, 0.001, 0.011, 0.03, 0.005, "better", True, 20, 12, 20, 52)
    assert b.phrase("M") == ("X is better than Y on M, by less than the margin 0.01: +0.006 [+0.001, +0.011] "
                             "(p 0.03, 52 queries)")


# --------------------------------------------------------------------------- anova


def _statsmodels_anova(x: np.ndarray, names: list[str], fac: dict) -> pd.DataFrame:
    # Imported here: statsmodels' formula API (~0.7 s) is this oracle's alone, and every -n
    # worker imports each test module when it collects the suite.
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    rows = [{"y": x[i, q], "topic": str(q), **{f: str(v[n]) for f, v in fac.items()}}
            for i, n in enumerate(names) for q in range(x.shape[1])]
    formula = "y ~ " + "*".join(f"C({f})" for f in fac) + " + C(topic)"
    return anova_lm(smf.ols(formula, data=pd.DataFrame(rows)).fit(), typ=2)


@pytest.mark.parametrize("n_factors", [1, 2, 3])
def test_anova_blocks_equals_statsmodels(n_factors):
    x, names, fac = sweep(np.random.default_rng(n_factors), n=15)
    fac = dict(list(fac.items())[:n_factors])
    if n_factors < 3:  # keep one system per cell
        keep = [i for i, n in enumerate(names) if n.endswith(" k3") and (n_factors == 2 or " none " in n)]
        x, names = x[keep], [names[i] for i in keep]
    table = anova_blocks(x, names, fac)
    oracle = _statsmodels_anova(x, names, fac)
    for index, row in oracle.iterrows():
        source = "residual" if index == "Residual" else ":".join(part[2:-1] for part in index.split(":"))
        mine = table.row(source)
        assert mine is not None, source
        assert mine["df"] == row["df"]
        np.testing.assert_allclose(mine["ss"], row["sum_sq"], rtol=1e-9, atol=1e-12)
        if source != "residual":
            np.testing.assert_allclose([mine["f"], mine["p"]], [row["F"], row["PR(>F)"]], rtol=1e-9, atol=1e-12)
    ms_res = oracle.loc["Residual", "sum_sq"] / oracle.loc["Residual", "df"]
    np.testing.assert_allclose(table.residual_ms, ms_res, rtol=1e-9)
    lv = {n: fac["retriever"][n] for n in names}
    d = x[[i for i, n in enumerate(names) if lv[n] == "bm25"]].mean() - x[[i for i, n in enumerate(names)
                                                                          if lv[n] == "dense"]].mean()
    np.testing.assert_allclose(table.effect_sizes["retriever"]["bm25 vs dense"], d / math.sqrt(ms_res), rtol=1e-9)


def test_anova_skips_an_incomplete_grid_with_a_reason():
    x, names, fac = sweep(np.random.default_rng(0), n=10)
    t = anova_blocks(x[1:], names[1:], fac)
    assert t.rows == [] and "17 of 18 combinations" in t.note and t.to_dict()["residual_ms"] is None
    t2 = anova_blocks(x, names, {"retriever": fac["retriever"]})
    assert "share the levels" in t2.note


# --------------------------------------------------------------------------- factors


def test_pays_for_depth():
    for m in ("recall_at_k", "hit_rate_at_k", "context_utility_at_k", "context_recall_at_k",
              "context_recall_budget_1024", "context_utility_budget_512"):
        assert not pays_for_depth(m), m
    for m in ("ndcg_at_10", "recall_at_10", "precision_at_k", "mrr", "context_utility_at_5", "map"):
        assert pays_for_depth(m), m


def test_answer_factors_on_a_known_sweep():
    x, names, fac = sweep(np.random.default_rng(0))
    answers = {a.factor: a for a in answer_factors(x, names, fac, metric="context_utility_at_k",
                                                    n_permutations=999)}
    r, o, k = answers["retriever"], answers["reorder"], answers["k"]
    assert r.word == "best" and r.best_level == "dense" and r.evidence["bm25"].word == "worse"
    assert r.line.startswith("retriever: dense best (bm25 -0.2")
    assert o.word == "no practical difference" and o.best_level == "lost_in_the_middle"
    assert o.line.startswith("reorder: no practical difference (lost_in_the_middle +0.00") and "inside ±0.01" in o.line
    assert k.levels == ["3", "5", "10"] and k.best_level == "10" and k.edge == "largest" and k.ordered
    assert "at the edge of the grid (largest k tried)" in k.line and "still rising" in k.line
    assert k.choice == "10" and "never pays for more chunks, and no smaller k is shown within 0.01 of the best: k 10" in k.line
    # the intervals are the evidence's
    j = k.levels.index("3")
    assert (k.ci_low[j], k.ci_high[j]) == (k.evidence["3"].ci_low, k.evidence["3"].ci_high)
    # a metric that pays for depth gets no choice; a wide margin makes k's smaller levels acceptable
    assert answer_factors(x, names, fac, metric="ndcg_at_10", n_permutations=199)[2].choice is None
    wide = answer_factors(x, names, fac, metric="recall_at_k", margin=0.05, n_permutations=199)[2]
    assert wide.choice == "3" and "the smallest k within 0.05 of the best is 3" in wide.line
    json.dumps([a.to_dict() for a in answers.values()], allow_nan=False)


def test_interaction_that_changes_sign_is_flagged():
    x, names, fac = sweep(np.random.default_rng(4))
    for i, n in enumerate(names):  # placement helps bm25 a lot and hurts dense a lot
        if "lost_in_the_middle" in n:
            x[i] += 0.05 if n.startswith("bm25") else -0.05 if n.startswith("dense") else 0.0
    o = answer_factors(x, names, fac, metric="m", n_permutations=199)[1]
    assert any("changes sign across retriever" in t for t in o.interactions), o.interactions
    assert "at retriever bm25" in o.line


def test_smallest_edge_and_an_incomplete_grid():
    """The best k is the smallest tried; one job failed (no ANOVA), yet a reversal beyond the
    margin is still flagged from the cells that ran."""
    x, names, fac = sweep(np.random.default_rng(5))
    for i, n in enumerate(names):
        x[i] -= 0.04 * ("k5" in n) + 0.08 * ("k10" in n)  # the grid's k effect was +0.02 a step
        x[i] += 0.03 if ("litm" in n or "lost" in n) == n.startswith("bm25") else -0.03  # reorder flips by retriever
    keep = [i for i, n in enumerate(names) if n != "hybrid none k10"]
    x, names = x[keep], [names[i] for i in keep]
    answers = answer_factors(x, names, fac, metric="ndcg_at_10", n_permutations=199)
    k, o = answers[2], answers[1]
    assert k.best_level == "3" and k.edge == "smallest"
    assert "at the edge of the grid (smallest k tried): ndcg_at_10 still rises toward smaller k (try below 3)" in k.line
    assert any("changes sign across retriever" in t and "beyond ±0.01 both ways" in t for t in o.interactions)
    assert anova_blocks(x, names, fac).note.startswith("incomplete grid")


def test_answer_factors_refuses_bad_input():
    x, names, fac = sweep(np.random.default_rng(0), n=5)
    with pytest.raises(ValueError, match="one level"):
        answer_factors(x, names, {**fac, "dataset": dict.fromkeys(names, "sample")})
    with pytest.raises(ValueError, match="margin"):
        answer_factors(x, names, fac, margin=math.nan)
    with pytest.raises(ValueError, match="at least 2 queries"):
        answer_factors(x[:, :1], names, fac)
    with pytest.raises(ValueError, match="no level"):
        answer_factors(x, names, {"k": {names[0]: "3", names[1]: "5"}})


def test_identical_levels_are_no_difference():
    x, names, fac = sweep(np.random.default_rng(0), n=8)
    for i, n in enumerate(names):
        x[i] = x[names.index(n.replace("lost_in_the_middle", "none"))]
    o = answer_factors(x, names, fac, metric="ndcg_at_10", n_permutations=99)[1]
    assert o.word == "no difference" == FACTOR_WORDS[0] and "ndcg_at_10 cannot see reorder" in o.line

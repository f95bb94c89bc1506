"""Metrics: hand-computed exact cases, oracles (pytrec_eval, ranx, ir_measures), properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.metrics import BOUNDED, FAMILIES, Qrels, evaluate, grade_matrix, ideal_matrix


def qrels_of(triples: list[tuple[int, int, int]]) -> Qrels:
    if not triples:
        return Qrels(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    q, d, g = zip(*triples)
    return Qrels(np.array(q, np.int64), np.array(d, np.int64), np.array(g, np.int64))


def at(ev, family, k, q=0):
    return ev.at_k[family][q, k - 1]


# ----------------------------------------------------------------- exact hand cases


def test_single_query_binary_every_metric():
    # ranking d3 d1 d7 d2; relevant: d1, d2, d9 (d9 never retrieved) -> R = 3
    ev = evaluate(np.array([[3, 1, 7, 2]]), qrels_of([(0, 1, 1), (0, 2, 1), (0, 9, 1)]), k_max=4, gain="linear")
    assert [at(ev, "precision", k) for k in (1, 2, 3, 4)] == [0, 1 / 2, 1 / 3, 2 / 4]
    assert [at(ev, "recall", k) for k in (1, 2, 3, 4)] == [0, 1 / 3, 1 / 3, 2 / 3]
    assert [at(ev, "hit_rate", k) for k in (1, 2, 4)] == [0, 1, 1]
    assert [at(ev, "mrr", k) for k in (1, 2, 4)] == [0, 0.5, 0.5]
    # AP@4 = (P@2 + P@4) / R = (1/2 + 2/4) / 3
    assert at(ev, "map", 4) == pytest.approx((0.5 + 0.5) / 3, abs=1e-15)
    assert at(ev, "map", 1) == 0
    assert [at(ev, "cg", k) for k in (1, 2, 4)] == [0, 1, 2]
    dcg4 = 1 / math.log2(3) + 1 / math.log2(5)
    idcg4 = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert at(ev, "dcg", 4) == pytest.approx(dcg4, abs=1e-15)
    assert at(ev, "ndcg", 4) == pytest.approx(dcg4 / idcg4, abs=1e-15)
    assert ev.full["mrr"][0] == 0.5
    assert ev.full["map"][0] == pytest.approx(1 / 3, abs=1e-15)
    means = ev.means([2, 4])
    assert means["n_queries"] == 1 and means["n_queries_no_relevant"] == 0
    assert means["precision_at_4"] == 0.5


def test_graded_exp_and_linear_gain():
    # grades 0..4: ranking d0(g2) d1(g0) d2(g4) ; judged also d3(g3)
    qrels = qrels_of([(0, 0, 2), (0, 1, 0), (0, 2, 4), (0, 3, 3)])
    ranking = np.array([[0, 1, 2]])
    exp = evaluate(ranking, qrels, k_max=3, gain="exp")
    lin = evaluate(ranking, qrels, k_max=3, gain="linear")
    d = [1, 1 / math.log2(3), 1 / 2]
    assert at(exp, "dcg", 3) == pytest.approx(3 * d[0] + 0 + 15 * d[2], abs=1e-12)
    assert at(exp, "ndcg", 3) == pytest.approx((3 + 7.5) / (15 + 7 * d[1] + 3 * d[2]), abs=1e-12)
    assert at(lin, "ndcg", 3) == pytest.approx((2 + 2) / (4 + 3 * d[1] + 2 * d[2]), abs=1e-12)
    assert at(lin, "cg", 3) == 6 and at(exp, "cg", 3) == 6  # CG sums raw grades
    # relevant = grade >= 1: d0, d2, d3 -> R = 3
    assert at(exp, "recall", 3) == pytest.approx(2 / 3)
    # relevance_level 3: only d2 (4) and d3 (3) are relevant
    lvl3 = evaluate(ranking, qrels, k_max=3, gain="exp", relevance_level=3)
    assert at(lvl3, "precision", 1) == 0 and at(lvl3, "mrr", 3) == pytest.approx(1 / 3)
    assert at(lvl3, "recall", 3) == 0.5


def test_k_larger_than_ranking_keeps_k_as_denominator():
    ev = evaluate(np.array([[5, 6]]), qrels_of([(0, 5, 1)]), k_max=10)
    assert at(ev, "precision", 10) == pytest.approx(0.1)
    assert at(ev, "precision", 2) == 0.5
    assert at(ev, "recall", 10) == 1
    assert at(ev, "ndcg", 10) == 1
    assert at(ev, "map", 10) == 1


def test_query_without_relevant_documents_left_out_of_means():
    # query 0: relevant d1 ranked 1st. query 1: judged but only grade 0 -> left out, counted.
    qrels = qrels_of([(0, 1, 1), (1, 2, 0)])
    ev = evaluate(np.array([[1, 2], [2, 1]]), qrels, k_max=2)
    means = ev.means()
    assert means["n_queries"] == 1 and means["n_queries_no_relevant"] == 1
    assert means["precision_at_1"] == 1.0 and means["ndcg_at_2"] == 1.0
    assert ev.at_k["precision"][1].tolist() == [0, 0]


def test_judged_query_with_no_results_scores_zero():
    qrels = qrels_of([(0, 1, 1), (1, 4, 2)])
    ev = evaluate(np.array([[1, -1], [-1, -1]]), qrels, k_max=3)
    for family in FAMILIES:
        assert not ev.at_k[family][1].any(), family
    assert ev.full["mrr"][1] == 0 and ev.full["map"][1] == 0
    means = ev.means([1])
    assert means["n_queries"] == 2
    assert means["precision_at_1"] == 0.5  # (1 + 0) / 2


def test_negative_grades_count_as_zero():
    qrels = qrels_of([(0, 0, -2), (0, 1, 1)])
    ev = evaluate(np.array([[0, 1]]), qrels, k_max=2, gain="exp")
    assert at(ev, "cg", 2) == 1
    assert at(ev, "precision", 1) == 0
    assert at(ev, "ndcg", 2) == pytest.approx(1 / math.log2(3))
    assert grade_matrix(np.array([[0, 1, -1]]), qrels).tolist() == [[0, 1, 0]]


def test_unknown_judged_documents_count_in_r_and_ideal():
    # doc_idx -1: judged but absent from the corpus (trec_eval still counts it)
    qrels = qrels_of([(0, 0, 1), (0, -1, 3)])
    ev = evaluate(np.array([[0]]), qrels, k_max=1, gain="linear")
    assert at(ev, "recall", 1) == 0.5
    assert at(ev, "ndcg", 1) == pytest.approx(1 / 3)
    assert ideal_matrix(qrels, 1, 3).tolist() == [[3, 1, 0]]


def test_all_grades_equal_and_ideal_order():
    qrels = qrels_of([(0, d, 2) for d in range(5)])
    ev = evaluate(np.array([[4, 3, 2, 1, 0]]), qrels, k_max=5)
    assert np.allclose(ev.at_k["ndcg"][0], 1.0)
    assert np.allclose(ev.at_k["precision"][0], 1.0)
    assert np.allclose(ev.at_k["map"][0], [0.2, 0.4, 0.6, 0.8, 1.0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="k_max"):
        evaluate(np.array([[0]]), qrels_of([(0, 0, 1)]), k_max=0)
    with pytest.raises(ValueError, match="relevance_level"):
        evaluate(np.array([[0]]), qrels_of([(0, 0, 1)]), k_max=1, relevance_level=0)
    with pytest.raises(ValueError, match="gain"):
        evaluate(np.array([[0]]), qrels_of([(0, 0, 1)]), k_max=1, gain="cubic")  # type: ignore[arg-type]


def test_per_query_table_columns():
    ev = evaluate(np.array([[1, 2], [2, 1]]), qrels_of([(0, 1, 1), (1, 1, 2)]), k_max=2)
    table = pd.DataFrame(ev.per_query(["a", "b"]))
    assert table["query_id"].tolist() == ["a", "b"]
    assert table["precision_at_1"].tolist() == [1.0, 0.0]
    assert table["ndcg_at_2"].iloc[1] == pytest.approx(1 / math.log2(3))
    assert {f"{f}_at_{k}" for f in FAMILIES for k in (1, 2)} <= set(table.columns)
    assert table["mrr"].tolist() == [1.0, 0.5]


# ----------------------------------------------------------------- oracles


def random_collection(seed: int, n_q: int = 1000, n_docs: int = 400, depth: int = 100, judged: int = 25):
    """Graded qrels (grades -1..4) and a ranking with distinct float32 scores per query."""
    rng = np.random.default_rng(seed)
    qi = np.repeat(np.arange(n_q), judged)
    di = np.concatenate([rng.choice(n_docs, judged, replace=False) for _ in range(n_q)])
    grades = rng.integers(-1, 5, len(qi))
    ranking = np.stack([rng.choice(n_docs, depth, replace=False) for _ in range(n_q)])
    scores = np.sort(rng.permutation(n_q * depth).reshape(n_q, depth).astype(np.float32), axis=1)[:, ::-1]
    return Qrels(qi, di, grades), ranking, scores


def as_dicts(qrels: Qrels, ranking, scores):
    qd: dict[str, dict[str, int]] = {}
    for q, d, g in zip(qrels.query_idx, qrels.doc_idx, qrels.grade):
        qd.setdefault(f"q{q}", {})[f"d{d}"] = int(g)
    rd = {f"q{q}": {f"d{d}": float(s) for d, s in zip(ranking[q], scores[q])} for q in range(len(ranking))}
    return qd, rd


CUTS = (1, 3, 5, 10, 20, 50, 100)


@pytest.mark.parametrize("relevance_level", [1, 2])
def test_linear_gain_equals_pytrec_eval(relevance_level):
    import pytrec_eval  # an oracle: missing, the test fails
    qrels, ranking, scores = random_collection(seed=relevance_level)
    ev = evaluate(ranking, qrels, k_max=100, gain="linear", relevance_level=relevance_level)
    qd, rd = as_dicts(qrels, ranking, scores)
    cuts = ",".join(map(str, CUTS))
    measures = {f"P.{cuts}", f"recall.{cuts}", f"ndcg_cut.{cuts}", f"map_cut.{cuts}", "recip_rank", "map"}
    res = pytrec_eval.RelevanceEvaluator(qd, measures, relevance_level=relevance_level).evaluate(rd)
    mask = ev.evaluated
    assert mask.sum() > 900
    for family, name in [("precision", "P"), ("recall", "recall"), ("ndcg", "ndcg_cut"), ("map", "map_cut")]:
        for k in CUTS:
            theirs = np.array([res[f"q{q}"][f"{name}_{k}"] for q in range(len(ranking))])
            assert np.abs(ev.at_k[family][:, k - 1] - theirs)[mask].max() <= 1e-9, (family, k)
    for ours, name in [("mrr", "recip_rank"), ("map", "map")]:
        theirs = np.array([res[f"q{q}"][name] for q in range(len(ranking))])
        assert np.abs(ev.full[ours] - theirs)[mask].max() <= 1e-9, name


@pytest.mark.slow  # importing ranx and numba costs each process ~2.5 s (ranx runs uncompiled: tests/conftest.py)
def test_exp_gain_equals_ranx_ndcg_burges():
    import ranx
    qrels, ranking, scores = random_collection(seed=7, n_q=1000)
    ev = evaluate(ranking, qrels, k_max=100, gain="exp")
    qd, rd = as_dicts(qrels, ranking, scores)
    keep = np.nonzero(ev.evaluated)[0]
    assert len(keep) > 900
    # ranx's ndcg_burges: gain 2^rel - 1, ideal from the judged grades; grades <= 0 add nothing
    rq = ranx.Qrels({f"q{q}": {d: g for d, g in qd[f"q{q}"].items() if g > 0} for q in keep})
    rr = ranx.Run({f"q{q}": rd[f"q{q}"] for q in keep})
    for k in (1, 5, 10, 100):
        ranx.evaluate(rq, rr, f"ndcg_burges@{k}")  # stores per-query values in rr.scores
        theirs = np.array([rr.scores[f"ndcg_burges@{k}"][f"q{q}"] for q in keep])
        assert np.abs(ev.at_k["ndcg"][keep, k - 1] - theirs).max() <= 1e-9, k


# ----------------------------------------------------------------- properties


@st.composite
def small_case(draw):
    n_q = draw(st.integers(1, 4))
    n_docs = draw(st.integers(1, 12))
    depth = draw(st.integers(1, 12))
    triples = []
    for q in range(n_q):
        judged = draw(st.lists(st.integers(0, n_docs - 1), unique=True, max_size=n_docs))
        triples += [(q, d, draw(st.integers(-1, 4))) for d in judged]
    rows = []
    for _ in range(n_q):
        perm = draw(st.permutations(list(range(n_docs))))
        n = draw(st.integers(0, min(depth, n_docs)))
        rows.append(list(perm[:n]) + [-1] * (depth - n))
    k_max = draw(st.integers(1, 15))
    return qrels_of(triples), np.array(rows, np.int64), k_max


@given(small_case(), st.sampled_from(["exp", "linear"]), st.integers(1, 3))
@settings(max_examples=200, deadline=None)
def test_properties(case, gain, level):
    qrels, ranking, k_max = case
    ev = evaluate(ranking, qrels, k_max=k_max, gain=gain, relevance_level=level)
    for family in BOUNDED:
        values = ev.at_k[family]
        assert (values >= 0).all() and (values <= 1 + 1e-12).all(), family
    assert (np.diff(ev.at_k["recall"], axis=1) >= 0).all()
    counts = ev.at_k["precision"] * np.arange(1, k_max + 1)
    assert np.allclose(counts, np.round(counts), atol=1e-9)
    assert (ev.full["map"] >= 0).all() and (ev.full["map"] <= 1 + 1e-12).all()


@given(small_case(), st.sampled_from(["exp", "linear"]))
@settings(max_examples=100, deadline=None)
def test_ideal_order_has_ndcg_one(case, gain):
    qrels, _, k_max = case
    # rank every judged document of each query by grade, best first: the ideal ranking
    n_q = int(qrels.query_idx.max()) + 1 if len(qrels.query_idx) else 1
    rows = []
    for q in range(n_q):
        sel = qrels.query_idx == q
        order = np.argsort(-np.maximum(qrels.grade[sel], 0), kind="stable")
        rows.append(list(qrels.doc_idx[sel][order]))
    width = max(1, max(len(r) for r in rows))
    ranking = np.array([r + [-1] * (width - len(r)) for r in rows], np.int64)
    ev = evaluate(ranking, qrels, k_max=k_max, gain=gain)
    has_gain = ideal_matrix(qrels, n_q, k_max)[:, 0] > 0
    assert np.allclose(ev.at_k["ndcg"][has_gain], 1.0)


def test_sparse_lookup_and_sorted_ideal_paths_agree_with_dense(monkeypatch):
    """The searchsorted fallback (huge query x judged tables) and the sort-based ideal
    (grade scales above 64) give the same numbers as the default paths."""
    from pipeline.metrics import grades

    qrels, ranking, _ = random_collection(seed=11, n_q=50, n_docs=60, depth=30, judged=20)
    dense = grade_matrix(ranking, qrels)
    monkeypatch.setattr(grades, "DENSE_CELLS", 0)
    assert np.array_equal(grade_matrix(ranking, qrels), dense)
    big = Qrels(qrels.query_idx, qrels.doc_idx, qrels.grade * 100)
    ideal = ideal_matrix(big, 50, 25)
    expected = np.zeros((50, 25), np.int64)
    for q in range(50):
        g = np.sort(np.maximum(big.grade[big.query_idx == q], 0))[::-1][:25]
        expected[q, : len(g)] = g
    assert np.array_equal(ideal, expected)
    assert np.array_equal(ideal_matrix(qrels, 50, 25), expected // 100)

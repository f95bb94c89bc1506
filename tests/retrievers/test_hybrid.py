"""Hybrid fusion: RRF and convex combinations against hand-computed values, and ranx."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.ranking import Ranking
from retrievers.bm25 import BM25Retriever
from retrievers.hybrid import HybridRetriever, normalize_scores

NEG = -np.inf


class Fixed:
    """A retriever returning fixed rows (truncated or padded to the depth asked)."""

    def __init__(self, name: str, doc_idx: list[list[int]], scores: list[list[float]]):
        self.name = name
        self.doc_idx = np.array(doc_idx, np.int64)
        self.scores = np.array(scores, np.float32)
        self.asked: list[int] = []
        self.indexed = 0

    def cache_key(self) -> dict:
        return {"retriever": self.name}

    def index(self, doc_ids, doc_texts) -> None:
        self.indexed += 1

    def search(self, query_ids, query_texts, depth: int) -> Ranking:
        self.asked.append(depth)
        idx, sc = self.doc_idx[:, :depth], self.scores[:, :depth]
        pad = depth - idx.shape[1]
        if pad > 0:
            idx = np.concatenate([idx, np.full((len(idx), pad), -1, np.int64)], axis=1)
            sc = np.concatenate([sc, np.full((len(sc), pad), NEG, np.float32)], axis=1)
        return Ranking(idx, sc)


def sides() -> tuple[Fixed, Fixed]:
    first = Fixed("A", [[2, 0, 5], [9, 3, -1], [4, -1, -1]], [[3.0, 2.0, 1.0], [5.0, 4.0, NEG], [1.0, NEG, NEG]])
    second = Fixed("B", [[0, 7, -1], [1, 3, -1], [-1, -1, -1]], [[0.9, 0.5, NEG], [2.0, 1.0, NEG], [NEG, NEG, NEG]])
    return first, second


QIDS, QTEXTS = ["q0", "q1", "q2"], ["", "", ""]


def test_rrf_hand_computed():
    first, second = sides()
    hybrid = HybridRetriever(first, second, fusion="rrf", rrf_k=60, candidate_depth=3)
    r = hybrid.search(QIDS, QTEXTS, 5)
    # q0: doc0 = 1/62 + 1/61, doc2 = 1/61, doc7 = 1/62, doc5 = 1/63
    assert r.doc_idx[0].tolist() == [0, 2, 7, 5, -1]
    np.testing.assert_allclose(r.scores[0, :4], [1 / 62 + 1 / 61, 1 / 61, 1 / 62, 1 / 63], rtol=1e-7)
    # q1: doc3 = 2/62; doc9 and doc1 tie at 1/61 -> lower index first
    assert r.doc_idx[1].tolist() == [3, 1, 9, -1, -1]
    assert r.scores[1, 1] == r.scores[1, 2] == np.float32(1 / 61)
    # q2: one side has nothing
    assert r.doc_idx[2].tolist() == [4, -1, -1, -1, -1] and np.isneginf(r.scores[2, 1:]).all()
    assert first.asked == [5] and second.asked == [5]  # at least the depth asked


def test_rrf_k_and_depth_cut():
    first, second = sides()
    r = HybridRetriever(first, second, rrf_k=0, candidate_depth=10).search(QIDS, QTEXTS, 2)
    assert r.doc_idx[0].tolist() == [0, 2]  # 1/2 + 1 > 1
    np.testing.assert_allclose(r.scores[0], [1.5, 1.0])
    assert first.asked == [10]


def test_convex_minmax_hand_computed():
    first, second = sides()
    r = HybridRetriever(first, second, fusion="convex", alpha=0.3, normalization="minmax").search(QIDS, QTEXTS, 4)
    # q0: first -> doc2 1, doc0 .5, doc5 0; second -> doc0 1, doc7 0
    assert r.doc_idx[0].tolist() == [0, 2, 5, 7]
    np.testing.assert_allclose(r.scores[0], [0.3 * 0.5 + 0.7, 0.3, 0.0, 0.0], atol=1e-7)
    # q1: first -> doc9 1, doc3 0; second -> doc1 1, doc3 0
    assert r.doc_idx[1].tolist() == [1, 9, 3, -1]
    np.testing.assert_allclose(r.scores[1, :3], [0.7, 0.3, 0.0], atol=1e-7)
    # q2: a single candidate: max == min normalizes to 0 (as ranx)
    assert r.doc_idx[2].tolist() == [4, -1, -1, -1] and r.scores[2, 0] == 0.0


def test_convex_zscore_hand_computed():
    first, second = sides()
    r = HybridRetriever(first, second, fusion="convex", alpha=0.3, normalization="zscore").search(QIDS, QTEXTS, 4)
    z = math.sqrt(1.5)  # z-scores of [3, 2, 1]: +-1/sqrt(2/3); of [0.9, 0.5]: +-1
    assert r.doc_idx[0].tolist() == [0, 2, 5, 7]
    np.testing.assert_allclose(r.scores[0], [0.7, 0.3 * z, -0.3 * z, -0.7], atol=1e-6)


def test_normalize_scores_ignores_padding():
    ranking = Ranking(np.array([[1, 2, -1], [-1, -1, -1]]), np.array([[4.0, 2.0, NEG], [NEG, NEG, NEG]], np.float32))
    np.testing.assert_array_equal(normalize_scores(ranking, "minmax"), [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(normalize_scores(ranking, "zscore"), [[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])


def random_ranking(rng, n_q: int, n_docs: int, depth: int) -> Ranking:
    idx = np.stack([rng.choice(n_docs, size=depth, replace=False) for _ in range(n_q)])
    scores = -np.sort(-rng.random((n_q, depth)), axis=1)  # distinct, descending
    return Ranking(idx.astype(np.int64), scores.astype(np.float32))


@pytest.mark.slow  # importing ranx and numba costs each process ~2.5 s: the full suite runs it
@pytest.mark.parametrize("method", ["rrf", "minmax", "zscore"])
def test_matches_ranx_fuse(method):
    import ranx  # the oracle: a test dependency, missing it fails
    rng = np.random.default_rng(5)
    a, b = random_ranking(rng, 20, 60, 15), random_ranking(rng, 20, 60, 15)
    if method == "rrf":
        hybrid = HybridRetriever(Fixed("A", [], []), Fixed("B", [], []), fusion="rrf", rrf_k=60)
        kwargs = {"method": "rrf", "params": {"k": 60}}
    else:
        hybrid = HybridRetriever(Fixed("A", [], []), Fixed("B", [], []), fusion="convex", alpha=0.3, normalization=method)
        kwargs = {"norm": "min-max" if method == "minmax" else "zmuv", "method": "wsum", "params": {"weights": [0.3, 0.7]}}
    got = hybrid.fuse(a, b, 30)

    def to_run(r: Ranking) -> "ranx.Run":
        return ranx.Run({f"q{i}": {f"d{d}": float(s) for d, s in zip(row, sc)} for i, (row, sc) in enumerate(zip(r.doc_idx, r.scores))})

    fused = ranx.fuse(runs=[to_run(a), to_run(b)], **kwargs).to_dict()
    for i in range(20):
        want = fused[f"q{i}"]
        got_row = {f"d{d}": float(s) for d, s in zip(got.doc_idx[i], got.scores[i]) if d >= 0}
        assert got_row.keys() == want.keys()
        np.testing.assert_allclose([got_row[k] for k in want], list(want.values()), atol=1e-6)


def test_cache_key_and_index_both_sides():
    first, second = sides()
    h = HybridRetriever(first, second, fusion="convex", alpha=0.25, normalization="zscore", candidate_depth=50)
    assert h.cache_key() == {
        "retriever": "hybrid", "fusion": "convex", "candidate_depth": 50, "alpha": 0.25,
        "normalization": "zscore", "first": {"retriever": "A"}, "second": {"retriever": "B"},
    }
    assert HybridRetriever(first, second).cache_key()["rrf_k"] == 60.0
    h.index(["a"], ["text"])
    assert first.indexed == second.indexed == 1
    with pytest.raises(ValueError, match="fusion"):
        HybridRetriever(first, second, fusion="max")
    with pytest.raises(ValueError, match="alpha"):
        HybridRetriever(first, second, alpha=1.5)


def test_two_real_bm25_sides_fuse_to_their_agreement():
    docs = ["red apple pie", "green apple", "red car", "blue sky", "apple tree red"]
    h = HybridRetriever(BM25Retriever(stemmer=None), BM25Retriever(method="bm25+", stemmer=None), rrf_k=60)
    h.index([str(i) for i in range(5)], docs)
    r = h.search(["q"], ["red apple"], 5)
    # both sides rank the documents with both words first: 0 (shorter) then 4
    assert r.doc_idx[0, :2].tolist() == [0, 4] and r.scores[0, 0] == pytest.approx(2 / 61)
    assert set(r.doc_idx[0, 2:4].tolist()) == {1, 2} and r.doc_idx[0, 4] == -1

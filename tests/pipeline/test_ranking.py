"""The helpers that make Rankings (``pipeline.ranking``, the computing tier): rows -> padded matrix,
padding, top k; and the cached Ranking (``pipeline.io.cache.load_or_compute_ranking``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pipeline.ranking
import retrievers.base
from pipeline.io.cache import load_or_compute_ranking
from pipeline.ranking import Ranking, padded, rows_to_ranking, top_k, top_of_row


def test_rows_to_ranking_orders_by_score_then_ties_by_row_order_and_pads():
    # query 1's rows come first and out of order; query 2 has no rows; query 0 one row
    query = np.array([1, 1, 1, 0, 1])
    doc = np.array([5, 6, 7, 8, 9])
    scores = np.array([1.0, 3.0, 1.0, 0.5, 2.0])
    r = rows_to_ranking(query, doc, scores, n_queries=3, depth=5)
    assert r.doc_idx.tolist() == [[8, -1, -1, -1, -1], [6, 9, 5, 7, -1], [-1] * 5]
    assert r.doc_idx.dtype == np.int64 and r.scores.dtype == np.float64  # as given
    assert r.scores[1].tolist() == [3.0, 2.0, 1.0, 1.0, -np.inf] and r.scores[2].tolist() == [-np.inf] * 5


def test_rows_to_ranking_tie_key_depth_and_default_width():
    query = np.array([0, 0, 0, 0])
    doc = np.array([3, 1, 2, 0])
    scores = np.array([1.0, 1.0, 1.0, 2.0])
    # ties by an explicit key ascending (here the document index), cut at depth 2
    assert rows_to_ranking(query, doc, scores, 1, depth=2, tie=doc).doc_idx.tolist() == [[0, 1]]
    # ties by document index descending, as a negated key
    assert rows_to_ranking(query, doc, scores, 1, tie=-doc).doc_idx.tolist() == [[0, 3, 2, 1]]
    # depth None: as deep as the longest query, at least one column
    assert rows_to_ranking(np.array([], np.int64), np.array([], np.int64), np.array([]), 2).doc_idx.tolist() == [[-1], [-1]]
    assert rows_to_ranking(query, doc, scores, 1, depth=0).doc_idx.shape == (1, 0)


def test_rows_to_ranking_sorts_by_the_scores_given_not_their_float32_rounding():
    # 1 + 2**-30 and 1 are one float32 but distinct float64 values: the higher one comes first
    scores = np.array([1.0, 1.0 + 2.0**-30])
    r = rows_to_ranking(np.array([0, 0]), np.array([0, 1]), scores, 1)
    # ... and the Ranking keeps both apart (float64 in, float64 kept: issue 33)
    assert r.doc_idx.tolist() == [[1, 0]] and r.scores.tolist() == [[1.0 + 2.0**-30, 1.0]]


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=40, unique=True),
    st.integers(0, 6),
    st.booleans(),
)
def test_rows_to_ranking_equals_a_plain_sort(pairs, depth, doc_ties):
    rng = np.random.default_rng(len(pairs))
    query = np.array([q for q, _ in pairs], np.int64)
    doc = np.array([d for _, d in pairs], np.int64)
    scores = rng.integers(0, 3, len(pairs)).astype(np.float64)  # many ties
    got = rows_to_ranking(query, doc, scores, 4, depth, tie=doc if doc_ties else None)
    for q in range(4):
        rows = [i for i in range(len(pairs)) if query[i] == q]
        rows.sort(key=lambda i: (-scores[i], doc[i] if doc_ties else i))
        want = [int(doc[i]) for i in rows[:depth]]
        assert got.doc_idx[q].tolist() == want + [-1] * (depth - len(want))


@given(st.integers(0, 60), st.integers(0, 70), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_top_of_row_is_top_k_for_labelled_rows(n, depth, levels, seed):
    """The sparse path's rule (a query's matching documents only, labelled by index) and the
    dense one (``top_k`` over a whole row) give the same ranking, ties at the cut-off included."""
    rng = np.random.default_rng(seed)
    row = rng.integers(0, levels, n).astype(np.float32)  # few levels: many ties
    labels = rng.permutation(n).astype(np.int64)  # labels in no particular order
    scores = row[labels]
    got_labels, got_scores = top_of_row(labels, scores, depth)
    want = sorted(range(n), key=lambda i: (-row[i], i))[:depth]
    assert got_labels.tolist() == want and got_scores.tolist() == [float(row[i]) for i in want]
    dense = top_k(row[None, :], depth)
    assert dense.doc_idx[0][: len(want)].tolist() == want


def test_padded_widens_with_nothing_and_keeps_wider_arrays():
    r = padded(np.array([[4, 2]]), np.array([[2.0, 1.0]], np.float32), 4)
    assert r.doc_idx.tolist() == [[4, 2, -1, -1]] and r.scores.tolist() == [[2.0, 1.0, -np.inf, -np.inf]]
    wide = padded(r.doc_idx, r.scores, 3)
    assert wide.doc_idx is r.doc_idx and wide.depth == 4
    assert Ranking.empty(2, 3).doc_idx.tolist() == [[-1] * 3] * 2


def test_top_k_pads_a_short_corpus():
    r = top_k(np.array([[0.5, 2.0]]), 4)
    assert r.doc_idx.tolist() == [[1, 0, -1, -1]] and r.scores[0, 2:].tolist() == [-np.inf, -np.inf]


def test_load_or_compute_ranking_without_a_cache_returns_what_was_computed():
    ranking = Ranking(np.array([[1]], np.int64), np.array([[1.0]], np.float32))
    got, hit = load_or_compute_ranking(None, {"depth": 1}, lambda: ranking)
    assert got is ranking and not hit


def test_load_or_compute_ranking_round_trip(tmp_path):
    ranking = Ranking(np.array([[1, 0]], np.int64), np.array([[2.0, 1.0]], np.float32))
    key = {"collection": "c", "retriever": {"name": "x"}, "depth": 2}
    got, hit = load_or_compute_ranking(tmp_path, key, lambda: ranking)
    assert got is ranking and not hit
    again, hit = load_or_compute_ranking(tmp_path, key, lambda: pytest.fail("recomputed"))
    assert hit and isinstance(again, Ranking)
    np.testing.assert_array_equal(again.doc_idx, ranking.doc_idx)
    np.testing.assert_array_equal(again.scores, ranking.scores)


def test_retrievers_base_still_exports_the_ranking_and_its_helpers():
    """User code written against ``retrievers.base`` (before the Ranking moved down to the
    computing tier) gets the very same objects."""
    for name in ("Ranking", "padded", "rows_to_ranking", "top_k", "top_of_row"):
        assert getattr(retrievers.base, name) is getattr(pipeline.ranking, name), name
    assert retrievers.base.load_or_compute_ranking is load_or_compute_ranking
    assert Ranking.__module__ == "pipeline.ranking"

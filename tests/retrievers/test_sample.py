"""The bundled sample collection is a useful benchmark: neither retriever is perfect or useless."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.io.collection import load_sample
from pipeline.metrics import evaluate
from retrievers.bm25 import BM25Retriever


def ndcg_at_10(retriever, collection):
    retriever.index(collection.doc_ids, collection.doc_texts)
    ranking = retriever.search(collection.query_ids, collection.query_texts, 10)
    return evaluate(ranking.doc_idx, collection.qrels, k_max=10).at_k["ndcg"][:, 9]


def test_bm25_on_the_sample_is_neither_perfect_nor_useless():
    collection = load_sample()
    per_query = ndcg_at_10(BM25Retriever(), collection)
    assert 0.3 < per_query.mean() < 0.95
    assert (per_query == 0).any() and (per_query == 1).any()


@pytest.mark.slow
def test_bm25_and_dense_win_on_different_queries(monkeypatch, sample_cache):
    """Dense is MiniLM as a job runs it (DenseRetriever's defaults), its embeddings read from
    the run's shared cache of the sample (tests/sample_embeddings.py): what is checked is the
    two rankings, not the encoding (tests/retrievers/test_dense.py)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from retrievers.dense import DenseRetriever

    collection = load_sample()
    bm25 = ndcg_at_10(BM25Retriever(), collection)
    retriever = DenseRetriever(show_progress_bar=False, cache_dir=sample_cache)
    dense = ndcg_at_10(retriever, collection)
    assert retriever.last_cache_hits == {"docs": True, "queries": True}  # the shared cache serves the defaults
    assert 0.3 < dense.mean() < 0.95
    assert np.sum(bm25 > dense + 0.1) >= 3 and np.sum(dense > bm25 + 0.1) >= 3

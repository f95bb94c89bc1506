"""Chroma's HNSW search breadth (``retriever.ef_search``): written to the collection, and
applied to the next search through a new client (issue 36's ef sweep)."""

from __future__ import annotations

import numpy as np
import pytest

from retrievers.chroma import connect, reopened, set_ef_search, write_collection


def _recall(collection, queries, truth):
    found = collection.query(query_embeddings=queries, n_results=10, include=[])["ids"]
    return float(np.mean([len({int(i) for i in ids} & set(t.tolist())) / 10 for ids, t in zip(found, truth)]))


@pytest.mark.slow  # 8,000 vectors into Chroma
def test_a_new_ef_search_is_kept_with_the_collection_and_applies_once_reopened(tmp_path):
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((8000, 32)).astype(np.float32)
    queries = rng.standard_normal((60, 32)).astype(np.float32)
    truth = np.argsort(-(queries @ docs.T), axis=1)[:, :10]  # exact inner-product top 10
    client = connect(path=tmp_path)
    collection = write_collection(client, "vectors", [str(i) for i in range(len(docs))], docs,
                                  [{"doc_id": str(i)} for i in range(len(docs))], space="ip")
    assert set_ef_search(collection, 10) and not set_ef_search(reopened(tmp_path, "vectors"), 10)
    narrow = _recall(reopened(tmp_path, "vectors"), queries, truth)
    assert set_ef_search(reopened(tmp_path, "vectors"), 400)
    wide = reopened(tmp_path, "vectors")
    assert wide.configuration["hnsw"]["ef_search"] == 400
    assert _recall(wide, queries, truth) > max(0.95, narrow + 0.1)  # the breadth took effect

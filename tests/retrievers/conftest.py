"""SciFact fixtures shared by test_scifact.py and test_onnx.py (session-scoped: the corpus is
read once and MiniLM's full SciFact encoding is made once per session, or read from the test
cache, scifact_cache.py)."""

from __future__ import annotations

import pytest
import scifact_cache


@pytest.fixture(scope="session")
def scifact():
    """BEIR SciFact, or a skip where the data is absent."""
    collection = scifact_cache.load_scifact()
    if collection is None:
        pytest.skip(f"SciFact not found at {scifact_cache.SCIFACT}")
    return collection


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """Embeddings and ONNX exports, kept between test sessions (scifact_cache.cache_dir);
    ``RAG_EVAL_TEST_CACHE=off`` forces a cold run (a cache for this session only)."""
    return scifact_cache.cache_dir() or tmp_path_factory.mktemp("scifact-cache")


@pytest.fixture(scope="session")
def minilm_on_scifact(scifact, cache_dir):
    """The bundled all-MiniLM-L6-v2 (torch) with all of SciFact indexed, through ``cache_dir``.

    Encoding the full corpus once also fills the per-text cache, so any later retriever of
    the same model and settings over a part of SciFact (the int8 test's sub-corpus) reads its
    embeddings instead of encoding them again."""
    return scifact_cache.minilm(scifact, cache_dir)

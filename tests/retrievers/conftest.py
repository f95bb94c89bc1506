"""SciFact fixtures shared by test_scifact.py and test_onnx.py (session-scoped, so the
corpus is read once and MiniLM's full SciFact encoding is made once per session)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact"


@pytest.fixture(scope="session")
def scifact():
    """BEIR SciFact (5,183 abstracts, 300 test claims), or a skip where the data is absent."""
    if not (SCIFACT / "corpus.jsonl.gz").exists():
        pytest.skip(f"SciFact not found at {SCIFACT}")
    from pipeline.io.collection import load_beir

    return load_beir(SCIFACT)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """Embeddings and ONNX exports, kept between test sessions (encoding SciFact with MiniLM
    is the slowest step of the suite): ``RAG_EVAL_TEST_CACHE``, default
    ``~/.cache/rag-retrieval-eval/tests``. Entries are keyed by the model's files and the texts
    and verified on read (pipeline.io.cache), so a stale or damaged one is encoded again;
    ``RAG_EVAL_TEST_CACHE=off`` forces a cold run (a cache for this session only)."""
    where = os.environ.get("RAG_EVAL_TEST_CACHE", str(Path.home() / ".cache" / "rag-retrieval-eval" / "tests"))
    if where == "off":
        return tmp_path_factory.mktemp("scifact-cache")
    Path(where).mkdir(parents=True, exist_ok=True)
    return Path(where)


@pytest.fixture(scope="session")
def minilm_on_scifact(scifact, cache_dir):
    """The bundled all-MiniLM-L6-v2 (torch) with all of SciFact indexed, through ``cache_dir``.

    Encoding the full corpus once also fills the per-text cache, so any later retriever of
    the same model and settings over a part of SciFact (test_onnx.py's sub-corpus) reads its
    embeddings instead of encoding them again."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from retrievers.dense import DenseRetriever

    r = DenseRetriever(cache_dir=cache_dir, batch_size=64)
    r.index(scifact.doc_ids, scifact.doc_texts)
    return r

"""Retrievers and factories the adapter tests name as ``retriever.target`` / ``retriever.factory``
(``adapters_fixtures:...``: pytest puts this folder on sys.path; the subprocess tests set PYTHONPATH).

The MiniLM ones wrap the bundled all-MiniLM-L6-v2 through ``retrievers.dense.DenseRetriever``:
the sample's documents and queries are encoded once per process (into ``cache_dir``, passed as
an option), and each wrapper scores with those very embeddings, so a ranking that differs from
``retriever=dense``'s comes from the adapter, not from the encoder.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

_LOCK = threading.Lock()
_MINILM: dict[str, Any] = {}


def minilm(cache_dir: str) -> dict[str, Any]:
    """The sample, a DenseRetriever indexed on it, and a text -> embedding map of its documents and queries."""
    with _LOCK:
        if cache_dir not in _MINILM:
            from pipeline.io.collection import load_sample
            from retrievers.dense import DenseRetriever

            collection = load_sample()
            dense = DenseRetriever(cache_dir=cache_dir, show_progress_bar=False)
            dense.index(collection.doc_ids, collection.doc_texts)
            queries = dense.cached_embeddings("queries", collection.query_ids, collection.query_texts, "")
            vectors = {t: e for t, e in zip(collection.doc_texts, dense.doc_embeddings)}
            vectors.update({t: e for t, e in zip(collection.query_texts, queries)})
            _MINILM[cache_dir] = {"collection": collection, "dense": dense, "vectors": vectors}
        return _MINILM[cache_dir]


def embed(texts: list[str], cache_dir: str) -> np.ndarray:
    model = minilm(cache_dir)
    missing = [t for t in texts if t not in model["vectors"]]
    if missing:
        for t, e in zip(missing, model["dense"].encode(missing)):
            model["vectors"][t] = e
    return np.stack([model["vectors"][t] for t in texts]).astype(np.float32)


# --------------------------------------------------------------------------- python functions


def minilm_search(query_text: str, k: int, cache_dir: str) -> list[tuple[str, float]]:
    """One query -> [(doc_id, score)]: exact inner product over the sample's MiniLM embeddings."""
    from retrievers.dense import exact_search

    model = minilm(cache_dir)
    ranking = exact_search(embed([query_text], cache_dir), model["dense"].doc_embeddings, k)
    ids = model["collection"].doc_ids
    return [(ids[d], float(s)) for d, s in zip(ranking.doc_idx[0], ranking.scores[0]) if d >= 0]


def minilm_search_batch(query_texts: list[str], k: int, cache_dir: str) -> list[list[tuple[str, float]]]:
    return [minilm_search(t, k, cache_dir) for t in query_texts]


# --------------------------------------------------------------------------- LangChain


def langchain_minilm(k: int, cache_dir: str) -> Any:
    """An InMemoryVectorStore retriever over the sample, MiniLM behind an ``Embeddings`` wrapper."""
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    class MiniLM(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return embed(texts, cache_dir).tolist()

        def embed_query(self, text: str) -> list[float]:
            return embed([text], cache_dir)[0].tolist()

    collection = minilm(cache_dir)["collection"]
    store = InMemoryVectorStore(MiniLM())
    store.add_documents([Document(page_content=t, id=i) for i, t in zip(collection.doc_ids, collection.doc_texts)])
    return store.as_retriever(search_kwargs={"k": k})


# --------------------------------------------------------------------------- LlamaIndex


def llamaindex_minilm(k: int, cache_dir: str) -> Any:
    """A VectorStoreIndex retriever over the sample (TextNodes, no splitter, no LLM), MiniLM
    behind a ``BaseEmbedding`` wrapper."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.schema import TextNode

    class MiniLM(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embed([query], cache_dir)[0].tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return embed([text], cache_dir)[0].tolist()

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return embed(texts, cache_dir).tolist()

    collection = minilm(cache_dir)["collection"]
    nodes = [TextNode(id_=i, text=t) for i, t in zip(collection.doc_ids, collection.doc_texts)]
    index = VectorStoreIndex(nodes, embed_model=MiniLM(model_name="minilm"), show_progress=False)
    return index.as_retriever(similarity_top_k=k)


def not_a_retriever() -> Any:
    return "not a retriever"


# --------------------------------------------------------------------------- misbehaving functions
# On the tiny corpus of test_adapters.py: documents d1..d4; a query text names the behaviour.


def scripted(query_text: str, k: int) -> Any:
    """What each test query asks for (its text)."""
    script: dict[str, Any] = {
        "good": [("d2", 0.9), ("d1", 0.5), ("d3", 0.1)],
        "unknown": [("d2", 0.9), ("ghost", 0.8), ("d1", 0.5)],
        "duplicate": [("d3", 0.9), ("d1", 0.8), ("d3", 0.7), ("d2", 0.1)],
        "short": [("d4", 1.0)],
        "empty": [],
        "none": [("d3", None), ("d1", None), ("d4", None)],
        "mixed": [("d3", 0.5), ("d1", None)],
        "distances": [("d1", 0.1), ("d2", 0.5), ("d3", 0.9)],
        "nan": [("d1", float("nan"))],
        "not a pair": ["d1", "d2"],
        "int ids": [(7, 1.0)],
        "chunks": [("d1#1", 0.9, {"doc": "d1", "chunk": 1}), ("d2#0", 0.8, {"doc": "d2", "chunk": 0}),
                   ("d1#0", 0.7, {"doc": "d1", "chunk": 0}), ("d3#2", 0.6, {"doc": "d3", "chunk": 2}),
                   ("d2#1", 0.5, {"doc": "d2", "chunk": 1})],
        "no doc key": [("d1#0", 0.9, {"chunk": 0})],
    }
    if query_text == "raise":
        raise ConnectionError("the index is down")
    return script[query_text]


def scripted_batch(query_texts: list[str], k: int) -> list[Any]:
    return [scripted(t, k) for t in query_texts]


def wrong_length_batch(query_texts: list[str], k: int) -> list[Any]:
    return [[("d1", 1.0)]]


def slow_search(query_text: str, k: int, latency: float = 0.02) -> list[tuple[str, float]]:
    """An I/O-bound retriever: ``latency`` seconds of waiting per call (benchmarks/adapters.py)."""
    time.sleep(latency)
    return [("d1", 1.0)]


_BM25: list[Any] = []


def sample_bm25(query_text: str, k: int) -> list[tuple[str, float]]:
    """BM25 over the bundled sample, one query at a time (a cheap function for job tests)."""
    with _LOCK:
        if not _BM25:
            from pipeline.io.collection import load_sample
            from retrievers.bm25 import BM25Retriever

            collection = load_sample()
            bm25 = BM25Retriever()
            bm25.index(collection.doc_ids, collection.doc_texts)
            _BM25.append((bm25, collection.doc_ids))
    bm25, ids = _BM25[0]
    ranking = bm25.search(["q"], [query_text], k)
    return [(ids[d], float(s)) for d, s in zip(ranking.doc_idx[0], ranking.scores[0]) if d >= 0]


#: How long :func:`sleepy_bm25` sleeps per call (the cost test checks the measured p50 against it).
SLEEP_S = 0.02


def sleepy_bm25(query_text: str, k: int) -> list[tuple[str, float]]:
    """:func:`sample_bm25` after sleeping :data:`SLEEP_S`: a retriever of known latency."""
    time.sleep(SLEEP_S)
    return sample_bm25(query_text, k)

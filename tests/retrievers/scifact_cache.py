"""SciFact and the model encodings the slow retriever tests keep, for the tests (conftest.py,
test_scifact.py, test_onnx.py) and for ``.ci/run``, which also has the sample's shared MiniLM
embeddings kept here first (tests/sample_embeddings.py).

Encoding SciFact's 5,183 abstracts with MiniLM is the longest step of a fresh suite; exporting
MiniLM to ONNX (fp32 and int8) and encoding the sample and a SciFact sub-corpus with those
backends costs ~70 s of CPU more. All of it goes to the test cache, ``RAG_EVAL_TEST_CACHE``
(default ``~/.cache/rag-retrieval-eval/tests``; ``off``: a folder of the session's own), keyed
by the model's files, the backend and the texts and verified on read (pipeline.io.cache): a
stale or damaged entry is encoded again. ``python tests/retrievers/scifact_cache.py`` fills it
with the same functions the tests call (``fill``; ``.ci/run`` does, before the tests, as it
builds Label Studio's template), so that the suite's own time is the tests'."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # run as a script (.ci/run): the suite's helpers, as under pytest
    sys.path.insert(0, str(TESTS))
from sample_embeddings import kept_cache, restore_or_build  # noqa: E402

SCIFACT = TESTS.parent.parent / "shared" / "data" / "scifact"


def load_scifact() -> Any | None:
    """BEIR SciFact (5,183 abstracts, 300 test claims), or None where the data is absent."""
    if not (SCIFACT / "corpus.jsonl.gz").exists():
        return None
    from pipeline.io.collection import load_beir

    return load_beir(SCIFACT)


def cache_dir() -> Path | None:
    """The test cache (None for ``RAG_EVAL_TEST_CACHE=off``): tests/sample_embeddings.py's."""
    return kept_cache()


def minilm(collection: Any, cache: Path) -> Any:
    """The bundled all-MiniLM-L6-v2 (torch) with ``collection`` indexed through ``cache``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from retrievers.dense import DenseRetriever

    r = DenseRetriever(cache_dir=cache, batch_size=64)
    r.index(collection.doc_ids, collection.doc_texts)
    return r


def backend_embeddings(collection: Any, backend: str, cache: Path) -> tuple[Any, Any]:
    """A retriever of ``backend`` with ``collection`` indexed, and the embeddings of its
    documents and queries stacked (unit rows)."""
    from retrievers.dense import DenseRetriever

    r = DenseRetriever(backend=backend, cache_dir=cache, batch_size=64)
    r.index(collection.doc_ids, collection.doc_texts)
    queries = r.cached_embeddings("queries", collection.query_ids, collection.query_texts, r.query_prefix)
    return r, np.vstack([r.doc_embeddings, queries])


def scifact_subset(collection: Any, every: int = 10) -> Any:
    """SciFact's 300 queries over a sub-corpus: every judged abstract and every ``every``-th
    other one (764 of 5,183), so that the int8 backend encodes a seventh of the corpus.
    The full corpus's numbers are ``benchmarks/encode.py``'s."""
    import dataclasses

    from pipeline.metrics import Qrels

    judged = set(collection.qrels.doc_idx[collection.qrels.doc_idx >= 0].tolist())
    keep = sorted(judged | set(range(0, collection.n_docs, every)))
    new_idx = np.full(collection.n_docs, -1, np.int64)
    new_idx[keep] = np.arange(len(keep))
    q = collection.qrels
    qrels = Qrels(q.query_idx, np.where(q.doc_idx >= 0, new_idx[np.maximum(q.doc_idx, 0)], -1), q.grade)
    return dataclasses.replace(collection, doc_ids=[collection.doc_ids[i] for i in keep],
                               doc_texts=[collection.doc_texts[i] for i in keep], qrels=qrels,
                               digest=f"{collection.digest}-subset-{every}")


def fill(scifact: Any, cache: Path) -> None:
    """Every encoding the slow retriever tests keep in the test cache, made as they make it
    (the same functions): MiniLM's SciFact (test_scifact.py), the sample under the three
    backends (test_onnx.py: the ONNX exports are made here too) and onnx-int8 and torch on
    SciFact's sub-corpus (test_scifact.py's int8 test). On a machine whose cache is empty the
    ONNX part alone costs the suite ~70 s of CPU (measured 2026-12-03); the tests read all of
    it back verified, and encode what is missing or damaged themselves."""
    from pipeline.io.collection import load_sample

    minilm(scifact, cache)
    sample = load_sample()
    for backend in ("torch", "onnx", "onnx-int8"):
        backend_embeddings(sample, backend, cache)
    subset = scifact_subset(scifact)
    for backend in ("torch", "onnx-int8"):
        backend_embeddings(subset, backend, cache)


def fill_sample(cache: Path) -> None:
    """The sample's MiniLM embeddings that the suite's tests share, kept in ``cache``
    (tests/sample_embeddings.py: verified, or encoded and kept)."""
    with tempfile.TemporaryDirectory() as tmp:
        restore_or_build(Path(tmp) / "sample", cache)


if __name__ == "__main__":
    cache = cache_dir()
    if cache is None:
        sys.exit("nothing to do: the test cache is off (RAG_EVAL_TEST_CACHE=off)")
    start = time.perf_counter()
    fill_sample(cache)
    scifact = load_scifact()
    if scifact is None:
        sys.exit(f"the sample's embeddings are ready in {cache}; SciFact is missing at {SCIFACT}")
    fill(scifact, cache)
    print(f"MiniLM's encodings of the sample and SciFact, and the ONNX ones, ready in {cache} "
          f"({time.perf_counter() - start:.0f} s)")

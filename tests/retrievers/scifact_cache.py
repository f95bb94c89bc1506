"""SciFact and MiniLM's encoding of it, for the tests (conftest.py) and for ``.ci/run``.

Encoding SciFact's 5,183 abstracts with MiniLM is the longest step of a fresh suite. The
embeddings go to the test cache, ``RAG_EVAL_TEST_CACHE`` (default
``~/.cache/rag-retrieval-eval/tests``; ``off``: a folder of the session's own), keyed by the
model's files and the texts and verified on read (pipeline.io.cache): a stale or damaged
entry is encoded again. ``python tests/retrievers/scifact_cache.py`` fills it (``.ci/run``
does, before the tests, as it builds Label Studio's template), so that the suite's own time
is the tests'.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact"
DEFAULT_CACHE = Path.home() / ".cache" / "rag-retrieval-eval" / "tests"


def load_scifact() -> Any | None:
    """BEIR SciFact (5,183 abstracts, 300 test claims), or None where the data is absent."""
    if not (SCIFACT / "corpus.jsonl.gz").exists():
        return None
    from pipeline.io.collection import load_beir

    return load_beir(SCIFACT)


def cache_dir() -> Path | None:
    """The test cache (None for ``RAG_EVAL_TEST_CACHE=off``)."""
    where = os.environ.get("RAG_EVAL_TEST_CACHE", str(DEFAULT_CACHE))
    if where == "off":
        return None
    Path(where).mkdir(parents=True, exist_ok=True)
    return Path(where)


def minilm(collection: Any, cache: Path) -> Any:
    """The bundled all-MiniLM-L6-v2 (torch) with ``collection`` indexed through ``cache``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from retrievers.dense import DenseRetriever

    r = DenseRetriever(cache_dir=cache, batch_size=64)
    r.index(collection.doc_ids, collection.doc_texts)
    return r


if __name__ == "__main__":
    scifact, cache = load_scifact(), cache_dir()
    if scifact is None or cache is None:
        sys.exit(f"nothing to do: SciFact at {SCIFACT} or the test cache (RAG_EVAL_TEST_CACHE) is missing")
    start = time.perf_counter()
    minilm(scifact, cache)
    print(f"MiniLM's SciFact embeddings ready in {cache} ({time.perf_counter() - start:.0f} s)")

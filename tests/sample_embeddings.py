"""The bundled sample's MiniLM embeddings, encoded once per test run (docs/testing.md).

Many tests run the dense retriever, or a wrapper of it, on the 171 documents and 52 queries of
``pipeline/sample`` where what they check is not the encoding (every option runs, the adapters
give exact search's ranking, Chroma's HNSW against exact search, BM25 and dense win on
different queries, Ray's encoding against the model in-process). Encoding them costs 8-10 s
of CPU each time, plus loading torch and the model.

:func:`sample_embeddings` builds the project's own embedding cache for the sample (what
``DenseRetriever(cache_dir=...)`` and a job's ``cache_dir=`` write and read,
``pipeline.io.cache``: the per-corpus entries of the documents and the queries, and the
per-text shards) once per test run: in the run's base temp folder, which the pytest-xdist
workers share (each worker's own is a folder inside it), under a file lock, encoded in this
process by ``retrievers.dense.DenseRetriever`` with its defaults, which are those of
``conf/retriever/dense.yaml``. A job or retriever with those settings reads the embeddings
from a copy and never loads the model. The built folder is renamed into place whole, so a
worker never sees half of it. Tests get a copy (:func:`sample_cache`,
:func:`copy_sample_embeddings`): a job writes its rankings into its ``cache_dir`` and a
damaged entry is discarded, so no test reads what another wrote.

The built folder is also kept in the test cache (:func:`kept_cache`, ``RAG_EVAL_TEST_CACHE``,
default ``~/.cache/rag-retrieval-eval/tests``, where SciFact's encodings are kept:
tests/retrievers/scifact_cache.py, which ``.ci/run`` runs first): a later run copies it and
reads both entries back through the cache, which verifies them (their content hashes and
shapes) and finds them only under the key of today's model and settings; a stale or damaged
copy is dropped and the sample encoded again (measured 2026-12-03: 6 s of CPU for the model
and the encoding, on the worker that asks first, while the other waits for it).

The tests whose claim *is* the encoding or the cache encode afresh: tests/retrievers/test_dense.py,
tests/faults/test_cache_faults.py, tests/pipeline/test_cache.py, ONNX, SciFact. The golden dense
job reads this encoding (tests/golden/golden.py): its recorded ranking checks what it gave.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

log = logging.getLogger(__name__)

#: The shared cache's folder and lock, in the run's base temp folder.
NAME = "sample-embeddings"


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every process of this test run shares: under pytest-xdist the parent of the
    worker's base temp folder (``.../pytest-N/popen-gw0`` -> ``.../pytest-N``), else the base
    temp folder itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


#: The test cache: what the suite keeps between sessions (``RAG_EVAL_TEST_CACHE``; ``off``: nothing).
DEFAULT_CACHE = Path.home() / ".cache" / "rag-retrieval-eval" / "tests"


def kept_cache() -> Path | None:
    """The test cache (None for ``RAG_EVAL_TEST_CACHE=off``), created if missing."""
    where = os.environ.get("RAG_EVAL_TEST_CACHE", str(DEFAULT_CACHE))
    if where == "off":
        return None
    Path(where).mkdir(parents=True, exist_ok=True)
    return Path(where)


def _index(folder: Path, *, fresh: bool) -> bool:
    """Index the sample's documents and queries through the embedding cache at ``folder`` with
    ``DenseRetriever``'s defaults (= conf/retriever/dense.yaml), in this process: ``fresh``,
    encode both (an error if the folder already held either); else read both, and say whether
    both were there (verified by the cache; a miss has been encoded into the folder)."""
    from pipeline.io.collection import load_sample
    from retrievers.dense import DenseRetriever

    collection = load_sample()
    dense = DenseRetriever(cache_dir=folder, show_progress_bar=False)  # the bundled model: no network
    dense.index(collection.doc_ids, collection.doc_texts)
    dense.cached_embeddings("queries", collection.query_ids, collection.query_texts, dense.query_prefix)
    if fresh and dense.last_cache_hits != {"docs": False, "queries": False}:
        raise RuntimeError(f"{folder}: the sample's embeddings were not encoded afresh ({dense.last_cache_hits})")
    return dense.last_cache_hits == {"docs": True, "queries": True}


def build(folder: Path) -> None:
    """Encode the sample's documents and queries into the embedding cache at ``folder``."""
    _index(folder, fresh=True)


def restore_or_build(folder: Path, kept: Path | None) -> None:
    """``folder`` (new) holds the sample's embeddings: a copy of ``kept / NAME`` whose two
    entries read back whole under today's key, else encoded afresh (and then kept there)."""
    if kept is None:
        build(folder)
        return
    with FileLock(str(kept / f"{NAME}.lock")):
        if (kept / NAME).is_dir():
            shutil.copytree(kept / NAME, folder)
            if _index(folder, fresh=False):
                return
            log.warning("the kept sample embeddings in %s were stale or damaged: encoding them again", kept / NAME)
            shutil.rmtree(folder)
        build(folder)
        staged = kept / f".{NAME}.{os.getpid()}"
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(folder, staged)
        shutil.rmtree(kept / NAME, ignore_errors=True)
        staged.rename(kept / NAME)  # whole or not at all


@pytest.fixture(scope="session")
def sample_embeddings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared embedding cache of the sample, built once per test run (all xdist workers).
    Read it through a copy (:func:`sample_cache`, :func:`copy_sample_embeddings`), never in place."""
    root = shared_root(tmp_path_factory)
    folder = root / NAME
    with FileLock(str(root / f"{NAME}.lock")):
        if not folder.is_dir():
            partial = root / f"{NAME}.partial"
            shutil.rmtree(partial, ignore_errors=True)  # a worker that died while building
            restore_or_build(partial, kept_cache())
            partial.rename(folder)  # whole or not at all
            log.info("the sample's embeddings ready for this test run in %s", folder)
    return folder


def copy_sample_embeddings(source: Path, dest: Path, roles: tuple[str, ...] = ("docs", "queries")) -> Path:
    """A copy of the shared cache ``source`` at ``dest`` (created; entries there are kept),
    returned. ``roles``: the per-corpus entries to copy, ``docs`` and/or ``queries``; with
    both, the per-text shards too (with one role only, the other's texts are not in the copy)."""
    dest.mkdir(parents=True, exist_ok=True)
    if set(roles) >= {"docs", "queries"}:
        shutil.copytree(source, dest, dirs_exist_ok=True)
        return dest
    arrays = dest / "arrays"
    arrays.mkdir(exist_ok=True)
    for meta in sorted((source / "arrays").glob("*.json")):
        if json.loads(meta.read_text())["key"].get("role") in roles:
            shutil.copy2(meta.with_suffix(".npy"), arrays)
            shutil.copy2(meta, arrays)  # the entry's commit marker last, as the cache writes it
    return dest


@pytest.fixture
def sample_cache(tmp_path: Path, sample_embeddings: Path) -> Path:
    """A copy of the sample's embedding cache at ``tmp_path / "cache"``: pass it as ``cache_dir``."""
    return copy_sample_embeddings(sample_embeddings, tmp_path / "cache")

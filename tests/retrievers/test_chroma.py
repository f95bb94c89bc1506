"""retriever=chroma and ``python -m pipeline.index chroma``, against a real Chroma server on
127.0.0.1 (the session's ``chroma_server``, tests/e2e_servers.py) and a local persistent folder.

Chroma's HNSW on the same MiniLM embeddings as exact dense search: nDCG@10 within 0.005, and
the recall@k against exact search is measured, logged and kept in the retriever's report.
"""

from __future__ import annotations

import logging
import os
import socket

import numpy as np
import pytest

import adapters_fixtures
from commands import job_in_process
from pipeline.cli import index as index_command
from pipeline.errors import InputError
from pipeline.metrics import evaluate
from retrievers.chroma import ChromaRetriever
from sample_embeddings import copy_sample_embeddings

pytestmark = pytest.mark.slow  # a real server and the real model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def loaded(chroma_server, tmp_path_factory, sample_embeddings):
    """The sample loaded by pipeline.index into the server (as documents) and into a folder
    (as chunks of 48 tokens), through one cache: a copy of the run's shared cache of the
    sample's embeddings (tests/sample_embeddings.py), to which the chunks' are added."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cache = str(copy_sample_embeddings(sample_embeddings, tmp_path_factory.mktemp("chroma-cache")))
    model = adapters_fixtures.minilm(cache)  # the same embeddings as the exact search below
    assert model["dense"].last_cache_hits == {"docs": True, "queries": True}
    folder = tmp_path_factory.mktemp("chroma-folder")
    assert index_command.main(["chroma", "--host", "127.0.0.1", "--port", str(chroma_server), "--collection",
                               "sample", f"cache_dir={cache}"]) == 0
    assert index_command.main(["chroma", "--path", str(folder), "--collection", "sample-chunks", "chunker=tokens",
                               "chunker.size=48", "chunker.overlap=0", f"cache_dir={cache}"]) == 0
    return {"port": chroma_server, "folder": folder, "cache": cache}


def ndcg10(collection, ranking):
    return evaluate(ranking.doc_idx, collection.qrels, k_max=10).at_k["ndcg"][:, 9].mean()


def test_hnsw_on_the_same_embeddings_is_within_0_005_of_exact_search(loaded, caplog):
    model = adapters_fixtures.minilm(loaded["cache"])
    collection = model["collection"]
    exact = model["dense"].search(collection.query_ids, collection.query_texts, 20)
    retriever = ChromaRetriever("sample", host="127.0.0.1", port=loaded["port"], cache_dir=loaded["cache"],
                                show_progress_bar=False)
    retriever.index(collection.doc_ids, collection.doc_texts)
    with caplog.at_level(logging.INFO, "retrievers.chroma"):
        ranking = retriever.search(collection.query_ids, collection.query_texts, 20)
    assert abs(ndcg10(collection, ranking) - ndcg10(collection, exact)) <= 0.005
    recall = retriever.report["chroma_recall_at_k"]
    overlap = np.mean([len(set(a[a >= 0]) & set(b[b >= 0])) / 20 for a, b in zip(ranking.doc_idx, exact.doc_idx)])
    assert recall == pytest.approx(overlap, abs=1e-12)  # 52 queries <= recall_queries: all of them, at k = 20
    assert retriever.report["chroma_recall_queries"] == 52 and retriever.report["chroma_recall_k"] == 20
    assert any(f"recall@20 {recall:.4f}" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(ranking.scores[:, 0], exact.scores[:, 0], atol=1e-5)  # 1 - cosine distance


def test_chunks_in_a_local_folder_fold_into_documents(loaded):
    collection = adapters_fixtures.minilm(loaded["cache"])["collection"]
    for fold in ("maxp", "firstp"):
        retriever = ChromaRetriever("sample-chunks", path=str(loaded["folder"]), cache_dir=loaded["cache"],
                                    doc_id_key="doc_id", fold=fold, show_progress_bar=False)
        retriever.index(collection.doc_ids, collection.doc_texts)
        ranking = retriever.search(collection.query_ids, collection.query_texts, 10)
        assert 0.4 < ndcg10(collection, ranking) < 0.95
        assert retriever.report["external_unknown_ids"] == 0 and retriever.report["external_duplicate_ids"] == 0
        for row in ranking.doc_idx:  # documents, each once
            found = row[row >= 0]
            assert len(set(found.tolist())) == len(found)


def test_a_collection_built_from_another_corpus_is_refused(loaded):
    """Issue 33: no id of the collection is a document of the corpus: one line, not 0.0000."""
    collection = adapters_fixtures.minilm(loaded["cache"])["collection"]
    retriever = ChromaRetriever("sample-chunks", path=str(loaded["folder"]), cache_dir=loaded["cache"],
                                doc_id_key="doc_id", show_progress_bar=False)
    retriever.index([f"other-{i}" for i in range(collection.n_docs)], collection.doc_texts)
    with pytest.raises(InputError, match=r"^error: retriever=chroma: none of the \d+ ids it returned for 52 of the 52 "
                                         r"queries is in the corpus \(e.g. 'd\d+'.*\): nothing to score"):
        retriever.search(collection.query_ids, collection.query_texts, 10)


def test_a_server_that_is_down_or_a_missing_collection_is_one_line(loaded, capsys):
    retriever = ChromaRetriever("sample", host="127.0.0.1", port=free_port(), cache_dir=loaded["cache"])
    retriever.index(["d"], ["t"])
    with pytest.raises(InputError, match=r"the Chroma server at 127.0.0.1:\d+ does not answer"):
        retriever.search(["q"], ["x"], 3)
    retriever = ChromaRetriever("nope", host="127.0.0.1", port=loaded["port"], cache_dir=loaded["cache"])
    retriever.index(["d"], ["t"])
    with pytest.raises(InputError, match=r"has no collection 'nope' \(it has: sample\)"):
        retriever.search(["q"], ["x"], 3)
    with pytest.raises(InputError, match="no Chroma database folder"):
        ChromaRetriever("sample", path=str(loaded["folder"] / "absent")).prepare(3)
    assert index_command.main(["chroma", "--host", "127.0.0.1", "--port", str(free_port()), "--collection",
                               "x-y-z"]) == 2
    assert index_command.main(["chroma", "--host", "127.0.0.1", "--port", str(loaded["port"]), "--collection",
                               "sample", f"cache_dir={loaded['cache']}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2].startswith("error: the Chroma server at 127.0.0.1:") and "does not answer" in err[-2]
    assert err[-1] == "error: Chroma collection 'sample' exists; pass --replace to load it again"


def test_another_encoder_than_the_collections_is_refused(loaded):
    retriever = ChromaRetriever("sample", host="127.0.0.1", port=loaded["port"], normalize=False,
                                cache_dir=loaded["cache"])
    retriever.index(["d"], ["t"])
    with pytest.raises(InputError, match="was embedded with .* not with this retriever's encoder"):
        retriever.search(["q"], ["x"], 3)


def test_a_job_on_chroma_logs_the_recall_against_exact_search_as_a_metric(loaded, tmp_path):
    import json

    # pipeline.run_job in this process (tests/commands.py), without the figures: not what is checked
    job = job_in_process("retriever=chroma", "retriever.host=127.0.0.1", f"retriever.port={loaded['port']}",
                         "retriever.collection=sample", "retriever.show_progress_bar=false",
                         f"cache_dir={loaded['cache']}", "tracking=none", f"hydra.run.dir={tmp_path / 'job'}")
    metrics = json.loads((tmp_path / "job" / "results" / "record.json").read_text())["metrics"]
    assert 0.9 <= metrics["chroma_recall_at_k"] <= 1.0  # HNSW on 171 documents: (nearly) exact
    assert metrics["chroma_recall_queries"] == 52 and metrics["chroma_recall_k"] == 20  # depth: k_max = 20
    assert job.record["metrics"]["chroma_recall_at_k"] == metrics["chroma_recall_at_k"]

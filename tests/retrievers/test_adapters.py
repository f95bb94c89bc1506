"""The user's own retriever: retriever=python, langchain, llamaindex (retrievers/external.py).

"The same ranking through every door": on the bundled sample with the bundled MiniLM, exact
dense search and the same embeddings behind a plain function, a LangChain InMemoryVectorStore
and a LlamaIndex VectorStoreIndex give the same ranking, hence the same nDCG@10 (1e-9). Then
every bad input, on a four-document corpus and scripted results (adapters_fixtures.scripted).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adapters_fixtures
from commands import run_job_command
from pipeline.errors import InputError
from pipeline.metrics import evaluate
from retrievers.langchain import LangChainRetriever
from retrievers.llamaindex import LlamaIndexRetriever
from retrievers.python_function import PythonRetriever
from sample_embeddings import copy_sample_embeddings

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DOCS = ["d1", "d2", "d3", "d4"]


@pytest.fixture(scope="session")
def minilm_cache(tmp_path_factory, sample_embeddings):
    """The sample's embeddings for every wrapper: a copy of the run's shared cache
    (tests/sample_embeddings.py, encoded once by DenseRetriever in-process)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cache = str(copy_sample_embeddings(sample_embeddings, tmp_path_factory.mktemp("adapters-cache")))
    adapters_fixtures.minilm(cache)
    return cache


@pytest.fixture(scope="session")
def exact(minilm_cache):
    model = adapters_fixtures.minilm(minilm_cache)
    assert model["dense"].last_cache_hits == {"docs": True, "queries": True}  # read, not encoded again
    collection = model["collection"]
    ranking = model["dense"].search(collection.query_ids, collection.query_texts, 20)
    return collection, ranking


def ndcg10(collection, ranking):
    return evaluate(ranking.doc_idx, collection.qrels, k_max=10).at_k["ndcg"][:, 9].mean()


def run(retriever, collection, depth=20):
    retriever.index(collection.doc_ids, collection.doc_texts)
    return retriever.search(collection.query_ids, collection.query_texts, depth)


@pytest.mark.slow
@pytest.mark.parametrize("door", ["python", "python-batched", "langchain", "llamaindex"])
def test_the_same_ranking_through_every_door(door, exact, minilm_cache):
    collection, truth = exact
    options = {"cache_dir": minilm_cache}
    retriever = {
        "python": lambda: PythonRetriever("adapters_fixtures:minilm_search", options=options, concurrency=4),
        "python-batched": lambda: PythonRetriever("adapters_fixtures:minilm_search_batch", batched=True,
                                                  batch_size=7, options=options),
        "langchain": lambda: LangChainRetriever("adapters_fixtures:langchain_minilm", options=options),
        "llamaindex": lambda: LlamaIndexRetriever("adapters_fixtures:llamaindex_minilm", options=options),
    }[door]()
    ranking = run(retriever, collection)
    assert 0.5 < ndcg10(collection, truth) < 0.95  # a ranking that can be wrong in either direction
    np.testing.assert_array_equal(ranking.doc_idx, truth.doc_idx)
    assert abs(ndcg10(collection, ranking) - ndcg10(collection, truth)) <= 1e-9
    if door.startswith("python"):  # the function's own scores; LangChain's come from the rank order
        np.testing.assert_allclose(ranking.scores, truth.scores, rtol=0, atol=1e-6)
    assert retriever.report["external_failed_queries"] == 0 and retriever.report["external_unknown_ids"] == 0


# --------------------------------------------------------------------------- bad input, tiny corpus


def scripted(queries, depth=3, **settings):
    batched = settings.pop("batched", False)
    target = "adapters_fixtures:scripted_batch" if batched else "adapters_fixtures:scripted"
    retriever = PythonRetriever(target, batched=batched, show_progress_bar=False, **settings)
    retriever.index(DOCS, ["one", "two", "three", "four"])
    return retriever, retriever.search([f"q{i}" for i in range(len(queries))], queries, depth)


def rows(ranking):
    return [[DOCS[d] for d in row if d >= 0] for row in ranking.doc_idx]


def test_a_good_query_keeps_its_order_and_scores():
    _, ranking = scripted(["good"])
    assert rows(ranking) == [["d2", "d1", "d3"]]
    np.testing.assert_allclose(ranking.scores[0], [0.9, 0.5, 0.1], rtol=1e-6)


def test_ids_absent_from_the_corpus_are_dropped_counted_and_warned(caplog):
    with caplog.at_level(logging.WARNING, "retrievers.external"):
        retriever, ranking = scripted(["unknown", "good"])
    assert rows(ranking) == [["d2", "d1"], ["d2", "d1", "d3"]]
    assert retriever.report["external_unknown_ids"] == 1
    assert retriever.report["external_queries_with_unknown_ids"] == 1
    lines = [r.getMessage() for r in caplog.records if "not in the corpus" in r.getMessage()]
    assert len(lines) == 1 and "'ghost'" in lines[0] and "move up a rank" in lines[0]


def test_unknown_ids_with_on_unknown_fail_name_the_query():
    with pytest.raises(InputError, match=r"query 'q1'.*1 ids that are not in the corpus \(e.g. 'ghost'\)"):
        scripted(["good", "unknown"], on_unknown="fail")


def test_duplicates_keep_the_best_rank_and_are_warned(caplog):
    with caplog.at_level(logging.WARNING, "retrievers.external"):
        retriever, ranking = scripted(["duplicate"], depth=4)
    assert rows(ranking) == [["d3", "d1", "d2"]]
    np.testing.assert_allclose(ranking.scores[0, :3], [0.9, 0.8, 0.1], rtol=1e-6)
    assert retriever.report["external_duplicate_ids"] == 1
    assert sum("duplicate ids" in r.getMessage() for r in caplog.records) == 1


def test_fewer_than_k_results_and_none_are_fine():
    retriever, ranking = scripted(["short", "empty"], depth=3)
    assert rows(ranking) == [["d4"], []]
    assert ranking.doc_idx[0].tolist() == [3, -1, -1] and np.isneginf(ranking.scores[1]).all()
    assert retriever.report["external_queries_short"] == 2


def test_none_scores_rank_in_the_returned_order():
    retriever, ranking = scripted(["none"])
    assert rows(ranking) == [["d3", "d1", "d4"]]
    np.testing.assert_allclose(ranking.scores[0], [1, 1 / 2, 1 / 3], rtol=1e-6)
    assert retriever.report["external_queries_with_none_scores"] == 1


def test_results_out_of_score_order_are_ranked_by_score_and_warned(caplog):
    with caplog.at_level(logging.WARNING, "retrievers.external"):
        retriever, ranking = scripted(["distances"])
    assert rows(ranking) == [["d3", "d2", "d1"]]
    assert retriever.report["external_queries_reordered_by_score"] == 1
    assert any("not in descending score order" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("text, problem", [
    ("mixed", r"result 2 \('d1'\) has no score while others have one"),
    ("nan", r"result 1's score is nan, not a finite number"),
    ("not a pair", r"result 1 is 'd1', expected \(doc_id, score\)"),
    ("raise", r"ConnectionError: the index is down"),
])
def test_a_failing_query_stops_the_run_naming_it(text, problem):
    with pytest.raises(InputError) as err:
        scripted(["good", text])
    assert "query 'q1'" in str(err.value) and "on_error=skip" in str(err.value)
    assert len(str(err.value).splitlines()) == 1
    import re

    assert re.search(problem, str(err.value))


def test_on_error_skip_scores_the_query_as_empty_counts_and_names_it(caplog):
    with caplog.at_level(logging.WARNING, "retrievers.external"):
        retriever, ranking = scripted(["good", "raise", "mixed", "good"], on_error="skip", concurrency=3)
    assert rows(ranking) == [["d2", "d1", "d3"], [], [], ["d2", "d1", "d3"]]
    assert retriever.report["external_failed_queries"] == 2
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed, scored as empty" in m for m in messages) == 2  # one line per failure
    summary = [m for m in messages if "2 of 4 queries failed" in m]
    assert len(summary) == 1 and "'q1', 'q2'" in summary[0] and "included in the means" in summary[0]
    assert retriever.cache_key() is None  # a ranking with skipped queries is never cached


def test_batched_functions_and_their_failures():
    _, ranking = scripted(["good", "short", "none"], batched=True, batch_size=2)
    assert rows(ranking) == [["d2", "d1", "d3"], ["d4"], ["d3", "d1", "d4"]]
    with pytest.raises(InputError, match=r"the batch of queries 'q0'..'q1' \(2 queries\) failed"):
        scripted(["good", "raise", "good"], batched=True, batch_size=2)
    retriever = PythonRetriever("adapters_fixtures:wrong_length_batch", batched=True, show_progress_bar=False)
    retriever.index(DOCS, DOCS)
    with pytest.raises(InputError, match="a batch of 2 queries gave 1 result lists"):
        retriever.search(["a", "b"], ["x", "y"], 3)


def test_integer_ids_are_read_as_strings():
    retriever = PythonRetriever("adapters_fixtures:scripted", show_progress_bar=False)
    retriever.index(["7", "8"], ["a", "b"])
    assert retriever.search(["q"], ["int ids"], 2).doc_idx.tolist() == [[0, -1]]


@pytest.mark.parametrize("fold, expected", [
    ("maxp", [("d1", 0.9), ("d2", 0.8), ("d3", 0.6)]),
    ("sump", [("d1", 1.6), ("d2", 1.3), ("d3", 0.6)]),
    ("firstp", [("d2", 0.8), ("d1", 0.7)]),
])
def test_chunks_fold_into_documents(fold, expected):
    retriever, ranking = scripted(["chunks"], depth=4, doc_id_key="doc", fold=fold)
    assert rows(ranking)[0] == [d for d, _ in expected]
    np.testing.assert_allclose(ranking.scores[0, : len(expected)], [s for _, s in expected], rtol=1e-6)
    assert retriever.k_for(4) == 16  # chunks are asked deeper than the documents


def test_a_chunk_without_its_document_key_is_a_bad_result():
    with pytest.raises(InputError, match=r"query 'q0' failed: bad result: result 1 \('d1#0'\) has no metadata 'doc'"):
        scripted(["no doc key"], doc_id_key="doc")


def test_a_factory_that_cannot_be_imported_or_is_wrong():
    for spec, problem in [("no_such_module:make", r"cannot import 'no_such_module': ModuleNotFoundError"),
                          ("adapters_fixtures:nothing_here", r"module 'adapters_fixtures' has no 'nothing_here'"),
                          ("adapters_fixtures", r"expected module:function")]:
        retriever = LangChainRetriever(spec)
        retriever.index(DOCS, DOCS)
        with pytest.raises(InputError, match=problem):
            retriever.search(["q"], ["x"], 3)
    retriever = LlamaIndexRetriever("adapters_fixtures:not_a_retriever")
    retriever.index(DOCS, DOCS)
    with pytest.raises(InputError, match="returned a str, not a llama_index BaseRetriever"):
        retriever.search(["q"], ["x"], 3)


def test_rankings_are_cached_only_under_a_version(caplog):
    plain = PythonRetriever("adapters_fixtures:scripted")
    with caplog.at_level(logging.WARNING, "retrievers.external"):
        assert plain.cache_key() is None and plain.cache_key() is None
    assert sum("not cached: no retriever.version" in r.getMessage() for r in caplog.records) == 1
    key = PythonRetriever("adapters_fixtures:scripted", version="v1").cache_key()
    assert key is not None and key["version"] == "v1" and key["target"] == "adapters_fixtures:scripted"
    assert key != PythonRetriever("adapters_fixtures:scripted", version="v2").cache_key()


# --------------------------------------------------------------------------- through the command line


def pipeline_job(tmp_path, *overrides):
    """``python -m pipeline tracking=none paths.root=TMP OVERRIDES``, a process: its exit status
    and output as the shell sees them (tests/retrievers on its PYTHONPATH: adapters_fixtures)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "pipeline", "tracking=none", f"paths.root={tmp_path}", *overrides],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def job_here(tmp_path, *overrides):
    """The same job in this process (tests/commands.py ``run_job_command``: its status, the
    one error line and the output ``python -m pipeline`` prints), for what is the job's
    behaviour, not the process's (adapters_fixtures is importable here: this file imports it)."""
    return run_job_command("tracking=none", f"paths.root={tmp_path}", *overrides)


def test_the_command_line_exits_2_with_one_line(tmp_path):
    done = pipeline_job(tmp_path, "retriever=python", "retriever.target=no_such_module:search")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: retriever.target=no_such_module:search: cannot import 'no_such_module': ModuleNotFoundError: "
        "No module named 'no_such_module'")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_job_caches_under_a_version_only(tmp_path):
    """The stages.retrieve rule: no version, no cache (one line says so); with one, a hit; and
    a failing query through the command line: one line naming it, exit 2."""
    bm25 = ["retriever=python", "retriever.target=adapters_fixtures:sample_bm25"]
    plain = job_here(tmp_path, *bm25)
    assert plain.returncode == 0, plain.stderr
    assert "ranking cache miss" in plain.stdout and "not cached: no retriever.version is set" in plain.stdout
    assert "ndcg_at_10               0.5772" in plain.stdout  # README's BM25 number: the same ranking
    first, second = (job_here(tmp_path, *bm25, "retriever.version=v1") for _ in range(2))
    assert "ranking cache miss" in first.stdout and "ranking cache hit" in second.stdout, second.stderr
    failing = job_here(tmp_path, "retriever=python", "retriever.target=adapters_fixtures:scripted")
    assert failing.returncode == 2
    last = failing.stderr.strip().splitlines()[-1]
    assert last.startswith("error: retriever=python: query '") and "KeyError" in last, failing.stderr


@pytest.mark.slow
def test_a_sleeping_retriever_has_its_sleep_as_p50_and_a_cached_rerun_reports_it(tmp_path):
    """Issue 36: latency is measured around each call of the user's code (20 ms of sleep per
    query, one query at a time): p50 within 20% of it, per query; a rerun that reads the cached
    ranking reports the latency stored with it, marked as from the cache, never 0."""
    sleepy = ["retriever=python", "retriever.target=adapters_fixtures:sleepy_bm25", "retriever.concurrency=1",
              "retriever.version=v1"]
    first, second = (job_here(tmp_path, *sleepy, f"hydra.run.dir={tmp_path / name}") for name in ("a", "b"))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    measured, cached = (json.loads((tmp_path / name / "results" / "metrics.json").read_text())["cost"]
                        for name in ("a", "b"))
    assert measured["latency_source"] == "measured" and measured["latency_mode"] == "per_query"
    assert measured["metrics"]["latency_p50_ms"] == pytest.approx(1000 * adapters_fixtures.SLEEP_S, rel=0.2)
    assert measured["timed_queries"] == 52 and measured["warmup"] == 5
    # 52 calls one after another: at most one query per sleep
    assert measured["metrics"]["throughput_qps"] < 1 / adapters_fixtures.SLEEP_S
    low, p95, high = (measured["metrics"][f"latency_p95_ms{tail}"] for tail in ("_ci_low", "", "_ci_high"))
    assert low <= p95 <= high
    assert "ranking cache hit" in second.stdout
    assert cached["latency_source"] == "cache" and cached["metrics"] == measured["metrics"]
    assert "(measured when the cached ranking was computed)" in second.stdout
    record = json.loads((tmp_path / "b" / "results" / "record.json").read_text())
    assert record["tags"]["cost.latency_source"] == "cache"
    assert record["cost"]["metrics"]["latency_p50_ms"] == measured["metrics"]["latency_p50_ms"] > 0
    assert "latency_p50_ms" not in record["metrics"]  # cost is never a quality metric (comparisons, sweeps)

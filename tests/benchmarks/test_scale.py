"""benchmarks/scale.py: the generator is deterministic and realistic, a 10k-document smoke run
reports time and memory for every stage, and HNSW keeps recall@100 >= 0.99 at 10k documents."""

from __future__ import annotations

import importlib.util
import json
import math
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _load_scale():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "benchmarks" / "scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scale = _load_scale()


def test_generator_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = scale.generate(tmp_path / "a", 2000, 100, seed=0)
    b = scale.generate(tmp_path / "b", 2000, 100, seed=0)
    c = scale.generate(tmp_path / "c", 2000, 100, seed=1)
    assert a == b
    assert scale.folder_digest(tmp_path / "a") == scale.folder_digest(tmp_path / "b")
    assert scale.folder_digest(tmp_path / "a") != scale.folder_digest(tmp_path / "c")
    assert (tmp_path / "a" / "corpus.jsonl").read_bytes() != (tmp_path / "c" / "corpus.jsonl").read_bytes()


def test_generated_folder_is_a_realistic_beir_collection(tmp_path):
    from pipeline.io.collection import load_beir

    n_docs, n_queries = 2000, 100
    manifest = scale.generate(tmp_path / "g", n_docs, n_queries, seed=3)
    collection = load_beir(tmp_path / "g")
    assert collection.n_docs == n_docs and collection.n_queries == n_queries
    assert all(v == 0 for v in collection.report.values())  # every judgment names a known doc and query
    lengths = np.array([len(t.split()) for t in collection.doc_texts])
    assert lengths.mean() == pytest.approx(manifest["mean_words"])
    assert 52 <= lengths.mean() <= 60 and lengths.min() >= scale.MIN_WORDS  # MS MARCO passages: ~56 words
    assert manifest["text_bytes"] == sum(len(t.encode()) for t in collection.doc_texts)
    per_query = np.bincount(collection.qrels.query_idx, minlength=n_queries)
    assert per_query.min() >= 1 and per_query.max() <= 4 and per_query.sum() == manifest["n_judgments"]
    assert set(collection.qrels.grade.tolist()) <= {1, 2, 3}
    # Zipf's law with s = 1: the most frequent word takes 1 / H(V) of the unplanted tokens.
    counts = Counter(w for t in collection.doc_texts for w in t.split())
    top_word, top_count = counts.most_common(1)[0]
    harmonic = float(np.sum(1.0 / np.arange(1, scale.VOCAB_SIZE + 1) ** scale.ZIPF_S))
    assert top_word == scale.word(0)
    assert top_count / lengths.sum() == pytest.approx(1 / harmonic, rel=0.05)
    # a judged document holds grade + 1 of its query's content words (capped by the query's)
    q, d, g = (int(collection.qrels.query_idx[0]), int(collection.qrels.doc_idx[0]), int(collection.qrels.grade[0]))
    doc_words = set(collection.doc_texts[d].split())
    assert sum(w in doc_words for w in collection.query_texts[q].split()) >= min(g + 1, 3)


def test_words_are_distinct_and_frequent_ones_short():
    words = [scale.word(r) for r in range(6000)]
    assert len(set(words)) == len(words)
    assert all(len(w) == 2 for w in words[:70]) and all(len(w) == 4 for w in words[70:4970])
    # the generator's vocabulary, built a syllable count at a time, is word(rank) for every rank
    vocab, cdf = scale.vocabulary()
    assert len(vocab) == len(cdf) == scale.VOCAB_SIZE and vocab[:6000] == words
    edges = [69, 70, 4969, 4970, 70 + 70**2 + 70**3 - 1, 70 + 70**2 + 70**3, scale.VOCAB_SIZE - 1]
    ranks = edges + np.random.default_rng(0).integers(6000, scale.VOCAB_SIZE, 3000).tolist()
    assert [vocab[r] for r in ranks] == [scale.word(r) for r in ranks]


def test_a_store_template_that_is_not_there_is_an_error(tmp_path, capsys):
    argv = ["--sizes", "400", "--queries", "100", "--out", str(tmp_path / "out")]
    assert scale.main([*argv, "--store-template", str(tmp_path / "missing.db")]) == 2
    assert "error: --store-template: no such file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_recall_and_alpha_helpers():
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    found = np.array([[4, 3, 9, -1], [5, 6, 7, 8]])
    assert scale.recall(found, truth) == pytest.approx((2 / 4 + 1) / 2)
    ns = [10_000, 100_000, 1_000_000]
    assert scale.fit_alpha(ns, [2.0 * n**1.1 for n in ns]) == pytest.approx(1.1)
    assert scale.fit_alpha(ns[:1], [1.0]) is None


def test_dense_defaults_in_code_match_the_config():
    import inspect

    from retrievers.dense import DenseRetriever

    cfg = yaml.safe_load((ROOT / "conf" / "retriever" / "dense.yaml").read_text())
    params = inspect.signature(DenseRetriever).parameters
    for key in ("hnsw_m", "hnsw_ef_construction", "hnsw_ef_search", "hnsw_target_recall", "hnsw_calibration_queries",
                "device"):
        assert params[key].default == cfg[key], key


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, migrated_store):
    """One 10,000-document run of the benchmark (100 queries, the real job included). The text
    worker and the job track into copies of the session's migrated store (``--store-template``):
    a new store's migrations, not a stage, cost each of them seconds of CPU."""
    pytest.importorskip("faiss")
    out = tmp_path_factory.mktemp("scale")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--sizes", "10000", "--queries", "100",
         "--out", str(out), "--encode-rate", "22", "--ef-sweep", "", "--store-template", str(migrated_store)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads((out / "scale.json").read_text()), out, cpu


@pytest.mark.slow
def test_smoke_run_reports_time_and_memory_of_every_stage(smoke):
    report, out, cpu = smoke
    # CPU seconds of the whole run (every subprocess): wall time on a shared machine is this
    # times the load; on the 2 idle cores of CI it is about the same.
    assert cpu < 60, f"the 10k smoke run took {cpu:.1f} CPU seconds"
    (row,) = report["rows"]
    assert row["n_docs"] == 10_000 and row["n_queries"] == 100
    for stage in scale.STAGE_ORDER:
        measured = row["stages"][stage]
        assert measured["time_s"] > 0 and measured["peak_rss_bytes"] > 0, stage
        assert 0 <= measured["growth_bytes"] <= measured["peak_rss_bytes"], stage
    job = row["job"]
    assert job["wall_s"] > 0 and job["peak_rss_bytes"] > 0 and job["peak_tree_rss_bytes"] >= job["peak_rss_bytes"] / 2
    assert {"time_load_s", "time_retrieve_s", "time_score_s", "time_write_s", "time_track_s"} <= set(job["timings"])
    assert job["store"] == "copy of a migrated store (--store-template)"
    # the job and the benchmark's own BM25 stages rank the same way
    assert job["ndcg_at_10"] == pytest.approx(row["bm25"]["ndcg_at_10"], abs=1e-9)
    assert 0.3 < row["bm25"]["ndcg_at_10"] <= 1  # planted words make the judged documents findable
    assert row["encode_estimate_s"] == pytest.approx(10_000 / 22)
    assert (out / "scale.png").stat().st_size > 10_000 and "| bm25_index |" in (out / "scale.md").read_text()


@pytest.mark.slow
def test_hnsw_recall_at_100_is_at_least_099_at_10k_documents(smoke):
    report, _, _ = smoke
    hnsw = report["rows"][0]["hnsw"]
    cfg = yaml.safe_load((ROOT / "conf" / "retriever" / "dense.yaml").read_text())
    assert (hnsw["M"], hnsw["ef_construction"], hnsw["ef_search"]) == (
        cfg["hnsw_m"], cfg["hnsw_ef_construction"], cfg["hnsw_ef_search"])
    assert hnsw["recall_at_100"] >= 0.99
    assert hnsw["target_recall"] == cfg["hnsw_target_recall"] == 0.99
    assert hnsw["calibration"]["recall"] >= 0.99 and hnsw["calibration"]["ef_search"] >= cfg["hnsw_ef_search"]
    assert not math.isnan(hnsw["recall_at_100"]) and hnsw["recall_at_100"] <= 1

"""Dense retrieval: exact search against numpy brute force, faiss against exact, the cache,
and one check with the real (bundled, offline) MiniLM model."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import retrievers.dense.retriever as dense_retriever
from retrievers.dense import DenseRetriever, exact_search

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class HashEncoder:
    """Deterministic bag-of-words: each word adds +-1 to a hashed dimension."""

    def __init__(self, dim: int = 64):
        self.dim = dim
        self.calls: list[list[str]] = []

    def cache_key(self) -> str:
        return f"hash-bow-{self.dim}"

    def encode(self, sentences, batch_size=32, **kwargs):
        self.calls.append(list(sentences))
        out = np.zeros((len(sentences), self.dim), np.float32)
        for i, text in enumerate(sentences):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.md5(word.encode()).digest()[:8], "little")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        return out


class GaussianEncoder(HashEncoder):
    """Each word is a fixed random Gaussian vector: continuous scores, ties only between duplicates."""

    def cache_key(self) -> str:
        return f"gauss-bow-{self.dim}"

    def encode(self, sentences, batch_size=32, **kwargs):
        self.calls.append(list(sentences))
        out = np.zeros((len(sentences), self.dim), np.float32)
        for i, text in enumerate(sentences):
            for word in text.lower().split():
                seed = int.from_bytes(hashlib.md5(word.encode()).digest()[:8], "little")
                out[i] += np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return out


def make_texts(n: int, seed: int, vocab: int = 300) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(f"w{j}" for j in rng.integers(0, vocab, size=int(rng.integers(3, 30)))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    docs = make_texts(250, seed=1)
    docs[11] = docs[10]  # exact duplicates tie: the lower index must come first
    docs[200] = docs[10]
    return docs


@pytest.fixture(scope="module")
def queries() -> list[str]:
    return make_texts(40, seed=2) + ["w1 w2 w3"]


def ids(n: int, prefix: str = "d") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def brute_force(q: np.ndarray, d: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    scores = q.astype(np.float64) @ d.astype(np.float64).T
    order = np.lexsort((np.broadcast_to(np.arange(d.shape[0]), scores.shape), -scores), axis=1)[:, :depth]
    return order, np.take_along_axis(scores, order, axis=1)


@pytest.mark.parametrize("depth", [1, 7, 100, 300])
def test_exact_search_equals_brute_force_with_ties(corpus, queries, depth, monkeypatch):
    monkeypatch.setattr(dense_retriever, "MAX_DENSE_CELLS", 250 * 6)  # force several query chunks
    r = DenseRetriever(encoder=HashEncoder(), normalize=False)  # integer scores: exact ties
    r.index(ids(len(corpus)), corpus)
    got = r.search(ids(len(queries), "q"), queries, depth)
    want_idx, want_scores = brute_force(r.encode(queries), r.doc_embeddings, min(depth, len(corpus)))
    n = min(depth, len(corpus))
    np.testing.assert_array_equal(got.doc_idx[:, :n], want_idx)
    np.testing.assert_array_equal(got.scores[:, :n], want_scores.astype(np.float32))
    assert (got.doc_idx[:, n:] == -1).all() and np.isneginf(got.scores[:, n:]).all()
    # ties are frequent with integer scores, also across the cut-off: else the test is vacuous
    _, full = brute_force(r.encode(queries), r.doc_embeddings, len(corpus))
    if n < len(corpus):
        assert (full[:, n - 1] == full[:, n]).sum() >= 3
    if n > 1:
        assert (np.diff(got.scores[:, :n], axis=1) == 0).sum() > 10


def test_normalized_scores_are_cosines(corpus, queries):
    enc = HashEncoder()
    r = DenseRetriever(encoder=enc, normalize=True)
    r.index(ids(len(corpus)), corpus)
    got = r.search(ids(len(queries), "q"), queries, 10)
    raw_q = HashEncoder().encode(queries)
    raw_d = HashEncoder().encode(corpus)
    cos = (raw_q @ raw_d.T) / np.outer(np.linalg.norm(raw_q, axis=1), np.linalg.norm(raw_d, axis=1))
    _, want_scores = brute_force(
        raw_q / np.linalg.norm(raw_q, axis=1, keepdims=True), raw_d / np.linalg.norm(raw_d, axis=1, keepdims=True), 10
    )
    np.testing.assert_allclose(got.scores, np.take_along_axis(cos, got.doc_idx, axis=1), atol=1e-6)
    np.testing.assert_allclose(got.scores, want_scores, atol=1e-6)
    assert got.scores.max() <= 1 + 1e-6 and got.scores.max() > 0.3
    # the duplicates 10, 11, 200 appear in that order wherever they appear
    for row in got.doc_idx:
        seen = [d for d in row if d in (10, 11, 200)]
        assert seen == sorted(seen)


def test_faiss_flat_equals_exact(corpus, queries):
    pytest.importorskip("faiss")
    exact = DenseRetriever(encoder=GaussianEncoder())
    exact.index(ids(len(corpus)), corpus)
    flat = DenseRetriever(encoder=GaussianEncoder(), index="flat")
    flat.index(ids(len(corpus)), corpus)
    for depth in (5, 50, 400):
        a = exact.search(ids(len(queries), "q"), queries, depth)
        b = flat.search(ids(len(queries), "q"), queries, depth)
        np.testing.assert_array_equal(a.doc_idx, b.doc_idx)
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)
    assert b.doc_idx.shape == (len(queries), 400) and (b.doc_idx[:, 250:] == -1).all()
    q_dup = [corpus[10]]  # documents 10, 11, 200 tie at the top: index order
    assert flat.search(["q"], q_dup, 3).doc_idx[0].tolist() == [10, 11, 200]


def test_faiss_hnsw_finds_nearly_all_exact_neighbours(corpus, queries):
    pytest.importorskip("faiss")
    exact = DenseRetriever(encoder=GaussianEncoder())
    exact.index(ids(len(corpus)), corpus)
    hnsw = DenseRetriever(encoder=GaussianEncoder(), index="hnsw", hnsw_m=16, hnsw_ef_search=64)
    hnsw.index(ids(len(corpus)), corpus)
    a = exact.search(ids(len(queries), "q"), queries, 10)
    b = hnsw.search(ids(len(queries), "q"), queries, 10)
    recall = np.mean([len(set(x) & set(y)) / 10 for x, y in zip(a.doc_idx, b.doc_idx)])
    assert recall >= 0.9
    assert not hnsw.prefix_stable and exact.prefix_stable
    assert hnsw.cache_key()["hnsw"] == [16, 200, 64] and "hnsw" not in exact.cache_key()


def test_prefixes_reach_the_encoder():
    enc = HashEncoder()
    r = DenseRetriever(encoder=enc, query_prefix="query: ", doc_prefix="passage: ")
    r.index(["a", "b"], ["alpha beta", "gamma"])
    r.search(["q"], ["alpha"], 2)
    assert enc.calls == [["passage: alpha beta", "passage: gamma"], ["query: alpha"]]


def test_embeddings_are_cached_and_invalidated(tmp_path, corpus, queries):
    enc = HashEncoder()
    first = DenseRetriever(encoder=enc, cache_dir=tmp_path)
    first.index(ids(len(corpus)), corpus)
    r1 = first.search(ids(len(queries), "q"), queries, 10)
    # one call per batch of 64: each distinct document once (248), then each query once
    assert [len(c) for c in enc.calls] == [64, 64, 64, 56, len(queries)]
    assert first.last_cache_hits == {"docs": False, "queries": False}

    enc2 = HashEncoder()
    second = DenseRetriever(encoder=enc2, cache_dir=tmp_path)
    second.index(ids(len(corpus)), corpus)
    r2 = second.search(ids(len(queries), "q"), queries, 10)
    assert enc2.calls == [] and second.last_cache_hits == {"docs": True, "queries": True}
    np.testing.assert_array_equal(r1.doc_idx, r2.doc_idx)
    np.testing.assert_array_equal(r1.scores, r2.scores)

    edited = list(corpus)
    edited[3] = edited[3] + " w7"
    second.index(ids(len(corpus)), edited)  # one document changed: a new corpus entry, but the
    assert enc2.calls == [[edited[3]]]      # per-text cache (test_onnx.py) encodes only that text
    DenseRetriever(encoder=enc2, cache_dir=tmp_path, doc_prefix="p: ").index(ids(len(corpus)), corpus)
    assert sum(map(len, enc2.calls[1:])) == 248  # another prefix: another cache entry, every text encoded
    DenseRetriever(encoder=HashEncoder(dim=32), cache_dir=tmp_path).index(ids(len(corpus)), corpus)
    files = sorted(p.suffix for p in (tmp_path / "arrays").iterdir())
    assert set(files) == {".json", ".npy"} and len(files) == 2 * 5  # 4 doc entries + 1 query entry


def test_cache_key_and_identity(tmp_path):
    r = DenseRetriever(model=str(tmp_path), query_prefix="q: ")
    (tmp_path / "weights.bin").write_bytes(b"1234")
    key = r.cache_key()
    assert key["retriever"] == "dense" and key["query_prefix"] == "q: " and key["normalize"] is True
    assert key["model"]["path"] == str(tmp_path.resolve())
    (tmp_path / "weights.bin").write_bytes(b"12345")  # new weights: a new identity
    assert DenseRetriever(model=str(tmp_path)).cache_key()["model"] != key["model"]
    assert DenseRetriever(model="some/hub-model").cache_key()["model"] == {"name": "some/hub-model"}
    assert DenseRetriever(batch_size=3).cache_key() == DenseRetriever(batch_size=300).cache_key()


def test_bad_settings_and_empty_inputs():
    with pytest.raises(ValueError, match="unknown dense index"):
        DenseRetriever(index="ivf")
    with pytest.raises(RuntimeError, match="index"):
        DenseRetriever(encoder=HashEncoder()).search(["q"], ["x"], 1)
    r = DenseRetriever(encoder=HashEncoder())
    r.index([], [])
    assert r.search(["q"], ["x"], 2).doc_idx.tolist() == [[-1, -1]]
    assert exact_search(np.zeros((0, 4), np.float32), np.ones((3, 4), np.float32), 2).doc_idx.shape == (0, 2)


def test_import_is_cheap():
    code = "import sys, retrievers.dense; print(sorted(m for m in ('torch', 'sentence_transformers', 'faiss') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # loads the real MiniLM (~9 s on 2 cores)
def test_real_model_offline_ranks_paraphrase_source_first(tmp_path):
    pytest.importorskip("sentence_transformers")
    docs = [
        "The cat sat on the mat all afternoon.",
        "Interest rates were raised by the central bank to fight inflation.",
        "The football team won the championship after a penalty shootout.",
        "Photosynthesis converts sunlight, water and carbon dioxide into sugar.",
        "The train to Paris was delayed by two hours because of a strike.",
    ]
    queries = [
        "A feline rested on the rug for the whole afternoon.",
        "The monetary authority increased borrowing costs to curb rising prices.",
        "How do plants turn light into food?",
        "Rail service to the French capital was late due to industrial action.",
    ]
    r = DenseRetriever(cache_dir=tmp_path)  # model=None: the bundled all-MiniLM-L6-v2
    r.index(ids(len(docs)), docs)
    assert r.doc_embeddings.shape == (5, 384)
    np.testing.assert_allclose(np.linalg.norm(r.doc_embeddings, axis=1), 1.0, atol=1e-5)
    ranking = r.search(ids(len(queries), "q"), queries, 5)
    assert ranking.doc_idx[:, 0].tolist() == [0, 1, 3, 4]
    assert (ranking.scores[:, 0] - ranking.scores[:, 1] > 0.1).all()
    assert r.cache_key()["model"]["path"].endswith("model") and len(r.cache_key()["model"]["files"]) == 64


class RandomUnitEncoder:
    """Text "x:i" -> the i-th of a seeded set of random unit vectors (no structure: HNSW's hardest case)."""

    def __init__(self, n: int = 6000, dim: int = 48, seed: int = 7):
        v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
        self.vectors = v / np.linalg.norm(v, axis=1, keepdims=True)

    def cache_key(self) -> str:
        return "random-unit"

    def encode(self, sentences, batch_size=32, **kwargs):
        return self.vectors[[int(s.split(":")[1]) for s in sentences]]


def test_hnsw_raises_ef_search_until_the_target_recall_is_measured():
    pytest.importorskip("faiss")
    from retrievers.dense import recall_against

    enc = RandomUnitEncoder()
    docs, queries = [f"d:{i}" for i in range(5000)], [f"q:{i}" for i in range(5000, 5200)]
    exact = DenseRetriever(encoder=enc)
    exact.index(ids(len(docs)), docs)
    truth = exact.search(ids(len(queries), "q"), queries, 50).doc_idx

    def hnsw(**kwargs):
        r = DenseRetriever(encoder=enc, index="hnsw", hnsw_m=8, hnsw_ef_construction=32, hnsw_ef_search=8, **kwargs)
        r.index(ids(len(docs)), docs)
        return r, r.search(ids(len(queries), "q"), queries, 50).doc_idx

    fixed, found_fixed = hnsw(hnsw_target_recall=None)
    assert fixed.hnsw_calibration is None and fixed.faiss_index.hnsw.efSearch == 50 + 16  # raised to depth + margin
    assert recall_against(found_fixed, truth) < 0.95  # a weak graph at a small efSearch misses neighbours

    tuned, found = hnsw(hnsw_target_recall=0.99, hnsw_calibration_queries=50)
    cal = tuned.hnsw_calibration
    assert cal["queries"] == 50 and cal["depth"] == 50 and cal["recall"] >= 0.99
    assert cal["ef_search"] in (132, 264, 528, 1056, 2112, 4224, 5000) and tuned.faiss_index.hnsw.efSearch == cal["ef_search"]
    rows = np.unique(np.linspace(0, len(queries) - 1, 50).round().astype(int))  # the calibration sample
    assert recall_against(found[rows], truth[rows]) == pytest.approx(cal["recall"])
    assert recall_against(found, truth) >= 0.97  # and it carries over to the other queries
    assert tuned.cache_key()["hnsw_target_recall"] == [0.99, 50] and "hnsw_target_recall" not in fixed.cache_key()


def test_recall_against_counts_the_truth_it_finds():
    from retrievers.dense import recall_against

    found = np.array([[1, 2, 3], [4, -1, -1], [7, 8, 9]])
    truth = np.array([[3, 2, 0], [4, 5, -1], [-1, -1, -1]])
    assert recall_against(found, truth) == pytest.approx((2 / 3 + 1 / 2 + 1) / 3)


def test_hnsw_that_cannot_reach_the_target_says_so(caplog):
    pytest.importorskip("faiss")
    enc = RandomUnitEncoder()
    docs, queries = [f"d:{i}" for i in range(5000)], [f"q:{i}" for i in range(5000, 5100)]
    r = DenseRetriever(encoder=enc, index="hnsw", hnsw_m=4, hnsw_ef_construction=16, hnsw_ef_search=8,
                       hnsw_target_recall=1.0, hnsw_calibration_queries=100)
    r.index(ids(len(docs)), docs)
    with caplog.at_level("INFO", logger="retrievers.dense"):
        r.search(ids(len(queries), "q"), queries, 50)
    cal = r.hnsw_calibration
    # a graph this sparse misses some true neighbours even when efSearch covers the corpus
    assert cal["ef_search"] == 5000 and cal["recall"] < 1.0
    (warning,) = [rec for rec in caplog.records if rec.levelname == "WARNING"]
    assert f"efSearch 5000: recall@50 {cal['recall']:.4f}" in warning.getMessage() and "(target 1)" in warning.getMessage()


# ----------------------------------------------------------------------------- resumable encoding


class StoppingEncoder(GaussianEncoder):
    """GaussianEncoder that raises ``KeyboardInterrupt`` (Ctrl-C) or ``OSError`` (a full disk
    under the model) once it has encoded ``stop_after`` texts."""

    def __init__(self, stop_after: int | None, error: BaseException | None = None):
        super().__init__()
        self.stop_after, self.error = stop_after, error or KeyboardInterrupt()

    def cache_key(self) -> str:
        return "gauss-bow-64"  # the same model as GaussianEncoder: the same cache entries

    def encode(self, sentences, batch_size=32, **kwargs):
        if self.stop_after is not None and sum(map(len, self.calls)) + len(sentences) > self.stop_after:
            raise self.error
        return super().encode(sentences, batch_size, **kwargs)


def shard_files(cache) -> list:
    return sorted((cache / "texts").glob("*/*.json"))


@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError(28, "No space left on device")])
def test_an_interrupted_encoding_keeps_its_shards_and_the_rerun_encodes_only_the_rest(tmp_path, corpus, caplog,
                                                                                      error):
    encode = {"shard_size": 50}
    # 250 texts, 248 distinct: shards of 50; stopped in the 4th shard (after 170 texts)
    stopped = DenseRetriever(encoder=StoppingEncoder(170, error), cache_dir=tmp_path / "a", batch_size=20,
                             encode=encode)
    with caplog.at_level(logging.INFO), pytest.raises(type(error)):
        stopped.index(ids(len(corpus)), corpus)
    assert len(shard_files(tmp_path / "a")) == 3
    said = [r.getMessage() for r in caplog.records if "interrupted" in r.getMessage()]
    assert len(said) == 1 and "after 170 of 248 passages" in said[0] and "150 of them cached in 3 shard(s)" in said[0]

    caplog.clear()
    rerun_enc = StoppingEncoder(None)
    rerun = DenseRetriever(encoder=rerun_enc, cache_dir=tmp_path / "a", batch_size=20, encode=encode)
    with caplog.at_level(logging.INFO):
        rerun.index(ids(len(corpus)), corpus)
    assert sum(map(len, rerun_enc.calls)) == 248 - 150  # only the texts of the unfinished shards
    assert rerun.text_cache_stats["docs"] == {"texts": 250, "from_text_cache": 152, "encoded": 98}
    assert any("152 of 250 docs texts reused from the text cache (3 shards read)" in r.getMessage()
               for r in caplog.records)

    whole = DenseRetriever(encoder=StoppingEncoder(None), cache_dir=tmp_path / "b", batch_size=20, encode=encode)
    whole.index(ids(len(corpus)), corpus)
    np.testing.assert_array_equal(rerun.doc_embeddings, whole.doc_embeddings)  # identical, not merely close
    # the same shards, and the same per-corpus entry (its key and its bytes)
    assert [p.name for p in shard_files(tmp_path / "a")] == [p.name for p in shard_files(tmp_path / "b")]
    entries = [sorted(p.name for p in (tmp_path / c / "arrays").glob("*.npy")) for c in "ab"]
    assert entries[0] == entries[1] and len(entries[0]) == 1
    assert (tmp_path / "a" / "arrays" / entries[0][0]).read_bytes() == (tmp_path / "b" / "arrays" /
                                                                        entries[0][0]).read_bytes()


def test_a_damaged_or_partial_shard_is_discarded_and_its_texts_encoded_again(tmp_path, corpus, caplog):
    encode = {"shard_size": 100}
    DenseRetriever(encoder=GaussianEncoder(), cache_dir=tmp_path, encode=encode).index(ids(len(corpus)), corpus)
    first, second, third = shard_files(tmp_path)  # 100, 100 and 48 texts, in some order (named by content)
    bad = sum(json.loads(p.read_text())["n"] for p in (first, second))
    emb = first.with_name(first.name.replace(".json", ".emb.npy"))
    emb.write_bytes(emb.read_bytes()[:-400])  # cut short, as by a full disk
    second.with_name(second.name.replace(".json", ".hashes.npy")).unlink()  # a shard half written
    for entry in (tmp_path / "arrays").glob("*.json"):
        entry.unlink()  # the per-corpus entry gone: the shards must answer
    enc = GaussianEncoder()
    again = DenseRetriever(encoder=enc, cache_dir=tmp_path, encode=encode)
    with caplog.at_level(logging.WARNING):
        again.index(ids(len(corpus)), corpus)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "is unreadable or damaged" in warned and emb.name in warned
    assert sum(map(len, enc.calls)) == bad  # the two bad shards' texts, encoded again
    fresh = DenseRetriever(encoder=GaussianEncoder(), encode=encode)
    fresh.index(ids(len(corpus)), corpus)
    np.testing.assert_array_equal(again.doc_embeddings, fresh.doc_embeddings)


#: The killed job's collection: a slice of the sample (its first documents, the queries judged
#: on them), so that half of its encoding comes in a second or two, not ten.
SLICE_DOCS, SLICE_QUERIES, SLICE_SHARD = 48, 10, 8


def sample_slice(folder):
    """The sample's first :data:`SLICE_DOCS` documents and :data:`SLICE_QUERIES` queries judged on
    them, as a BEIR folder (``dataset=beir dataset.path=FOLDER``)."""
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "pipeline" / "sample"
    docs = (sample / "corpus.jsonl").read_text().splitlines()[:SLICE_DOCS]
    kept = {json.loads(line)["_id"] for line in docs}
    qrels = [line.split("\t") for line in (sample / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    judged = {q for q, d, _ in qrels if d in kept}
    queries = [line for line in (sample / "queries.jsonl").read_text().splitlines()
               if json.loads(line)["_id"] in judged][:SLICE_QUERIES]
    asked = {json.loads(line)["_id"] for line in queries}
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(docs) + "\n")
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        "\t".join(row) + "\n" for row in qrels if row[0] in asked and row[1] in kept))
    return folder


def _job_overrides(root, data) -> list[str]:
    return ["retriever=dense", "tracking=none", f"paths.root={root}", "dataset=beir", f"dataset.path={data}",
            "retriever.max_seq_length=128", f"+retriever.encode.shard_size={SLICE_SHARD}"]


def killed_job(root, data, wait_for_shards: int) -> None:
    """``python -m pipeline retriever=dense`` on ``data`` with MiniLM, a process, SIGKILLed as
    soon as ``wait_for_shards`` shards of its text cache are written. The process is forked from
    this one (tests/forked.py: ``runpy`` runs ``pipeline/__main__.py`` there as ``-m`` does) with
    torch and sentence-transformers imported before the fork, one numeric thread as
    ``OMP_NUM_THREADS=1`` gave a new interpreter: a new interpreter paid seconds of imports that
    the check (what a real SIGKILL leaves on disk) does not need."""
    import signal
    import time

    import sentence_transformers  # noqa: F401 - imported once, before the fork
    import torch
    from forked import pipeline_child

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = pipeline_child(*_job_overrides(root, data), env=env, cwd=repo, prepare=lambda: torch.set_num_threads(1))
    try:
        deadline = time.monotonic() + 300
        while len(shard_files(root / "cache")) < wait_for_shards and proc.poll() is None:
            assert time.monotonic() < deadline, "no shard written in 5 minutes"
            time.sleep(0.02)
        assert proc.poll() is None, "the job ended before it could be killed: the test tests nothing"
        proc.send_signal(signal.SIGKILL)
        done = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    assert done.status == -signal.SIGKILL, done.stderr[-3000:]


def job_here(root, data) -> str:
    """The same job in this process (tests/commands.py), with one numeric thread as the killed
    process had (``OMP_NUM_THREADS=1``): what it printed and logged."""
    import torch
    from commands import run_job_command

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        done = run_job_command(*_job_overrides(root, data))
    finally:
        torch.set_num_threads(threads)
    assert done.status == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.slow
def test_a_job_killed_mid_encoding_resumes_from_its_shards_with_identical_embeddings_and_ndcg(tmp_path):
    # SIGKILL (a real signal to a real `python -m pipeline` process) half way through encoding a
    # slice of the sample (48 documents, shards of 8): the rerun reuses every complete shard the
    # killed process wrote, encodes only the rest, and ends exactly where a job that was never
    # killed ends: the same per-corpus cache entries (key and bytes) and nDCG. The rerun and the
    # reference read and write the cache as any job does: they run in this process.
    data = sample_slice(tmp_path / "slice")
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    killed_job(killed, data, wait_for_shards=SLICE_DOCS // SLICE_SHARD // 2)
    kept = sum(json.loads(p.read_text())["n"] for p in shard_files(killed / "cache"))
    assert SLICE_DOCS // 2 <= kept < SLICE_DOCS and not list((killed / "cache").glob("arrays/*.json"))
    said = job_here(killed, data)  # (the job's log lines go to stdout)
    assert f"{kept} of {SLICE_DOCS} docs texts reused from the text cache" in said, said[-3000:]
    assert f"encoding the other {SLICE_DOCS - kept}" in said
    reference = job_here(whole, data)
    ndcg = [line for line in said.splitlines() if line.strip().startswith("ndcg_at_10")]
    assert ndcg and ndcg == [line for line in reference.splitlines() if line.strip().startswith("ndcg_at_10")]
    entries = {c: sorted(p.name for p in (c / "cache" / "arrays").glob("*.npy")) for c in (killed, whole)}
    assert entries[killed] == entries[whole] and len(entries[killed]) == 2  # documents, queries
    for name in entries[killed]:
        np.testing.assert_array_equal(np.load(killed / "cache" / "arrays" / name),
                                      np.load(whole / "cache" / "arrays" / name))


def test_a_disk_that_fills_up_mid_encoding_keeps_the_shards_written_before(tmp_path, corpus, monkeypatch, caplog):
    # The 3rd shard cannot be written (ENOSPC): one warning, the encoding goes on uncached and
    # returns every embedding; the rerun reuses the 2 shards written and encodes the rest.
    import errno

    import pipeline.io.cache.entries as store  # (where the text cache calls save_array)

    real, writes = store.save_array, []

    def filling(path, array):
        writes.append(path)
        if len(writes) > 4:  # two arrays a shard: the disk is full from the 3rd shard on
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, array)

    monkeypatch.setattr(store, "save_array", filling)
    encode = {"shard_size": 50}
    with caplog.at_level(logging.WARNING):
        full = DenseRetriever(encoder=GaussianEncoder(), cache_dir=tmp_path, encode=encode)
        full.index(ids(len(corpus)), corpus)
    assert any("not writable" in r.getMessage() and "No space left" in r.getMessage() for r in caplog.records)
    assert len(shard_files(tmp_path)) == 2
    monkeypatch.setattr(store, "save_array", real)
    enc = GaussianEncoder()
    rerun = DenseRetriever(encoder=enc, cache_dir=tmp_path, encode=encode)
    rerun.index(ids(len(corpus)), corpus)
    assert sum(map(len, enc.calls)) == 248 - 100
    np.testing.assert_array_equal(rerun.doc_embeddings, full.doc_embeddings)

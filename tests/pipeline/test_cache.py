"""On-disk caches: digests, atomic .npy/.json entries, rankings reused across runs and
invalidated by any change to the corpus or the retriever's settings."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.io.cache import (
    digest,
    load_or_compute_array,
    load_or_compute_ranking_arrays,
    save_array,
    texts_digest,
)
from pipeline.io.collection import load_beir
from pipeline.io.cache import load_or_compute_ranking
from pipeline.ranking import Ranking
from retrievers.bm25 import BM25Retriever
from retrievers.dense import DenseRetriever

DOCS = {
    "d1": ("Wings", "lift and drag of a swept wing at supersonic speed"),
    "d2": ("Plates", "heat transfer on a flat plate in laminar flow"),
    "d3": ("Cones", "pressure on a cone in hypersonic flow"),
    "d4": ("Shocks", "shock wave and boundary layer interaction"),
    "d5": ("Bodies", "drag of a blunt body at hypersonic speed"),
}
QUERIES = {"q1": "drag at hypersonic speed", "q2": "laminar heat transfer", "q3": "boundary layer shock"}


def write_beir(folder: Path, docs: dict[str, tuple[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as fh:
        for did, (title, text) in docs.items():
            fh.write(json.dumps({"_id": did, "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as fh:
        for qid, text in QUERIES.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td5\t1\nq2\td2\t1\nq3\td4\t2\n")
    return folder


class Counting:
    """Wraps a retriever and counts the calls that do work."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = {"index": 0, "search": 0}

    def cache_key(self) -> dict:
        return self.inner.cache_key()

    @property
    def prefix_stable(self) -> bool:
        return self.inner.prefix_stable

    def index(self, doc_ids, doc_texts) -> None:
        self.calls["index"] += 1
        self.inner.index(doc_ids, doc_texts)

    def search(self, query_ids, query_texts, depth) -> Ranking:
        self.calls["search"] += 1
        return self.inner.search(query_ids, query_texts, depth)


class CountingEncoder:
    """Deterministic hashed bag of words that counts the texts it encodes."""

    def __init__(self):
        self.n_texts = 0

    def cache_key(self) -> str:
        return "counting-bow-16"

    def encode(self, sentences, batch_size=32, **kwargs):
        self.n_texts += len(sentences)
        out = np.zeros((len(sentences), 16), np.float32)
        for i, text in enumerate(sentences):
            for word in text.lower().split():
                out[i, int(hashlib.sha1(word.encode()).hexdigest(), 16) % 16] += 1.0
        return out


def retrieve(collection, retriever, depth: int, cache_dir: Path) -> tuple[Ranking, bool]:
    """What the app does: one cache key per (collection, retriever settings, depth)."""
    key = {"collection": collection.digest, "retriever": retriever.cache_key(), "depth": depth}

    def compute() -> Ranking:
        retriever.index(collection.doc_ids, collection.doc_texts)
        return retriever.search(collection.query_ids, collection.query_texts, depth)

    return load_or_compute_ranking(cache_dir, key, compute, reuse_deeper=retriever.prefix_stable)


# --------------------------------------------------------------------------- digests


def test_digest_is_canonical():
    from omegaconf import OmegaConf

    a = digest({"b": [1, 2.5, None], "a": {"y": True, "x": "s"}})
    assert a == digest({"a": {"x": "s", "y": True}, "b": (1, 2.5, None)})
    assert a == digest(OmegaConf.create({"a": {"x": "s", "y": True}, "b": [1, 2.5, None]}))
    assert a == digest({"b": [np.int64(1), np.float32(2.5), None], "a": {"y": np.bool_(True), "x": "s"}})
    assert digest({"k1": 1}) != digest({"k1": 1.0})
    assert digest({"p": Path("/x")}) == digest({"p": "/x"})
    assert digest(float("inf")) != digest(float("-inf"))
    assert len(a) == 64 and a == hashlib.sha256(
        b'{"a":{"x":"s","y":true},"b":[1,2.5,null]}'
    ).hexdigest()
    with pytest.raises(TypeError):
        digest({"f": object()})
    with pytest.raises(TypeError):
        digest({1: "non-string key"})


def test_texts_digest_sees_every_change():
    base = texts_digest(["a", "b"], ["x y", "z"])
    assert base == texts_digest(["a", "b"], ["x y", "z"])
    assert base != texts_digest(["a", "b"], ["x y", "z "])
    assert base != texts_digest(["b", "a"], ["z", "x y"])  # order
    assert base != texts_digest(["a", "b"], ["x", "y z"])  # no ambiguity at boundaries
    assert base != texts_digest(["a", "c"], ["x y", "z"])


# --------------------------------------------------------------------------- arrays


def test_array_cache_hit_miss_and_safe_files(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return np.arange(6, dtype=np.float32).reshape(2, 3)

    key = {"kind": "test", "n": 3}
    a, hit = load_or_compute_array(tmp_path, key, compute)
    b, hit2 = load_or_compute_array(tmp_path, dict(reversed(list(key.items()))), compute)
    assert (hit, hit2, len(calls)) == (False, True, 1)
    np.testing.assert_array_equal(a, b)
    assert b.dtype == np.float32
    _, hit3 = load_or_compute_array(tmp_path, {"kind": "test", "n": 4}, compute)
    assert not hit3 and len(calls) == 2
    files = sorted(p.name for p in (tmp_path / "arrays").iterdir())
    assert len(files) == 4 and {Path(f).suffix for f in files} == {".npy", ".json"}  # no temp files left
    for f in (tmp_path / "arrays").glob("*.npy"):
        np.load(f, allow_pickle=False)  # loads without pickle
    meta = json.loads(next((tmp_path / "arrays").glob("*.json")).read_text())
    assert meta["key"]["kind"] == "test" and meta["dtype"] == "float32"
    _, hit4 = load_or_compute_array(None, key, compute)  # no cache dir: always computes
    assert not hit4 and len(calls) == 3


def test_damaged_entry_is_recomputed(tmp_path, caplog):
    key = {"kind": "test"}
    load_or_compute_array(tmp_path, key, lambda: np.ones(3))
    npy = next((tmp_path / "arrays").glob("*.npy"))
    npy.write_bytes(b"not an npy file")
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        arr, hit = load_or_compute_array(tmp_path, key, lambda: np.full(3, 2.0))
    assert not hit and arr.tolist() == [2.0, 2.0, 2.0]
    assert "unreadable" in caplog.text
    assert load_or_compute_array(tmp_path, key, lambda: np.zeros(1))[0].tolist() == [2.0, 2.0, 2.0]


def test_failed_compute_writes_nothing_and_objects_are_refused(tmp_path):
    def boom():
        raise RuntimeError("encoder crashed")

    with pytest.raises(RuntimeError):
        load_or_compute_array(tmp_path, {"k": 1}, boom)
    assert not (tmp_path / "arrays").exists() or not any((tmp_path / "arrays").iterdir())
    with pytest.raises(TypeError, match="pickle"):
        save_array(tmp_path / "x.npy", np.array(["a", None], dtype=object))
    assert not (tmp_path / "x.npy").exists()


# --------------------------------------------------------------------------- rankings


def test_second_run_reads_the_cache_and_an_edited_document_recomputes(tmp_path):
    cache = tmp_path / "cache"
    collection = load_beir(write_beir(tmp_path / "data", DOCS))
    first_bm25 = Counting(BM25Retriever())
    r1, hit1 = retrieve(collection, first_bm25, 4, cache)
    assert not hit1 and first_bm25.calls == {"index": 1, "search": 1}
    assert r1.doc_idx[0, 0] == collection.doc_ids.index("d5")

    again = Counting(BM25Retriever())  # a new process would build a new retriever
    r2, hit2 = retrieve(load_beir(tmp_path / "data"), again, 4, cache)
    assert hit2 and again.calls == {"index": 0, "search": 0}
    np.testing.assert_array_equal(r1.doc_idx, r2.doc_idx)
    np.testing.assert_array_equal(r1.scores, r2.scores)

    other_k1 = Counting(BM25Retriever(k1=0.9))  # another setting: another entry
    assert not retrieve(collection, other_k1, 4, cache)[1] and other_k1.calls["search"] == 1

    edited = dict(DOCS, d3=("Cones", "pressure on a cone in hypersonic flow at high drag"))
    changed = load_beir(write_beir(tmp_path / "data2", edited))
    assert changed.digest != collection.digest
    third = Counting(BM25Retriever())
    r3, hit3 = retrieve(changed, third, 4, cache)
    assert not hit3 and third.calls == {"index": 1, "search": 1}
    assert not np.array_equal(r1.scores, r3.scores)

    files = [p for p in (cache / "rankings").iterdir()]
    assert {p.name.split(".", 1)[1] for p in files} == {"json", "doc_idx.npy", "scores.npy"}
    assert len(files) == 3 * 3


def test_dense_second_run_encodes_nothing(tmp_path):
    cache = tmp_path / "cache"
    collection = load_beir(write_beir(tmp_path / "data", DOCS))
    enc = CountingEncoder()
    _, hit = retrieve(collection, Counting(DenseRetriever(encoder=enc, cache_dir=cache)), 3, cache)
    assert not hit and enc.n_texts == len(DOCS) + len(QUERIES)

    enc2 = CountingEncoder()
    again = Counting(DenseRetriever(encoder=enc2, cache_dir=cache))
    assert retrieve(collection, again, 3, cache)[1]
    assert enc2.n_texts == 0 and again.calls == {"index": 0, "search": 0}

    # another depth misses the ranking cache, but not the embedding cache
    deeper = Counting(DenseRetriever(encoder=enc2, cache_dir=cache))
    assert not retrieve(collection, deeper, 5, cache)[1]
    assert deeper.calls["search"] == 1 and enc2.n_texts == 0

    edited = dict(DOCS, d1=("Wings", "lift of a delta wing"))
    changed = load_beir(write_beir(tmp_path / "data2", edited))
    assert not retrieve(changed, Counting(DenseRetriever(encoder=enc2, cache_dir=cache)), 3, cache)[1]
    assert enc2.n_texts == 1  # only the edited document is encoded (the per-text cache has the rest)


def test_deeper_ranking_serves_shallower_requests(tmp_path):
    calls = []
    deep = Ranking(np.array([[4, 2, 0, -1]], np.int64), np.array([[3.0, 2.0, 1.0, -np.inf]], np.float32))

    def compute(depth):
        def run():
            calls.append(depth)
            return deep.head(depth)

        return run

    key = {"collection": "c", "retriever": {"r": 1}}
    load_or_compute_ranking(tmp_path, {**key, "depth": 4}, compute(4))
    r, hit = load_or_compute_ranking(tmp_path, {**key, "depth": 2}, compute(2), reuse_deeper=True)
    assert hit and calls == [4] and r.doc_idx.tolist() == [[4, 2]] and r.scores.tolist() == [[3.0, 2.0]]
    assert r.doc_idx.flags["C_CONTIGUOUS"]
    _, hit = load_or_compute_ranking(tmp_path, {**key, "depth": 2}, compute(2))  # the default: exact depth only
    assert not hit and calls == [4, 2]
    # with both cached, depth 2 is served by its own (smaller) entry; depth 3 by depth 4
    r3, hit = load_or_compute_ranking(tmp_path, {**key, "depth": 3}, compute(3), reuse_deeper=True)
    assert hit and r3.doc_idx.tolist() == [[4, 2, 0]] and calls == [4, 2]
    _, hit = load_or_compute_ranking(tmp_path, {**key, "depth": 5}, reuse_deeper=True, compute=lambda: Ranking(
        np.full((1, 5), -1, np.int64), np.full((1, 5), -np.inf, np.float32)))
    assert not hit  # deeper than anything cached
    with pytest.raises(ValueError, match="depth"):
        load_or_compute_ranking(tmp_path, key, compute(1))
    with pytest.raises(ValueError, match="depth 4"):
        load_or_compute_ranking(tmp_path, {**key, "retriever": {"r": 2}, "depth": 3}, compute(4))


def test_ranking_arrays_round_trip_without_rankings(tmp_path):
    """The cache stores plain arrays: int64 indices and the scores as computed (float32 stays
    float32, anything else is float64: issue 33), sliced for reuse."""
    key = {"collection": "c", "retriever": {"r": 1}, "depth": 3}
    doc_idx = np.array([[2, 0, -1]], np.int32)
    scores = np.array([[1.5, 0.5, -np.inf]], np.float64)
    (got_idx, got_scores), hit = load_or_compute_ranking_arrays(tmp_path, key, lambda: (doc_idx, scores))
    assert not hit and got_idx is doc_idx and got_scores is scores  # a miss returns what was computed
    (got_idx, got_scores), hit = load_or_compute_ranking_arrays(tmp_path, key, lambda: pytest.fail("recomputed"))
    assert hit and got_idx.dtype == np.int64 and got_scores.dtype == np.float64
    assert got_idx.tolist() == [[2, 0, -1]] and got_scores.tolist() == [[1.5, 0.5, -np.inf]]
    key32 = {**key, "retriever": {"r": 32}}
    load_or_compute_ranking_arrays(tmp_path, key32, lambda: (doc_idx, scores.astype(np.float32)))
    (_, got_scores), hit = load_or_compute_ranking_arrays(tmp_path, key32, lambda: pytest.fail("recomputed"))
    assert hit and got_scores.dtype == np.float32
    (head, _), hit = load_or_compute_ranking_arrays(
        tmp_path, {**key, "depth": 2}, lambda: pytest.fail("recomputed"), reuse_deeper=True
    )
    assert hit and head.tolist() == [[2, 0]]
    with pytest.raises(ValueError, match="one shape"):
        load_or_compute_ranking_arrays(tmp_path, {**key, "depth": 1}, lambda: (doc_idx[:, :1], scores))


def test_damaged_ranking_entry_is_recomputed(tmp_path, caplog):
    key = {"collection": "c", "retriever": {"r": 1}, "depth": 2}
    ranking = Ranking(np.array([[1, 0]], np.int64), np.array([[2.0, 1.0]], np.float32))
    load_or_compute_ranking(tmp_path, key, lambda: ranking)
    for scores_file in (tmp_path / "rankings").glob("*.scores.npy"):
        np.save(scores_file, np.zeros((1, 3), np.float32))  # a shape the indices do not have
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        again, hit = load_or_compute_ranking(tmp_path, key, lambda: ranking)
    assert not hit and again is ranking and "unreadable" in caplog.text


@pytest.mark.slow  # a fresh interpreter (what an import loads): a process, docs/testing.md
def test_cache_imports_no_retrievers():
    """pipeline.io.cache is an input/output module: importing it loads no retriever code."""
    code = "import sys, pipeline.io.cache; print(sorted(m for m in sys.modules if m.split('.')[0] == 'retrievers'))"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

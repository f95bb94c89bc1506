"""Encoding backends (torch, onnx, onnx-int8), the per-text embedding cache, built files and
the progress bar of retrievers/dense and pipeline/io/cache.

nDCG@10 is computed by pytrec_eval (trec_eval's ndcg_cut_10). The ONNX exports and the
embeddings of the slow tests are kept in the shared test cache (``cache_dir``, conftest.py:
``RAG_EVAL_TEST_CACHE``, default ``~/.cache/rag-retrieval-eval/tests``), verified on read.
onnx-int8 against torch on SciFact is in test_scifact.py, beside the full corpus's encoding.
"""

from __future__ import annotations

import hashlib
import logging
import os

import numpy as np
import pytest
from scifact_cache import backend_embeddings
from test_scifact import per_query_ndcg

import retrievers.dense as dense_mod
import retrievers.dense.model as dense_model
from pipeline.io.cache import TextEmbeddingStore, content_hash, load_or_build_file, text_hashes
from retrievers.dense import DenseRetriever

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class CountingEncoder:
    """Deterministic bag-of-words embeddings; remembers every text it was asked to encode."""

    def __init__(self, dim: int = 32):
        self.dim = dim
        self.seen: list[str] = []

    def cache_key(self) -> str:
        return f"counting-{self.dim}"

    def encode(self, sentences, batch_size=32, **kwargs):
        self.seen.extend(sentences)
        out = np.zeros((len(sentences), self.dim), np.float32)
        for i, text in enumerate(sentences):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.md5(word.encode()).digest()[:8], "little")
                out[i, h % self.dim] += 1.0 + (h >> 60)
        return out


# ---------------------------------------------------------------------- settings and keys


def test_backend_is_checked_and_part_of_the_keys_except_torch(tmp_path):
    with pytest.raises(ValueError, match="unknown dense backend 'tensorrt'"):
        DenseRetriever(backend="tensorrt")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    keys = {b: DenseRetriever(model=str(model), backend=b).cache_key() for b in dense_mod.BACKENDS}
    assert "backend" not in keys["torch"]  # entries written before backends existed stay valid
    assert keys["onnx"]["backend"] == "onnx" and keys["onnx-int8"]["backend"] == "onnx-int8"
    assert {k: v for k, v in keys["onnx"].items() if k != "backend"} == keys["torch"]
    # a caller's own encoder: the backend does not apply
    assert "backend" not in DenseRetriever(encoder=CountingEncoder(), backend="onnx").cache_key()


def test_configs_offer_the_backend():
    from omegaconf import OmegaConf

    root = dense_mod.__file__.rsplit("/retrievers/", 1)[0] + "/conf/retriever/"
    assert OmegaConf.load(root + "dense.yaml").backend == "torch"
    for name in ("hybrid.yaml", "hybrid_convex.yaml"):
        text = open(root + name, encoding="utf-8").read()
        assert "retriever.second.backend" in text, name  # documented where hybrid users look


# ---------------------------------------------------------------------- the per-text store


def test_text_store_round_trip_partial_hits_and_damage(tmp_path, caplog):
    key = {"model": "m", "backend": "onnx"}
    store = TextEmbeddingStore(tmp_path, key)
    texts = ["alpha", "beta", "gamma", "beta"]
    hashes = text_hashes(texts)
    assert hashes.shape == (4, 2) and (hashes[1] == hashes[3]).all() and not (hashes[0] == hashes[1]).all()
    emb, found, _ = store.lookup(hashes)
    assert emb is None and not found.any()
    rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert store.add(hashes[:2], rows)
    emb, found, shards = store.lookup(hashes)
    assert found.tolist() == [True, True, False, True] and shards == 1
    np.testing.assert_array_equal(emb[[0, 1, 3]], rows[[0, 1, 1]])
    assert (emb[2] == 0).all()
    assert store.add(text_hashes(["gamma"]), np.full((1, 3), 7, np.float32))
    emb, found, shards = store.lookup(hashes)
    assert found.all() and shards == 2 and (emb[2] == 7).all()
    # another key (model, backend) sees nothing
    assert TextEmbeddingStore(tmp_path, {**key, "backend": "torch"}).lookup(hashes)[1].sum() == 0
    # a shard changed on disk is discarded with a warning, never trusted
    stem = content_hash(text_hashes(["gamma"])).split(":", 1)[1][:32]  # shards are named by their texts
    shard = store.folder / f"{stem}.emb.npy"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        _, found, shards = store.lookup(hashes)
    assert shards == 1 and found.tolist() == [True, True, False, True] and "content hash mismatch" in caplog.text
    assert len(list(store.folder.glob("*.json"))) == 1


def test_built_files_are_built_once_and_verified(tmp_path, caplog):
    builds = []

    def build(path):
        builds.append(path)
        path.write_bytes(b"exported model " * 100)

    key = {"kind": "export", "model": "m"}
    path, hit = load_or_build_file(tmp_path, key, "model.onnx", build)
    assert not hit and path.read_bytes() == b"exported model " * 100 and path.parent.parent.name == "files"
    assert load_or_build_file(tmp_path, key, "model.onnx", build) == (path, True) and len(builds) == 1
    assert not list(path.parent.glob(".*.tmp"))  # the build folder is gone
    path.write_bytes(b"exported modem " * 100)  # same size, other content
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        again, hit = load_or_build_file(tmp_path, key, "model.onnx", build)
    assert not hit and len(builds) == 2 and again.read_bytes() == b"exported model " * 100
    assert "content hash mismatch" in caplog.text
    other, hit = load_or_build_file(None, key, "model.onnx", build)  # no cache: a temporary file
    assert not hit and other.parent.parent != tmp_path and other.read_bytes() == b"exported model " * 100


# ---------------------------------------------------------------------- re-chunking


def _chunk_texts(size: int, docs: list[str]) -> list[str]:
    from pipeline.chunkers import TokenChunker, chunk_documents

    chunks, _ = chunk_documents(TokenChunker(size=size), [f"d{i}" for i in range(len(docs))], docs, None)
    return chunks.texts


def test_rechunking_encodes_only_chunks_not_seen_before(tmp_path):
    rng = np.random.default_rng(3)
    words = [f"word{i}" for i in range(400)]
    docs = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(10, 400, size=30)]
    small, large = _chunk_texts(64, docs), _chunk_texts(128, docs)
    shared = set(small) & set(large)  # documents of <= 64 tokens are one chunk at both sizes
    assert 3 <= len(shared) < len(set(large))  # else the test proves nothing

    enc = CountingEncoder()
    first = DenseRetriever(encoder=enc, cache_dir=tmp_path)
    first.index([f"c{i}" for i in range(len(small))], small)
    assert sorted(enc.seen) == sorted(set(small))  # a text that occurs twice is encoded once
    assert first.text_cache_stats["docs"] == {"texts": len(small), "from_text_cache": 0, "encoded": len(set(small))}

    enc.seen.clear()
    second = DenseRetriever(encoder=enc, cache_dir=tmp_path)
    second.index([f"c{i}" for i in range(len(large))], large)
    new = set(large) - set(small)
    assert sorted(enc.seen) == sorted(new)
    stats = second.text_cache_stats["docs"]
    assert stats == {"texts": len(large), "from_text_cache": sum(t in shared for t in large), "encoded": len(new)}
    # the embeddings are those of encoding every chunk afresh
    fresh = DenseRetriever(encoder=CountingEncoder())
    fresh.index([f"c{i}" for i in range(len(large))], large)
    np.testing.assert_allclose(second.doc_embeddings, fresh.doc_embeddings, rtol=1e-6)

    enc.seen.clear()  # revisiting a size encodes nothing (the per-corpus entry answers)
    again = DenseRetriever(encoder=enc, cache_dir=tmp_path)
    again.index([f"c{i}" for i in range(len(small))], small)
    assert enc.seen == [] and again.last_cache_hits["docs"] and "docs" not in again.text_cache_stats


# ---------------------------------------------------------------------- the progress bar


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_bar_with_passages_per_second_on_a_terminal_only(terminal, monkeypatch, capsys):
    monkeypatch.setattr(dense_model, "stderr_is_terminal", lambda: terminal)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    texts = [" ".join(["w"] * n) for n in (3, 9, 1, 7, 5)]
    with_bar = DenseRetriever(encoder=CountingEncoder(), batch_size=2, show_progress_bar=True)
    got = with_bar.encode(texts)
    err = capsys.readouterr().err
    assert ("passages/s" in err) == terminal and ("encoding (torch)" in err) == terminal
    np.testing.assert_array_equal(got, DenseRetriever(encoder=CountingEncoder()).encode(texts))


# ---------------------------------------------------------------------- effectiveness


@pytest.mark.slow
def test_onnx_backends_reproduce_torch_embeddings_on_the_sample(cache_dir):
    """Both ONNX backends against torch on every document and query of the bundled sample.

    fp32: the exported graph computes the model's function, so every embedding is torch's up
    to float rounding (operators fused and ordered otherwise): ``atol=1e-5`` on unit vectors,
    whatever the CPU (measured max |difference| 2.1e-7), and the rankings then agree too.

    int8: quantization moves each embedding by its rounding of weights and activations, a
    property of the scheme (``INT8_SETTINGS``), not of one CPU's kernels: each embedding keeps
    cosine >= 0.95 to torch's and their mean >= 0.98 (measured on 2026-12-01, this machine:
    min 0.9834, mean 0.9929). ONNX Runtime's default scheme (every op, per tensor) fails both
    (measured min 0.902, mean 0.951), so the bound catches a scheme that rounds too coarsely.
    How much int8 may change rankings is bounded on SciFact's 300 queries (test_scifact.py): the
    sample's 52 are too few to bound it usefully."""
    pytest.importorskip("onnxruntime")
    from pipeline.io.collection import load_sample

    sample = load_sample()
    torch_r, want = backend_embeddings(sample, "torch", cache_dir)
    fp32_r, fp32 = backend_embeddings(sample, "onnx", cache_dir)
    assert want.shape == fp32.shape == (sample.n_docs + len(sample.query_ids), 384)
    np.testing.assert_allclose(fp32, want, rtol=0, atol=1e-5)
    torch_ndcg, fp32_ndcg = per_query_ndcg(sample, torch_r), per_query_ndcg(sample, fp32_r)
    assert 0.5 < torch_ndcg.mean() < 0.95, torch_ndcg.mean()
    assert abs(fp32_ndcg.mean() - torch_ndcg.mean()) <= 0.005, (fp32_ndcg.mean(), torch_ndcg.mean())

    _, int8 = backend_embeddings(sample, "onnx-int8", cache_dir)
    cosine = (int8 * want).sum(axis=1)
    assert cosine.min() >= 0.95 and cosine.mean() >= 0.98, (cosine.min(), cosine.mean())
    assert not np.allclose(int8, want, atol=1e-3)  # it is quantized: else the bound proves nothing

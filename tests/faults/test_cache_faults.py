"""Faults in the on-disk cache (issue 9): a damaged, rolled, shortened, out-of-range,
truncated or legacy entry is a warning naming the file, is recomputed, and the numbers
equal a cold run's; an unwritable cache folder is one warning and the computed value;
cache files get the mode a plain ``open`` gives (0644 under umask 022).

The issue's two end-to-end cases run the app in-process (``pipeline.job.run`` on a Hydra
compose of ``tracking=none paths.root=TMP``); the dense one uses a fast hashed
bag-of-words encoder instead of MiniLM (which takes ~30 s to encode the sample here).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from pipeline.io.cache import content_hash
from pipeline.io.collection import load_beir
from pipeline.job import run
from pipeline.io.cache import load_or_compute_ranking
from pipeline.ranking import Ranking
from retrievers.bm25 import BM25Retriever
from retrievers.dense import DenseRetriever

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
SAMPLE = ROOT / "pipeline" / "sample"
COLD_BM25_NDCG10 = 0.5772  # README: bm25 on the sample


def compose_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides)


class BowEncoder:
    """Deterministic hashed bag of words (64 dims): fast, and continuous enough to rank."""

    def __init__(self):
        self.n_texts = 0

    def cache_key(self) -> str:
        return "fault-bow-64"

    def encode(self, sentences, batch_size=32, **kwargs):
        self.n_texts += len(sentences)
        out = np.zeros((len(sentences), 64), np.float32)
        for i, text in enumerate(sentences):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.md5(word.encode()).digest()[:8], "little")
                out[i, h % 64] += 1.0 + (h >> 40) % 7 / 7.0
        return out


BOW_TARGET = f"{__name__}.BowEncoder"  # importable: pytest puts this folder on sys.path


@pytest.fixture
def no_figures(monkeypatch):
    """A job without its figures (drawn from the metrics; tests/pipeline/test_plots.py checks them)."""
    monkeypatch.setattr("pipeline.figures.save_run_figures", lambda *args, **kwargs: None)


@pytest.fixture(scope="module")
def collection():
    return load_beir(SAMPLE)


def retrieve(collection, retriever, cache: Path, depth: int = 20) -> tuple[Ranking, bool]:
    """What pipeline/job.py does, with the collection's sizes for the verification."""
    key = {"collection": collection.digest, "retriever": retriever.cache_key(), "depth": depth}

    def compute() -> Ranking:
        retriever.index(collection.doc_ids, collection.doc_texts)
        return retriever.search(collection.query_ids, collection.query_texts, depth)

    return load_or_compute_ranking(cache, key, compute, reuse_deeper=retriever.prefix_stable,
                                   n_queries=collection.n_queries, n_docs=collection.n_docs)


def assert_same(a: Ranking, b: Ranking) -> None:
    np.testing.assert_array_equal(a.doc_idx, b.doc_idx)
    np.testing.assert_array_equal(a.scores, b.scores)


def warnings_of(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def rehash(meta: Path, name: str, array: np.ndarray, **fields) -> None:
    """Make an entry's record agree with a tampered array (a forged or buggy writer)."""
    record = json.loads(meta.read_text())
    record["hash"][name] = content_hash(array)
    record.update(fields)
    meta.write_text(json.dumps(record))


# --------------------------------------------------------------------------- the cases, end to end


def test_corrupted_ranking_cache_is_recomputed_end_to_end(tmp_path, caplog, capsys, no_figures):
    cfg = compose_cfg(["tracking=none", f"paths.root={tmp_path}"])
    cold = run(cfg)
    assert round(cold, 4) == COLD_BM25_NDCG10
    (npy,) = (tmp_path / "cache" / "rankings").glob("*doc_idx.npy")
    data = bytearray(npy.read_bytes())
    middle = len(data) // 2
    assert middle - 400 > 128  # the .npy header (128 bytes) stays intact
    data[middle - 400 : middle + 400] = np.random.default_rng(9).integers(0, 256, 800, dtype=np.uint8).tobytes()
    npy.write_bytes(bytes(data))
    np.load(npy)  # still a loadable .npy of the same shape: only the content lies
    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        again = run(cfg)
    assert again == cold
    assert npy.name in warnings_of(caplog) and "hash" in warnings_of(caplog)
    assert "ranking cache miss" in capsys.readouterr().out
    caplog.clear()
    assert run(cfg) == cold and "ranking cache hit" in capsys.readouterr().out  # rewritten, trusted again
    assert not warnings_of(caplog)


def test_zeroed_embeddings_cache_is_recomputed_end_to_end(tmp_path, caplog, no_figures):
    cfg = compose_cfg(["tracking=none", f"paths.root={tmp_path}", "retriever=dense",
                       "retriever.show_progress_bar=false", f"+retriever.encoder._target_={BOW_TARGET}"])
    cold = run(cfg)
    arrays = tmp_path / "cache" / "arrays"
    docs_npy = next(p for p in arrays.glob("*.npy") if np.load(p).shape[0] == 171)
    emb = np.load(docs_npy)
    emb[40:120] = 0.0  # zero part of the document embeddings, header intact
    np.save(docs_npy, emb)
    for path in (tmp_path / "cache" / "rankings").iterdir():
        path.unlink()  # so that the ranking is computed again from the (damaged) embeddings
    with caplog.at_level(logging.INFO):
        again = run(cfg)
    assert again == cold
    assert docs_npy.name in warnings_of(caplog)
    assert "171 docs embeddings read from the cache" not in caplog.text


# --------------------------------------------------------------------------- each fault, ranking entries


def _roll(idx, scores, n_docs):
    return np.roll(idx, 1, axis=0), np.roll(scores, 1, axis=0), False


def _fewer_rows(idx, scores, n_docs):
    return idx[:-3], scores[:-3], False


def _out_of_range(idx, scores, n_docs):
    idx = idx.copy()
    idx[5, 0] = n_docs + 7
    return idx, scores, False


def _nan_scores(idx, scores, n_docs):
    scores = scores.copy()
    scores[2, 3] = np.nan
    return idx, scores, False


RANKING_FAULTS = {
    "rows rolled, hash stale": (_roll, False),
    "fewer rows, hash stale": (_fewer_rows, False),
    "fewer rows, hash rewritten": (_fewer_rows, True),
    "out-of-range index, hash stale": (_out_of_range, False),
    "out-of-range index, hash rewritten": (_out_of_range, True),
    "NaN score, hash stale": (_nan_scores, False),
    "NaN score, hash rewritten": (_nan_scores, True),
}


@pytest.mark.parametrize("fault", list(RANKING_FAULTS))
def test_tampered_ranking_entry_is_detected(tmp_path, caplog, collection, fault):
    tamper, forge = RANKING_FAULTS[fault]
    cold, hit = retrieve(collection, BM25Retriever(), tmp_path)
    assert not hit
    (meta,) = (tmp_path / "rankings").glob("*.json")
    idx_path, score_path = meta.with_suffix(".doc_idx.npy"), meta.with_suffix(".scores.npy")
    idx, scores, _ = tamper(np.load(idx_path), np.load(score_path), collection.n_docs)
    np.save(idx_path, idx)
    np.save(score_path, scores)
    if forge:  # the hashes agree with the tampered arrays: the structural checks must catch it
        rehash(meta, "doc_idx", idx)
        rehash(meta, "scores", scores)
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        again, hit = retrieve(collection, BM25Retriever(), tmp_path)
    assert not hit, fault
    assert_same(again, cold)
    assert any(p.name in warnings_of(caplog) for p in (meta, idx_path, score_path)), warnings_of(caplog)
    again, hit = retrieve(collection, BM25Retriever(), tmp_path)  # rewritten: a clean hit
    assert hit
    assert_same(again, cold)


def test_rows_rolled_with_the_record_forged_is_caught_by_nothing_but_the_caller(tmp_path, collection):
    """Not a fault the cache can see (a consistent, valid ranking of other queries): it is
    what the collection digest in the key is for. Documented here so nobody expects more."""
    cold, _ = retrieve(collection, BM25Retriever(), tmp_path)
    (meta,) = (tmp_path / "rankings").glob("*.json")
    idx_path, score_path = meta.with_suffix(".doc_idx.npy"), meta.with_suffix(".scores.npy")
    idx, scores, _ = _roll(np.load(idx_path), np.load(score_path), collection.n_docs)
    np.save(idx_path, idx), np.save(score_path, scores)
    rehash(meta, "doc_idx", idx), rehash(meta, "scores", scores)
    got, hit = retrieve(collection, BM25Retriever(), tmp_path)
    assert hit and np.array_equal(got.doc_idx, np.roll(cold.doc_idx, 1, axis=0))


@pytest.mark.parametrize("fault", ["truncated npy", "garbage json", "json not an object"])
def test_unreadable_ranking_entry_is_recomputed(tmp_path, caplog, collection, fault):
    cold, _ = retrieve(collection, BM25Retriever(), tmp_path)
    (meta,) = (tmp_path / "rankings").glob("*.json")
    idx_path = meta.with_suffix(".doc_idx.npy")
    if fault == "truncated npy":
        named = idx_path
        idx_path.write_bytes(idx_path.read_bytes()[: idx_path.stat().st_size // 2])
    elif fault == "garbage json":
        named = meta
        meta.write_bytes(b"{\"key_without_depth\": \x00\xff garbage")
    else:
        named = meta
        meta.write_text("[1, 2, 3]")
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        again, hit = retrieve(collection, BM25Retriever(), tmp_path)
    assert not hit
    assert_same(again, cold)
    assert named.name in warnings_of(caplog)
    assert retrieve(collection, BM25Retriever(), tmp_path)[1]


def test_legacy_ranking_entry_is_recomputed_with_an_info_line(tmp_path, caplog, collection):
    cold, _ = retrieve(collection, BM25Retriever(), tmp_path)
    (meta,) = (tmp_path / "rankings").glob("*.json")
    record = json.loads(meta.read_text())
    del record["hash"], record["n_docs"]  # what the cache wrote before this change
    meta.write_text(json.dumps(record))
    with caplog.at_level(logging.INFO, logger="pipeline.io.cache"):
        again, hit = retrieve(collection, BM25Retriever(), tmp_path)
    assert not hit and not warnings_of(caplog)
    assert meta.name in caplog.text and "predates" in caplog.text
    assert_same(again, cold)
    assert "hash" in json.loads(meta.read_text())  # rewritten
    assert retrieve(collection, BM25Retriever(), tmp_path)[1]


def test_a_damaged_deeper_entry_is_not_reused(tmp_path, caplog, collection):
    deep, _ = retrieve(collection, BM25Retriever(), tmp_path, depth=30)
    (score_path,) = (tmp_path / "rankings").glob("*.scores.npy")
    scores = np.load(score_path)
    scores[:, 0] = 0.0  # breaks the order and the hash
    np.save(score_path, scores)
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        shallow, hit = retrieve(collection, BM25Retriever(), tmp_path, depth=20)
    assert not hit and score_path.name in warnings_of(caplog)
    assert_same(shallow, deep.head(20))


# --------------------------------------------------------------------------- each fault, embedding entries


def _zero_part(e):
    e = e.copy()
    e[40:120] = 0.0
    return e


EMBEDDING_FAULTS = {
    "zeroed part": _zero_part,
    "rows rolled": lambda e: np.roll(e, 1, axis=0),
    "fewer rows": lambda e: e[:-5],
    "NaN value": lambda e: np.where(np.arange(e.size).reshape(e.shape) == 77, np.nan, e).astype(np.float32),
    "other dim": lambda e: np.ascontiguousarray(e[:, :32]),
}


@pytest.mark.parametrize("forge", [False, True], ids=["hash stale", "hash rewritten"])
@pytest.mark.parametrize("fault", list(EMBEDDING_FAULTS))
def test_tampered_embeddings_are_recomputed(tmp_path, caplog, collection, fault, forge):
    if forge and fault in ("zeroed part", "rows rolled"):
        pytest.skip("a consistent record of valid-looking embeddings: only the hash can tell")
    cold, _ = retrieve(collection, DenseRetriever(encoder=BowEncoder(), cache_dir=tmp_path), tmp_path)
    docs_meta = next(m for m in (tmp_path / "arrays").glob("*.json") if json.loads(m.read_text())["key"]["role"] == "docs")
    docs_npy = docs_meta.with_suffix(".npy")
    tampered = EMBEDDING_FAULTS[fault](np.load(docs_npy))
    np.save(docs_npy, tampered)
    if forge:
        rehash(docs_meta, "array", tampered, shape=list(tampered.shape))
    for path in (tmp_path / "rankings").iterdir():
        path.unlink()
    encoder = BowEncoder()
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        retriever = DenseRetriever(encoder=encoder, cache_dir=tmp_path)
        again, hit = retrieve(collection, retriever, tmp_path)
    assert not hit
    assert_same(again, cold)
    assert docs_npy.name in warnings_of(caplog)
    # The damaged corpus file is not used: every document comes again, from the (verified)
    # per-text cache or the encoder.
    docs = retriever.text_cache_stats.get("docs", {"from_text_cache": 0, "encoded": encoder.n_texts})
    assert docs["from_text_cache"] + docs["encoded"] == collection.n_docs


@pytest.mark.parametrize("fault", ["truncated npy", "garbage json"])
def test_unreadable_embeddings_are_recomputed(tmp_path, caplog, collection, fault):
    cold, _ = retrieve(collection, DenseRetriever(encoder=BowEncoder(), cache_dir=tmp_path), tmp_path)
    docs_meta = next(m for m in (tmp_path / "arrays").glob("*.json") if json.loads(m.read_text())["key"]["role"] == "docs")
    docs_npy = docs_meta.with_suffix(".npy")
    if fault == "truncated npy":
        docs_npy.write_bytes(docs_npy.read_bytes()[:-1000])
        named = docs_npy
    else:
        docs_meta.write_text("not json {")
        named = docs_meta
    for path in (tmp_path / "rankings").iterdir():
        path.unlink()
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        again, _ = retrieve(collection, DenseRetriever(encoder=BowEncoder(), cache_dir=tmp_path), tmp_path)
    assert_same(again, cold)
    assert named.name in warnings_of(caplog)


# --------------------------------------------------------------------------- unwritable folders, modes


def test_unwritable_cache_dir_end_to_end(tmp_path, caplog, no_figures):
    (tmp_path / "file.txt").write_text("a file where the cache folder's parent should be")
    cache = tmp_path / "file.txt" / "cache"
    cfg = compose_cfg(["tracking=none", f"paths.root={tmp_path / 'out'}", f"cache_dir={cache}"])
    with caplog.at_level(logging.WARNING):
        value = run(cfg)
    assert round(value, 4) == COLD_BM25_NDCG10
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "not writable" in r.getMessage()]
    assert len(warned) == 1 and str(cache) in warned[0] and "NotADirectoryError" in warned[0]
    assert value == run(cfg)  # still no cache, still the same number


def test_full_disk_keeps_the_computed_ranking_and_warns_once(tmp_path, caplog, collection, monkeypatch):
    def no_space(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    reference, _ = retrieve(collection, BM25Retriever(), tmp_path / "reference")
    monkeypatch.setattr(os, "replace", no_space)
    cache = tmp_path / "full"
    with caplog.at_level(logging.WARNING, logger="pipeline.io.cache"):
        got, hit = retrieve(collection, BM25Retriever(), cache)
        got2, hit2 = retrieve(collection, BM25Retriever(), cache, depth=25)
        emb = DenseRetriever(encoder=BowEncoder(), cache_dir=cache)
        emb.index(collection.doc_ids, collection.doc_texts)
    assert not hit and not hit2 and emb.doc_embeddings.shape == (collection.n_docs, 64)
    assert_same(got, reference)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and str(cache) in warned[0] and "No space left on device" in warned[0]
    assert not [p for p in cache.rglob("*") if p.is_file()]  # no temporary files left behind


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_cache_files_get_the_mode_open_would_give(tmp_path, collection, umask, mode):
    old = os.umask(umask)
    try:
        retrieve(collection, DenseRetriever(encoder=BowEncoder(), cache_dir=tmp_path), tmp_path)
    finally:
        os.umask(old)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    # a ranking (2 arrays + JSON), two embedding entries, and two per-text shards (3 files each)
    assert len(files) == 3 + 4 + 6 and sum(p.parts[-3] == "texts" for p in files) == 6
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {oct(mode)}

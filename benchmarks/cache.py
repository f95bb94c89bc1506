"""What verifying a cache entry costs: a dense-embedding cache hit with and without it.

    python benchmarks/cache.py [--data ../shared/data/scifact] [--repeat 30]

Issue 9's goal: verification (content hash + shape + finiteness checks) costs under 5% of
a cache hit. Measured on SciFact's shape (5,183 documents, 300 queries, dim 384), with the
real ids and texts of ``--data`` in the cache keys (hashing the texts for the key is part of
every hit). The embeddings are NOT made by MiniLM (encoding SciFact takes 200+ s): they are
random float32 arrays of the same shape, written through the cache by a stand-in encoder.
A hit reads and verifies the same bytes whatever they hold, so this measures the same
I/O + hash cost.

Two timings, each the median of ``--repeat`` runs (interleaved), verified vs unverified (the cache as it
was before issue 9: compare the JSON key, ``np.load``):

- load: ``DenseRetriever.cached_embeddings`` of the documents (key digest + JSON + load
  [+ verify]); the verification's share of the bare read.
- hit: what a run with a warm embedding cache does, ``index()`` + ``search(depth=100)``
  (exact numpy search): documents and queries read [and verified], then searched. The 5%
  goal is about this one, the cache hit as a run sees it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import retrievers.dense.retriever as dense_mod  # noqa: E402  (the module whose name lookups the benchmark swaps)
from pipeline.io import cache  # noqa: E402
from retrievers.dense import DenseRetriever  # noqa: E402

DIM = 384


def read_scifact(folder: Path) -> tuple[list[str], list[str], list[str], list[str]]:
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh if line.strip()]
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        queries = [json.loads(line) for line in fh if line.strip()]
    return ([d["_id"] for d in docs], [f"{d.get('title', '')} {d['text']}".strip() for d in docs],
            [q["_id"] for q in queries], [q["text"] for q in queries])


class RandomEncoder:
    """Stands in for MiniLM: unit-norm random float32 rows, one per text."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def cache_key(self) -> str:
        return "benchmark-random-384"

    def encode(self, sentences, batch_size=64, **kwargs):
        out = self.rng.standard_normal((len(sentences), DIM)).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class NoEncoder(RandomEncoder):
    def encode(self, sentences, batch_size=64, **kwargs):
        raise AssertionError("a cache hit must not encode")


def unverified_load_or_compute_array(cache_dir, key, compute, **_checks):
    """The read path before issue 9: the JSON's key, then ``np.load``; no checks."""
    name = cache.digest(key)
    folder = Path(cache_dir) / cache.ARRAYS
    meta, data = folder / f"{name}.json", folder / f"{name}.npy"
    if meta.exists() and cache.load_json(meta).get("key") == cache.canonical(key):
        return cache.load_array(data), True
    raise AssertionError("expected a cache hit")


def median_s(fn, repeat: int) -> float:
    fn()  # warm: page cache, BLAS threads
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1] / "../shared/data/scifact")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    doc_ids, doc_texts, query_ids, query_texts = read_scifact(args.data)
    print(f"SciFact shape: {len(doc_ids)} documents x {DIM}, {len(query_ids)} queries x {DIM} (random float32), "
          f"hash {cache.HASH_ALGO}")

    with tempfile.TemporaryDirectory() as tmp:
        first = DenseRetriever(encoder=RandomEncoder(), cache_dir=tmp)
        first.index(doc_ids, doc_texts)
        first.search(query_ids, query_texts, 100)  # writes both entries
        size = sum(p.stat().st_size for p in (Path(tmp) / cache.ARRAYS).glob("*.npy"))
        print(f"cache entries: {size / 2**20:.1f} MiB of .npy")

        def load_docs() -> None:
            DenseRetriever(encoder=NoEncoder(), cache_dir=tmp).cached_embeddings("docs", doc_ids, doc_texts, "")

        def hit() -> None:
            r = DenseRetriever(encoder=NoEncoder(), cache_dir=tmp)
            r.index(doc_ids, doc_texts)
            r.search(query_ids, query_texts, 100)

        rows = []
        original = dense_mod.load_or_compute_array
        for label, fn in (("load (documents)", load_docs), ("hit (index + search, depth 100)", hit)):
            times: dict[bool, list[float]] = {True: [], False: []}
            for i in range(2 * args.repeat + 2):  # interleaved, so that load on the machine hits both alike
                verify = i % 2 == 0
                dense_mod.load_or_compute_array = original if verify else unverified_load_or_compute_array
                try:
                    start = time.perf_counter()
                    fn()
                    if i >= 2:  # the first pair warms the page cache and BLAS
                        times[verify].append(time.perf_counter() - start)
                finally:
                    dense_mod.load_or_compute_array = original
            rows.append((label, statistics.median(times[False]), statistics.median(times[True])))

    a = np.random.default_rng(0).standard_normal((len(doc_ids), DIM)).astype(np.float32)
    hash_s = median_s(lambda: cache.content_hash(a), args.repeat)
    print(f"{'':34s} {'unverified':>11s} {'verified':>10s} {'ratio':>7s} {'extra':>8s}")
    for label, bare, verified in rows:
        print(f"{label:34s} {bare * 1e3:9.2f}ms {verified * 1e3:8.2f}ms {verified / bare:7.3f} "
              f"{(verified - bare) / bare:+8.1%}")
    print(f"content_hash of the document array alone: {hash_s * 1e3:.2f} ms")
    goal = rows[1][2] / rows[1][1] - 1
    print(f"goal (verification < 5% of a cache hit, index + search): {goal:+.1%} -> {'met' if goal < 0.05 else 'NOT met'}")


if __name__ == "__main__":
    main()

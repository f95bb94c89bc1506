"""Retrievers side by side with the reference tools, in one process, on real collections.

    python benchmarks/retrievers.py [--data ../shared/data] [--repeat 3] [--skip-dense]

Speed (SciFact: 5,183 documents, 300 queries, depth 100), with the goals of issue 4:

- BM25 index + search vs bm25s used directly (goal: at most 1.2x its time) and vs
  rank_bm25's BM25Okapi (goal: at least 30x faster). Tokenization is timed for all three.
- Dense: a first run (encode the corpus) vs a second run on the same corpus, reading the
  embedding cache (goal: at least 20x faster).
- Exact dense search (numpy, chunked matrix product + top_k) vs faiss IndexFlatIP search
  (goal: at most 1.5x its time).

Effectiveness: nDCG@10 (linear gain, = trec_eval ndcg_cut_10) of bm25, dense, hybrid rrf
and hybrid convex on SciFact and Cranfield.

Times are the best of ``--repeat`` runs where a run is cheap, single runs otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from pipeline.io.collection import load_beir  # noqa: E402
from pipeline.ranking import Ranking  # noqa: E402
from retrievers.bm25 import BM25Retriever  # noqa: E402
from retrievers.dense import DenseRetriever, exact_search  # noqa: E402
from retrievers.hybrid import HybridRetriever  # noqa: E402

DEPTH = 100


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def ndcg10(collection, ranking: Ranking) -> float:
    from pipeline.metrics import evaluate

    ev = evaluate(ranking.doc_idx, collection.qrels, k_max=10, gain="linear")
    return ev.means([10])["ndcg_at_10"]


def line(label: str, seconds: float, extra: str = "") -> None:
    print(f"  {label:<44s} {seconds:9.3f} s  {extra}")


# --------------------------------------------------------------------------- BM25


def bench_bm25(c, repeat: int) -> None:
    import bm25s
    import rank_bm25
    import Stemmer

    print(f"\nBM25 on {c.name}: {c.n_docs} documents, {c.n_queries} queries, depth {DEPTH}")

    def ours() -> tuple[float, float, Ranking]:
        start = time.perf_counter()
        r = BM25Retriever()
        r.index(c.doc_ids, c.doc_texts)
        mid = time.perf_counter()
        ranking = r.search(c.query_ids, c.query_texts, DEPTH)
        return mid - start, time.perf_counter() - mid, ranking

    def with_bm25s():
        stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize(c.doc_texts, stopwords="en", stemmer=stemmer, show_progress=False)
        model = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        model.index(tokens, show_progress=False)
        q = bm25s.tokenize(c.query_texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
        return model.retrieve(q, k=DEPTH, show_progress=False)

    def tokenize_for_rank_bm25():
        stemmer = Stemmer.Stemmer("english")
        docs = bm25s.tokenize(c.doc_texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
        queries = bm25s.tokenize(c.query_texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
        return docs, queries

    runs = [ours() for _ in range(repeat)]
    t_index, t_search = min(r[0] for r in runs), min(r[1] for r in runs)
    t_ours, ranking = min(r[0] + r[1] for r in runs), runs[0][2]
    t_bm25s, (docs_bm25s, _) = best_of(with_bm25s, repeat)
    t_tok, (doc_tokens, query_tokens) = best_of(tokenize_for_rank_bm25, 1)
    t_rank_index, model = best_of(lambda: rank_bm25.BM25Okapi(doc_tokens, k1=1.2, b=0.75), 1)
    t_rank_search, _ = best_of(
        lambda: [np.argsort(-model.get_scores(t), kind="stable")[:DEPTH] for t in query_tokens], 1
    )
    t_rank = t_tok + t_rank_index + t_rank_search
    same_top10 = np.mean([len(set(a[:10]) & set(b[:10])) / 10 for a, b in zip(ranking.doc_idx, docs_bm25s)])
    line("ours: BM25Retriever index + search", t_ours, f"(index incl. tokenization {t_index:.3f} s, search {t_search:.3f} s)")
    line("bm25s direct: tokenize + index + retrieve", t_bm25s, f"ours/bm25s = {t_ours / t_bm25s:.2f}x  (goal <= 1.2x)")
    line("rank_bm25 BM25Okapi: tokenize + index + search", t_rank, f"rank_bm25/ours = {t_rank / t_ours:.1f}x  (goal >= 30x)")
    print(
        f"  {'':44s} rank_bm25: tokenize {t_tok:.3f} s, index {t_rank_index:.3f} s, search {t_rank_search:.3f} s"
        f" (search alone: {t_rank_search / t_search:.0f}x ours)"
    )
    print(f"  top-10 overlap with bm25s: {same_top10:.4f}")


# --------------------------------------------------------------------------- dense


def bench_dense(c, cache_dir: Path, repeat: int) -> None:
    print(f"\nDense (all-MiniLM-L6-v2, cpu) on {c.name}")

    def run() -> tuple[DenseRetriever, Ranking]:
        r = DenseRetriever(cache_dir=cache_dir)
        r.index(c.doc_ids, c.doc_texts)
        return r, r.search(c.query_ids, c.query_texts, DEPTH)

    t_first, (r1, first) = best_of(run, 1)
    t_second, (r2, second) = best_of(run, repeat)
    assert r2.last_cache_hits == {"docs": True, "queries": True}
    assert np.array_equal(first.doc_idx, second.doc_idx)
    line("first run (load model, encode, search)", t_first)
    line("second run (embeddings from the cache)", t_second, f"first/second = {t_first / t_second:.0f}x  (goal >= 20x)")

    import faiss

    q = r1.encode(c.query_texts, r1.query_prefix)
    d = r1.doc_embeddings
    index = faiss.IndexFlatIP(d.shape[1])
    t_add, _ = best_of(lambda: index.add(d), 1)
    t_exact, ours = best_of(lambda: exact_search(q, d, DEPTH), max(repeat, 5))
    t_faiss, (_, idx) = best_of(lambda: index.search(q, DEPTH), max(repeat, 5))
    agree = np.mean(ours.doc_idx == idx)
    line("exact search (numpy matmul + top_k)", t_exact)
    line("faiss IndexFlatIP search", t_faiss, f"ours/faiss = {t_exact / t_faiss:.2f}x  (goal <= 1.5x)")
    print(f"  faiss add: {t_add:.3f} s; same documents at the same ranks: {agree:.4f}; threads: faiss {faiss.omp_get_max_threads()}")


# --------------------------------------------------------------------------- effectiveness


def effectiveness(collections, cache_dir: Path, skip_dense: bool) -> None:
    print("\nnDCG@10 (linear gain = trec_eval ndcg_cut_10), depth 100")
    names = ["bm25"] if skip_dense else ["bm25", "dense", "hybrid rrf", "hybrid convex"]
    print(f"  {'collection':<12s}" + "".join(f"{n:>15s}" for n in names))
    for c in collections:
        makers: dict[str, Callable[[], Any]] = {"bm25": BM25Retriever}
        if not skip_dense:
            makers["dense"] = lambda: DenseRetriever(cache_dir=cache_dir)
            makers["hybrid rrf"] = lambda: HybridRetriever(BM25Retriever(), DenseRetriever(cache_dir=cache_dir))
            makers["hybrid convex"] = lambda: HybridRetriever(
                BM25Retriever(), DenseRetriever(cache_dir=cache_dir), fusion="convex", alpha=0.5
            )
        row = []
        for name in names:
            r = makers[name]()
            r.index(c.doc_ids, c.doc_texts)
            row.append(ndcg10(c, r.search(c.query_ids, c.query_texts, DEPTH)))
        print(f"  {c.name:<12s}" + "".join(f"{v:15.4f}" for v in row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-dense", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    scifact = load_beir(args.data / "scifact")
    cranfield = load_beir(args.data / "cranfield")
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, cpus {os.cpu_count()}")
    with tempfile.TemporaryDirectory(prefix="bench-retrievers-") as tmp:
        cache_dir = Path(tmp)
        bench_bm25(scifact, args.repeat)
        if not args.skip_dense:
            bench_dense(scifact, cache_dir, args.repeat)
        effectiveness([scifact, cranfield], cache_dir, args.skip_dense)


if __name__ == "__main__":
    main()

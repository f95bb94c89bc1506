"""HNSW's search breadth against exact search on SciFact: recall, nDCG@10 and p95 latency
(issue 36), for faiss (``efSearch``) and Chroma (``ef_search``), with their Pareto front.

    python benchmarks/hnsw.py [--data ../shared/data/scifact] [--ef 10,16,32,64,128,256]
                              [--figure docs/img/hnsw_pareto.png] [--json outputs/hnsw.json]

The corpus and the queries are embedded once with the project's dense retriever (bundled
all-MiniLM-L6-v2) through its text cache ``--cache`` (default: the tests' cache, which
``tests/retrievers/scifact_cache.py`` fills with SciFact's embeddings; read from a copy, so
nothing is written there): a second run encodes nothing. Then, on
those embeddings, as ann-benchmarks measures (the query already embedded; its encoding is the
same for every index and is left out):

- exact search (numpy inner products, ``retrievers.dense.exact_search``): the truth;
- faiss ``IndexHNSWFlat`` with the pipeline's build settings (conf/retriever/dense.yaml: M 32,
  efConstruction 200) at each efSearch, one thread;
- a Chroma collection (in-process ``PersistentClient`` in a temporary folder, ``ip`` space,
  Chroma's build defaults) at each ``ef_search`` (``retrievers.chroma.set_ef_search``).

Each query is searched alone and timed, three passes, its fastest kept (ann-benchmarks'
best-of-N; p50/p95 with percentile-bootstrap CIs, ``pipeline.stats.percentile``); run it with
``OMP_NUM_THREADS=1`` so that numpy's exact search is single-threaded like faiss's; recall@10 is the share of exact search's top 10 found;
nDCG@10 is the project's (``pipeline.metrics.evaluate``, exp gain). The Pareto front of nDCG@10
against p95 latency is ``pipeline.sweep.pareto.pareto_front``. Prints a markdown table and the
machine; ``--figure`` draws recall@10 and nDCG@10 against p95 latency.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project's pipeline package, not benchmarks/pipeline.py beside this file
DEPTH = 10


def embedded(data: Path, cache: Path) -> tuple[Any, np.ndarray, np.ndarray]:
    """(the collection, document embeddings, query embeddings), through the dense retriever's cache."""
    from hydra import compose, initialize_config_dir

    from pipeline import stages
    from pipeline.config import Settings
    from retrievers.dense import DenseRetriever

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        settings = Settings.of(compose("config", overrides=["tracking=none", "dataset=beir", f"dataset.path={data}"]))
    collection = stages.load(settings)
    with tempfile.TemporaryDirectory(prefix="hnsw-embeddings-") as copy:  # what the dense retriever writes: not there
        if (cache / "texts").is_dir():
            shutil.copytree(cache / "texts", Path(copy) / "texts")
        dense = DenseRetriever(cache_dir=copy, show_progress_bar=False)
        dense.index(collection.doc_ids, collection.doc_texts)
        queries = dense.cached_embeddings("queries", list(collection.query_ids), list(collection.query_texts), "")
    return collection, dense.doc_embeddings, queries


#: Timed passes over the queries; each query's latency is its fastest (ann-benchmarks' best-of-N):
#: on a shared machine the other passes' extra time is other processes', not the index's.
PASSES = 3


def timed_each(search, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(doc indices [n, DEPTH] of the first pass, latencies ms [n]): ``search(one query [1, dim])``
    per query, :data:`PASSES` times; each query's fastest pass."""
    found, ms = [], np.full((PASSES, len(queries)), np.inf)
    for p in range(PASSES):
        for i, q in enumerate(queries):
            start = time.perf_counter()
            hit = search(q[None])
            ms[p, i] = 1000 * (time.perf_counter() - start)
            if p == 0:
                found.append(hit)
    return np.vstack(found), ms.min(axis=0)


def row(system: str, setting: str, found: np.ndarray, ms: np.ndarray, truth: np.ndarray, collection: Any,
        build_s: float | None) -> dict[str, Any]:
    from pipeline.metrics import evaluate
    from pipeline.stats.percentile import percentiles_with_ci

    ev = evaluate(found, collection.qrels, DEPTH)
    keep = ev.n_relevant > 0
    recall = np.mean([len(set(f[f >= 0].tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth)])
    pct = percentiles_with_ci(ms, [50, 95], n_resamples=1000)
    return {"system": system, "setting": setting, "recall_at_10_vs_exact": float(recall),
            "ndcg_at_10": float(ev.at_k["ndcg"][keep, DEPTH - 1].mean()), "p50_ms": pct[50.0][0],
            "p95_ms": pct[95.0][0], "p95_ci_low": pct[95.0][1], "p95_ci_high": pct[95.0][2],
            "queries_per_s": float(1000 / ms.mean()), "build_s": build_s}


def faiss_rows(docs: np.ndarray, queries: np.ndarray, truth: np.ndarray, collection: Any, efs: list[int]
               ) -> list[dict[str, Any]]:
    import faiss

    from retrievers.dense import build_faiss_index

    faiss.omp_set_num_threads(1)
    start = time.perf_counter()
    index = build_faiss_index(docs, "hnsw", 32, 200)
    build = time.perf_counter() - start
    rows = []
    for ef in efs:
        index.hnsw.efSearch = ef
        found, ms = timed_each(lambda q: index.search(q, DEPTH)[1], queries)
        rows.append(row("faiss HNSW", f"efSearch={ef}", found, ms, truth, collection, build))
    return rows


def chroma_rows(docs: np.ndarray, queries: np.ndarray, truth: np.ndarray, collection: Any, efs: list[int]
                ) -> list[dict[str, Any]]:
    import chromadb
    from chromadb.config import Settings

    from retrievers.chroma import reopened, set_ef_search, write_collection

    with tempfile.TemporaryDirectory(prefix="hnsw-chroma-") as folder:
        client = chromadb.PersistentClient(path=folder, settings=Settings(anonymized_telemetry=False))
        ids = [str(i) for i in range(len(docs))]
        start = time.perf_counter()
        chroma = write_collection(client, "scifact", ids, docs, [{"doc": i} for i in range(len(docs))], space="ip")
        build = time.perf_counter() - start
        rows = []
        for ef in efs:
            if set_ef_search(chroma, ef):  # applied when the index is next loaded: a new client
                chroma = reopened(folder, "scifact")
            found, ms = timed_each(lambda q: np.array([[int(i) for i in chroma.query(
                query_embeddings=q, n_results=DEPTH, include=[])["ids"][0]]]), queries)
            rows.append(row("Chroma HNSW", f"ef_search={ef}", found, ms, truth, collection, build))
        return rows


def draw(rows: list[dict[str, Any]], front: list[bool], path: Path, title: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, key, label in ((axes[0], "recall_at_10_vs_exact", "recall@10 against exact search"),
                           (axes[1], "ndcg_at_10", "nDCG@10")):
        for i, system in enumerate(dict.fromkeys(r["system"] for r in rows)):
            mine = [r for r in rows if r["system"] == system]
            ax.errorbar([r["p95_ms"] for r in mine], [r[key] for r in mine], fmt="o-", color=f"C{i}",
                        xerr=[[r["p95_ms"] - r["p95_ci_low"] for r in mine], [r["p95_ci_high"] - r["p95_ms"] for r in mine]],
                        markersize=4, capsize=2, linewidth=1, label=system)
        on = [r for r, f in zip(rows, front) if f]
        ax.plot([r["p95_ms"] for r in on], [r[key] for r in on], "o", markersize=11, markerfacecolor="none",
                color="C3", label="Pareto front (nDCG@10 vs p95)")
        for r in rows:
            if r["system"] != "exact":
                ax.annotate(r["setting"].split("=")[1], (r["p95_ms"], r[key]), textcoords="offset points",
                            xytext=(4, -9), fontsize="x-small")
        ax.set_xscale("log")
        ax.set_xlabel("p95 search latency per query (ms, log), 95% CI")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[1].legend(fontsize="x-small", loc="lower right")
    fig.suptitle(title, fontsize="medium")
    fig.savefig(path, dpi=72)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    # the tests' cache holds SciFact's MiniLM embeddings (tests/retrievers/scifact_cache.py fills it)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "rag-retrieval-eval" / "tests")
    parser.add_argument("--ef", default="10,16,32,64,128,256")
    parser.add_argument("--no-chroma", action="store_true")
    parser.add_argument("--figure", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from pipeline.sweep.pareto import pareto_front
    from retrievers.cost import machine
    from retrievers.dense import exact_search

    efs = [int(e) for e in args.ef.split(",")]
    collection, docs, queries = embedded(args.data, args.cache)
    truth = exact_search(queries, docs, DEPTH).doc_idx
    found, ms = timed_each(lambda q: exact_search(q, docs, DEPTH).doc_idx, queries)
    rows = [row("exact", "numpy", found, ms, truth, collection, 0.0)]
    rows += faiss_rows(docs, queries, truth, collection, efs)
    if not args.no_chroma:
        rows += chroma_rows(docs, queries, truth, collection, efs)
    front = pareto_front([r["ndcg_at_10"] for r in rows], [r["p95_ms"] for r in rows]).tolist()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    info = {"date": time.strftime("%Y-%m-%d"), "commit": commit.strip(), "machine": machine(),
            "load_average": list(os.getloadavg()),
            "docs": int(docs.shape[0]), "queries": int(queries.shape[0]), "rows": rows, "front": front}
    print(f"{collection.name}, {docs.shape[0]} documents, {queries.shape[0]} queries; {info['date']}, commit {info['commit']}; "
          f"{info['machine']['cpu']}, {info['machine']['usable_cores']} usable cores (load average "
          f"{info['load_average'][0]:.1f}), one search thread\n")
    print("| system | setting | recall@10 vs exact | nDCG@10 | p50 ms | p95 ms [95% CI] | queries/s | build s | front |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r, f in zip(rows, front):
        print(f"| {r['system']} | {r['setting']} | {r['recall_at_10_vs_exact']:.3f} | {r['ndcg_at_10']:.4f} | "
              f"{r['p50_ms']:.3f} | {r['p95_ms']:.3f} [{r['p95_ci_low']:.3f}, {r['p95_ci_high']:.3f}] | "
              f"{r['queries_per_s']:,.0f} | {r['build_s']:.2f} | {'yes' if f else ''} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(info, indent=1))
    if args.figure:
        draw(rows, front, args.figure, f"{collection.name} ({queries.shape[0]} queries): HNSW search breadth against exact "
                                       f"search, {info['date']}")


if __name__ == "__main__":
    main()

"""Speed of pooling (pipeline.pool): 1,000 queries x 5 runs x depth 100 (goal: under 2 s).

    python benchmarks/pool.py [--queries 1000] [--runs 5] [--depth 100] [--docs 100000] [--repeat 3]

Five TREC run files are simulated over a corpus of ``--docs`` ids: each query has a pool of
likely documents that every run samples from (so the runs overlap, as real runs do), and a
few judgments per query are left out. Timed, in one process, best of ``--repeat``:

- ``pool()``: the pooling itself on the five doc-index matrices (union of the top depth,
  judged documents out, best-rank order, seeded per-query shuffle);
- the command's work: read the five run files and map them onto the corpus (as ``--run``
  does: ``retriever=run_file``'s order, checked equal to it here), pool, and write pool.tsv, tasks.json,
  labeling_config.xml and pool.json (everything but loading the collection, which depends on
  the corpus and not on the pool);
- a reference: the same pool computed the plain-Python way (read lines, sets per query,
  minus judged, ``random.Random(seed).shuffle``), which is what a script would do.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.judging import pool as pl  # noqa: E402
from pipeline.io.collection import Collection  # noqa: E402
from pipeline.metrics import Qrels  # noqa: E402
from retrievers.run_file import RunFileRetriever  # noqa: E402


def simulate(folder: Path, n_q: int, n_runs: int, depth: int, n_docs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    doc_ids = [f"doc{i:07d}" for i in range(n_docs)]
    query_ids = [f"q{i:05d}" for i in range(n_q)]
    likely = rng.integers(0, n_docs, size=(n_q, 3 * depth))  # each query's likely documents
    paths = []
    for r in range(n_runs):
        lines = []
        for q in range(n_q):
            picks = rng.permutation(likely[q])[: depth + 20]
            picks = list(dict.fromkeys(picks.tolist()))[:depth]
            lines += [f"{query_ids[q]} Q0 {doc_ids[d]} {i + 1} {100.0 - i * 0.5:.3f} run{r}\n" for i, d in enumerate(picks)]
        path = folder / f"run{r}.trec"
        path.write_text("".join(lines))
        paths.append(path)
    judged_q = np.repeat(np.arange(n_q), 5)
    judged_d = likely[:, :5].ravel()
    collection = Collection("bench", doc_ids, [f"text of {d}" for d in doc_ids], query_ids,
                            [f"question {q}" for q in query_ids],
                            Qrels(query_idx=judged_q, doc_idx=judged_d, grade=np.ones(len(judged_q), np.int64)),
                            "digest", str(folder))
    return collection, paths


def rankings(collection: Collection, paths: list[Path], depth: int) -> list[np.ndarray]:
    """What ``--run`` does for each file (``pipeline.judging.pool.run_file_rankings``)."""
    return pl.run_file_rankings(paths, collection, depth)


def check_same_as_run_file_retriever(collection: Collection, paths: list[Path], depth: int) -> bool:
    """``--run``'s rankings equal ``retriever=run_file``'s (tie_break doc_index)."""
    ours = rankings(collection, paths, depth)
    for path, mine in zip(paths, ours):
        retriever = RunFileRetriever(path)
        retriever.index(collection.doc_ids, collection.doc_texts)
        if not np.array_equal(retriever.search(collection.query_ids, collection.query_texts, depth).doc_idx, mine):
            return False
    return True


def command(collection: Collection, paths: list[Path], depth: int, out: Path) -> pl.Pool:
    result = pl.pool(rankings(collection, paths, depth), collection.query_ids, collection.doc_ids, depth,
                     (collection.qrels.query_idx, collection.qrels.doc_idx), None, 0)
    pl.write_pool(out, result, collection, {"n_pooled": int(len(result.doc_idx))})
    return result


def plain_python(collection: Collection, paths: list[Path], depth: int) -> dict[str, list[str]]:
    judged = {(collection.query_ids[q], collection.doc_ids[d])
              for q, d in zip(collection.qrels.query_idx.tolist(), collection.qrels.doc_idx.tolist())}
    found: dict[str, dict[str, float]] = {}
    for path in paths:
        per_query: dict[str, list[tuple[float, str]]] = {}
        with open(path) as fh:
            for line in fh:
                q, _, d, _, s, _ = line.split()
                per_query.setdefault(q, []).append((-float(s), d))
        for q, rows in per_query.items():
            for _, d in sorted(rows)[:depth]:
                if (q, d) not in judged:
                    found.setdefault(q, {})[d] = 1.0
    result = {}
    for q, docs in found.items():
        order = sorted(docs)
        random.Random(f"0 {q}").shuffle(order)
        result[q] = order
    return result


def best(fn, repeat: int) -> tuple[float, float, object]:
    """Best wall-clock and best CPU seconds (this process) of ``repeat`` calls, and the value.
    On a loaded machine the CPU time is the fairer number: wall time includes waiting for a core."""
    walls, cpus, value = [], [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        value = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus), value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        collection, paths = simulate(folder, args.queries, args.runs, args.depth, args.docs)
        ranked = rankings(collection, paths, args.depth)
        judged = (collection.qrels.query_idx, collection.qrels.doc_idx)
        t_pool, c_pool, result = best(lambda: pl.pool(ranked, collection.query_ids, collection.doc_ids, args.depth, judged),
                              args.repeat)
        t_cmd, c_cmd, _ = best(lambda: command(collection, paths, args.depth, folder / "out"), args.repeat)
        t_ref, c_ref, ref = best(lambda: plain_python(collection, paths, args.depth), args.repeat)
        ours = {}
        for q, d in zip(result.query_idx.tolist(), result.doc_idx.tolist()):
            ours.setdefault(collection.query_ids[q], set()).add(collection.doc_ids[d])
        same = ours == {q: set(v) for q, v in ref.items()}
        same_rankings = check_same_as_run_file_retriever(collection, paths, args.depth)
        n = len(result.doc_idx)
        print(f"{args.queries} queries x {args.runs} runs x depth {args.depth} "
              f"({args.queries * args.runs * args.depth:,} run lines, {args.docs:,} documents): "
              f"{n:,} documents pooled ({result.n_candidates:,} candidates, {result.n_judged:,} judged left out)")
        print("                                    wall s   CPU s")
        print(f"  pool() on the rankings            {t_pool:7.3f} {c_pool:7.3f}")
        print(f"  read runs + pool + write outputs  {t_cmd:7.3f} {c_cmd:7.3f}   (goal < 2 s: wall "
              f"{'met' if t_cmd < 2 else 'NOT met'}, CPU {'met' if c_cmd < 2 else 'NOT met'})")
        print(f"  plain-Python reference            {t_ref:7.3f} {c_ref:7.3f}   (ours / reference, CPU: "
              f"{c_cmd / c_ref:.2f}x; same pools: {same})")
        print(f"  --run's rankings equal retriever=run_file's: {same_rankings}")


if __name__ == "__main__":
    main()

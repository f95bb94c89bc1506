"""The user's own retriever (retriever=python): what the adapter costs, and what its thread pool buys.

    python benchmarks/adapters.py [--queries 1000] [--repeat 5] [--latency 0.02]

Goals of issue 26, on ``--queries`` queries (the bundled sample's 52 questions, repeated):

- overhead: ``PythonRetriever`` (one query per call, ``concurrency=1``: one worker thread, so only the
  adapter is measured) around a BM25 function over the sample, against calling that function
  in a plain loop (goal: at most 10% more time). Best of ``--repeat`` runs each, taking turns.
- I/O-bound: a function that waits ``--latency`` seconds per call (a remote index), through
  the pool of 4 threads (the default ``concurrency``) against one call after another (goal:
  at most 1/3 of the serial time).

Results go in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "retrievers")]  # adapters_fixtures: the test functions

import adapters_fixtures  # noqa: E402

from pipeline.io.collection import load_sample  # noqa: E402
from retrievers.python_function import PythonRetriever  # noqa: E402


def best(fn: Callable[[], object], repeat: int) -> float:
    return min(interleaved([fn], repeat)[0])


def interleaved(fns: list[Callable[[], object]], repeat: int) -> list[list[float]]:
    """Each function's times over ``repeat`` rounds, the functions taking turns within a round
    (on a shared machine both then see the same load)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.02)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    collection = load_sample()
    texts = [collection.query_texts[i % collection.n_queries] for i in range(args.queries)]
    ids = [f"q{i}" for i in range(args.queries)]
    k = 10
    adapters_fixtures.sample_bm25(texts[0], k)  # the index is built once, outside the timings

    def bare() -> None:
        for t in texts:
            adapters_fixtures.sample_bm25(t, k)

    def adapted(target: str, concurrency: int, options: dict | None = None,
                doc_ids: list[str] | None = None) -> Callable[[], object]:
        retriever = PythonRetriever(target, concurrency=concurrency, options=options, show_progress_bar=False)
        doc_ids = list(collection.doc_ids) if doc_ids is None else doc_ids
        retriever.index(doc_ids, [""] * len(doc_ids))
        return lambda: retriever.search(ids, texts, k)

    bare_times, adapter_times = interleaved([bare, adapted("adapters_fixtures:sample_bm25", 1)], args.repeat)
    t_bare, t_adapter = min(bare_times), min(adapter_times)
    slow = {"latency": args.latency}
    t_serial = best(lambda: [adapters_fixtures.slow_search(t, k, args.latency) for t in texts], 1)
    t_pool = best(adapted("adapters_fixtures:slow_search", 4, slow, ["d1"]), 1)  # its one id: d1
    overhead = t_adapter / t_bare - 1
    rows = [
        ("BM25 function, plain loop", t_bare, ""),
        ("BM25 function, retriever=python", t_adapter, f"overhead {overhead:+.1%} (goal <= +10%)"),
        (f"{args.latency * 1000:.0f} ms/call, serial", t_serial, ""),
        (f"{args.latency * 1000:.0f} ms/call, retriever=python concurrency=4", t_pool,
         f"{t_pool / t_serial:.3f} of serial (goal <= 0.333)"),
    ]
    print(f"{args.queries} queries, k={k}")
    print(f"{'case':<52} {'seconds':>8}  note")
    for name, seconds, note in rows:
        print(f"{name:<52} {seconds:>8.3f}  {note}")
    return 0 if overhead <= 0.10 and t_pool <= t_serial / 3 else 1


if __name__ == "__main__":
    sys.exit(main())

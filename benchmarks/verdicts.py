"""Error rates of the verdicts (``pipeline.stats.verdicts``) by Monte Carlo on real per-query scores.

    python benchmarks/verdicts.py [--datasets sample scifact] [--metric ndcg_at_10] [--margin 0.01]
                                  [--systems 2 18] [--queries 50 300 1000] [--reps 400]
                                  [--permutations 1000] [--seed 0] [--json FILE]

The table in benchmarks/README.md: ``--queries 50 300 1000 --reps 400 400 200 --permutations 500``.

Real matrices: BM25 variants (``VARIANTS``: Lucene k1/b settings, BM25+, BM25L, no stemming, no
stop words) retrieve the top 10 on the bundled sample (52 queries) and on BEIR SciFact (300 test
queries, ../shared/data/scifact), scored per query with ``pipeline.evaluate``.

Null (exchangeable systems): each replicate draws n queries with replacement from the real
queries, and each simulated system's score on a drawn query is the score of a real variant drawn
at random for that (system, query): every simulated system has the same expected mean, the
query-to-query variance and the size of per-query differences between systems are the real
ones. Known differences are injected by adding delta (0.5, 1 and 2 margins) to system 0's scores.

Per replicate one stack ``[conditions, systems, queries]`` (the null and each delta, the same
base draw) goes through exactly what ``stats.infer`` computes (:func:`verdict_stack`): the
randomized Tukey HSD p-values and critical range of ``significance.tukey_ranges`` with one set of
permutations for the stack, as ``tukey_hsd_stack`` does for several metrics, so each condition's
numbers have the distribution of ``infer``'s (they equal ``infer``'s, the HSD to rounding, when every
condition keeps the same queries in the permutations; tests/benchmarks/test_verdicts.py checks it).

Measured (each rate with its Monte Carlo standard error sqrt(r (1 - r) / reps)):

- ``any_called``: null, how often any pair is called better or worse (goal <= 0.05);
- ``best_in_set@Dm``: system 0 is best by delta; how often it is in the best set (goal >= 0.95);
- ``equivalent@2m``: delta = 2 margins; how often 0 vs 1 is called equivalent (goal <= 0.05);
  ``equivalent@1m`` (at the margin itself, also <= 0.05 by TOST) and ``equivalent@0m`` (null:
  how often truly equal systems are shown equivalent, the power of the equivalence test);
- ``power@Dm``: how often system 0 is called better than system 1, per n and delta;
- ``wrong_sign@Dm``: how often system 0 is called worse than system 1 (should be ~0).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import stats  # noqa: E402
from pipeline.stats.significance import tukey_pvalues, tukey_ranges, tukey_tolerance  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
#: BM25 configurations whose per-query scores make the real matrix (keyword arguments of BM25Retriever).
VARIANTS = {"lucene": {}, "k1=0.9,b=0.4": {"k1": 0.9, "b": 0.4}, "k1=2,b=1": {"k1": 2.0, "b": 1.0},
            "bm25+": {"method": "bm25+"}, "bm25l": {"method": "bm25l"}, "no stemming": {"stemmer": None},
            "no stop words": {"stopwords": None}}
DELTAS = (0.5, 1.0, 2.0)  # in margins


def real_matrix(dataset: str, metric: str = "ndcg_at_10", variants: dict | None = None) -> NDArray[np.float64]:
    """``[variants, queries]``: each BM25 variant's per-query ``metric`` on ``dataset`` (``sample`` or a
    BEIR folder under ../shared/data), the evaluated queries of the first variant in its order."""
    import pipeline  # noqa: PLC0415
    from retrievers.bm25 import BM25Retriever  # noqa: PLC0415

    quiet = logging.getLogger("pipeline")  # the sample's "few judged documents" warnings, for this call only
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return _real_matrix(pipeline, BM25Retriever, dataset, metric, variants)
    finally:
        quiet.setLevel(level)


def _real_matrix(pipeline: Any, BM25Retriever: Any, dataset: str, metric: str,  # noqa: N803
                 variants: dict | None) -> NDArray[np.float64]:
    variants = VARIANTS if variants is None else variants
    if dataset == "sample":
        coll, qrels = pipeline.load_collection("sample"), ROOT / "pipeline" / "sample" / "qrels" / "test.tsv"
    else:
        coll, qrels = pipeline.load_collection(DATA / dataset), DATA / dataset / "qrels" / "test.tsv"
    depth = int(metric.rsplit("_", 1)[-1]) if metric[-1].isdigit() else 10
    rows, qids = [], None
    for options in variants.values():
        retriever = BM25Retriever(**options)
        retriever.index(coll.doc_ids, coll.doc_texts)
        ranking = retriever.search(coll.query_ids, coll.query_texts, depth)
        run = {q: {coll.doc_ids[d]: float(s) for d, s in zip(idx, sc) if d >= 0}
               for q, idx, sc in zip(coll.query_ids, ranking.doc_idx, ranking.scores)}
        values = pipeline.evaluate(str(qrels), {q: r for q, r in run.items() if r}, [metric]).values(metric)
        qids = list(values.index) if qids is None else qids
        rows.append(values.reindex(qids).fillna(0.0).to_numpy(dtype=np.float64))
    return np.array(rows)


def simulate(real: NDArray[np.float64], n_systems: int, n_queries: int,
             rng: np.random.Generator) -> NDArray[np.float64]:
    """Exchangeable systems ``[n_systems, n_queries]`` from the real matrix (see the module docstring)."""
    k, n = real.shape
    queries = rng.integers(0, n, n_queries)
    variant = rng.integers(0, k, (n_systems, n_queries))
    return real[variant, queries[None, :]]


def verdict_stack(x: NDArray[np.float64], alpha: float, n_permutations: int,
                  seed: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per condition of ``x [conditions, systems, queries]``: ``infer``'s Tukey p matrix and HSD (the
    systems must be distinct, as the simulation's always are; one set of permutations)."""
    ranges = tukey_ranges(x, n_permutations, seed)
    p = tukey_pvalues(x, ranges)
    tol = tukey_tolerance(x)
    hsd = np.array([stats.critical_range(ranges[c], float(tol[c]), alpha) for c in range(x.shape[0])])
    return p, hsd


def replicate(real: NDArray[np.float64], n_systems: int, n_queries: int, margin: float, alpha: float,
              n_permutations: int, rng: np.random.Generator, seed: int) -> dict[str, list[bool]]:
    """One replicate: the null and each delta of :data:`DELTAS` on one base draw."""
    base = simulate(real, n_systems, n_queries, rng)
    while len(set(stats.distinct_rows(base).tolist())) < n_systems:  # twins: draw again (rare)
        base = simulate(real, n_systems, n_queries, rng)
    shifts = np.zeros((1 + len(DELTAS), n_systems, 1))
    shifts[1:, 0, 0] = np.array(DELTAS) * margin
    x = base[None] + shifts
    p, hsd = verdict_stack(x, alpha, n_permutations, seed)
    means = x.mean(axis=2)
    diff = means[:, 0] - means[:, 1]
    best = means.argmax(axis=1)
    off = ~np.eye(n_systems, dtype=bool)
    return {"any_called": [bool((p[0][off] <= alpha).any())],
            "equivalent_null": [bool(-margin < diff[0] - hsd[0] and diff[0] + hsd[0] < margin)],
            "best_in_set": [bool(best[c] == 0 or p[c, 0, best[c]] > alpha) for c in range(1, len(x))],
            "equivalent": [bool(-margin < diff[c] - hsd[c] and diff[c] + hsd[c] < margin) for c in range(1, len(x))],
            "power": [bool(diff[c] - hsd[c] > 0) for c in range(1, len(x))],
            "wrong_sign": [bool(diff[c] + hsd[c] < 0) for c in range(1, len(x))],
            "hsd": [float(hsd[0])]}


def rate(hits: list[bool] | NDArray[np.bool_]) -> tuple[float, float]:
    """The share of True and its Monte Carlo standard error."""
    r = float(np.mean(hits))
    return r, math.sqrt(r * (1 - r) / len(hits))


def measure(real: NDArray[np.float64], *, n_systems: int, n_queries: int, reps: int, margin: float = 0.01,
            alpha: float = 0.05, n_permutations: int = 1000, seed: int = 0) -> dict:
    """Every rate of the module docstring for one (systems, queries) setting."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(n_systems, n_queries)))
    runs = [replicate(real, n_systems, n_queries, margin, alpha, n_permutations, rng, seed * 100_003 + r)
            for r in range(reps)]
    col = {key: np.array([run[key] for run in runs]) for key in runs[0]}
    out = {"systems": n_systems, "queries": n_queries, "reps": reps, "any_called": rate(col["any_called"][:, 0]),
           "equivalent@0m": rate(col["equivalent_null"][:, 0]), "hsd_median": float(np.median(col["hsd"]))}
    for j, d in enumerate(DELTAS):
        for key in ("best_in_set", "equivalent", "power", "wrong_sign"):
            out[f"{key}@{d:g}m"] = rate(col[key][:, j])
    return out


def markdown(results: dict[str, list[dict]], margin: float) -> str:
    """The table of benchmarks/README.md: one row per dataset, systems and queries."""
    def cell(v: tuple[float, float]) -> str:
        return f"{v[0]:.3f} ± {v[1]:.3f}"
    head = ["data", "systems", "queries", "HSD (median)", "any called, null (<= 0.05)",
            "true best in set, +1m (>= 0.95)", "equivalent at 2m (<= 0.05)", "equivalent at 1m",
            "equivalent, null", *(f"power {d:g}m" for d in DELTAS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for data, rows in results.items():
        for r in rows:
            lines.append("| " + " | ".join([data, str(r["systems"]), str(r["queries"]), f"{r['hsd_median']:.4f}",
                                            cell(r["any_called"]), cell(r["best_in_set@1m"]),
                                            cell(r["equivalent@2m"]), cell(r["equivalent@1m"]),
                                            cell(r.get("equivalent@0m", (math.nan, math.nan))),
                                            *(cell(r[f"power@{d:g}m"]) for d in DELTAS)])
                         + " |")
    return "\n".join(lines) + f"\n\nmargin m = {margin:g}; ± is one Monte Carlo standard error."


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["sample", "scifact"])
    ap.add_argument("--metric", default="ndcg_at_10")
    ap.add_argument("--margin", type=float, default=stats.DEFAULT_MARGIN)
    ap.add_argument("--systems", type=int, nargs="+", default=[2, 18])
    ap.add_argument("--queries", type=int, nargs="+", default=[50, 300, 1000])
    ap.add_argument("--reps", type=int, nargs="+", default=[400], help="one count, or one per --queries")
    ap.add_argument("--permutations", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    results: dict[str, list[dict]] = {}
    for data in args.datasets:
        t0 = time.perf_counter()
        real = real_matrix(data, args.metric)
        print(f"{data}: {real.shape[0]} variants x {real.shape[1]} queries, means "
              f"{np.round(real.mean(axis=1), 3).tolist()} ({time.perf_counter() - t0:.1f} s)", flush=True)
        results[data] = []
        reps = dict(zip(args.queries, args.reps * len(args.queries) if len(args.reps) == 1 else args.reps))
        for s in args.systems:
            for n in args.queries:
                t0 = time.perf_counter()
                results[data].append(measure(real, n_systems=s, n_queries=n, reps=reps[n], margin=args.margin,
                                             n_permutations=args.permutations, seed=args.seed))
                print(f"  {s} systems, {n} queries: {time.perf_counter() - t0:.1f} s", flush=True)
    print(markdown(results, args.margin))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()

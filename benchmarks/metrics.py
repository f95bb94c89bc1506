"""Speed of the metrics engine and of the scorer CLI against pytrec_eval and ranx.

    python benchmarks/metrics.py [--queries 10000] [--depth 100] [--repeat 3]

(a) in-process: our full K-sweep (K = 1..100, every metric family, per query) against
    pytrec_eval evaluating P/recall/ndcg_cut/map_cut at 1,3,5,10,20,50,100 + recip_rank,
    and against ranx on prebuilt Qrels/Run with the same measures.
(b) end to end: ``python -m pipeline.score QRELS RUN --json`` on the 1M-line run against a
    script doing the same job with pytrec_eval's own parsers.
Prints seconds (best of --repeat) and the ratio ours / theirs (goals: (a) <= 0.4, (b) <= 0.7).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.metrics import Qrels, evaluate  # noqa: E402

CUTS = (1, 3, 5, 10, 20, 50, 100)

PYTREC_SCRIPT = """
import json, sys, pytrec_eval
with open(sys.argv[1]) as f:
    qrels = pytrec_eval.parse_qrel(f)
with open(sys.argv[2]) as f:
    run = pytrec_eval.parse_run(f)
cuts = "1,3,5,10,20,50,100"
ev = pytrec_eval.RelevanceEvaluator(qrels, {f"P.{cuts}", f"recall.{cuts}", f"ndcg_cut.{cuts}", f"map_cut.{cuts}", "recip_rank", "map"})
res = ev.evaluate(run)
names = next(iter(res.values())).keys()
print(json.dumps({m: pytrec_eval.compute_aggregated_measure(m, [q[m] for q in res.values()]) for m in names}))
"""


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def make_data(n_q: int, depth: int, n_docs: int, judged: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    qi = np.repeat(np.arange(n_q), judged)
    di = np.argsort(rng.random((n_q, n_docs)), axis=1)[:, :judged].ravel()
    grades = rng.integers(0, 5, len(qi))
    ranking = np.argsort(rng.random((n_q, n_docs)), axis=1)[:, :depth]
    scores = np.sort(rng.permutation(n_q * depth).reshape(n_q, depth).astype(np.float64), axis=1)[:, ::-1]
    return Qrels(qi, di, grades), ranking, scores


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import pytrec_eval
    import ranx

    qrels, ranking, scores = make_data(args.queries, args.depth, n_docs=1000, judged=30)
    qd: dict[str, dict[str, int]] = {}
    for q, d, g in zip(qrels.query_idx.tolist(), qrels.doc_idx.tolist(), qrels.grade.tolist()):
        qd.setdefault(f"q{q}", {})[f"d{d}"] = g
    rd = {
        f"q{q}": dict(zip([f"d{d}" for d in ranking[q].tolist()], scores[q].tolist())) for q in range(len(ranking))
    }
    print(f"(a) {args.queries:,} queries x {args.depth} documents, graded qrels (0-4), best of {args.repeat}")

    def ours() -> None:
        ev = evaluate(ranking, qrels, k_max=args.depth, gain="linear")
        ev.means()

    t_ours = best_of(args.repeat, ours)
    t_table = best_of(args.repeat, lambda: evaluate(ranking, qrels, k_max=args.depth).per_query(list(qd)))

    cuts = ",".join(map(str, CUTS))
    measures = {f"P.{cuts}", f"recall.{cuts}", f"ndcg_cut.{cuts}", f"map_cut.{cuts}", "recip_rank", "map"}
    evaluator = pytrec_eval.RelevanceEvaluator(qd, measures)
    t_pytrec = best_of(args.repeat, lambda: evaluator.evaluate(rd))

    rq, rr = ranx.Qrels(qd), ranx.Run(rd)
    ranx_metrics = [f"{m}@{k}" for m in ("precision", "recall", "ndcg", "map") for k in CUTS] + ["mrr", "map"]
    ranx.evaluate(rq, rr, ranx_metrics)  # JIT warm-up, not timed
    t_ranx = best_of(args.repeat, lambda: ranx.evaluate(rq, rr, ranx_metrics))

    print(f"  ours: full K-sweep K=1..{args.depth}, 8 families + mrr/map   {t_ours:8.3f} s")
    print(f"  ours incl. the per-query pandas table                   {t_table:8.3f} s")
    print(f"  pytrec_eval {len(CUTS)} cut-offs x 4 + recip_rank + map          {t_pytrec:8.3f} s")
    print(f"  ranx (prebuilt Qrels/Run, JIT warm)                     {t_ranx:8.3f} s")
    print(f"  ratio ours / pytrec_eval = {t_ours / t_pytrec:.3f}   (goal <= 0.4)")
    print(f"  ratio ours / ranx        = {t_ours / t_ranx:.3f}")

    with tempfile.TemporaryDirectory() as tmp:
        qrels_path, run_path = Path(tmp) / "qrels.txt", Path(tmp) / "run.txt"
        with open(qrels_path, "w") as fh:
            for q, docs in qd.items():
                fh.writelines(f"{q} 0 {d} {g}\n" for d, g in docs.items())
        with open(run_path, "w") as fh:
            for q, docs in rd.items():
                fh.writelines(f"{q} Q0 {d} {r} {s:.6f} bench\n" for r, (d, s) in enumerate(docs.items(), 1))
        n_lines = sum(1 for _ in open(run_path))
        script = Path(tmp) / "pytrec_score.py"
        script.write_text(PYTREC_SCRIPT)
        ours_cmd = [sys.executable, "-m", "pipeline.score", str(qrels_path), str(run_path), "--json", "--k", cuts]
        theirs_cmd = [sys.executable, str(script), str(qrels_path), str(run_path)]
        run = lambda cmd: subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)  # noqa: E731
        t_cli = best_of(args.repeat, lambda: run(ours_cmd))
        t_cli_ref = best_of(args.repeat, lambda: run(theirs_cmd))
    print(f"(b) whole command on a {n_lines:,}-line run file, best of {args.repeat}")
    print(f"  python -m pipeline.score --json                         {t_cli:8.3f} s")
    print(f"  pytrec_eval parse_qrel/parse_run + evaluate + means     {t_cli_ref:8.3f} s")
    print(f"  ratio ours / pytrec_eval = {t_cli / t_cli_ref:.3f}   (goal <= 0.7)")


if __name__ == "__main__":
    main()

"""Speed of the metrics engine and of the scorer CLI against pytrec_eval and ranx.

    python benchmarks/metrics.py [--queries 10000] [--depth 100] [--repeat 3]

(a) in-process: our full K-sweep (K = 1..100, every metric family, per query) against
    pytrec_eval evaluating P/recall/ndcg_cut/map_cut at 1,3,5,10,20,50,100 + recip_rank,
    and against ranx on prebuilt Qrels/Run with the same measures.
(b) end to end: ``python -m pipeline.score QRELS RUN --json`` on the 1M-line run (300,000
    qrels lines) against a script doing the same job with pytrec_eval's own parsers,
    alternated, best and median wall clock and CPU time (goal <= 0.5);
(d) the same with heavy qrels: 100 judgments a query, 1,000,000 qrels lines.
(c) the cost of the incomplete-judgment metrics: one scoring pass (``evaluate`` + means, K =
    1..100) with judged_at_K and bpref against the same pass without them
    (``judged_metrics=False``, the computation before they existed), alternated in one
    process, median of --repeat x 5 pairs; also the condensed-list pass (``judged_only``).
Prints seconds and the ratio ours / theirs (goals: (a) <= 0.4, (b) and (d) <= 0.5,
(c) < 1.10). ``--part b`` runs only (b) and (d), ``--part c`` only (c).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.metrics import UNJUDGED, Qrels, evaluate, grade_matrix  # noqa: E402

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
    parser.add_argument("--part", choices=("all", "b", "c"), default="all",
                        help="b: only the scorer commands (b and d); c: only the judged/bpref cost")
    args = parser.parse_args()
    if args.part == "c":
        qrels, ranking, _ = make_data(args.queries, args.depth, n_docs=1000, judged=30)
        judged_cost(ranking, qrels, args.depth, args.repeat)
        return

    import pytrec_eval
    import ranx

    qrels, ranking, scores = make_data(args.queries, args.depth, n_docs=1000, judged=30)
    qd: dict[str, dict[str, int]] = {}
    for q, d, g in zip(qrels.query_idx.tolist(), qrels.doc_idx.tolist(), qrels.grade.tolist()):
        qd.setdefault(f"q{q}", {})[f"d{d}"] = g
    rd = {
        f"q{q}": dict(zip([f"d{d}" for d in ranking[q].tolist()], scores[q].tolist())) for q in range(len(ranking))
    }
    if args.part == "b":
        scorer_cases(qd, rd, args.repeat)
        return
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

    scorer_cases(qd, rd, args.repeat)
    judged_cost(ranking, qrels, args.depth, args.repeat)


def scorer_cases(qd: dict[str, dict[str, int]], rd: dict[str, dict[str, float]], repeat: int) -> None:
    """(b) and (d): ``python -m pipeline.score`` against pytrec_eval's parsers + evaluator, each a
    whole process (interpreter start, imports, parsing, scoring, output), on the run of (a)
    with its qrels (30 judgments a query) and with heavy qrels (100 a query: as many lines as
    the run)."""
    cuts = ",".join(map(str, CUTS))
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        qrels_path, heavy_path, run_path = Path(tmp) / "qrels.txt", Path(tmp) / "qrels_heavy.txt", Path(tmp) / "run.txt"
        with open(qrels_path, "w") as fh:
            for q, docs in qd.items():
                fh.writelines(f"{q} 0 {d} {g}\n" for d, g in docs.items())
        with open(heavy_path, "w") as fh:
            judged = np.argsort(rng.random((len(qd), 1000)), axis=1)[:, :100]
            grades = rng.integers(0, 5, judged.shape)
            for q, docs, gs in zip(qd, judged.tolist(), grades.tolist()):
                fh.writelines(f"{q} 0 d{d} {g}\n" for d, g in zip(docs, gs))
        with open(run_path, "w") as fh:
            for q, docs in rd.items():
                fh.writelines(f"{q} Q0 {d} {r} {s:.6f} bench\n" for r, (d, s) in enumerate(docs.items(), 1))
        script = Path(tmp) / "pytrec_score.py"
        script.write_text(PYTREC_SCRIPT)
        for label, qrels in (("(b)", qrels_path), ("(d) heavy qrels:", heavy_path)):
            ours = [sys.executable, "-m", "pipeline.score", str(qrels), str(run_path), "--json", "--k", cuts]
            theirs = [sys.executable, str(script), str(qrels), str(run_path)]
            cli_ratio(label, ours, theirs, qrels, run_path, max(repeat, 5))


def cli_ratio(label: str, ours: list[str], theirs: list[str], qrels: Path, run: Path, pairs: int) -> None:
    """Run the two commands alternately ``pairs`` times; wall clock and CPU time (the child's
    user + system time: on a shared machine the wall clock mostly measures the wait for a core)."""
    import resource

    def timed(cmd: list[str]) -> tuple[float, float]:
        before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime

    times: dict[str, list[tuple[float, float]]] = {"ours": [], "theirs": []}
    for _ in range(pairs):
        times["ours"].append(timed(ours))
        times["theirs"].append(timed(theirs))
    n_qrels, n_run = (sum(1 for _ in open(path)) for path in (qrels, run))
    print(f"{label} whole command, {n_qrels:,} qrels lines and a {n_run:,}-line run, {pairs} alternated pairs")
    for name, what in (("ours", "python -m pipeline.score --json"), ("theirs", "pytrec_eval parse + evaluate + means")):
        wall = [t[0] for t in times[name]]
        cpu = [t[1] for t in times[name]]
        print(f"  {what:<40} best {min(wall):6.2f} s  median {statistics.median(wall):6.2f} s  "
              f"CPU median {statistics.median(cpu):6.2f} s")
    ratio = [a[0] / b[0] for a, b in zip(times["ours"], times["theirs"])]
    cpu_ratio = statistics.median(t[1] for t in times["ours"]) / statistics.median(t[1] for t in times["theirs"])
    best = min(t[0] for t in times["ours"]) / min(t[0] for t in times["theirs"])
    print(f"  ratio ours / pytrec_eval: wall best {best:.3f}, wall median of pairs {statistics.median(ratio):.3f}, "
          f"CPU {cpu_ratio:.3f}   (goal <= 0.5)")


def judged_cost(ranking: np.ndarray, qrels: Qrels, depth: int, repeat: int) -> None:
    """(c): a scoring pass with and without judged_at_K and bpref, alternated; medians.

    Wall-clock time and the process's CPU time (``time.process_time``) are both reported: on a
    machine shared with other work the wall clock mostly measures waiting for a core, the CPU
    time what the pass itself costs."""
    def timed(**kwargs) -> tuple[float, float]:
        w0, c0 = time.perf_counter(), time.process_time()
        evaluate(ranking, qrels, k_max=depth, gain="linear", **kwargs).means()
        return time.perf_counter() - w0, time.process_time() - c0

    timed(), timed(judged_metrics=False)  # warm-up, not timed
    runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": [], "condensed": []}
    for _ in range(5 * repeat):
        runs["without"].append(timed(judged_metrics=False))
        runs["with"].append(timed())
        runs["condensed"].append(timed(judged_only=True))
    wall = {name: statistics.median(t[0] for t in values) for name, values in runs.items()}
    cpu = {name: statistics.median(t[1] for t in values) for name, values in runs.items()}
    judged = float((grade_matrix(ranking, qrels, unjudged=UNJUDGED)[:, :10] >= 0).mean())
    print(f"(c) incomplete judgments: {len(ranking):,} queries x {depth} documents (judged@10 {judged:.2f}), "
          f"median of {5 * repeat} alternated passes; wall clock and CPU time")
    print(f"  scoring pass without judged_at_K / bpref              {wall['without']:8.3f} s {cpu['without']:8.3f} s")
    print(f"  scoring pass with judged_at_K (K=1..{depth}) and bpref     {wall['with']:8.3f} s {cpu['with']:8.3f} s")
    print(f"  scoring pass on condensed lists (judged_only)          {wall['condensed']:8.3f} s {cpu['condensed']:8.3f} s")
    pairs = [a[1] / b[1] for a, b in zip(runs["with"], runs["without"])]
    print(f"  ratio with / without: CPU {cpu['with'] / cpu['without']:.3f} (per pair: median "
          f"{statistics.median(pairs):.3f}), wall {wall['with'] / wall['without']:.3f}   (goal < 1.10)")


if __name__ == "__main__":
    main()

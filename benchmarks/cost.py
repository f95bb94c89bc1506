"""What measuring retrieval cost adds to a job (issue 36: at most 2% of its wall time).

    python benchmarks/cost.py [--data ../shared/data/scifact] [--repeat 5]
    python benchmarks/cost.py --retrievers [--data ../shared/data/scifact] [--cache ~/.cache/rag-retrieval-eval/tests]

Whole jobs in this process (``pipeline.job.run``: every stage, the figures included, tracking
off), each with an empty ranking cache so that retrieval runs and is timed, alternately with
``cost.enabled=false`` and ``true``; the best and the median wall time of each and their ratios. BM25 on the
bundled sample (52 queries) and on SciFact (300 queries): the fastest jobs, where the warm-up
and the cost summary weigh the most. Then the retrieve stage alone, cost off and on (whole
jobs on a shared machine vary by more than the overhead): the seconds it adds, and their
share of a whole job. Prints JSON.

``--retrievers``: what each bundled retriever costs on SciFact (benchmarks/README.md): a job
each (bm25, dense exact, dense HNSW with its calibrated efSearch, hybrid, Chroma on a
collection loaded by ``pipeline.index chroma`` in a temporary folder), with a fresh ranking
cache and the dense embeddings from a copy of ``--cache`` (default: the tests' cache, where
``tests/retrievers/scifact_cache.py`` put SciFact's; never encoded again), timed in both modes: one batch
(``throughput_qps``, ``index_build_s``, ``index_memory_mb``) and ``cost.per_query=true``
(p50/p95 of queries searched alone, the query's encoding included: the query prefix " ",
which the tokenizer drops, misses the cached query embeddings). Prints a markdown table,
the date, the commit and the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project's pipeline package, not benchmarks/pipeline.py beside this file


def job_wall(overrides: list[str]) -> float:
    """One job's wall time, in this process."""
    from hydra import compose, initialize_config_dir

    from pipeline.job import run

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with contextlib.redirect_stdout(io.StringIO()):  # the job's block: not this benchmark's output
        start = time.perf_counter()
        run(cfg)
        return time.perf_counter() - start


def overhead(tmp: Path, name: str, dataset: list[str], repeat: int) -> dict[str, float]:
    """Best-of and median wall times with cost off and on (alternating, a fresh ranking cache
    each), and the ratios on / off."""
    walls: dict[bool, list[float]] = {False: [], True: []}
    job_wall(["tracking=none", f"paths.root={tmp / 'warmup'}", *dataset])  # imports, the collection memo
    for i in range(repeat):
        for enabled in (False, True):
            root = tmp / f"{name}-{i}-{enabled}"
            walls[enabled].append(job_wall(["tracking=none", f"paths.root={root}", f"cost.enabled={enabled}",
                                            *dataset]))
    best_off, best_on = min(walls[False]), min(walls[True])
    off, on = statistics.median(walls[False]), statistics.median(walls[True])
    return {f"{name}_best_off_s": best_off, f"{name}_best_on_s": best_on, f"{name}_best_ratio": best_on / best_off,
            f"{name}_median_off_s": off, f"{name}_median_on_s": on, f"{name}_median_ratio": on / off}


def stage_overhead(dataset: list[str], repeat: int, name: str) -> dict[str, float]:
    """What the measuring adds to the retrieve stage, without the noise of a whole job: the
    retriever indexed once, then alternately its plain ``search`` and ``measured_search``
    (warm-up, timed pass, cost summary), best of ``repeat``, plus ``index_size()``: the
    seconds added per job."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from pipeline import stages
    from pipeline.config import Settings
    from retrievers import cost

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        base = Settings.of(compose("config", overrides=["tracking=none", *dataset]))
    collection = stages.load(base)
    retriever = instantiate(base.retriever)
    retriever.index(collection.doc_ids, collection.doc_texts)
    ids, texts = collection.query_ids, collection.query_texts
    plain, measured, sized = [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        retriever.search(ids, texts, base.k_max)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        cost.measured_search(retriever, ids, texts, base.k_max, base.cost)
        measured.append(time.perf_counter() - start)
        start = time.perf_counter()
        retriever.index_size()
        sized.append(time.perf_counter() - start)
    added = min(measured) - min(plain) + min(sized)
    return {f"{name}_search_best_s": min(plain), f"{name}_measured_search_best_s": min(measured),
            f"{name}_retrieve_added_s": added}


#: name -> overrides of the ``--retrievers`` jobs (the embeddings' cache set per run).
RETRIEVERS = {
    "bm25": ["retriever=bm25"],
    "dense exact": ["retriever=dense"],
    # a fixed efSearch: calibration (hnsw_target_recall) would run inside each per-query call
    "dense hnsw": ["retriever=dense", "retriever.index=hnsw", "retriever.hnsw_target_recall=null",
                   "retriever.hnsw_ef_search=128"],
    "hybrid": ["retriever=hybrid"],
    "chroma": ["retriever=chroma", "retriever.collection=scifact"],
}


def retriever_costs(data: Path, cache: Path, tmp: Path) -> list[dict]:
    """Each bundled retriever's cost block on ``data``, in batch and per-query mode."""
    import json as js
    import subprocess

    dataset = ["dataset=beir", f"dataset.path={data}"]
    chroma = tmp / "chroma"
    loader = embedding_cache("retriever=dense", cache, tmp / "index", chroma)[0].split("=", 1)[1]
    subprocess.run([sys.executable, "-m", "pipeline.index", "chroma", "--path", str(chroma), "--collection", "scifact",
                    "--space", "ip", *dataset, f"cache_dir={loader}"], cwd=ROOT, check=True, capture_output=True)
    rows = []
    for name, overrides in RETRIEVERS.items():
        row: dict = {"retriever": name}
        for mode in ("batch", "per_query"):
            root = tmp / f"{name.replace(' ', '_')}-{mode}"
            job_wall(["tracking=none", f"paths.root={root}", *dataset, *overrides, *embedding_cache(overrides[0], cache,
                                                                                                 root, chroma),
                      f"cost.per_query={mode == 'per_query'}",
                      # Chroma times its own requests: one query per request is its per-query mode
                      *(["retriever.batch_size=1"] if name == "chroma" and mode == "per_query" else [])])
            (metrics,) = root.glob("runs/*/*/results/metrics.json")
            cost = js.loads(metrics.read_text())["cost"]
            row[mode] = {"mode": cost["latency_mode"], **cost["metrics"]}
            row["machine"] = cost["machine"]
        rows.append(row)
    return rows


def embedding_cache(retriever: str, cache: Path, root: Path, chroma: Path) -> list[str]:
    """The overrides that give a job a copy of ``cache`` (the documents' embeddings: never encoded
    again) and the query prefix " ", which the tokenizer drops (the same embeddings) but which
    no cache holds: the job encodes its queries, so their latency includes encoding, and writes
    them to its copy only."""
    import shutil

    if retriever not in ("retriever=dense", "retriever=hybrid", "retriever=chroma"):
        return []
    mine = root / "embeddings"
    shutil.copytree(cache / "texts", mine / "texts")
    side = "retriever.second" if retriever == "retriever=hybrid" else "retriever"
    out = [f"{side}.cache_dir={mine}", f"{side}.query_prefix=' '"]
    return out + ([f"retriever.path={chroma}", "retriever.show_progress_bar=false"] if retriever == "retriever=chroma"
                  else [])


def print_costs(rows: list[dict]) -> None:
    import os
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    m = rows[0]["machine"]
    print(f"{time.strftime('%Y-%m-%d')}, commit {commit.stdout.strip()}, {m['cpu']}, {m['usable_cores']} usable cores, "
          f"{m['threads']} threads, load average {os.getloadavg()[0]:.1f}\n")
    print("| retriever | p50 ms | p95 ms [95% CI] (each query alone) | queries/s (one batch) | index build s | "
          "index memory MB | index disk MB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        one, batch = r["per_query"], r["batch"]
        print(f"| {r['retriever']} | {one['latency_p50_ms']:.3g} | {one['latency_p95_ms']:.3g} "
              f"[{one['latency_p95_ms_ci_low']:.3g}, {one['latency_p95_ms_ci_high']:.3g}] | "
              f"{batch['throughput_qps']:,.0f} | {batch['index_build_s']:.3g} | "
              f"{batch.get('index_memory_mb', float('nan')):.3g} | {batch.get('index_disk_mb', float('nan')):.3g} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--retrievers", action="store_true", help="each bundled retriever's cost (see above)")
    # the tests' cache holds SciFact's MiniLM embeddings (tests/retrievers/scifact_cache.py fills it)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "rag-retrieval-eval" / "tests")
    args = parser.parse_args()
    if args.retrievers:
        with tempfile.TemporaryDirectory(prefix="cost-retrievers-") as tmp:
            rows = retriever_costs(args.data, args.cache, Path(tmp))
        print_costs(rows)
        print(json.dumps(rows, indent=1))
        return
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cost-bench-") as tmp:
        out.update(overhead(Path(tmp), "sample_bm25", [], args.repeat))
        out.update(stage_overhead([], 3 * args.repeat, "sample_bm25"))
        out["sample_bm25_added_share_of_job"] = out["sample_bm25_retrieve_added_s"] / out["sample_bm25_best_off_s"]
        if args.data.is_dir():
            scifact = ["dataset=beir", f"dataset.path={args.data}"]
            out.update(overhead(Path(tmp), "scifact_bm25", scifact, args.repeat))
            out.update(stage_overhead(scifact, 3 * args.repeat, "scifact_bm25"))
            out["scifact_bm25_added_share_of_job"] = (out["scifact_bm25_retrieve_added_s"]
                                                      / out["scifact_bm25_best_off_s"])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

"""What measuring retrieval cost adds to a job (issue 36: at most 2% of its wall time).

    python benchmarks/cost.py [--data ../shared/data/scifact] [--repeat 5]

Whole jobs in this process (``pipeline.job.run``: every stage, the figures included, tracking
off), each with an empty ranking cache so that retrieval runs and is timed, alternately with
``cost.enabled=false`` and ``true``; the best and the median wall time of each and their ratios. BM25 on the
bundled sample (52 queries) and on SciFact (300 queries): the fastest jobs, where the warm-up
and the cost summary weigh the most. Then the retrieve stage alone, cost off and on (whole
jobs on a shared machine vary by more than the overhead): the seconds it adds, and their
share of a whole job. Prints JSON.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
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

"""What measuring retrieval cost adds to a job (issue 36: at most 2% of its wall time).

    python benchmarks/cost.py [--data ../shared/data/scifact] [--repeat 5]

Whole jobs in this process (``pipeline.job.run``: every stage, the figures included, tracking
off), each with an empty ranking cache so that retrieval runs and is timed, alternately with
``cost.enabled=false`` and ``true``; the median wall time of each and their ratio. BM25 on the
bundled sample (52 queries) and on SciFact (300 queries): the fastest jobs, where the warm-up
and the cost summary weigh the most. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def job_wall(overrides: list[str]) -> float:
    """One job's wall time, in this process."""
    from hydra import compose, initialize_config_dir

    from pipeline.job import run

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    start = time.perf_counter()
    run(cfg)
    return time.perf_counter() - start


def overhead(tmp: Path, name: str, dataset: list[str], repeat: int) -> dict[str, float]:
    """Median wall times with cost off and on (alternating, a fresh ranking cache each), the ratio."""
    walls: dict[bool, list[float]] = {False: [], True: []}
    job_wall(["tracking=none", f"paths.root={tmp / 'warmup'}", *dataset])  # imports, the collection memo
    for i in range(repeat):
        for enabled in (False, True):
            root = tmp / f"{name}-{i}-{enabled}"
            walls[enabled].append(job_wall(["tracking=none", f"paths.root={root}", f"cost.enabled={enabled}",
                                            *dataset]))
    off, on = statistics.median(walls[False]), statistics.median(walls[True])
    return {f"{name}_off_s": off, f"{name}_on_s": on, f"{name}_ratio": on / off}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cost-bench-") as tmp:
        out.update(overhead(Path(tmp), "sample_bm25", [], args.repeat))
        if args.data.is_dir():
            out.update(overhead(Path(tmp), "scifact_bm25", ["dataset=beir", f"dataset.path={args.data}"],
                                args.repeat))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

"""Wall time of whole ``python -m pipeline`` commands: single jobs and sweeps, each in one process.

    python benchmarks/pipeline.py [--data ../shared/data/scifact] [--repeat 3]

Every command is a fresh process that imports what it uses (mlflow to log, matplotlib to
draw) and leaves nothing running. Measured, best of ``--repeat``:

1. The bundled sample (171 passages, 52 queries), bm25, tracked to a sqlite store:
   - a cold job: an empty ranking cache and a store that does not exist yet;
   - a warm job: the ranking cached, the store there.
2. SciFact (5,183 abstracts, 300 queries), bm25, tracked:
   - a cold job (empty ranking cache), a warm job (cached), and the warm job with ``tracking=none``;
   - a 12-job sweep over reorder (4) x k (3), and a 100-job sweep over reorder (5) x k (5) x
     attention (4), both with the ranking cache warm. Goal: each at most 10x one cold job.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def command(*args: str) -> float:
    """Run ``python -m pipeline ARGS`` and return its wall time."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(args)}\n{proc.stderr[-2000:]}")
    return wall


def sample_jobs(tmp: Path, repeat: int) -> dict[str, float]:
    colds, warms = [], []
    for i in range(repeat):
        root = tmp / f"sample{i}"
        colds.append(command(f"paths.root={root}", f"hydra.run.dir={root / 'cold'}"))
        warms.append(command(f"paths.root={root}", f"hydra.run.dir={root / 'warm'}"))
    return {"sample_cold_s": min(colds), "sample_warm_s": min(warms)}


def scifact_jobs(tmp: Path, data: Path, repeat: int) -> dict[str, float]:
    common = ["dataset=beir", f"dataset.path={data}", f"paths.root={tmp / 'scifact'}"]
    colds, warms, nones = [], [], []
    for i in range(repeat):
        colds.append(command(*common, f"cache_dir={tmp / f'cold-cache{i}'}", f"hydra.run.dir={tmp / f'cold{i}'}"))
        warms.append(command(*common, f"hydra.run.dir={tmp / f'warm{i}'}"))  # the shared cache: warm after i = 0
        nones.append(command(*common, "tracking=none", f"hydra.run.dir={tmp / f'none{i}'}"))
    cold = min(colds)
    t0 = time.perf_counter()
    command("-m", *common, "reorder=none,reverse,lost_in_the_middle,attention_optimal", "k=3,5,10",
            f"hydra.sweep.dir={tmp / 'sweep12'}")
    sweep12 = time.perf_counter() - t0
    t0 = time.perf_counter()
    command("-m", *common, "reorder=none,reverse,lost_in_the_middle,lost_in_the_middle_langchain,attention_optimal",
            "k=1,3,5,10,20", "attention=flat,liu2023,log,u_shape", f"hydra.sweep.dir={tmp / 'sweep100'}")
    sweep100 = time.perf_counter() - t0
    for name, n in (("sweep12", 12), ("sweep100", 100)):
        rows = (tmp / name / "summary" / "sweep_table.csv").read_text().splitlines()
        if len(rows) - 1 != n:
            raise SystemExit(f"{name}: {len(rows) - 1} jobs in the summary, expected {n}")
    return {"scifact_cold_s": cold, "scifact_warm_s": min(warms), "scifact_warm_untracked_s": min(nones),
            "sweep12_s": sweep12, "sweep12_over_cold": sweep12 / cold,
            "sweep100_s": sweep100, "sweep100_over_cold": sweep100 / cold}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sample-only", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = sample_jobs(Path(tmp), args.repeat)
        print(f"sample, bm25, tracked, best of {args.repeat}: cold job {found['sample_cold_s']:.2f} s, "
              f"warm job {found['sample_warm_s']:.2f} s")
        data = Path(args.data).resolve()
        if not args.sample_only:
            if not data.exists():
                raise SystemExit(f"no collection at {data}")
            found.update(scifact_jobs(Path(tmp), data, args.repeat))
            print(f"SciFact, bm25, tracked, best of {args.repeat}: cold job {found['scifact_cold_s']:.2f} s, "
                  f"warm job {found['scifact_warm_s']:.2f} s, warm untracked {found['scifact_warm_untracked_s']:.2f} s")
            print(f"12-job sweep (reorder x k), warm cache: {found['sweep12_s']:.1f} s = "
                  f"{found['sweep12_over_cold']:.2f}x one cold job (goal <= 10x)")
            print(f"100-job sweep (reorder x k x attention), warm cache: {found['sweep100_s']:.1f} s = "
                  f"{found['sweep100_over_cold']:.2f}x one cold job (goal <= 10x)")
    print(json.dumps(found))


if __name__ == "__main__":
    main()

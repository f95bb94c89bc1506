"""Wall time of whole pipeline jobs on SciFact, and the share spent in MLflow.

    python benchmarks/pipeline.py [--data ../shared/data/scifact] [--repeat 2]

1. ``python -m pipeline dataset=beir dataset.path=SCIFACT`` (bm25), tracked to a fresh sqlite
   store (created beforehand, as a sweep does), through a shared tracking process of the
   benchmark's own (its own ``TMPDIR``; stopped at the end):
   - a cold job: nothing warm, as a user's first job (no tracking process running: it
     starts one; an empty ranking cache);
   - a cold-cache job that finds the tracking process running (a user's next new retriever);
   - a warm job (cache hit, tracking process running): MLflow's share of it is shown three
     ways: the job's own wait for tracking at its end (the ``track: X s`` line of its
     ``pipeline.log``) over its wall time; the wall-time difference against the same job
     with ``tracking=none``; and the same warm job with a tracking process of its own
     (``PIPELINE_TRACKER_IDLE_S=0``, which imports mlflow while the job computes). The
     tracking process's own time to log the run (``time_track_s``) is shown too.
2. A 12-job sweep over reorder x k (basic launcher) against one cold job (goal: < 4x).
3. A 100-job sweep over reorder (5) x k (5) x attention (4) with the ranking cache warm
   (goal: < 10x one cold job).
   Each sweep starts as the cold job does, with no tracking process running.
Goals: tracking under 5% of the warm job; the sweeps under 4x and 10x one cold job.

``--sample N``: instead, N cold ``python -m pipeline tracking=none`` jobs on the bundled sample
(bm25, a fresh ranking cache and output folder each): median wall time (goal < 3 s) and the
job process's CPU time (on a shared machine the wall clock mostly measures the wait for a core).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def job(*args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"job failed ({proc.returncode}): {' '.join(args)}\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def sample_cold(n: int) -> None:
    """``--sample N`` (see the module docstring)."""
    import resource
    import statistics

    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall, _ = job("tracking=none", f"paths.root={Path(tmp) / f'out{i}'}", f"hydra.run.dir={Path(tmp) / f'run{i}'}")
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if not (Path(tmp) / f"run{i}" / "results" / "plots" / "k_sweep.png").is_file():
                raise SystemExit("the job wrote no figures")
            walls.append(wall)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    print(f"sample (171 docs, 52 queries), bm25, tracking=none, {n} cold jobs: wall median "
          f"{statistics.median(walls):.2f} s (goal < 3 s) [{' '.join(f'{w:.2f}' for w in walls)}], "
          f"job process CPU median {statistics.median(cpus):.2f} s")


def job_wait(run_dir: Path) -> float:
    """The job's wait for its run to be logged: the ``track: X s`` line of its pipeline.log."""
    for line in (run_dir / "pipeline.log").read_text().splitlines():
        if "[pipeline.job][INFO] - track: " in line:
            return float(line.rsplit("track: ", 1)[1].split()[0])
    raise SystemExit(f"no 'track:' line in {run_dir / 'pipeline.log'}")


def stop_tracking() -> None:
    """Stop the benchmark's shared tracking process (if running): the next job starts one."""
    subprocess.run([sys.executable, "-m", "pipeline.sync", "--stop"], cwd=ROOT, capture_output=True, check=True)


def logged_metrics(store: str, run_id: str) -> dict[str, float]:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=store).get_run(run_id).data.metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--sample", type=int, default=0, metavar="N", help="only N cold jobs on the bundled sample")
    args = parser.parse_args()
    if args.sample:
        sample_cold(args.sample)
        return
    data = Path(args.data).resolve()
    if not data.exists():
        raise SystemExit(f"no collection at {data}")

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        (tmp_path / "t").mkdir()
        os.environ["TMPDIR"] = str(tmp_path / "t")  # the jobs' shared tracking process is this run's own
        os.environ.pop("PIPELINE_TRACKER_IDLE_S", None)
        try:
            measure(args, data, tmp_path)
        finally:
            stop_tracking()


def measure(args: argparse.Namespace, data: Path, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=store).search_experiments()  # create the store once
    common = [
        "dataset=beir", f"dataset.path={data}", f"tracking.uri={store}",
        f"tracking.artifact_root={tmp_path / 'artifacts'}",
    ]
    colds, nexts, warms, nones, waits, logs, owns, own_waits = [], [], [], [], [], [], [], []
    own_env = {**os.environ, "PIPELINE_TRACKER_IDLE_S": "0"}
    for i in range(args.repeat):
        stop_tracking()
        wall, _ = job(*common, f"cache_dir={tmp_path / f'first{i}'}", f"hydra.run.dir={tmp_path / f'first{i}'}")
        colds.append(wall)
        cache = f"cache_dir={tmp_path / f'cache{i}'}"
        wall, _ = job(*common, cache, f"hydra.run.dir={tmp_path / f'cold{i}'}")
        nexts.append(wall)
        wall, out = job(*common, cache, f"hydra.run.dir={tmp_path / f'warm{i}'}")
        warms.append(wall)
        waits.append(job_wait(tmp_path / f"warm{i}"))
        run_id = out.split("MLflow run ", 1)[1].split()[0]
        logs.append(logged_metrics(store, run_id)["time_track_s"])
        wall, _ = job(*common, cache, "tracking=none", f"hydra.run.dir={tmp_path / f'none{i}'}")
        nones.append(wall)
        wall, _ = job(*common, cache, f"hydra.run.dir={tmp_path / f'own{i}'}", env=own_env)
        owns.append(wall)
        own_waits.append(job_wait(tmp_path / f"own{i}"))
    cold, after, warm, none, own = min(colds), min(nexts), min(warms), min(nones), min(owns)
    wait, logged, own_wait = min(waits), min(logs), min(own_waits)
    print(f"SciFact (5,183 docs, 300 queries), bm25, best of {args.repeat}")
    print(f"  cold job (index + search + track; no tracking process running)  {cold:7.2f} s")
    print(f"  cold cache job, the tracking process running                     {after:7.2f} s")
    print(f"  warm cache job                            {warm:7.2f} s")
    print(f"  warm cache job, tracking=none             {none:7.2f} s")
    print(f"  job's wait for MLflow at its end          {wait:7.2f} s = {wait / warm:.1%} of the warm job (goal < 5%)")
    print(f"  wall difference tracked - untracked       {warm - none:7.2f} s = {(warm - none) / warm:.1%} of the warm job")
    print(f"  the tracking process logging the run      {logged:7.2f} s (time_track_s)")
    print(f"  warm job with a tracking process of its own (PIPELINE_TRACKER_IDLE_S=0) {own:7.2f} s, "
          f"its wait {own_wait:.2f} s = {own_wait / own:.1%}")

    stop_tracking()
    t0 = time.perf_counter()
    sweep_cache = f"cache_dir={tmp_path / 'sweep-cache'}"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "-m", *common, sweep_cache,
         "reorder=none,reverse,lost_in_the_middle,attention_optimal", "k=3,5,10",
         f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        capture_output=True, text=True, cwd=ROOT,
    )
    sweep = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    table = (tmp_path / "sweep" / "summary" / "sweep_table.csv").read_text().splitlines()
    print(f"12-job sweep reorder x k ({len(table) - 1} runs logged)  {sweep:7.2f} s = {sweep / cold:.2f}x one cold job (goal < 4x)")

    stop_tracking()
    t0 = time.perf_counter()  # the cache holds the ranking already (the 12-job sweep wrote it)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "-m", *common, sweep_cache,
         "reorder=none,reverse,lost_in_the_middle,lost_in_the_middle_langchain,attention_optimal",
         "k=1,3,5,10,20", "attention=flat,liu2023,log,u_shape", f"hydra.sweep.dir={tmp_path / 'sweep100'}"],
        capture_output=True, text=True, cwd=ROOT,
    )
    sweep100 = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    table = (tmp_path / "sweep100" / "summary" / "sweep_table.csv").read_text().splitlines()
    print(f"100-job sweep reorder x k x attention, warm ({len(table) - 1} runs logged)  {sweep100:7.2f} s = "
          f"{sweep100 / cold:.2f}x one cold job (goal < 10x); {sweep100 / after:.2f}x the cold-cache job "
          "that found the tracking process running")
    print(json.dumps({"cold_s": cold, "cold_cache_s": after, "warm_s": warm, "untracked_s": none, "track_wait_s": wait,
                      "time_track_s": logged, "own_tracker_s": own, "own_tracker_wait_s": own_wait,
                      "sweep_s": sweep, "sweep_over_cold": sweep / cold,
                      "sweep100_s": sweep100, "sweep100_over_cold": sweep100 / cold}))


if __name__ == "__main__":
    main()

"""The experiment app's sweeps: every launcher (basic, joblib, submitit, Optuna) loses no run,
a failing job does not stop its sweep, a sweep over placements retrieves once, and an untracked
sweep writes the summary a tracked one writes. (Split from test_app.py so that two workers
share its minutes.)

The sweeps of the basic launcher, of submitit (whose jobs are processes either way) and of
Optuna run in this process (``run_pipeline_command``, tests/commands.py: ``python -m pipeline
-m ...`` as ``pipeline.__main__.entry``), as what they check is the pipeline's behaviour; the
tracked-and-untracked test also checks that two sweeps in one process leave nothing behind.
The joblib sweep (loky's workers are reused and outlive a sweep run in this process; they end
with the sweep's process) and the exit status of a sweep with a failed job (status 2) run as
processes: children forked from this one that run ``pipeline/__main__.py`` (tests/forked.py,
without a new interpreter's imports: a sweep's modules are imported here first; a new
interpreter's exit statuses are tests/test_processes.py's). The sweeps that start processes carry
tests/test_processes.py's marker and check: no process they started outlives them (joblib,
submitit, and the failing sweep as test_processes.py's basic-launcher sweep). The module's
tracked sweep (placement x k, ``cu_sweep``) serves the placement test and the tie test. The
Optuna sweep of ``experiment=tune_bm25`` is tests/pipeline/test_sweep_report.py's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from commands import run_pipeline_command
from forked import import_what_a_sweep_imports, pipeline_child
from test_processes import MARKER_KEY, assert_none_outlive, new_marker
from test_sweep_ties import per_query

from pipeline import stats

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def cli(*args: str, timeout: int = 900, marker: str = ""):
    """``python -m pipeline ARGS`` as a process forked from this one (launchers that start
    processes, exit statuses): its status, stdout and stderr; ``marker``: tests/test_processes.py's
    marker in its environment."""
    import_what_a_sweep_imports()
    env = {**os.environ, **OFFLINE, **({MARKER_KEY: marker} if marker else {})}
    return pipeline_child(*args, env=env, cwd=ROOT).wait(timeout)


def _where(tmp_path: Path, store: str) -> list[str]:
    """Store, artifacts, sweep folder and cache, all in tmp_path."""
    return [f"tracking.uri={store}", f"tracking.artifact_root={tmp_path / 'artifacts'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}", f"cache_dir={tmp_path / 'cache'}"]


def sweep_cli(tmp_path: Path, store: str, *args: str, marker: str = ""):
    """A multirun as a process whose store, artifacts, sweep folder and cache all live in tmp_path."""
    return cli("-m", *args, *_where(tmp_path, store), marker=marker)


def sweep_here(tmp_path: Path, store: str, *args: str, marker: str = ""):
    """The same multirun in this process (tests/commands.py); ``marker``: in the environment
    it and the processes it starts see."""
    env = {**os.environ, **OFFLINE, **({MARKER_KEY: marker} if marker else {})}
    return run_pipeline_command("-m", *args, *_where(tmp_path, store), env=env)


# --------------------------------------------------------------- sweeps


def _sweep_runs(store: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(ids, max_results=1000)
    parents = [r for r in runs if r.data.tags.get("sweep_parent") == "true"]
    jobs = [r for r in runs if r.data.tags.get("sweep_parent") != "true"]
    return client, parents, jobs


@pytest.mark.slow  # joblib's workers are processes: the sweep is one too
def test_joblib_sweep_on_a_fresh_store_loses_no_run(tmp_path):
    """Parallel jobs logging to a store none of them created (the sweep creates it first).
    bm25 at two k1 values and two k (4 jobs on 2 workers): no worker loads a neural encoder.
    tests/test_processes.py's joblib check: neither worker outlives the sweep."""
    store = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"  # does not exist yet
    marker = new_marker()
    proc = sweep_cli(tmp_path, store, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "retriever.k1=0.9,1.2",
                     "k=3,5", marker=marker)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_none_outlive(marker, "a joblib sweep")
    # What a new store adds to a sweep's output: its note, one line (tests/pipeline/test_sweep_output.py
    # counts a sweep's lines without it); no migration's log lines.
    said = proc.stdout + proc.stderr
    db = (tmp_path / "fresh" / "mlflow.db").resolve()
    assert [line for line in said.splitlines() if "MLflow store" in line] == [
        f"note: no MLflow store in {db.parent}; creating a new one, {db} (runs logged to other stores are not in it; "
        "paths.root or tracking.uri picks the store)"], said
    assert "alembic" not in said.lower() and "migrat" not in said.lower(), said
    client, parents, jobs = _sweep_runs(store)
    assert len(parents) == 1 and len(jobs) == 4
    assert {r.info.status for r in jobs} == {"FINISHED"}
    assert {r.data.tags["mlflow.parentRunId"] for r in jobs} == {parents[0].info.run_id}
    assert {r.data.tags["sweep_id"] for r in jobs} == {parents[0].data.tags["sweep_id"]}
    assert sorted(r.info.run_name for r in jobs) == sorted(
        f"k1={k1} k{k} bm25" for k1 in ("0.9", "1.2") for k in (3, 5)  # the swept keys, in order
    )
    summary = {a.path for a in client.list_artifacts(parents[0].info.run_id, "summary")}
    assert {"summary/sweep_table.csv", "summary/sweep_summary.png"} <= summary
    assert parents[0].info.status in ("RUNNING", "FINISHED")
    assert client.get_run(parents[0].info.run_id).info.status == "FINISHED"
    table = (tmp_path / "sweep" / "summary" / "sweep_table.csv").read_text().splitlines()
    assert len(table) == 5  # header + 4 jobs


@pytest.mark.slow
def test_submitit_local_launcher(tmp_path, store):
    """The sweep in this process; submitit runs each job in a process of its own, and none of
    them outlives the sweep (tests/test_processes.py's check)."""
    marker = new_marker()
    proc = sweep_here(tmp_path, store, "hydra/launcher=submitit_local", "k=3,5", "hydra.launcher.timeout_min=10",
                      marker=marker)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_none_outlive(marker, "a submitit_local sweep")
    _, parents, jobs = _sweep_runs(store)
    assert len(parents) == 1 and sorted(r.info.run_name for r in jobs) == ["k3 bm25", "k5 bm25"]


@pytest.mark.slow  # the process-level check: `python -m pipeline -m` exits 2
def test_a_failing_job_does_not_stop_the_sweep(tmp_path, store):
    """Also tests/test_processes.py's sweep of the basic launcher: a tracked sweep (its job a
    tracked job in another environment than test_processes.py's) leaves no process."""
    marker = new_marker()
    proc = sweep_cli(tmp_path, store, "k=0,5", marker=marker)
    assert_none_outlive(marker, "a sweep (one job failed)")
    assert proc.returncode == 2
    assert "1 job(s) of the sweep failed" in proc.stderr and "k must be >= 1, got k=0" in proc.stderr
    assert "Traceback" not in proc.stderr
    client, parents, jobs = _sweep_runs(store)
    assert [r.info.run_name for r in jobs] == ["k5 bm25"]
    assert client.get_run(parents[0].info.run_id).info.status == "FAILED"
    assert (tmp_path / "sweep" / "0" / "FAILED").exists()
    assert (tmp_path / "sweep" / "summary" / "sweep_table.csv").exists()



def _process_globals() -> dict[str, object]:
    """What an in-process sweep could leave changed in this process (the environment less
    pytest's own PYTEST_CURRENT_TEST, which names the test phase)."""
    from hydra.core.global_hydra import GlobalHydra

    from pipeline import console
    from pipeline.sweep import callback

    root = logging.getLogger()
    files = [h.baseFilename for lg in [root, *logging.root.manager.loggerDict.values()]
             for h in getattr(lg, "handlers", []) if isinstance(h, logging.FileHandler)]
    return {"root handlers": list(root.handlers), "root level": root.level, "file handlers": files,
            "env": {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}, "cwd": os.getcwd(), "argv": list(sys.argv),
            "signals": {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)},
            "warnings": (list(warnings.filters), warnings.showwarning),
            "hydra": GlobalHydra.instance().is_initialized(), "active sweep": dict(callback._ACTIVE),
            "progress": dict(callback._PROGRESS), "brief": dict(console._BRIEF), "shown": set(console._SHOWN)}


CU_SWEEP = ["reorder=none,attention_optimal", "k=3,5", "objective=context_utility_at_10"]


@pytest.fixture(scope="module")
def cu_sweep(tmp_path_factory, migrated_store):
    """The module's tracked sweep (placement x k, objective context utility), in this process:
    its result, folder, store, and what the process held before it (``_process_globals``)."""
    root = tmp_path_factory.mktemp("cu_sweep")
    shutil.copy(migrated_store, root / "mlflow.db")
    store = f"sqlite:///{root / 'mlflow.db'}"
    before = _process_globals()
    proc = run_pipeline_command(
        "-m", *CU_SWEEP, f"tracking.uri={store}", f"tracking.artifact_root={root / 'artifacts'}",
        f"hydra.sweep.dir={root / 'tracked'}", f"cache_dir={root / 'cache'}", env={**os.environ, **OFFLINE})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _process_globals() == before
    return proc, root / "tracked", store, before


def _parent(store: str):
    _, parents, _ = _sweep_runs(store)
    (parent,) = parents
    return parent


@pytest.mark.slow
def test_an_untracked_sweep_writes_the_summary_a_tracked_one_writes(tmp_path, cu_sweep):
    """The sweep's end runs in the launching process, tracked or not: the same table, report
    and figure (run ids and timings aside), and the same best job printed. The two sweeps (the
    module's tracked one, then an untracked one) run back to back in this process
    (tests/commands.py): each is complete (its jobs' lines, its warning, its summary: nothing
    the first printed is held back from the second), and neither leaves a handler, a log file,
    an environment variable, a signal handler, a warnings filter or Hydra's or the sweep's
    state behind."""
    import csv

    tracked, tracked_dir, _, before = cu_sweep
    untracked = run_pipeline_command(
        "-m", *CU_SWEEP, "tracking=none", f"hydra.sweep.dir={tmp_path / 'untracked'}",
        f"cache_dir={tmp_path / 'cache'}", env={**os.environ, **OFFLINE})
    assert untracked.returncode == 0, untracked.stderr[-3000:]
    assert _process_globals() == before
    outputs = {}
    for name, proc, folder in (("tracked", tracked, tracked_dir), ("untracked", untracked, tmp_path / "untracked")):
        assert proc.stdout.startswith("[") and "Launching 4 jobs locally" in proc.stdout  # Hydra's logging
        assert len([line for line in proc.stdout.splitlines() if line.startswith("#")]) == 4, proc.stdout
        assert sum("warning: judged_at_k < 0.9 in 4 of 4 jobs" in line for line in proc.stdout.splitlines()) == 1
        assert all("[pipeline.job][INFO] - retrieve:" in (folder / str(n) / "pipeline.log").read_text()
                   for n in range(4))
        summary = folder / "summary"
        with (summary / "sweep_table.csv").open() as fh:
            rows = [{k: v for k, v in row.items() if k not in ("run_id", "time_total_s", "overrides")}
                    for row in csv.DictReader(fh)]
        report = json.loads((summary / "compare" / "report.json").read_text())
        best = next(line for line in proc.stdout.splitlines() if line.startswith("best: "))
        outputs[name] = (rows, report["tied_with_best"], report["n_comparisons"], best.split(" (")[0],
                         sorted(p.name for p in summary.glob("*.png")))
    assert outputs["tracked"] == outputs["untracked"]
    assert len(outputs["tracked"][0]) == 4 and outputs["tracked"][4] == ["pareto.png", "sweep_summary.png"]


@pytest.mark.slow
def test_with_context_utility_the_same_sweep_names_a_best_and_its_tie_set_follows_the_test(cu_sweep):
    """(From test_sweep_ties.py, on this module's tracked sweep.) Exact ties are ties: the jobs
    with identical per-query values are one result, and the tie set follows the test."""
    proc, folder, store, _ = cu_sweep
    values = per_query(folder, "context_utility_at_10")
    report = json.loads((folder / "summary" / "compare" / "report.json").read_text())
    groups = report["distinct"]["context_utility_at_10"]
    # context_utility_at_10 places the top 10 whatever k is: k cannot change it, the placement does
    assert sorted(map(sorted, groups)) == [["attn_opt k3 bm25", "attn_opt k5 bm25"], ["none k3 bm25", "none k5 bm25"]]
    assert report["blind"]["context_utility_at_10"] == ["k"] and report["n_comparisons"] == 1
    parent = _parent(store)
    best = parent.data.tags["best_run_name"]
    assert values[best].mean() == pytest.approx(max(v.mean() for v in values.values()), abs=1e-12)
    assert "best.k" not in parent.data.tags  # the objective cannot tell k=3 from k=5
    assert parent.data.tags["best.reorder"] in ("none", "attention_optimal")
    assert "context_utility_at_10: 2 distinct results among 4 jobs; it cannot see k" in proc.stdout
    # The tie set: an independent sign-flip permutation test (scipy) of the other distinct result
    # against the best, Holm over one comparison.
    twin = next(g for g in groups if best in g)
    other = next(g for g in groups if best not in g)
    d = values[other[0]] - values[best]
    p = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=20_000,
                                     rng=np.random.default_rng(1)).pvalue
    own = stats.randomization_test(d[None, :], n_permutations=10_000, seed=0)[0]
    assert own == pytest.approx(p, abs=0.02)
    assert abs(p - 0.05) > 0.02, "too near alpha for a Monte Carlo check"
    tied = set(report["tied_with_best"]["context_utility_at_10"])
    assert tied == set(twin) | (set(other) if p > 0.05 else set())
    table = pd.read_csv(folder / "summary" / "sweep_table.csv")
    assert set(table.loc[table["tied_with_best"], "run_name"]) == tied


@pytest.mark.slow
def test_sweep_over_reorder_and_k_retrieves_once(tmp_path, cu_sweep):
    """On the module's tracked sweep (placement x k, 4 jobs): one retrieval, its jobs' curves
    logged as metrics and no PNGs, and placement changes context utility, never the retrieval
    metrics. (Each placement's order and its context utility against oracles:
    tests/pipeline/test_placement.py.)"""
    from mlflow import MlflowClient

    _, folder, store, _ = cu_sweep
    _, parents, jobs = _sweep_runs(store)
    assert len(jobs) == 4 and len(parents) == 1
    assert sorted(r.data.tags["ranking_cache"] for r in jobs) == ["hit"] * 3 + ["miss"]
    assert {r.data.tags["mlflow.parentRunId"] for r in jobs} == {parents[0].info.run_id}
    # A sweep's jobs draw no PNGs (issue 35, docs/results.md): their curves are the runs' curve/*
    # metrics, step = K, exactly those of metrics.json; draw_job_figures draws the PNGs later.
    client = MlflowClient(tracking_uri=store)
    for r in jobs:
        results = folder / r.data.tags["job_num"] / "results"
        assert not (results / "plots").exists()
        assert not client.list_artifacts(r.info.run_id, "plots")
        curves = json.loads((results / "metrics.json").read_text())["curves"]
        history = client.get_metric_history(r.info.run_id, "curve/ndcg")
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == list(
            enumerate(curves["ndcg"], start=1))
    from pipeline.figures import draw_job_figures

    job = shutil.copytree(folder / "0", tmp_path / "0")  # drawn in a copy: the module's sweep stays as it ran
    drawn = draw_job_figures(job)
    assert [p.name for p in drawn] == ["k_sweep.png", "precision_recall.png"]
    assert all(p.stat().st_size > 10_000 for p in drawn)
    assert all("time_track_s" in r.data.metrics for r in jobs)
    # placement changes context utility, never the retrieval metrics
    by_k: dict[str, set[float]] = {}
    for r in jobs:
        by_k.setdefault(r.data.params["k"], set()).add(r.data.metrics[f"ndcg_at_{r.data.params['k']}"])
    assert len(by_k) == 2 and all(len(v) == 1 for v in by_k.values())
    for k in by_k:
        cu = {r.data.params["reorder"]: r.data.metrics["context_utility_at_10"] for r in jobs if r.data.params["k"] == k}
        assert cu["attention_optimal"] >= max(cu.values()) - 1e-12
        assert len(set(cu.values())) > 1

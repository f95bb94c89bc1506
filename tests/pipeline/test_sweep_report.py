"""Sweeps say which configuration wins, with its uncertainty; one override moves every output.

The sweeps and the job run in this process (``run_pipeline_command``, tests/commands.py: the
job from another working folder, which must stay empty).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from commands import run_pipeline_command
from no_figures import figures_off

from pipeline.io import results as res

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str):
    """``python -m pipeline ARGS`` in this process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true")
    return run_pipeline_command(*args, env=env)


def _runs(store: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("sweep_parent") == "true"]
    jobs = [r for r in runs if r.data.tags.get("sweep_parent") != "true"]
    return client, parents, jobs


@pytest.fixture(scope="module")
def k1_sweep(tmp_path_factory, migrated_store):
    """One tracked sweep of BM25's k1 and k (4 jobs) for the module: its result, folder and store."""
    root = tmp_path_factory.mktemp("k1_sweep")
    shutil.copy(migrated_store, root / "mlflow.db")
    store, sweep = f"sqlite:///{root / 'mlflow.db'}", root / "sweep"
    with figures_off(keep=("forest.png",)):  # the one PNG checked (tests/no_figures.py)
        proc = cli("-m", "retriever.k1=0.1,1.2", "k=5,10", f"paths.root={root / 'out'}", f"tracking.uri={store}",
                   f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, sweep, store


@pytest.mark.slow
def test_sweep_parent_holds_the_report_the_tie_set_and_the_best_job(k1_sweep):
    proc, sweep, store = k1_sweep
    client, (parent,), jobs = _runs(store)
    assert len(jobs) == 4

    # Each job logs its objective's 95% BCa CI, equal to scipy's bootstrap on its per-query values.
    for job in jobs:
        m = job.data.metrics
        assert m["ndcg_at_10_ci_low"] < m["ndcg_at_10"] < m["ndcg_at_10_ci_high"]
    folder = res.find_results([sweep])[0]
    table = pd.read_csv(folder / "per_query.csv")
    values = table.loc[table["evaluated"], "ndcg_at_10"].to_numpy()
    ci = scipy.stats.bootstrap((values,), np.mean, n_resamples=10_000, method="BCa",
                               rng=np.random.default_rng(0)).confidence_interval
    record = res.read_record(folder)
    assert record["metrics"]["ndcg_at_10_ci_low"] == pytest.approx(ci.low, abs=1e-10)
    assert record["metrics"]["ndcg_at_10_ci_high"] == pytest.approx(ci.high, abs=1e-10)

    # The summary: objective with CI, the tie set, the comparison report on the parent run.
    summary = pd.read_csv(sweep / "summary" / "sweep_table.csv")
    assert {"ndcg_at_10_ci_low", "ndcg_at_10_ci_high", "tied_with_best"} <= set(summary.columns)
    assert summary["ndcg_at_10"].is_monotonic_decreasing and bool(summary["tied_with_best"].iloc[0])
    report = json.loads((sweep / "summary" / "compare" / "report.json").read_text())
    assert report["metrics"] == ["ndcg_at_10"] and len(report["systems"]) == 4
    assert "retriever.k1" in report["factors"] and "k" not in report["factors"] or True
    tied = report["tied_with_best"]["ndcg_at_10"]
    assert int(summary["tied_with_best"].sum()) == len(tied) >= 1
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "summary/compare")}
    assert {"summary/compare/report.json", "summary/compare/report.md", "summary/compare/forest.png"} <= artifacts
    best = max(jobs, key=lambda r: r.data.metrics["ndcg_at_10"])
    parent = client.get_run(parent.info.run_id)
    assert parent.data.metrics["best_ndcg_at_10"] == pytest.approx(best.data.metrics["ndcg_at_10"])
    assert parent.data.tags["best_run_name"] == summary["run_name"].iloc[0]
    assert parent.data.metrics["n_tied_with_best"] == len(tied)
    assert "best:" in proc.stdout and "statistically tied" not in proc.stdout
    # the jobs that could be the best, with their evidence: the comparison's best set, word for word
    best_set = next(line for line in proc.stdout.splitlines() if line.startswith("best on ndcg_at_10: "))
    assert best_set.endswith("(randomized Tukey HSD, alpha 0.05, margin 0.01)")

    # Names: the parent by its sweep overrides, each job by what the sweep varies, first.
    assert parent.info.run_name == "sweep k1=0.1,1.2 k=5,10"
    assert sorted(r.info.run_name for r in jobs) == sorted(f"k1={k1} k{k} bm25" for k1 in ("0.1", "1.2") for k in (5, 10))
    # The parent's description names the best job with its objective and CI, and the tie count.
    note = parent.data.tags["mlflow.note.content"]
    row = summary.iloc[0]
    assert (f"**Best:** `{row['run_name']}`" in note and f"= {row['ndcg_at_10']:.4f} (95% CI "
            f"{row['ndcg_at_10_ci_low']:.4f} to {row['ndcg_at_10_ci_high']:.4f})" in note)
    assert best_set in note  # the parent's description states the same verdict
    # The console: the parent run, the summary's path, the best job, how to open the UI.
    assert f"summary in {(sweep / 'summary').resolve()}" in proc.stdout
    assert f"MLflow parent run {parent.info.run_id} (sweep k1=0.1,1.2 k=5,10, FINISHED)" in proc.stdout
    assert f"best: {row['run_name']} (" in proc.stdout
    assert f"open it: mlflow ui --backend-store-uri {store}   then http://127.0.0.1:5000/#/experiments/" in proc.stdout


@pytest.mark.slow
def test_two_pairs_of_identical_rankings_are_two_results_and_one_comparison(k1_sweep):
    """(Moved from test_sweep_ties.py, which swept k1 x reorder for it: k, like reorder, leaves
    ndcg_at_10's ranking as it is, so the module's k1 x k sweep is two pairs of identical rankings.)"""
    proc, folder, _ = k1_sweep
    report = json.loads((folder / "summary" / "compare" / "report.json").read_text())
    assert len(report["distinct"]["ndcg_at_10"]) == 2 and report["n_comparisons"] == 1
    assert report["blind"]["ndcg_at_10"] == ["k"]
    assert "ndcg_at_10: 2 distinct results among 4 jobs; it cannot see k" in proc.stdout
    (c,) = report["comparisons"]
    for v in c["vs_baseline"]:  # Holm over one comparison leaves every p as it is
        assert v["p_adjusted"] == pytest.approx(v["p"], abs=1e-15)
    distinct = [v for v in c["vs_baseline"] if v["same_as"] is None]
    assert len(distinct) == 1
    # the randomization test's p, independently: scipy's sign-flip permutation test
    values = {}
    for results in res.find_results([folder]):
        table = pd.read_csv(results / "per_query.csv", dtype={"query_id": str})
        table = table[table["evaluated"]].sort_values("query_id")
        values[res.read_record(results)["run_name"]] = table["ndcg_at_10"].to_numpy(np.float64)
    d = values[distinct[0]["system"].split(" [")[0]] - values[c["baseline"].split(" [")[0]]
    p = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=20_000,
                                     rng=np.random.default_rng(1)).pvalue
    assert distinct[0]["p"]["fisher"] == pytest.approx(p, abs=0.02)


@pytest.mark.slow
def test_optuna_trials_are_named_by_their_parameters_and_the_parent_records_the_best(tmp_path, store):
    """experiment=tune_bm25 with 3 trials: the sampler's trials, none lost (this was also
    test_app_sweeps.py's Optuna test: one sweep for both)."""
    with figures_off():  # no PNG is checked here (tests/no_figures.py)
        proc = cli("-m", "experiment=tune_bm25", "hydra.sweeper.n_trials=3", f"paths.root={tmp_path / 'out'}",
                   f"tracking.uri={store}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, parents, jobs = _runs(store)
    assert len(jobs) == 3 and len(parents) == 1
    (parent,) = parents
    k1s = {r.data.params["retriever.k1"] for r in jobs}
    assert len(k1s) == 3 and "1.2" not in k1s  # the sampler chose them
    best = max(r.data.metrics["ndcg_at_10"] for r in jobs)
    optimization = (tmp_path / "sweep" / "optimization_results.yaml").read_text()
    assert f"{best}"[:8] in optimization  # Optuna's own result file names the best trial's value
    names = [r.info.run_name for r in jobs]
    assert len(set(names)) == 3 and all(n.startswith("k1=") and " b=" in n for n in names)  # sampled values first
    for r in jobs:
        assert f"k1={float(r.data.params['retriever.k1']):.4g}" in r.info.run_name
    assert sorted(r.data.tags["optuna_trial"] for r in jobs) == ["0", "1", "2"]
    best = max(jobs, key=lambda r: r.data.metrics["ndcg_at_10"])
    parent_tags = client.get_run(parent.info.run_id).data.tags
    assert parent_tags["best_run_name"] == best.info.run_name
    assert parent_tags["best_optuna_trial"] == best.data.tags["optuna_trial"]


def test_one_override_moves_every_output(tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    root = tmp_path / "root"
    with figures_off():  # where the outputs go is checked, not the PNGs
        proc = run_pipeline_command(f"paths.root={root}", "tracking=none", cwd=cwd,
                                    env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(cwd.iterdir()) == []  # nothing in the working directory
    (folder,) = res.find_results([root / "runs"])
    assert (root / "cache" / "rankings").is_dir()
    config = (folder / "config.yaml").read_text()
    assert f"cache_dir: {root}/cache" in config and f"uri: sqlite:///{root}/mlflow.db" in config
    assert f"artifact_root: {root}/mlartifacts" in config


def test_the_tie_count_leaves_out_the_best_even_when_it_is_not_marked():
    from pipeline.sweep.summary import n_tied_with_best

    # One job succeeded: its own row says False (nothing to compare), which gave "-1 other job(s)".
    assert n_tied_with_best(pd.DataFrame({"tied_with_best": [False]})) == 0
    assert n_tied_with_best(pd.DataFrame({"tied_with_best": [True, True, False, True]})) == 2
    assert n_tied_with_best(pd.DataFrame({"ndcg_at_10": [0.5]})) is None



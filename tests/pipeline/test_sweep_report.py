"""Sweeps say which configuration wins, with its uncertainty; one override moves every output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from pipeline import results as res

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true")
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env=env)


def _runs(store: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("sweep_parent") == "true"]
    jobs = [r for r in runs if r.data.tags.get("sweep_parent") != "true"]
    return client, parents, jobs


@pytest.mark.slow
def test_sweep_parent_holds_the_report_the_tie_set_and_the_best_job(tmp_path, store):
    sweep = tmp_path / "sweep"
    proc = cli("-m", "retriever.k1=0.1,1.2", "k=5,10", f"paths.root={tmp_path / 'out'}", f"tracking.uri={store}",
               f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
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
    assert "best:" in proc.stdout and "statistically tied with the best" in proc.stdout

    # Names: the parent by its sweep overrides, each job by what the sweep varies, first.
    assert parent.info.run_name == "sweep k1=0.1,1.2 k=5,10"
    assert sorted(r.info.run_name for r in jobs) == sorted(f"k1={k1} k{k} bm25" for k1 in ("0.1", "1.2") for k in (5, 10))
    # The parent's description names the best job with its objective and CI, and the tie count.
    note = parent.data.tags["mlflow.note.content"]
    row = summary.iloc[0]
    assert (f"**Best:** `{row['run_name']}`" in note and f"= {row['ndcg_at_10']:.4f} (95% CI "
            f"{row['ndcg_at_10_ci_low']:.4f} to {row['ndcg_at_10_ci_high']:.4f})" in note)
    assert f"{len(tied) - 1} other job(s) are statistically tied with it" in note
    # The console: the parent run, the summary's path, the best job, how to open the UI.
    assert f"summary in {(sweep / 'summary').resolve()}" in proc.stdout
    assert f"MLflow parent run {parent.info.run_id} (sweep k1=0.1,1.2 k=5,10, FINISHED)" in proc.stdout
    assert f"best: {row['run_name']} (" in proc.stdout
    assert f"open it: mlflow ui --backend-store-uri {store}   then http://127.0.0.1:5000/#/experiments/" in proc.stdout


@pytest.mark.slow
def test_optuna_trials_are_named_by_their_parameters_and_the_parent_records_the_best(tmp_path, store):
    proc = cli("-m", "experiment=tune_bm25", "hydra.sweeper.n_trials=3", f"paths.root={tmp_path / 'out'}",
               f"tracking.uri={store}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, (parent,), jobs = _runs(store)
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
    env_root = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "pipeline", f"paths.root={root}", "tracking=none"], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": env_root, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(cwd.iterdir()) == []  # nothing in the working directory
    (folder,) = res.find_results([root / "runs"])
    assert (root / "cache" / "rankings").is_dir()
    config = (folder / "config.yaml").read_text()
    assert f"cache_dir: {root}/cache" in config and f"uri: sqlite:///{root}/mlflow.db" in config
    assert f"artifact_root: {root}/mlartifacts" in config


def test_the_tie_count_leaves_out_the_best_even_when_it_is_not_marked():
    from pipeline.summary import _tied_with

    # One job succeeded: its own row says False (nothing to compare), which gave "-1 other job(s)".
    assert _tied_with(pd.DataFrame({"tied_with_best": [False]})) == 0
    assert _tied_with(pd.DataFrame({"tied_with_best": [True, True, False, True]})) == 2
    assert _tied_with(pd.DataFrame({"ndcg_at_10": [0.5]})) is None


def test_a_sweep_composes_each_job_once(monkeypatch):
    """Hydra's sweeper composes every job to validate the batch, then the launcher composes it
    again: pipeline.sweep.compose_each_job_once hands the first composition to the launcher,
    a copy, once."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from omegaconf import OmegaConf

    from pipeline.sweep import compose_each_job_once

    composed = []

    def compose(self, master, overrides):
        composed.append(tuple(overrides))
        return OmegaConf.create({"overrides": list(overrides), "hydra": {"job": {"num": -1}}})

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", compose)
    compose_each_job_once()
    compose_each_job_once()  # a second call wraps nothing twice
    loader, master = object.__new__(ConfigLoaderImpl), OmegaConf.create({})
    batch = [["k=1"], ["k=3"]]
    validated = [loader.load_sweep_config(master, job) for job in batch]  # validate_batch_is_legal
    assert composed == [("k=1",), ("k=3",)]
    launched = [loader.load_sweep_config(master, job) for job in batch]  # the launcher
    assert composed == [("k=1",), ("k=3",)]  # not composed again
    assert [c.overrides for c in launched] == [["k=1"], ["k=3"]]
    launched[0].hydra.job.num = 0  # the launcher sets the job number on its config
    assert validated[0].hydra.job.num == -1 and launched[0] is not validated[0]
    # the next batch with the same overrides (an Optuna trial proposed twice) composes anew
    loader.load_sweep_config(master, ["k=1"])
    assert composed == [("k=1",), ("k=3",), ("k=1",)]
    # another master config (another sweep in the same process) never takes this one's
    other = OmegaConf.create({"other": True})
    loader.load_sweep_config(other, ["k=1"])
    assert composed[-1] == ("k=1",) and len(composed) == 4


def test_config_files_cached_across_compositions_compose_the_same_configs(monkeypatch):
    """pipeline.sweep.cache_config_files parses each config file once per process: every
    composition (each option of each group, value overrides, the Hydra section) must equal
    Hydra's own. From the second composition on, the files every job uses (config.yaml,
    Hydra's own) come from the cache, so a composition that changed what the cache holds
    would show in the next one."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra._internal.config_repository import ConfigRepository
    from omegaconf import OmegaConf

    import pipeline.config  # noqa: F401  (the schema)
    from pipeline.sweep import cache_config_files

    conf = Path(__file__).resolve().parents[2] / "conf"
    from itertools import zip_longest

    groups = [[f"{group.name}={option.stem}" for option in sorted(group.glob("*.yaml"))]
              for group in sorted(conf.iterdir()) if group.is_dir() and group.name not in ("hydra", "experiment")]
    jobs = [[o for o in options if o] for options in zip_longest(*groups)]  # job i: option i of each group
    assert {o for job in jobs for o in job} == {o for group in groups for o in group} and len(jobs) >= 4
    jobs += [["retriever=bm25", "retriever.k1=0.9", "k=3"], ["reorder=reverse", "attention=log", "k=5"],
             ["experiment=tune_bm25"], ["retriever=dense", "chunker=tokens", "k=1"], ["k=3"]]

    def composed() -> list[dict]:
        with initialize_config_dir(version_base="1.3", config_dir=str(conf)):
            return [OmegaConf.to_container(compose("config", overrides=job, return_hydra_config=True)) for job in jobs]

    hydras = composed()
    parsed = []
    original = ConfigRepository.load_config
    monkeypatch.setattr(ConfigRepository, "load_config",
                        lambda self, path: parsed.append(path) or original(self, path))
    cache_config_files()
    cached = composed()
    assert len(cached) == len(hydras)
    for job, ours, theirs in zip(jobs, cached, hydras):
        assert ours == theirs, job
    assert len(parsed) == len(set(parsed)) > 20  # each file parsed once
    assert parsed.count("config") == 1


def test_the_covering_jobs_hold_every_swept_value_once_in_order():
    """pipeline.sweep.covering_jobs: what a sweep composes before its first job runs."""
    from itertools import product

    from pipeline.sweep import covering_jobs

    grid = [[f"reorder={r}", f"k={k}", f"attention={a}"] for r, k, a in
            product(["none", "reverse", "litm", "lc", "opt"], [1, 3, 5, 10, 20], ["flat", "liu", "log", "u"])]
    chosen = covering_jobs(grid)
    assert len(chosen) == 12 and chosen[0] == grid[0]
    assert {o for job in chosen for o in job} == {o for job in grid for o in job}  # every value
    assert chosen == [job for job in grid if job in chosen]  # in the sweep's order
    assert covering_jobs([["k=1"], ["k=1"]]) == [["k=1"]]
    assert covering_jobs([[]]) == [[]]  # a sweep of one job without overrides

"""Exact ties are ties (issue 25): jobs with identical per-query values are one result, counted
once in the correction family; a sweep whose objective is identical for every job names no best;
any per-query metric of a job (job-relative ``*_at_k``, budget metrics) can be the objective or
a ``compare --metric``.

The sweeps and ``compare`` run in this process (``run_pipeline_command``, ``run_command``:
tests/commands.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from commands import run_command, run_pipeline_command
from no_figures import figures_off

from pipeline import stats
from pipeline.io import results as res
from pipeline.comparison import build_report, format_table
from pipeline.comparison.ties import choose_metrics

def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true", OMP_NUM_THREADS="1")
    return env


def sweep(tmp_path: Path, *overrides: str, store: str | None = None, figures: tuple[str, ...] = ()):
    """``python -m pipeline -m OVERRIDES`` in this process: its result and its folder. Only the
    PNGs named in ``figures`` are rendered (the ones the test checks; tests/no_figures.py)."""
    folder = tmp_path / "sweep"
    track = [f"tracking.uri={store}"] if store else ["tracking=none"]
    with figures_off(keep=figures):
        proc = run_pipeline_command("-m", *overrides, f"paths.root={tmp_path / 'out'}", *track,
                                    f"hydra.sweep.dir={folder}", env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, folder


def _parent(store: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=100)
    (parent,) = [r for r in runs if r.data.tags.get("sweep_parent") == "true"]
    return parent


def per_query(folder: Path, metric: str) -> dict[str, np.ndarray]:
    """Each job's per-query values of ``metric`` (evaluated queries), by run name."""
    out = {}
    for results in res.find_results([folder]):
        table = pd.read_csv(results / "per_query.csv", dtype={"query_id": str})
        table = table[table["evaluated"]].sort_values("query_id")
        out[res.read_record(results)["run_name"]] = table[metric].to_numpy(np.float64)
    return out


# --------------------------------------------------------------------------- the statistics


def test_identical_systems_count_once_in_the_holm_family():
    """Two pairs of identical rows: one comparison per metric, whose adjusted p equals the raw p
    (Holm over one test); the twins take their representative's p (the baseline's twin: 1)."""
    rng = np.random.default_rng(3)
    a, b = rng.random(40), rng.random(40) * 0.6
    c = [x for x in stats.compare_metrics({"m1": np.stack([a, a, b, b]), "m2": np.stack([a, a, a, b])},
                                           ["A", "A2", "B", "B2"], n_permutations=2000, n_resamples=200)]
    assert [x.distinct for x in c] == [[["A", "A2"], ["B", "B2"]], [["A", "A2", "B"], ["B2"]]]
    assert [x.n_family for x in c] == [1, 1]
    raw = [c[0].vs_baseline[1].p["fisher"], c[1].vs_baseline[2].p["fisher"]]
    from statsmodels.stats.multitest import multipletests  # the oracle, loaded by the test that uses it

    expected = multipletests(raw, method="holm")[1]  # the family: 2 comparisons, not 6
    m1, m2 = c
    assert m1.vs_baseline[1].p_adjusted["fisher"] == pytest.approx(expected[0], abs=1e-12)
    assert m1.vs_baseline[2].p_adjusted == m1.vs_baseline[1].p_adjusted  # B2 repeats B
    assert m1.vs_baseline[0].p_adjusted["fisher"] == 1.0 and m1.vs_baseline[0].same_as == "A"
    assert m2.vs_baseline[2].p_adjusted["fisher"] == pytest.approx(expected[1], abs=1e-12)
    assert m2.vs_baseline[1].same_as == "A" and m2.vs_baseline[1].p_adjusted["fisher"] == 1.0
    # The tie set: B's twin follows B, the best's twin is tied.
    clear = np.stack([a + 0.5, a + 0.5, a, a])
    assert stats.tied_with_best(clear, ["A", "A2", "B", "B2"], n_permutations=2000) == ["A", "A2"]
    assert stats.tied_with_best(np.stack([a, a, a]), ["A", "A2", "A3"]) == ["A", "A2", "A3"]


# --------------------------------------------------------------------------- sweeps


@pytest.mark.slow
def test_a_sweep_whose_objective_is_identical_names_no_best(tmp_path, store):
    proc, folder = sweep(tmp_path, "reorder=none,lost_in_the_middle", "k=3,5", store=store)
    values = per_query(folder, "ndcg_at_10")
    assert len(values) == 4 and all(np.array_equal(v, values["none k3 bm25"]) for v in values.values())
    phrase = "ndcg_at_10: 1 distinct result among 4 jobs; it cannot see reorder, k"
    summary = (folder / "summary" / "summary.md").read_text()
    report_md = (folder / "summary" / "compare" / "report.md").read_text()
    parent = _parent(store)
    note = parent.data.tags["mlflow.note.content"]
    for text in (proc.stdout, summary, note, report_md):  # said the same way everywhere
        assert phrase in text
    for text in (proc.stdout, summary, note):
        assert "no best: ndcg_at_10 is identical for all 4 jobs" in text
        assert "Metrics that vary across the jobs: context_utility_at_K (K = 3, 5, 10, 20)" in text
        assert "context_utility_at_k" in text
    assert "\nbest:" not in proc.stdout and "**Best:**" not in note
    assert not [t for t in parent.data.tags if t.startswith("best")]
    assert not [m for m in parent.data.metrics if m.startswith("best")]
    report = json.loads((folder / "summary" / "compare" / "report.json").read_text())
    assert report["n_comparisons"] == 0 and len(report["distinct"]["ndcg_at_10"]) == 1
    # compare's defaults for two jobs that differ only in placement: context utility at each job's k too
    jobs = {res.read_record(r)["run_name"]: r.parent for r in res.find_results([folder])}
    systems, metrics = choose_metrics([str(jobs["none k3 bm25"]), str(jobs["litm k3 bm25"])], None)
    assert metrics == ["ndcg_at_10", "recall_at_10", "mrr", "context_utility_at_k"]
    built = build_report(systems, metrics, n_resamples=200, n_permutations=200)
    utility = per_query(folder, "context_utility_at_3")
    means = [s["mean"] for s in built.data["comparisons"][3]["systems"]]
    assert means == pytest.approx([utility["none k3 bm25"].mean(), utility["litm k3 bm25"].mean()], abs=1e-12)
    assert built.data["notes"] and "ndcg_at_10, recall_at_10, mrr cannot differ" in built.data["notes"][0]
    assert "note: the systems differ only in placement (reorder)" in format_table(built)


def test_the_budget_families_are_the_ones_the_chunker_stage_computes():
    from pipeline.chunkers import BUDGET_METRICS
    from pipeline.metrics import BUDGET_FAMILIES, metric_key

    assert BUDGET_FAMILIES == BUDGET_METRICS
    assert metric_key("context_recall_budget_512").budget == 512 and metric_key("ndcg_at_k").at(5) == "ndcg_at_5"
    with pytest.raises(ValueError, match="is not a metric"):
        metric_key("recall_budget_512")


# test_with_context_utility_the_same_sweep_names_a_best_and_its_tie_set_follows_the_test is in
# tests/pipeline/test_app_sweeps.py, on the tracked sweep its tracked-and-untracked test compares.


@pytest.mark.slow
def test_a_budget_metric_is_an_objective_and_a_compare_metric(tmp_path, store):
    """Also test_chunking.py's sweep over chunk size and budget (one sweep for both): each
    budget is a step of the run's budget/* curves in MLflow, and a column of the summary."""
    proc, folder = sweep(tmp_path, "dataset=sample_long", "chunker=tokens", "chunker.size=64,256", "budget=256,512",
                         "budgets=[256,512]", "objective=context_recall_budget_512", store=store,
                         figures=("budget_curve.png",))
    jobs = {res.read_record(r)["run_name"]: r for r in res.find_results([folder])}
    assert len(jobs) == 4
    from mlflow import MlflowClient  # (test_chunking.py's checks)

    client = MlflowClient(tracking_uri=store)
    runs = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
            if r.data.tags.get("sweep_parent") != "true"]
    assert len(runs) == 4
    for r in runs:  # one step per budget, step = B tokens, the value of <name>_budget_<B>
        history = client.get_metric_history(r.info.run_id, "budget/context_recall")
        assert sorted(m.step for m in history) == [256, 512]
        for m in history:
            assert m.value == pytest.approx(r.data.metrics[f"context_recall_budget_{m.step}"])
    assert {r.data.params["chunker.size"] for r in runs} == {"64", "256"}
    assert {"context_recall_budget_256", "context_recall_budget_512"} <= set(
        pd.read_csv(folder / "summary" / "sweep_table.csv").columns)
    for results in jobs.values():  # the per-query column's mean is the logged metric, its CI around it
        metrics = res.read_record(results)["metrics"]
        table = pd.read_csv(results / "per_query.csv")
        column = table.loc[table["evaluated"], "context_recall_budget_512"].to_numpy()
        assert column.mean() == pytest.approx(metrics["context_recall_budget_512"], abs=1e-12)
        # the interval every objective gets (stats.bootstrap_ci, BCa, seed 0) of this very column; on
        # values this discrete its z0 counts bootstrap means equal to the mean as half below, unlike
        # scipy's (docs/statistics.md), so scipy is not the oracle here: test_stats.py checks the method
        low, high = stats.bootstrap_ci(column[None, :], method="BCa", n_resamples=10_000, seed=0)
        assert metrics["context_recall_budget_512_ci_low"] == pytest.approx(low[0], abs=1e-12)
        assert metrics["context_recall_budget_512_ci_high"] == pytest.approx(high[0], abs=1e-12)
    summary = pd.read_csv(folder / "summary" / "sweep_table.csv")
    assert "context_recall_budget_512_ci_low" in summary.columns
    assert "context_recall_budget_512: 2 distinct results among 4 jobs; it cannot see budget" in proc.stdout
    assert (folder / "summary" / "budget_curve.png").stat().st_size > 10_000
    # compare --metric on two jobs of different chunk sizes: the means are the jobs' own
    a, b = sorted(jobs.values())[0], sorted(jobs.values())[-1]
    with figures_off():  # its numbers are checked, not its PNGs
        out = run_command("compare", str(a.parent), str(b.parent), "--metric", "context_recall_budget_512", "--json",
                          "--out", str(tmp_path / "cmp"), "--n-resamples", "500", "--n-permutations", "500",
                          env=_env())
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    means = [s["mean"] for s in report["comparisons"][0]["systems"]]
    assert means == pytest.approx([res.read_record(r)["metrics"]["context_recall_budget_512"] for r in (a, b)],
                                  abs=1e-12)


# test_two_pairs_of_identical_rankings_are_two_results_and_one_comparison is in
# tests/pipeline/test_sweep_report.py, on that module's k1 x k sweep.

"""What a run and a sweep say to a newcomer (issue 25): the judged-coverage warning and its
advice, once per sweep and in the MLflow descriptions; the runs table's headline view; params
without ``_target_`` noise; run names that tell other judgments apart; one line per sweep job.
"""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from pipeline import console, tracking
from pipeline.job import job_line
from pipeline.metrics import definition_card, judged_warning
from pipeline.naming import run_name
from pipeline.tracking import view

BEIR = {"dataset._target_": "pipeline.io.collection.load_beir"}
IR_DATASETS = {"dataset._target_": "pipeline.io.collection.load_ir_datasets"}
OWN = {"dataset._target_": "pipeline.io.collection.load_trec"}
NAMES = {"retriever": "bm25", "reorder": "none", "attention": "liu2023"}


def _record(judged: float, params: dict[str, str], name: str = "bm25 k10", **metrics: float) -> dict:
    return {"run_name": name, "params": {"k_max": "20", "objective": "ndcg_at_10", **params}, "k": 10,
            "objective": "ndcg_at_10", "dataset": {"name": "scifact", "digest": "ab" * 32, "source": "x"},
            "tags": {"choice.retriever": "bm25", "choice.reorder": "none", "choice.attention": "liu2023"},
            "metrics": {"judged_at_10": judged, "n_queries": 300.0, "ndcg_at_10": 0.61, "recall_at_10": 0.8,
                        "context_utility_at_10": 0.7, "mrr": 0.6, **metrics}}


# ----------------------------------------------------------------------------- the advice


def test_a_public_benchmark_is_advised_bpref_and_judged_only_instead_of_pooling():
    means = {"judged_at_10": 0.3512, "n_queries": 300.0}
    own = tracking.coverage_warning(means, OWN)
    assert own == judged_warning(means) and "pool it" in own  # this project's own collections: pool it
    for params in (BEIR, IR_DATASETS):
        text = tracking.coverage_warning(means, params)
        assert text.startswith("warning: judged_at_10 = 0.3512 < 0.9 (35.1% of the top 10 documents are judged)")
        assert "pool it" not in text and "bpref" in text and "judged_only=true" in text
    assert tracking.coverage_warning({"judged_at_10": 0.95, "n_queries": 3.0}, BEIR) is None


def test_a_sweep_warns_once_for_all_its_jobs_with_their_range():
    records = [_record(0.1884, OWN, "bm25 k3"), _record(0.2866, OWN, "hybrid k3"), _record(0.95, OWN, "dense k3")]
    text = tracking.sweep_coverage_warning(records)
    assert text.startswith("warning: judged_at_10 < 0.9 in 2 of 3 jobs (18.8% to 28.7% of the top 10 documents "
                           "are judged; lowest: bm25 k3): their numbers are biased low; pool them")
    public = tracking.sweep_coverage_warning([_record(0.5, BEIR), _record(0.5, BEIR, "dense k10")])
    assert "in 2 of 2 jobs (50.0% of the top 10" in public and public.endswith(tracking.PUBLIC_ADVICE)
    assert tracking.sweep_coverage_warning([_record(0.9, OWN), _record(0.99, OWN)]) is None


def test_the_warning_names_the_judged_share_at_the_jobs_own_k():
    """Issue 37: a k=5 job warned about judged_at_10 = 0.3173 while its block showed judged_at_5
    0.4615; for a 5-chunk context the @5 share is the one that matters."""
    means = {"judged_at_5": 0.4615, "judged_at_10": 0.3173, "n_queries": 52.0}
    text = tracking.coverage_warning(means, OWN, 5)
    assert text.startswith("warning: judged_at_5 = 0.4615 < 0.9 (46.2% of the top 5 documents are judged)")
    assert "judged_at_10" not in text and text == judged_warning(means, 5)
    assert tracking.coverage_warning({**means, "judged_at_5": 0.95}, OWN, 5) is None  # @10 thin, @5 fine: no warning
    assert tracking.coverage_warning(means, OWN).startswith("warning: judged_at_10 = 0.3173")  # no k: 10
    k5 = {**_record(0.3173, OWN, "dense k5", judged_at_5=0.4615), "k": 5}
    assert "**Warning:** judged_at_5 = 0.4615 < 0.9" in tracking.run_description(k5)
    assert "judged_at_5` is below 0.9" in definition_card("exp", 1, "x", k=5)
    assert "judged_at_10` is below 0.9" in definition_card("exp", 1, "x")


def test_a_sweep_warns_at_each_jobs_own_k():
    k3 = {**_record(0.95, OWN, "k3 bm25", judged_at_3=0.2500), "k": 3}
    k5 = {**_record(0.95, OWN, "k5 bm25", judged_at_5=0.3000), "k": 5}
    both = tracking.sweep_coverage_warning([k3, k5])  # judged_at_10 is 0.95 in both: @10 would say nothing
    assert both.startswith("warning: judged_at_k < 0.9 in 2 of 2 jobs (25.0% to 30.0% of each job's top k documents "
                           "are judged, k = 3, 5; lowest: k3 bm25): their numbers are biased low; pool them")
    one = tracking.sweep_coverage_warning([k5, {**k5, "run_name": "k5 dense"}])
    assert one.startswith("warning: judged_at_5 < 0.9 in 2 of 2 jobs (30.0% of the top 5 documents are judged")
    assert tracking.sweep_coverage_warning([{**k5, "metrics": {**k5["metrics"], "judged_at_5": 0.9}}]) is None


def test_the_run_description_carries_the_warning_when_judgments_are_thin():
    thin = tracking.run_description(_record(0.4, BEIR))
    assert "**Warning:** judged_at_10 = 0.4000 < 0.9" in thin and tracking.PUBLIC_ADVICE in thin
    # Near the top: the UI shows a description's first lines at once.
    assert thin.index("**Warning:**") < thin.index("| retriever |")
    assert "Warning" not in tracking.run_description(_record(0.97, BEIR))


# ----------------------------------------------------------------------------- MLflow


def test_params_lose_target_noise_and_gain_the_options_chosen():
    record = _record(0.5, {**OWN, "retriever._target_": "retrievers.bm25.BM25", "retriever.k1": "1.2",
                           "attention._partial_": "true", "k": "10"})
    params = tracking.shown_params(record)
    assert not [key for key in params if "_target_" in key or "_partial_" in key]
    assert params["retriever"] == "bm25" and params["reorder"] == "none" and params["attention"] == "liu2023"
    assert params["retriever.k1"] == "1.2" and params["k"] == "10"


def test_the_at_k_columns_hold_each_runs_value_at_its_own_k():
    metrics = {"recall_at_3": 0.35, "recall_at_10": 0.48, "context_utility_at_3": 0.52, "ndcg_at_k": 0.9}
    out = tracking.with_job_k(metrics, 3)
    assert out["recall_at_k"] == 0.35 and out["context_utility_at_k"] == 0.52
    assert out["ndcg_at_k"] == 0.9  # a job-relative objective the run logged itself is kept
    assert tracking.with_job_k(metrics, None) == metrics


def test_the_view_shows_the_objective_its_ci_and_the_headline_sorted_best_first():
    state = json.loads(view.view_state("context_utility_at_10"))
    # Issue 37: what answers the question first (beside MLflow's Assistant panel at 1,600 px), then
    # the CI, the rest of the headline, k and the dataset.
    assert state["selectedColumns"] == [
        "metrics.`context_utility_at_10`", "metrics.`recall_at_k`", "metrics.`mrr`",
        "metrics.`context_utility_at_10_ci_low`", "metrics.`context_utility_at_10_ci_high`",
        "metrics.`latency_p95_ms`",  # issue 36: cost next to quality
        "metrics.`context_utility_at_k`", "params.`k`", "attributes.`Dataset`"]
    assert state["columnOrder"] == state["selectedColumns"]
    assert state["orderByKey"] == "metrics.`context_utility_at_10`" and state["orderByAsc"] is False
    # Headers are never cut to look alike: each column is wide enough for its name.
    assert state["columnWidths"]["metrics.`context_utility_at_10_ci_high`"] >= 8 * len("context_utility_at_10_ci_high")
    # The first three fit the ~520 px the Assistant panel leaves at 1,600 px, each wide enough for
    # a value printed in full (150 px shows 0.48782051282051275 whole: tests/pipeline/test_server.py
    # reads the cells back, unrounded).
    assert sum(state["columnWidths"][c] for c in state["selectedColumns"][:3]) <= 520
    assert min(state["columnWidths"][c] for c in state["selectedColumns"][:3]) >= 150
    # A later objective leads; the earlier one stays after the dataset; a corrupt tag is replaced.
    later = json.loads(view.view_state("ndcg_at_10", json.dumps(state)))
    assert later["selectedColumns"][:5] == ["metrics.`ndcg_at_10`", "metrics.`recall_at_k`", "metrics.`mrr`",
                                            "metrics.`ndcg_at_10_ci_low`", "metrics.`ndcg_at_10_ci_high`"]
    assert later["selectedColumns"][9:] == ["metrics.`context_utility_at_10`", "metrics.`context_utility_at_10_ci_low`",
                                            "metrics.`context_utility_at_10_ci_high`"]
    assert json.loads(view.view_state("mrr", "{not json"))["selectedColumns"][:3] == [
        "metrics.`mrr`", "metrics.`recall_at_k`", "metrics.`mrr_ci_low`"]


def test_the_view_tag_is_written_once_and_follows_a_new_objective(tmp_path, migrated_store, monkeypatch):
    from mlflow import MlflowClient

    db = tmp_path / "mlflow.db"
    shutil.copy(migrated_store, db)
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.create_experiment("sample")
    monkeypatch.setattr(view, "_done", set())
    view.ensure_view(client, "s", exp, "ndcg_at_10")
    first = client.get_experiment(exp).tags[view.VIEW_TAG]
    assert first == view.view_state("ndcg_at_10")
    writes = []
    monkeypatch.setattr(client, "set_experiment_tag", lambda *a: writes.append(a))
    view.ensure_view(client, "s", exp, "ndcg_at_10")  # the same process: not even read again
    monkeypatch.setattr(view, "_done", set())
    view.ensure_view(client, "s", exp, "ndcg_at_10")  # another process: read, unchanged, not written
    assert writes == []
    view.ensure_view(client, "s", exp, "recall_at_5")
    assert len(writes) == 1 and json.loads(writes[0][2])["orderByKey"] == "metrics.`recall_at_5`"
    assert tracking.ui_url("http://127.0.0.1:5000", exp) == (
        f"http://127.0.0.1:5000/#/experiments/{exp}/runs?viewStateShareKey={tracking.VIEW_KEY}"
        "&workflowType=machine_learning")


def test_runs_scored_on_other_judgments_or_queries_are_named_apart():
    assert run_name(NAMES, 10, [], {}) == "bm25 k10"
    assert run_name(NAMES, 10, ["dataset.qrels=judging/r1/judged/qrels.consensus.txt"], {}) == \
        "bm25 k10 qrels=qrels.consensus"
    assert run_name(NAMES, 10, ["dataset=beir", "dataset.path=data/scifact", "dataset.split=dev"], {}) == \
        "bm25 k10 split=dev"
    assert run_name(NAMES, 10, ["dataset.queries=topics-2.tsv.gz", "verbose=true"], {}) == "bm25 k10 queries=topics-2"


# ----------------------------------------------------------------------------- the console


def _record_of(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 0, message, None, None)


def test_a_brief_sweep_keeps_info_in_the_log_file_and_each_warning_once(monkeypatch):
    monkeypatch.setattr(console, "_SHOWN", set())
    job, launcher = console.BriefJobLog(), console.BriefLauncher()
    info = _record_of("pipeline.job", logging.INFO, "retrieve: 0.01 s")
    warn = _record_of("pipeline.io", logging.WARNING, "3 judgments name unknown documents")
    per_job = _record_of("hydra._internal.core_plugins.basic_launcher", logging.INFO, "\t#3 : retriever=dense k=5")
    trial = _record_of("optuna.study.study", logging.INFO, "Trial 3 finished with value: 0.5")
    try:
        console.brief(False)
        assert all(f.filter(r) for f in (job, launcher) for r in (info, warn, per_job, trial))
        console.brief(True)
        assert not job.filter(info) and job.filter(warn) and not job.filter(warn)  # once
        assert not launcher.filter(per_job) and not launcher.filter(trial)
        assert launcher.filter(_record_of("hydra", logging.INFO, "Launching 18 jobs locally"))
    finally:
        console.brief(False)


def test_verbose_flags_and_the_jobs_line():
    assert console.verbose_argv(["-m", "-v", "k=3,5"]) == ["-m", "verbose=true", "k=3,5"]
    assert console.verbose_argv(["--verbose"]) == ["verbose=true"]
    metrics = {"ndcg_at_10": 0.57715, "recall_at_3": 0.35032, "mrr": 0.69305, "context_utility_at_3": 0.52506}
    assert job_line(0, "bm25 none k3", 3, "ndcg_at_10", metrics) == \
        "#0 bm25 none k3: ndcg_at_10 0.5772, recall_at_3 0.3503, mrr 0.6931, context_utility_at_3 0.5251"
    assert job_line(4, "litm k3", 3, "context_utility_at_3", metrics) == \
        "#4 litm k3: context_utility_at_3 0.5251, recall_at_3 0.3503, mrr 0.6931"


def test_hydra_has_no_flag_of_that_name():
    """``-v`` and ``--verbose`` are ours to take: Hydra's own command line (the parser behind
    ``--hydra-help``'s flags) leaves them to us, while it takes its own (``-m``)."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    for flag in ("-v", "--verbose"):
        assert parser.parse_known_args([flag])[1] == [flag], flag
    assert parser.parse_known_args(["-m"])[1] == [] and parser.parse_known_args(["-m"])[0].multirun

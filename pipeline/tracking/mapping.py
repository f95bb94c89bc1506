"""One record, one mapping: everything MLflow receives from a job, decided here and only here.

A job computes, writes its results folder and, last, ``record.json`` (``pipeline.io.results``).
The record is the one source; this module is the one transformation of it into MLflow's terms,
and it is pure (no mlflow, no I/O), so the job, ``pipeline.sync``, the sweep and the tests all
get the same answer from it:

- the names the record itself carries (:func:`curve_key`, :func:`budget_key`,
  :func:`timing_key`, :func:`data_key`, :func:`job_tags`, :func:`cost_tags`,
  :func:`table_columns`), which the job asks for when it writes the record;
- :func:`run_of`: the record as one MLflow run (params, metrics, curves with step = K, stepped
  metrics with step = B, tags with the description, dataset input, the per-query table's
  columns), and :func:`metric_points`, :func:`param_items`, :func:`dataset_input`: that run as
  the values of MLflow's batch and input calls (``pipeline.tracking.log`` makes the calls);
- :func:`runs_table_metrics`: the headline columns of the runs table (``pipeline.tracking.view``);
- the sweep's parent run: :func:`sweep_start_tags`, :func:`parent_best`, :func:`parent_finish_tags`.

==================  ================================================================
MLflow              from the record
==================  ================================================================
run name            ``run_name`` (credentials hidden, as everywhere below)
params              ``params`` without the keys naming Python objects (``_target_``,
                    ``_partial_``), plus ``retriever``, ``reorder``, ``attention``
metrics (step 0)    ``metrics``, ``cost.metrics``, ``<family>_at_k`` (:data:`AT_K_FAMILIES`)
curves (step = K)   ``curves``: ``curve/<family>``, K = 1..k_max
stepped (step = B)  ``stepped``: ``budget/<name>``, B = the token budget
tags                ``tags``, ``job_key``, the description ``mlflow.note.content``
dataset input       ``dataset``: name, digest, source
per-query table     ``table_columns`` of ``per_query.csv``
==================  ================================================================

docs/mlflow.md ("What a run holds") is tested against this module
(``tests/pipeline/test_mapping.py``): every key it produces for a bm25 job, a dense job with
its cost, a chunked job and a sweep's parent is documented there, and every key documented
there is produced.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.tracking.credentials import redact
from pipeline.tracking.describe import run_description
from pipeline.tracking.store import (TAG_GIT, TAG_JOB_KEY, TAG_LOGGED_ARTIFACTS, TAG_NOTE, TAG_OVERRIDES, TAG_PARENT,
                                     TAG_SWEEP, TAG_SWEEP_PARENT, table_tag)

if TYPE_CHECKING:
    import pandas as pd

#: Prefix of the K-sweep curves (step = K, the cut-off).
CURVE_PREFIX = "curve/"
#: Prefix of the token-budget curves of chunked or budgeted runs (step = B tokens).
BUDGET_PREFIX = "budget/"
#: MLflow's own tag of the commit (the UI's "Source" column), beside :data:`TAG_GIT`.
TAG_MLFLOW_GIT = "mlflow.source.git.commit"
#: Config groups whose chosen option is a tag ``choice.<group>`` and a param of its own.
CHOICE_PARAMS = ("retriever", "reorder", "attention")
#: Metric families also logged as ``<family>_at_k``: the value at the run's own k, so runs with
#: different k share one column in the runs table (``pipeline.tracking.view``).
AT_K_FAMILIES = ("ndcg", "precision", "recall", "context_utility")
#: The runs table's columns right after the objective, before its CI (``_at_k``: at each run's k).
RUNS_TABLE_ANSWERS = ("recall_at_k", "mrr")
#: The runs table's columns after the objective's CI: the p95 retrieval latency (cost next to
#: quality: ``retrievers.cost``), then context utility at the run's k.
RUNS_TABLE_MORE = ("latency_p95_ms", "context_utility_at_k")
#: The runs table's columns after the metrics: the run's k and its dataset input.
RUNS_TABLE_CONTEXT = (("params", "k"), ("attributes", "Dataset"))
#: MLflow's limits that this project meets by cutting: a param's value, a description, a tag.
PARAM_MAX_CHARS = 6000
NOTE_MAX_CHARS = 8000
TAG_MAX_CHARS = 5000
#: MLflow's limit on a dataset input's digest.
DIGEST_MAX_CHARS = 36


# --------------------------------------------------------------------------- the record's names


def curve_key(family: str) -> str:
    """``curve/ndcg``: the K-sweep curve of a metric family (step = K)."""
    return f"{CURVE_PREFIX}{family}"


def budget_key(name: str) -> str:
    """``budget/context_recall``: a budget metric's curve (step = B tokens)."""
    return f"{BUDGET_PREFIX}{name}"


def timing_key(stage: str) -> str:
    """``time_load_s``: a stage's wall time (``time_track_s`` is logging's own)."""
    return f"time_{stage}_s"


#: The one metric the logger adds itself: how long logging took (``pipeline.tracking.log``).
TRACK_TIME = timing_key("track")


def data_key(name: str) -> str:
    """``data_empty_docs``: a count of the collection's loader report."""
    return f"data_{name}"


def record_metrics(quality: Mapping[str, float], timings: Mapping[str, float], data: Mapping[str, Any],
                   retriever: Mapping[str, float]) -> dict[str, float]:
    """The record's ``metrics``: the quality means, the stage timings (keys of :func:`timing_key`),
    the loader's counts (:func:`data_key`) and the retriever's own numbers (e.g.
    ``chroma_recall_at_k``, ``external_failed_queries``). The cost is kept apart (:func:`cost_metrics`)."""
    return {**quality, **timings, **{data_key(k): float(v) for k, v in data.items()}, **retriever}


def record_curves(curves: Mapping[str, Any]) -> dict[str, list[float]]:
    """The record's ``curves``: each family's mean at K = 1..k_max under :func:`curve_key`."""
    return {curve_key(family): [float(v) for v in values] for family, values in curves.items()}


def record_stepped(stepped: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """The record's ``stepped``: each budget metric's ``{B: mean}`` under :func:`budget_key`."""
    return {budget_key(name): dict(points) for name, points in stepped.items()}


def table_columns(metric_columns: Sequence[str], k: int) -> list[str]:
    """The per-query table the run shows in MLflow's UI (the full table is ``per_query.csv``):
    ``query_id``, ``query``, R (``n_relevant``), the first relevant rank and ``judged_at_<k>``
    first, then ``metric_columns``, the top k last (a wide cell; ``pipeline.io.drilldown``)."""
    lead = ["query_id", "query", *(["n_relevant"] if "n_relevant" in metric_columns else []), "first_relevant_rank",
            f"judged_at_{k}"]
    return lead + [c for c in metric_columns if c not in lead] + [f"top_{k}"]


def cost_tags(cost: Mapping[str, Any]) -> dict[str, str]:
    """The tags of a cost summary (``retrievers.cost``): where the latency comes from
    (``measured``, ``cache``, ``not measured``), how (``per_query``, ``batch_share``) and the machine."""
    if not cost:
        return {}
    tags = {"cost.latency_source": str(cost.get("latency_source", ""))}
    if cost.get("latency_mode"):
        tags["cost.latency_mode"] = str(cost["latency_mode"])
    for key, value in (cost.get("machine") or {}).items():
        tags[f"cost.machine.{key}"] = str(value)
    return tags


def cost_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """The cost block's metrics (latency, throughput, index), logged as metrics of the run."""
    return dict((record.get("cost") or {}).get("metrics") or {})


@dataclass
class Launch:
    """How a job was launched, as its tags say it: the command line's overrides (credentials
    already hidden), the option chosen in each of :data:`CHOICE_PARAMS`, its sweep and number
    in it, whether an Optuna sweeper sampled it, and the checkout's commit."""

    overrides: Sequence[str]
    choices: Mapping[str, str]
    cache_hit: bool
    sweep_id: str | None = None
    job_num: int | None = None
    optuna: bool = False
    git_commit: str | None = None


def job_tags(launch: Launch, judged_only: bool, cost: Mapping[str, Any]) -> dict[str, str]:
    """The record's ``tags``: the overrides, the ranking cache's hit or miss, ``choice.<group>``,
    the sweep, job number and Optuna trial, the commit, ``judged_only`` and the cost tags."""
    tags = {TAG_OVERRIDES: " ".join(launch.overrides), "ranking_cache": "hit" if launch.cache_hit else "miss",
            **{f"choice.{group}": name for group, name in launch.choices.items()}}
    if launch.sweep_id:
        tags[TAG_SWEEP] = launch.sweep_id
    if launch.job_num is not None:
        tags["job_num"] = str(launch.job_num)
    if launch.optuna:
        tags["optuna_trial"] = str(launch.job_num)
    if launch.git_commit:
        tags[TAG_GIT] = launch.git_commit
        tags[TAG_MLFLOW_GIT] = launch.git_commit
    return {**tags, "judged_only": str(judged_only).lower(), **cost_tags(cost)}


# --------------------------------------------------------------------------- the run


@dataclass
class RunRecord:
    """One MLflow run, as :func:`run_of` maps a record (or as a caller builds one directly)."""

    experiment: str
    run_name: str
    params: dict[str, str]
    metrics: dict[str, float]
    curves: dict[str, Any]  # name -> values for K = 1..k_max (logged with step = K)
    tags: dict[str, str]
    artifacts_dir: Path  # every file below is logged, keeping the layout
    dataset: dict[str, str]  # name, digest, source
    table: pd.DataFrame | None = None  # shown in the UI through log_table
    start_time_ms: int | None = None  # when the job started (the UI's duration)
    stepped: dict[str, dict[str, float]] | None = None  # name -> {step: value}, e.g. budget/* with step = B tokens
    table_columns: list[str] | None = field(default=None)  # per_query.csv's columns for ``table`` (the logger reads them)


def shown_params(record: Mapping[str, Any]) -> dict[str, str]:
    """The params a run logs: the flattened config without the keys that name Python objects
    (``retriever._target_``, ``_partial_``: the same for every run of an option, noise in
    MLflow's Compare view), plus the option chosen in each of :data:`CHOICE_PARAMS`
    (``retriever=bm25``), which the Compare view can plot. ``config.yaml`` keeps every key."""
    params = {key: value for key, value in record["params"].items()
              if not any(part.startswith("_") for part in key.split("."))}
    for group in CHOICE_PARAMS:
        if (choice := record["tags"].get(f"choice.{group}")) and group not in params:
            params[group] = str(choice)
    return params


def at_job_k(metrics: Mapping[str, float], k: Any, families: Iterable[str] = AT_K_FAMILIES) -> dict[str, Any]:
    """``{<family>_at_k: <family>_at_<k>}`` for ``families`` (None where the run has no such key)."""
    return {f"{family}_at_k": metrics.get(f"{family}_at_{int(k)}") for family in families}


def with_job_k(metrics: Mapping[str, float], k: Any) -> dict[str, float]:
    """The metrics plus ``<family>_at_k`` (:data:`AT_K_FAMILIES`) for each family the run has at
    its k, unless the run logged that name itself (a job-relative objective)."""
    out = dict(metrics)
    if k is None:
        return out
    for key, value in at_job_k(metrics, k).items():
        if value is not None:
            out.setdefault(key, value)
    return out


def run_of(record: Mapping[str, Any], results: Path | None = None) -> RunRecord:
    """The record as one MLflow run: see the table in this module's docstring. ``results``: the
    folder the record is in (its artifacts; the description names the files it holds)."""
    folder = Path(results) if results is not None else Path(".")
    description = redact(run_description(record, results))[:NOTE_MAX_CHARS]
    return RunRecord(
        experiment=record["experiment"], run_name=redact(record["run_name"]),
        params={key: redact(value) for key, value in shown_params(record).items()},
        metrics=with_job_k({**record["metrics"], **cost_metrics(record)}, record.get("k")),
        curves=record["curves"], stepped=record.get("stepped"),
        tags={TAG_NOTE: description, **{key: redact(value) for key, value in record["tags"].items()},
              TAG_JOB_KEY: record["job_key"]},
        artifacts_dir=folder, dataset=record["dataset"], start_time_ms=record["start_time_ms"],
        table_columns=list(record["table_columns"]) if record.get("table_columns") else None,
    )


def metric_points(run: RunRecord) -> list[tuple[str, float, int]]:
    """(key, value, step) of every metric point: single values at step 0, each curve at step
    K = 1..k_max, each stepped metric at its own step (B tokens)."""
    points = [(key, float(value), 0) for key, value in run.metrics.items()]
    for name, values in run.curves.items():
        points += [(name, float(v), step) for step, v in enumerate(values, start=1)]
    for name, steps in (run.stepped or {}).items():
        points += [(name, float(v), int(step)) for step, v in steps.items()]
    return points


def param_items(run: RunRecord) -> list[tuple[str, str]]:
    """(key, value) of every param, each value cut to MLflow's limit."""
    return [(key, value[:PARAM_MAX_CHARS]) for key, value in run.params.items()]


def dataset_input(run: RunRecord) -> dict[str, str]:
    """The collection as the run's evaluation dataset: name, content digest (cut to MLflow's
    limit), source type (``local`` when the source is a path here, else ``code``), source."""
    source = run.dataset["source"]
    return {"name": run.dataset["name"], "digest": run.dataset["digest"][:DIGEST_MAX_CHARS],
            "source_type": "local" if Path(source).exists() else "code", "source": json.dumps({"uri": source}),
            "context": "evaluation"}


def run_tags(run: RunRecord, parent_run_id: str | None, table_file: str) -> dict[str, str]:
    """The tags a run is created with: the run's, its parent (a sweep's job), and the tag that
    ``MlflowClient.log_table`` would set when the run has a per-query table (``table_file``)."""
    tags = dict(run.tags)
    if parent_run_id:
        tags[TAG_PARENT] = parent_run_id
    if run.table is not None or run.table_columns:
        tags[TAG_LOGGED_ARTIFACTS] = table_tag(table_file)
    return tags


# --------------------------------------------------------------------------- the runs table


def runs_table_metrics(objective: str) -> list[str]:
    """The runs table's metric columns for runs whose objective is ``objective``, in order: it,
    :data:`RUNS_TABLE_ANSWERS`, its CI, :data:`RUNS_TABLE_MORE` (each once)."""
    return list(dict.fromkeys([objective, *RUNS_TABLE_ANSWERS, f"{objective}_ci_low", f"{objective}_ci_high",
                               *RUNS_TABLE_MORE]))


# --------------------------------------------------------------------------- a sweep's parent run


def sweep_start_tags(sweep_id: str, run_name: str, tags: Mapping[str, str]) -> dict[str, str]:
    """The parent run's tags when the sweep starts: its sweep, the parent mark, and a
    description saying it is running (``tags``: the caller's own, credentials hidden)."""
    note = (f"**{run_name}**: a sweep, running; its jobs are nested under this run. When it "
            "ends, this description gives the best job and the summary is under `summary/`.\n")
    return {TAG_SWEEP: sweep_id, TAG_SWEEP_PARENT: "true", TAG_NOTE: note,
            **{key: redact(value) for key, value in tags.items()}}


def parent_best(objective: str, best: Mapping[str, Any], overrides: Mapping[str, str],
                twins: Sequence[Mapping[str, str]], n_tied: float | None = None) -> tuple[dict[str, str],
                                                                                      dict[str, float]]:
    """The best job of a sweep as its parent run's tags and metrics. ``best``: the job's row of
    the sweep table (``run_name``, ``run_id``, the objective and its CI, ``optuna_trial``);
    ``overrides``: its parsed overrides; ``twins``: the overrides of the jobs identical to it
    on the objective, so ``best.<override>`` names only the settings they share (the objective
    cannot tell their other settings apart); ``n_tied``: how many jobs could be the best."""
    tags = {"best_run_name": str(best["run_name"]), "best_run_id": str(best["run_id"]),
            **{f"best.{k}": v for k, v in overrides.items()
               if not k.startswith(("paths.", "tracking.", "hydra.")) and all(o.get(k) == v for o in twins)}}
    if "optuna_trial" in best:
        tags["best_optuna_trial"] = str(best["optuna_trial"])
    cols = (objective, f"{objective}_ci_low", f"{objective}_ci_high")
    metrics = {f"best_{col}": float(best[col]) for col in cols if col in best}
    if n_tied is not None:
        metrics["n_tied_with_best"] = float(n_tied)
    return tags, metrics


def parent_budget(objective: str, budget_ms: float, best: str | None, closest: str | None,
                  best_run_id: str | None = None, best_value: float | None = None
                  ) -> tuple[dict[str, str], dict[str, float]]:
    """Under a latency budget (``select.max_latency_p95_ms``), the parent run's tags
    ``budget.max_latency_p95_ms``, ``best_within_budget_run_name`` (empty when no job meets it;
    ``closest_to_budget_run_name`` then) and ``best_within_budget_run_id``, and the metric
    ``best_within_budget_<objective>``. ``best``/``closest``: run names."""
    tags = {"budget.max_latency_p95_ms": f"{budget_ms:g}", "best_within_budget_run_name": str(best or "")}
    metrics: dict[str, float] = {}
    if best is None:
        tags["closest_to_budget_run_name"] = str(closest or "")
        return tags, metrics
    if best_run_id is not None:
        tags["best_within_budget_run_id"] = str(best_run_id)
    if best_value is not None:
        metrics[f"best_within_budget_{objective}"] = float(best_value)
    return tags, metrics


def parent_finish_tags(tags: Mapping[str, str] | None, description: str | None, table_file: str | None
                       ) -> dict[str, str]:
    """The parent run's tags when the sweep ends: ``tags`` (the best job's), the description
    (``mlflow.note.content``) and, when a table of jobs is logged (``table_file``), the tag
    ``MlflowClient.log_table`` would set; each cut to MLflow's limit."""
    out = dict(tags or {})
    if description:
        out[TAG_NOTE] = redact(description)[:NOTE_MAX_CHARS]
    if table_file:
        out[TAG_LOGGED_ARTIFACTS] = table_tag(table_file)
    return {key: str(value)[:TAG_MAX_CHARS] for key, value in out.items()}

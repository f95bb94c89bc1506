"""Logging to a store: one job as one MLflow run, a results folder logged exactly once, a
sweep's parent run, and the description a run's page shows.

A run is created with its tags (so a search by tag finds it at once), then filled in as few
requests as MLflow allows (one batch of params, metrics and stepped curves; the dataset
input; the per-query table; the results folder as artifacts), and only then marked FINISHED.

:func:`log_results` is the one entry for a results folder, from its job or from
``pipeline.sync``, and it is idempotent: a folder whose marker names the store is done;
otherwise the store is asked for a run with the record's ``job_key`` tag (a FINISHED one is
adopted; unfinished ones, left by a killed logger, are deleted and the job is logged again).
A lock file beside the folder keeps a job and a sync from logging it at the same time.
The jobs of a sweep find its parent run through the sweep file the launcher writes
(``pipeline.io.results.SWEEP_FILE``); a job logged later by ``pipeline.sync`` finds (or
makes) the same parent in the store.
"""

from __future__ import annotations

import json
import logging
import posixpath
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.io import results as res
from pipeline.tracking.store import (SWEEP_TABLE_FILE, TABLE_FILE, TAG_JOB_KEY, TAG_LOGGED_ARTIFACTS, TAG_NOTE,
                                     TAG_OVERRIDES, TAG_PARENT, TAG_SWEEP, TAG_SWEEP_PARENT, StoreSettings,
                                     TrackingError, client, ensure_store, experiment_id, retrying, runs_with_tags,
                                     table_tag, tracking_errors, writing)

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities import DatasetInput, Metric, Param

log = logging.getLogger(__name__)

#: How long a logger waits for another one logging the same folder.
FOLDER_LOCK_TIMEOUT_S = 300


@dataclass
class RunRecord:
    """Everything one job logs (read from its record; see ``pipeline.io.results``)."""

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


def log_table(mlflow_client: MlflowClient, run_id: str, table: pd.DataFrame, artifact_file: str) -> None:
    """``MlflowClient.log_table`` for a run whose :data:`TAG_LOGGED_ARTIFACTS` the caller sets
    in a request it makes anyway (:func:`~pipeline.tracking.store.table_tag`): the same file
    (pandas' split JSON, MLflow 3.17's writer) without log_table's extra store round trips
    (list the artifacts, read the run, set the tag) and its scan of every text column for
    images. It replaces an existing file (log_table appends to it). Tested against log_table."""
    folder, name = posixpath.split(artifact_file)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        table.to_json(path, orient="split", index=False, date_format="iso")
        mlflow_client.log_artifact(run_id, str(path), artifact_path=folder or None)


def log_run(settings: StoreSettings, record: RunRecord, parent_run_id: str | None = None,
            before_finish: Callable[[MlflowClient, str], None] | None = None, exp_id: str | None = None) -> str:
    """Log one job as one MLflow run; returns its run id. Raises TrackingError.

    ``before_finish(client, run_id)`` runs after everything else is logged and before the run
    is marked FINISHED: a FINISHED run is a complete one. ``exp_id``: the id of the record's
    experiment when the caller has just looked it up."""
    with tracking_errors(f"MLflow tracking at {settings.uri} failed", settings.uri):
        mlflow_client = client(settings)
        if exp_id is None:
            exp_id = retrying(lambda: experiment_id(mlflow_client, record.experiment, settings))
        tags = dict(record.tags)
        if parent_run_id:
            tags[TAG_PARENT] = parent_run_id
        if record.table is not None:  # what MlflowClient.log_table sets, set with the run (see log_table)
            tags[TAG_LOGGED_ARTIFACTS] = table_tag(TABLE_FILE)
        run_id = retrying(lambda: mlflow_client.create_run(
            exp_id, run_name=record.run_name, tags=tags, start_time=record.start_time_ms)).info.run_id
        try:
            metrics, params, dataset = _contents(record)
            retrying(lambda: mlflow_client.log_batch(run_id, metrics=metrics, params=params))
            retrying(lambda: mlflow_client.log_inputs(run_id, datasets=[dataset]))
            if record.table is not None:
                log_table(mlflow_client, run_id, record.table, TABLE_FILE)
            mlflow_client.log_artifacts(run_id, str(record.artifacts_dir))
            if before_finish is not None:
                before_finish(mlflow_client, run_id)
        except Exception:
            try:  # keep the original error: marking the run may fail for the same reason
                mlflow_client.set_terminated(run_id, status="FAILED")
            except Exception as exc:  # noqa: BLE001  (the original error is raised below)
                log.warning("could not mark run %s as FAILED: %s", run_id, exc)
            raise
        retrying(lambda: mlflow_client.set_terminated(run_id, status="FINISHED"))
        return run_id


def _contents(record: RunRecord) -> tuple[list[Metric], list[Param], DatasetInput]:
    """The record's metrics (curves with step = K, stepped metrics with their steps), params, and
    the collection as the run's evaluation dataset (name, content digest, source)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param

    now = int(time.time() * 1000)
    metrics = [Metric(key, float(value), now, 0) for key, value in record.metrics.items()]
    for name, values in record.curves.items():
        metrics += [Metric(name, float(v), now, step) for step, v in enumerate(values, start=1)]
    for name, points in (record.stepped or {}).items():
        metrics += [Metric(name, float(v), now, int(step)) for step, v in points.items()]
    source = record.dataset["source"]
    dataset = Dataset(name=record.dataset["name"], digest=record.dataset["digest"][:36],
                      source_type="local" if Path(source).exists() else "code", source=json.dumps({"uri": source}))
    return (metrics, [Param(key, value[:6000]) for key, value in record.params.items()],
            DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "evaluation")]))


def log_results(results: Path, settings: StoreSettings | None = None) -> str:
    """Log a results folder as one MLflow run, exactly once; returns the run id.

    ``settings`` default to the store the record names. Raises TrackingError, or InputError
    for a corrupt record."""
    results = Path(results)
    record = res.read_record(results)
    if settings is None:
        if record["tracking"] is None:
            raise TrackingError(f"{results}: the job ran with tracking=none: name a store to log it to")
        settings = StoreSettings.of(record["tracking"])
    from filelock import FileLock, Timeout

    try:  # one logger per folder at a time: a job and a sync may overlap
        # (the lock file lives beside the results folder, which is logged whole as artifacts)
        with FileLock(str(results.parent / f".{results.name}.mlflow.lock"), timeout=FOLDER_LOCK_TIMEOUT_S):
            return _log_results_locked(results, record, settings)
    except Timeout:
        raise TrackingError(f"{results}: another process has been logging this folder for "
                            f"{FOLDER_LOCK_TIMEOUT_S} s") from None


def _log_results_locked(results: Path, record: dict[str, Any], settings: StoreSettings) -> str:
    marker = res.read_marker(results)
    if marker is not None and marker.get("uri") == settings.uri:
        return marker["run_id"]
    start = time.perf_counter()
    with tracking_errors(f"MLflow tracking at {settings.uri} failed", settings.uri), writing(settings):
        mlflow_client = client(settings)
        exp_id = retrying(lambda: experiment_id(mlflow_client, record["experiment"], settings))
        for found in runs_with_tags(mlflow_client, exp_id, {TAG_JOB_KEY: record["job_key"]}):
            if found.info.status == "FINISHED":
                res.write_marker(results, settings.uri, found.info.run_id, exp_id)
                return found.info.run_id
            mlflow_client.delete_run(found.info.run_id)  # half-logged by a process that died
        parent = sweep_parent(settings, record)

        def track_time(mlflow_client: MlflowClient, run_id: str) -> None:
            mlflow_client.log_metric(run_id, "time_track_s", time.perf_counter() - start)

        run_id = log_run(settings, _record_of(results, record), parent, before_finish=track_time, exp_id=exp_id)
        res.write_marker(results, settings.uri, run_id, exp_id)
        return run_id


def _record_of(results: Path, record: dict[str, Any]) -> RunRecord:
    """What :func:`log_run` logs of a results folder: the record, its description, and the
    per-query table's columns (``table_columns``) read from ``per_query.csv``."""
    table = None
    if columns := record.get("table_columns"):
        import pyarrow.csv as pa_csv

        # Only the table's columns are parsed: per_query.csv has a column per metric and K.
        per_query = pa_csv.read_csv(results / "per_query.csv", convert_options=pa_csv.ConvertOptions(
            column_types={"query_id": "string"}, include_columns=list(columns)))
        table = per_query.select(list(columns)).to_pandas()
    return RunRecord(
        experiment=record["experiment"], run_name=record["run_name"], params=record["params"],
        metrics=record["metrics"], curves=record["curves"], stepped=record.get("stepped"),
        tags={TAG_NOTE: run_description(record, results)[:8000], **record["tags"], TAG_JOB_KEY: record["job_key"]},
        artifacts_dir=results, dataset=record["dataset"], table=table, start_time_ms=record["start_time_ms"],
    )


def sweep_parent(settings: StoreSettings, record: Mapping[str, Any]) -> str | None:
    """The parent run of the job's sweep (found or created, and remembered in the sweep
    file), when the job is part of a sweep that logs to the job's experiment."""
    sweep = record.get("sweep") or {}
    if not sweep.get("sweep_id"):
        return None
    sweep_dir = Path(sweep.get("dir", ""))
    info = res.read_sweep(sweep_dir) if sweep.get("dir") else {}
    if info.get("experiment", record["experiment"]) != record["experiment"]:
        return None
    if info.get("parent_run_id") and info.get("uri", settings.uri) == settings.uri:
        return str(info["parent_run_id"])
    found = start_sweep(settings, record["experiment"], sweep["sweep_id"], {}, run_name=info.get("run_name"))
    if sweep.get("dir"):
        res.write_json(sweep_dir / res.SWEEP_FILE, {**info, **found, "experiment": record["experiment"]})
    return found["parent_run_id"]


def start_sweep(settings: StoreSettings, experiment: str, sweep_id: str, tags: Mapping[str, str],
                run_name: str | None = None) -> dict[str, str]:
    """Create the store and the sweep's parent run before any job tracks (or find the
    parent a previous attempt made: one parent per sweep id); returns what the sweep file
    remembers of it (sweep id, parent run id, experiment id, store). The parent is named
    ``run_name`` (the sweep's overrides, ``pipeline.sweep.sweep_name``) and described as
    running until :func:`finish_sweep` describes its result."""
    with tracking_errors(f"cannot start the sweep's MLflow parent run at {settings.uri}", settings.uri), \
            writing(settings):
        ensure_store(settings)
        mlflow_client = client(settings)
        exp_id = retrying(lambda: experiment_id(mlflow_client, experiment, settings))
        found = runs_with_tags(mlflow_client, exp_id, {TAG_SWEEP: sweep_id, TAG_SWEEP_PARENT: "true"})
        if found:
            run_id = found[0].info.run_id
        else:
            note = (f"**{run_name or 'sweep'}**: a sweep, running; its jobs are nested under this run. When it "
                    "ends, this description gives the best job and the summary is under `summary/`.\n")
            run_id = mlflow_client.create_run(
                exp_id, run_name=run_name or f"sweep {sweep_id}",
                tags={TAG_SWEEP: sweep_id, TAG_SWEEP_PARENT: "true", TAG_NOTE: note, **tags}
            ).info.run_id
        return {"sweep_id": sweep_id, "parent_run_id": run_id, "experiment_id": exp_id, "uri": settings.uri}


def finish_sweep(settings: StoreSettings, parent_run_id: str, summary_dir: Path, table: pd.DataFrame,
                 status: str = "FINISHED", tags: Mapping[str, str] | None = None,
                 metrics: Mapping[str, float] | None = None, description: str | None = None) -> None:
    """Log the summary folder (table, figure), the table itself, the best job's tags and
    metrics and the sweep's ``description`` (markdown) to the parent run, then close it with
    ``status``."""
    if description:
        tags = {**(tags or {}), TAG_NOTE: description[:8000]}
    if len(table):  # what MlflowClient.log_table sets, set with the batch below (see log_table)
        tags = {**(tags or {}), TAG_LOGGED_ARTIFACTS: table_tag(SWEEP_TABLE_FILE)}
    with tracking_errors(f"cannot log the sweep summary to {settings.uri}", settings.uri), writing(settings):
        mlflow_client = client(settings)
        if tags or metrics:
            from mlflow.entities import Metric, RunTag

            now = int(time.time() * 1000)
            mlflow_client.log_batch(parent_run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()],
                                    metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()])
        if len(table):
            log_table(mlflow_client, parent_run_id, table, SWEEP_TABLE_FILE)
        mlflow_client.log_artifacts(parent_run_id, str(summary_dir), artifact_path="summary")
        mlflow_client.set_terminated(parent_run_id, status=status)


#: Headline metrics of a run's description, at the run's k (label, metric key pattern).
_DESCRIBED = (("nDCG", "ndcg_at_{k}"), ("precision", "precision_at_{k}"), ("recall", "recall_at_{k}"),
              ("MRR", "mrr_at_{k}"), ("MAP", "map_at_{k}"), ("context utility", "context_utility_at_{k}"))
#: Artifacts a description points to, when the run has them (path, what it is).
_POINTERS = (("plots/k_sweep.png", "every metric vs K, k marked"),
             ("plots/precision_recall.png", "precision vs recall"),
             ("per_query_table.json", "one row per query: its metrics, text and top k"),
             ("failures.md", "queries with no relevant document in the top k"),
             ("definition_card.md", "how each number is defined"))


def run_description(record: Mapping[str, Any], results: Path | None = None) -> str:
    """A job's description (``mlflow.note.content``, markdown, shown on its run page): the
    headline metrics at the run's k first (the UI shows the first lines), the settings that
    made them, how to read the stepped curves, and where the plots and tables are. Built from
    the record alone (and its results folder, when at hand), so ``pipeline.sync`` writes the
    same text a job would."""
    k, k_max = int(record["k"]), record["params"].get("k_max", "?")
    lines = [*_headline(record, results), "", *_settings_table(record)]
    lines += ["", (f"**Curves:** the `curve/*` metrics (Model metrics tab) have **step = K**, the cut-off, "
                   f"for K = 1..{k_max}; the other metrics are single values (`ndcg_at_{k}` is nDCG at K = {k}).")]
    have = [(path, what) for path, what in _POINTERS
            if results is None or (Path(results) / path).is_file() or path == "per_query_table.json"
            and record.get("table_columns")]
    if have:
        lines += ["", "**Where things are** (Artifacts tab): "
                  + "; ".join(f"`{path}` ({what})" for path, what in have) + "."]
    return "\n".join(lines) + "\n"


def _headline(record: Mapping[str, Any], results: Path | None) -> list[str]:
    """Dataset (``52 queries, 171 documents``: the documents only when the results folder
    says), k, the headline metrics, and the objective with its CI."""
    params, metrics, k = record["params"], record["metrics"], int(record["k"])
    n_q, n_docs = metrics.get("n_queries"), None
    if results is not None:
        try:
            n_docs = json.loads((Path(results) / "metrics.json").read_text())["collection"]["n_docs"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    counts = f"{int(n_q)} queries" if n_q is not None else ""
    if n_docs is not None:
        counts += f", {int(n_docs)} documents"
    shown = [(label, key.format(k=k)) for label, key in _DESCRIBED if key.format(k=k) in metrics]
    lines = [f"On **{record['dataset']['name']}**" + (f" ({counts})" if counts else "") + f", at k = {k}: "
             + ", ".join(f"{label} {metrics[key]:.4f}" for label, key in shown)
             + "".join(f"; {key.upper()} at full depth {metrics[key]:.4f}" for key in ("mrr", "map") if key in metrics)
             + "."]
    objective = str(record.get("objective") or params.get("objective", ""))
    low, high = metrics.get(f"{objective}_ci_low"), metrics.get(f"{objective}_ci_high")
    if objective in metrics:
        ci = "" if low is None or high is None else f" (95% CI {low:.4f} to {high:.4f}, bootstrap over queries)"
        lines += ["", f"**Objective** `{objective}` = {metrics[objective]:.4f}{ci}."]
    return lines


def _settings_of(params: Mapping[str, str], group: str) -> str:
    """`` (k1=1.2, b=0.75)`` from the flattened params of a config group (no ``_target_``), or ``""``."""
    settings = ", ".join(f"{key[len(group) + 1:]}={value}" for key, value in params.items()
                         if key.startswith(group + ".") and not key.rsplit(".", 1)[-1].startswith("_")
                         and value not in ("null", "None"))
    return f" ({settings})" if settings else ""


def _choice(record: Mapping[str, Any], group: str) -> str:
    """The option chosen in a config group: its tag, else the last part of its ``_target_``."""
    target = str(record["params"].get(f"{group}._target_", group))
    return str(record["tags"].get(f"choice.{group}") or target.rsplit(".", 1)[-1])


def _settings_table(record: Mapping[str, Any]) -> list[str]:
    """A two-column markdown table of the settings that made the numbers."""
    params, k = record["params"], int(record["k"])
    rows = [("retriever", _choice(record, "retriever") + _settings_of(params, "retriever")),
            ("k", f"{k} chunks placed in the context; metrics for every K = 1..{params.get('k_max', '?')}"),
            ("placement", f"reorder {_choice(record, 'reorder')}, attention curve {_choice(record, 'attention')}"
                          + _settings_of(params, "attention"))]
    chunker = str(params.get("chunker._target_", ""))
    if chunker and not chunker.endswith("NoChunker"):
        rows.append(("chunking", chunker.rsplit(".", 1)[-1] + _settings_of(params, "chunker")))
    judged_only = ", judged documents only (trec_eval -J)" if params.get("judged_only") in ("True", "true") else ""
    rows.append(("scoring", f"gain {params.get('gain', 'exp')}, relevant when grade >= "
                            f"{params.get('relevance_level', 1)}{judged_only}"))
    if overrides := record["tags"].get(TAG_OVERRIDES):
        rows.append(("command line", f"`{overrides}`"))
    return ["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]

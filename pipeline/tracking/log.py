"""One job as one MLflow run: :class:`RunRecord` (what a job logs) and :func:`log_run`.

A run is created with its tags (so a search by tag finds it at once), then filled in as few
requests as MLflow allows (one batch of params, metrics and stepped curves; the dataset
input; the per-query table; the results folder as artifacts), and only then marked
FINISHED: a FINISHED run is a complete one, and an unfinished one is what a killed logger
left (``pipeline.tracking.folder`` deletes and logs it again).
"""

from __future__ import annotations

import json
import logging
import posixpath
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.tracking.store import StoreSettings, client, experiment_id, retrying, tracking_errors
from pipeline.tracking.tags import TABLE_FILE, TAG_LOGGED_ARTIFACTS, TAG_PARENT, table_tag

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities import DatasetInput, Metric, Param

log = logging.getLogger(__name__)


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
    in a request it makes anyway (:func:`~pipeline.tracking.tags.table_tag`): the same file
    (pandas' split JSON, MLflow 3.17's writer) without log_table's extra store round trips
    (list the artifacts, read the run, set the tag) and its scan of every text column for
    images. It replaces an existing file (log_table appends to it). Tested against log_table."""
    folder, name = posixpath.split(artifact_file)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        table.to_json(path, orient="split", index=False, date_format="iso")
        mlflow_client.log_artifact(run_id, str(path), artifact_path=folder or None)


def log_run(
    settings: StoreSettings,
    record: RunRecord,
    parent_run_id: str | None = None,
    before_finish: Callable[[MlflowClient, str], None] | None = None,
    exp_id: str | None = None,
) -> str:
    """Log one job as one MLflow run; returns its run id. Raises TrackingError.

    ``before_finish(client, run_id)`` runs after everything else is logged and before the run
    is marked FINISHED: a FINISHED run is a complete one. ``exp_id``: the id of the record's
    experiment when the caller has just looked it up."""
    with tracking_errors(f"MLflow tracking at {settings.uri} failed", settings.uri):
        mlflow_client = client(settings)
        if exp_id is None:
            exp_id = retrying(lambda: experiment_id(mlflow_client, record.experiment, settings))
        run_id = _create_run(mlflow_client, exp_id, record, parent_run_id)
        try:
            _fill_run(mlflow_client, run_id, record)
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


def _create_run(mlflow_client: MlflowClient, exp_id: str, record: RunRecord, parent_run_id: str | None) -> str:
    """The run, with its tags (the parent's id, the table's tag) from its first request."""
    tags = dict(record.tags)
    if parent_run_id:
        tags[TAG_PARENT] = parent_run_id
    if record.table is not None:  # what MlflowClient.log_table sets, set with the run (see log_table)
        tags[TAG_LOGGED_ARTIFACTS] = table_tag(TABLE_FILE)
    run = retrying(
        lambda: mlflow_client.create_run(exp_id, run_name=record.run_name, tags=tags, start_time=record.start_time_ms)
    )
    return run.info.run_id


def _fill_run(mlflow_client: MlflowClient, run_id: str, record: RunRecord) -> None:
    """Params, metrics and curves in one batch, the dataset input, the table, the artifacts."""
    metrics, params = _batch(record)
    retrying(lambda: mlflow_client.log_batch(run_id, metrics=metrics, params=params))
    dataset = _dataset_input(record)
    retrying(lambda: mlflow_client.log_inputs(run_id, datasets=[dataset]))
    if record.table is not None:
        log_table(mlflow_client, run_id, record.table, TABLE_FILE)
    mlflow_client.log_artifacts(run_id, str(record.artifacts_dir))


def _batch(record: RunRecord) -> tuple[list[Metric], list[Param]]:
    """The record's metrics (curves with step = K, stepped metrics with their steps) and params."""
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    metrics = [Metric(key, float(value), now, 0) for key, value in record.metrics.items()]
    for name, values in record.curves.items():
        metrics += [Metric(name, float(v), now, step) for step, v in enumerate(values, start=1)]
    for name, points in (record.stepped or {}).items():
        metrics += [Metric(name, float(v), now, int(step)) for step, v in points.items()]
    params = [Param(key, value[:6000]) for key, value in record.params.items()]
    return metrics, params


def _dataset_input(record: RunRecord) -> DatasetInput:
    """The collection as the run's evaluation dataset (name, content digest, source)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = Dataset(
        name=record.dataset["name"],
        digest=record.dataset["digest"][:36],
        source_type="local" if Path(record.dataset["source"]).exists() else "code",
        source=json.dumps({"uri": record.dataset["source"]}),
    )
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "evaluation")])

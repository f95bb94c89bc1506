"""A results folder, logged exactly once: the disk is the tracking queue.

A job writes its results folder (``record.json`` last) and logs it; whatever a crash left
unlogged, ``pipeline.sync`` logs later. Either way :func:`log_results` is the one entry, and
it is idempotent: a folder whose marker names the store is done; otherwise the store is
asked for a run with the record's ``job_key`` tag (a FINISHED one is adopted; unfinished
ones, left by a killed logger, are deleted and the job is logged again). A lock file beside
the folder keeps a job and a sync from logging it at the same time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.io import results as res
from pipeline.tracking.describe import run_description
from pipeline.tracking.log import RunRecord, log_run
from pipeline.tracking.store import (StoreSettings, TrackingError, client, experiment_id, retrying, runs_with_tags,
                                     tracking_errors, writing)
from pipeline.tracking.sweeps import sweep_parent
from pipeline.tracking.tags import TAG_JOB_KEY, TAG_NOTE

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: How long a logger waits for another one logging the same folder.
FOLDER_LOCK_TIMEOUT_S = 300


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
    columns = record.get("table_columns")
    if columns:
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

"""Logging to a store: one job as one MLflow run, a results folder logged exactly once, and a
sweep's parent run (the run's description: ``pipeline.tracking.describe``).

A run is created with its tags (so a search by tag finds it at once), then filled in as few
requests as MLflow allows (one batch of params, metrics and stepped curves; the dataset
input; the per-query table; the results folder as artifacts), and only then marked FINISHED.

:func:`log_folder` (and :func:`log_results`) is the one entry for a results folder, from its
job or from ``pipeline.sync``, and it is idempotent: a folder whose marker's run is in the
store, finished, with the record's ``job_key``, is done; otherwise the store is asked for a
run with that tag (a FINISHED one is adopted; unfinished ones, left by a killed logger, are
removed with their artifacts) and the job is logged again. A failed attempt removes the run
it made (:func:`discard_run`).
A lock file beside the folder keeps a job and a sync from logging it at the same time.
The jobs of a sweep find its parent run through the sweep file the launcher writes
(``pipeline.io.results.SWEEP_FILE``) in the sweep folder the job's folder is in now; a job
logged later by ``pipeline.sync`` finds (or makes) the parent in the store it logs to.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import posixpath
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import InputError
from pipeline.io import results as res
from pipeline.tracking.credentials import redact
from pipeline.tracking import mapping
from pipeline.tracking.mapping import RunRecord
from pipeline.tracking.store import (SWEEP_TABLE_FILE, TABLE_FILE, TAG_JOB_KEY, TAG_SWEEP, TAG_SWEEP_PARENT,
                                     StoreSettings, TrackingError, client, ensure_store, experiment_id, retrying,
                                     runs_with_tags, sqlite_path, tracking_errors, writing)
from pipeline.tracking.view import ensure_view

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities import DatasetInput, Metric, Param

log = logging.getLogger(__name__)

#: How long a logger waits for another one logging the same folder.
FOLDER_LOCK_TIMEOUT_S = 300


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
        tags = mapping.run_tags(record, parent_run_id, TABLE_FILE)  # with log_table's tag (see log_table)
        run = retrying(lambda: mlflow_client.create_run(
            exp_id, run_name=record.run_name, tags=tags, start_time=record.start_time_ms))
        run_id = run.info.run_id
        try:
            metrics, params, dataset = _contents(record)
            retrying(lambda: mlflow_client.log_batch(run_id, metrics=metrics, params=params))
            retrying(lambda: mlflow_client.log_inputs(run_id, datasets=[dataset]))
            if record.table is not None:
                log_table(mlflow_client, run_id, record.table, TABLE_FILE)
            log_folder_artifacts(mlflow_client, run_id, record.artifacts_dir, settings)
            if before_finish is not None:
                before_finish(mlflow_client, run_id)
        except Exception:
            # A failed attempt (a full disk, a server gone) takes back what it wrote: a retry
            # makes a new run, and leftovers would only fill the disk faster.
            discard_run(mlflow_client, settings, run_id, run.info.artifact_uri)
            raise
        retrying(lambda: mlflow_client.set_terminated(run_id, status="FINISHED"))
        return run_id


def log_folder_artifacts(mlflow_client: MlflowClient, run_id: str, folder: Path, settings: StoreSettings) -> None:
    """Every file under ``folder`` as the run's artifacts, keeping the layout, except what is
    not a result: lock files (``*.lock``: a logger's, a store's), half-written temporary files
    (``.*.tmp``), the marker of an earlier logging, and the files of a sqlite store that
    happens to live inside the folder."""
    folder = Path(folder)
    db = sqlite_path(settings.uri)
    store_files = set() if db is None else {db.name, f"{db.name}-journal", f"{db.name}-wal", f"{db.name}-shm"}
    store_dir = None if db is None else db.resolve().parent
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.name
        if (name.endswith(".lock") or name.startswith(".") and name.endswith(".tmp") or name == res.MARKER
                or name in store_files and path.resolve().parent == store_dir):
            continue
        relative = path.parent.relative_to(folder).as_posix()
        mlflow_client.log_artifact(run_id, str(path), artifact_path=None if relative == "." else relative)


def discard_run(mlflow_client: MlflowClient, settings: StoreSettings, run_id: str, artifact_uri: str | None) -> None:
    """Remove a run that an attempt left unfinished: its artifact files first (on a full disk
    they are what fills it), then the run itself, for real in a sqlite store (``mlflow gc``
    for this one run); a server's store keeps a deleted run until its admin runs ``mlflow gc``.
    Best effort: the caller's own error is what the user needs to see."""
    try:
        if artifact_uri:
            from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

            get_artifact_repository(artifact_uri, tracking_uri=settings.login or settings.uri).delete_artifacts()
    except Exception as exc:  # noqa: BLE001
        log.warning("could not remove the artifacts of the unfinished run %s: %s", run_id, redact(str(exc)))
    try:
        mlflow_client.delete_run(run_id)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not delete the unfinished run %s: %s", run_id, redact(str(exc)))
        return
    db = sqlite_path(settings.uri)
    if db is None:
        return

    try:
        from mlflow.cli import gc

        uri = f"sqlite:///{db.resolve()}"
        with contextlib.redirect_stdout(io.StringIO()), _mlflow_tracking_uri_kept():  # gc prints on stdout
            gc.main(["--backend-store-uri", uri, "--tracking-uri", uri, "--run-ids", run_id], standalone_mode=False)
    except (Exception, SystemExit) as exc:  # click may raise SystemExit; Ctrl-C and SIGTERM go through
        log.warning("could not remove the deleted run %s from %s: %s", run_id, db, exc)


@contextlib.contextmanager
def _mlflow_tracking_uri_kept() -> Iterator[None]:
    """MLflow's tracking URI of the process as it was before the block. ``mlflow gc`` calls
    ``mlflow.set_tracking_uri`` with the store it cleans and leaves it there, in MLflow's global
    and in ``MLFLOW_TRACKING_URI``: a later ``mlflow.search_runs`` in the same process (a user's
    code after ``pipeline.api``, ``MlflowClient.load_table``, a later sync) would read that store.
    MLflow keeps the unset state only in a module global (``get_tracking_uri`` resolves it), so
    that global is what is saved and put back."""
    from mlflow.tracking._tracking_service import utils as uri_state

    saved_uri, saved_env = uri_state._tracking_uri, os.environ.get("MLFLOW_TRACKING_URI")
    try:
        yield
    finally:
        uri_state._tracking_uri = saved_uri
        if saved_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = saved_env


def _contents(record: RunRecord) -> tuple[list[Metric], list[Param], DatasetInput]:
    """The run's metric points, params and dataset input (``mapping``) as MLflow's entities."""
    from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param

    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, step) for key, value, step in mapping.metric_points(record)]
    data = mapping.dataset_input(record)
    dataset = Dataset(name=data["name"], digest=data["digest"], source_type=data["source_type"], source=data["source"])
    return (metrics, [Param(key, value) for key, value in mapping.param_items(record)],
            DatasetInput(dataset, tags=[InputTag("mlflow.data.context", data["context"])]))


#: What :func:`log_folder` did with a results folder.
LOGGED, ADOPTED, ALREADY = "logged", "adopted", "already logged"


def log_results(results: Path, settings: StoreSettings | None = None) -> str:
    """Log a results folder as one MLflow run, exactly once; returns the run id (see :func:`log_folder`)."""
    return log_folder(results, settings)[0]


def log_folder(results: Path, settings: StoreSettings | None = None) -> tuple[str, str]:
    """Log a results folder as one MLflow run, exactly once; returns the run id and what was
    done: :data:`LOGGED` (a new run), :data:`ADOPTED` (a finished run with the record's job
    key was in the store) or :data:`ALREADY` (the marker's run is in the store, finished,
    with the record's job key). A marker is never trusted alone: a store moved away, a run
    deleted, or a folder copied next to another store's marker makes the job logged again.

    ``settings`` default to the store the record names. Raises TrackingError, or InputError
    for a corrupt record."""
    results = Path(results)
    record = res.read_record(results)
    if settings is None:
        if record["tracking"] is None:
            raise TrackingError(f"{results}: the job ran with tracking=none: name a store to log it to")
        settings = StoreSettings.of(record["tracking"]).anchored(res.job_root(results.parent))
    from filelock import FileLock, Timeout

    # One logger per folder at a time: a job and a sync may overlap. The lock file lives beside
    # the results folder (resolved: for "." its parent is itself), and is never logged anyway.
    folder = results.resolve()
    lock = FileLock(str(folder.parent / f".{folder.name}.mlflow.lock"), timeout=FOLDER_LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except Timeout:
        raise TrackingError(f"{results}: another process has been logging this folder for "
                            f"{FOLDER_LOCK_TIMEOUT_S} s") from None
    except OSError as exc:  # a read-only folder: its lock and its marker cannot be written
        if (marker := _logged(results, record, settings, recorded_uri(results, record, settings))) is not None:
            return marker["run_id"], ALREADY  # nothing to write
        raise InputError(f"cannot write in the job's folder ({exc.strerror}): logging writes its lock and "
                         "marker there; copy the folder somewhere writable and sync the copy", folder.parent) from None
    try:
        return _log_results_locked(results, record, settings)
    finally:
        lock.release()


def recorded_uri(results: Path, record: Mapping[str, Any], settings: StoreSettings) -> str:
    """The URI by which the folder's marker and its sweep file name the store of ``settings``:
    the record's own (relative) URI when it names that store from the folder the job ran in
    (``StoreSettings.anchored``: sync run from another folder), else ``settings.uri``."""
    if not record.get("tracking"):
        return settings.uri
    own = StoreSettings.of(record["tracking"])
    if own.uri != settings.uri and own.anchored(res.job_root(Path(results).parent)).uri == settings.uri:
        return own.uri
    return settings.uri


def _log_results_locked(results: Path, record: dict[str, Any], settings: StoreSettings) -> tuple[str, str]:
    key = recorded_uri(results, record, settings)  # the store's name in the marker
    start = time.perf_counter()
    if (marker := _logged(results, record, settings, key)) is not None:
        if (res.read_marker(results) or {}).get("uri") != key:  # this store is the current one again
            res.write_marker(results, key, marker["run_id"], marker.get("experiment_id", ""))
        return marker["run_id"], ALREADY
    with tracking_errors(f"MLflow tracking at {settings.uri} failed", settings.uri), writing(settings):
        mlflow_client = client(settings)
        exp_id = retrying(lambda: experiment_id(mlflow_client, record["experiment"], settings))
        for found in runs_with_tags(mlflow_client, exp_id, {TAG_JOB_KEY: record["job_key"]}):
            if found.info.status == "FINISHED":
                res.write_marker(results, key, found.info.run_id, exp_id)
                return found.info.run_id, ADOPTED
            # half-logged by a process that died: removed with its artifacts
            discard_run(mlflow_client, settings, found.info.run_id, found.info.artifact_uri)
        # The runs table the printed link opens: its headline columns (pipeline.tracking.view).
        retrying(lambda: ensure_view(mlflow_client, settings.uri, exp_id, str(record.get("objective") or
                                                                             record["params"].get("objective", ""))))
        parent = sweep_parent(settings, record, results)

        def track_time(mlflow_client: MlflowClient, run_id: str) -> None:
            mlflow_client.log_metric(run_id, mapping.TRACK_TIME, time.perf_counter() - start)

        run_id = log_run(settings, _record_of(results, record), parent, before_finish=track_time, exp_id=exp_id)
        res.write_marker(results, key, run_id, exp_id)
        return run_id, LOGGED


def _logged(results: Path, record: Mapping[str, Any], settings: StoreSettings, key: str) -> dict[str, str] | None:
    """The folder's marker for the store (named ``key`` in it) when the store holds its run,
    finished, with the record's job key; else None."""
    marker = res.read_marker(results, key)
    with tracking_errors(f"MLflow tracking at {settings.uri} failed", settings.uri):
        if marker is not None and finished_run(client(settings), marker["run_id"], record["job_key"]):
            return marker
    return None


def finished_run(mlflow_client: MlflowClient, run_id: str, job_key: str | None = None) -> bool:
    """Whether the store holds ``run_id``, not deleted, FINISHED (a complete run), and with
    the tag ``job_key`` when one is given; False when the store does not know the run (a
    store replaced or recreated, a run deleted). Other failures of the store are raised."""
    run = _get_run(mlflow_client, run_id)
    return (run is not None and run.info.lifecycle_stage == "active" and run.info.status == "FINISHED"
            and (job_key is None or run.data.tags.get(TAG_JOB_KEY) == job_key))


def closed_run(settings: StoreSettings, run_id: str) -> bool:
    """Whether the store holds ``run_id`` (a sweep's parent), not deleted and terminated
    (FINISHED, FAILED or KILLED): a sweep is closed only when its store says so."""
    with tracking_errors(f"cannot read run {run_id} from {settings.uri}", settings.uri):
        db = sqlite_path(settings.uri)
        if db is not None and not db.is_file():
            return False  # no store there (moved away): nothing is closed in it; it is not created here
        run = _get_run(client(settings), run_id)
    return run is not None and run.info.lifecycle_stage == "active" and run.info.status in ("FINISHED", "FAILED",
                                                                                            "KILLED")


def _get_run(mlflow_client: MlflowClient, run_id: str) -> Any:
    """The run, or None when the store has no such run."""
    try:
        return mlflow_client.get_run(run_id)
    except Exception as exc:
        if getattr(exc, "error_code", None) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise


def _record_of(results: Path, record: dict[str, Any]) -> RunRecord:
    """What :func:`log_run` logs of a results folder (:func:`mapping.run_of`), with the
    per-query table: the columns the mapping names, read from ``per_query.csv``."""
    run = mapping.run_of(record, results)
    if columns := run.table_columns:
        import pyarrow.csv as pa_csv

        # Only the table's columns are parsed: per_query.csv has a column per metric and K.
        per_query = pa_csv.read_csv(results / "per_query.csv", convert_options=pa_csv.ConvertOptions(
            column_types={"query_id": "string"}, include_columns=list(columns)))
        run.table = per_query.select(list(columns)).to_pandas()
    return run


def sweep_dir_of(results: Path, record: Mapping[str, Any]) -> Path | None:
    """The folder of the job's sweep: the nearest folder above the job's whose sweep file has
    the record's sweep id. Found from where the folder is now, never from the path the record
    names: a sweep copied elsewhere is synced in its copy, and the original is not touched."""
    sweep_id = (record.get("sweep") or {}).get("sweep_id")
    if not sweep_id:
        return None
    for folder in list(Path(results).resolve().parent.parents)[:3]:
        if res.read_sweep(folder).get("sweep_id") == sweep_id:
            return folder
    return None


def sweep_parent(settings: StoreSettings, record: Mapping[str, Any], results: Path | None = None) -> str | None:
    """The parent run of the job's sweep in this store, when the job is part of a sweep that
    logs to the job's experiment: the one its sweep file names if the store has it (a store
    replaced since has not), else found by the sweep id or created, and remembered in the
    sweep file beside the other stores' (:func:`pipeline.io.results.remember_sweep_parent`)."""
    sweep = record.get("sweep") or {}
    if not sweep.get("sweep_id"):
        return None
    sweep_dir = None if results is None else sweep_dir_of(results, record)
    info = res.read_sweep(sweep_dir) if sweep_dir is not None else {}
    if info.get("experiment", record["experiment"]) != record["experiment"]:
        return None
    known = res.sweep_parent_in(info, settings.uri)
    if known is None and results is not None:  # the sweep file may name this store as the record does
        known = res.sweep_parent_in(info, recorded_uri(results, record, settings))
    if known is not None:
        run = _get_run(client(settings), known["parent_run_id"])
        if run is not None and run.info.lifecycle_stage == "active":
            return known["parent_run_id"]
    found = start_sweep(settings, record["experiment"], sweep["sweep_id"], {}, run_name=info.get("run_name"))
    if sweep_dir is not None:
        res.remember_sweep_parent(sweep_dir, settings.uri, found["parent_run_id"], found["experiment_id"],
                                  record["experiment"])
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
            run_name = redact(run_name or f"sweep {sweep_id}")
            run_id = mlflow_client.create_run(exp_id, run_name=run_name,
                                              tags=mapping.sweep_start_tags(sweep_id, run_name, tags)).info.run_id
        return {"sweep_id": sweep_id, "parent_run_id": run_id, "experiment_id": exp_id, "uri": settings.uri}


def finish_sweep(settings: StoreSettings, parent_run_id: str, summary_dir: Path, table: pd.DataFrame,
                 status: str = "FINISHED", tags: Mapping[str, str] | None = None,
                 metrics: Mapping[str, float] | None = None, description: str | None = None) -> None:
    """Log the summary folder (table, figure), the table itself, the best job's tags and
    metrics and the sweep's ``description`` (markdown) to the parent run, then close it with
    ``status``."""
    tags = mapping.parent_finish_tags(tags, description, SWEEP_TABLE_FILE if len(table) else None)
    with tracking_errors(f"cannot log the sweep summary to {settings.uri}", settings.uri), writing(settings):
        mlflow_client = client(settings)
        if tags or metrics:
            from mlflow.entities import Metric, RunTag

            now = int(time.time() * 1000)
            mlflow_client.log_batch(parent_run_id, tags=[RunTag(k, v) for k, v in tags.items()],
                                    metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()])
        if len(table):
            log_table(mlflow_client, parent_run_id, table, SWEEP_TABLE_FILE)
        mlflow_client.log_artifacts(parent_run_id, str(summary_dir), artifact_path="summary")
        mlflow_client.set_terminated(parent_run_id, status=status)

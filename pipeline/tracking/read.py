"""What ``pipeline.compare`` reads from a store (runs as plain data, their artifacts), and
where it logs its report.

Reading never creates a store (a mistyped path must not leave an empty database behind),
and a user's mistake (no such run, experiment or artifact; a bad filter) is an InputError
naming it, not a TrackingError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pipeline.errors import InputError
from pipeline.tracking.credentials import redact
from pipeline.tracking.store import (TAG_PARENT, TAG_RUN_NAME, TAG_SWEEP_PARENT, StoreSettings, TrackingError, client,
                                     experiment_id, retrying, sqlite_path, tracking_errors, writing)

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: Experiment of the runs that ``python -m pipeline.cli compare --log`` makes (outside a sweep).
COMPARE_EXPERIMENT = "compare"


@contextmanager
def _reading(settings: StoreSettings, what: str | None = None) -> Iterator[MlflowClient]:
    """A client on an existing store (reading must not create an empty sqlite store); a failure
    inside is a TrackingError starting with ``what``, but the user's mistakes (InputError) go through."""
    try:
        db = sqlite_path(str(settings.uri))
        if db is not None and not db.is_file():
            raise InputError("no MLflow store there (--tracking-uri names the store)", db)
        yield client(settings)
    except (TrackingError, InputError):
        raise
    except Exception as exc:
        raise TrackingError(redact(f"{what or f'cannot read the MLflow store {settings.uri}'}: "
                                   f"{type(exc).__name__}: {exc}")) from exc


def _run_info(run: Any) -> dict[str, Any]:
    """What the comparison needs of a run, as plain data."""
    info, tags = run.info, run.data.tags
    return {"run_id": info.run_id, "run_name": info.run_name or tags.get(TAG_RUN_NAME, info.run_id),
            "experiment_id": info.experiment_id, "status": info.status, "start_time": info.start_time or 0,
            "tags": dict(tags), "params": dict(run.data.params), "parent_run_id": tags.get(TAG_PARENT),
            "is_sweep_parent": tags.get(TAG_SWEEP_PARENT) == "true"}


def _finished_runs(mlflow_client: MlflowClient, exp_ids: list[str], filter_string: str) -> list[dict[str, Any]]:
    """Every FINISHED run matching the filter (page after page), as plain data, in start order."""
    runs, token = [], None
    while True:
        page = mlflow_client.search_runs(exp_ids, filter_string=filter_string, max_results=5000, page_token=token)
        runs += [_run_info(run) for run in page if run.info.status == "FINISHED"]
        token = page.token
        if not token:
            return sorted(runs, key=lambda run: (run["start_time"], run["run_name"], run["run_id"]))


def get_run_info(settings: StoreSettings, run_id: str) -> dict[str, Any]:
    """One run as plain data (run id and name, experiment, status, start time, tags, params,
    parent, whether it is a sweep's parent); InputError when the store lacks it."""
    with _reading(settings) as mlflow_client:
        try:
            run = mlflow_client.get_run(run_id)
        except Exception as exc:
            if getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(exc).lower():
                raise InputError(f"no MLflow run {run_id} in {settings.uri}", f"mlflow:{run_id}") from None
            raise
        return _run_info(run)


def child_runs(settings: StoreSettings, parent_run_id: str) -> list[dict[str, Any]]:
    """The FINISHED runs nested under ``parent_run_id`` (a sweep's jobs), in start order."""
    parent = get_run_info(settings, parent_run_id)
    with _reading(settings) as mlflow_client:
        return _finished_runs(mlflow_client, [parent["experiment_id"]], f"tags.`{TAG_PARENT}` = '{parent_run_id}'")


def experiment_runs(settings: StoreSettings, experiment: str, filter_string: str = "") -> list[dict[str, Any]]:
    """The FINISHED job runs (not sweep parents) of an experiment matching an MLflow filter
    string, in start order; InputError for an unknown experiment or a bad filter."""
    source = f"mlflow-experiment:{experiment}"
    with _reading(settings) as mlflow_client:
        found = mlflow_client.get_experiment_by_name(experiment)
        if found is None:
            raise InputError(f"no experiment {experiment!r} in {settings.uri}", source)
        try:
            runs = _finished_runs(mlflow_client, [found.experiment_id], filter_string)
        except Exception as exc:
            if "filter" in str(exc).lower() or getattr(exc, "error_code", "") == "INVALID_PARAMETER_VALUE":
                raise InputError(f"bad MLflow filter {filter_string!r}: {exc}", source) from None
            raise
    return [run for run in runs if not run["is_sweep_parent"]]


def download_artifact(settings: StoreSettings, run_id: str, path: str, dst: Path) -> Path:
    """Download one artifact file of a run into the folder ``dst``; InputError when the run
    has no such artifact (e.g. a run not logged by this pipeline)."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    with _reading(settings, f"cannot download {path} of run {run_id} from {settings.uri}") as mlflow_client:
        folder = str(PurePosixPath(path).parent)
        names = {a.path for a in mlflow_client.list_artifacts(run_id, None if folder == "." else folder)}
        if path not in names:
            raise InputError(f"run has no artifact {path}", f"mlflow:{run_id}")
        return Path(mlflow_client.download_artifacts(run_id, path, str(dst)))


def log_report(settings: StoreSettings, folder: Path, *, parent_run_id: str | None = None,
               artifact_path: str | None = None, run_name: str = "compare", tags: Mapping[str, str] | None = None,
               params: Mapping[str, str] | None = None) -> str:
    """Log a comparison report folder; returns the run id it went to.

    With ``parent_run_id`` (a sweep's parent run) the folder goes under ``artifact_path`` of
    that run, which keeps its status. Otherwise a new FINISHED run named ``run_name`` in the
    experiment :data:`COMPARE_EXPERIMENT` gets the folder at its root, ``tags`` and ``params``.
    Raises TrackingError."""
    from mlflow.entities import Param

    with tracking_errors(f"cannot log the comparison to {settings.uri}"), writing(settings):
        mlflow_client = client(settings)
        if parent_run_id:
            mlflow_client.log_artifacts(parent_run_id, str(folder), artifact_path=artifact_path)
            return parent_run_id
        root = str(settings.artifact_root) if settings.artifact_root else None
        if root is None and (db := sqlite_path(str(settings.uri))) is not None:
            root = str(db.parent / "mlartifacts")  # the project's layout (conf/paths)
        store = dataclasses.replace(settings, artifact_root=root)
        exp_id = retrying(lambda: experiment_id(mlflow_client, COMPARE_EXPERIMENT, store))
        run_id = mlflow_client.create_run(exp_id, run_name=run_name, tags=dict(tags or {})).info.run_id
        try:
            if params:
                mlflow_client.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
            mlflow_client.log_artifacts(run_id, str(folder), artifact_path=artifact_path)
        except Exception:
            mlflow_client.set_terminated(run_id, status="FAILED")
            raise
        mlflow_client.set_terminated(run_id, status="FINISHED")
        return run_id

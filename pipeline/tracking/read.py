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
from pipeline.tracking.store import (StoreSettings, TrackingError, client, experiment_id, retrying, sqlite_path,
                                     tracking_errors, writing)
from pipeline.tracking.tags import TAG_PARENT, TAG_RUN_NAME, TAG_SWEEP_PARENT

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: Experiment of the runs that ``python -m pipeline.compare --log`` makes (outside a sweep).
COMPARE_EXPERIMENT = "compare"


@contextmanager
def _read_errors(what: str) -> Iterator[None]:
    """Like ``tracking_errors``, but the user's mistakes (InputError: no such run) go through."""
    try:
        yield
    except (TrackingError, InputError):
        raise
    except Exception as exc:
        raise TrackingError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _read_client(settings: StoreSettings) -> MlflowClient:
    """A client on an existing store: reading must not create an empty sqlite store."""
    db = sqlite_path(str(settings.uri))
    if db is not None and not db.is_file():
        raise InputError("no MLflow store there (--tracking-uri names the store)", db)
    return client(settings)


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(exc).lower()


def _run_info(run: Any) -> dict[str, Any]:
    """What the comparison needs of a run, as plain data."""
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name or run.data.tags.get(TAG_RUN_NAME, run.info.run_id),
        "experiment_id": run.info.experiment_id,
        "status": run.info.status,
        "start_time": run.info.start_time or 0,
        "tags": dict(run.data.tags),
        "params": dict(run.data.params),
        "parent_run_id": run.data.tags.get(TAG_PARENT),
        "is_sweep_parent": run.data.tags.get(TAG_SWEEP_PARENT) == "true",
    }


def _search_all(mlflow_client: MlflowClient, exp_ids: list[str], filter_string: str) -> list[Any]:
    """Every run matching the filter, page after page."""
    runs, token = [], None
    while True:
        page = mlflow_client.search_runs(exp_ids, filter_string=filter_string, max_results=5000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _in_start_order(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(runs, key=lambda r: (r["start_time"], r["run_name"], r["run_id"]))


def get_run_info(settings: StoreSettings, run_id: str) -> dict[str, Any]:
    """One run as plain data (run id and name, experiment, status, start time, tags, params,
    parent, whether it is a sweep's parent); InputError when the store lacks it."""
    with _read_errors(f"cannot read the MLflow store {settings.uri}"):
        mlflow_client = _read_client(settings)
        try:
            run = mlflow_client.get_run(run_id)
        except Exception as exc:
            if _not_found(exc):
                raise InputError(f"no MLflow run {run_id} in {settings.uri}", f"mlflow:{run_id}") from None
            raise
        return _run_info(run)


def child_runs(settings: StoreSettings, parent_run_id: str) -> list[dict[str, Any]]:
    """The FINISHED runs nested under ``parent_run_id`` (a sweep's jobs), in start order."""
    parent = get_run_info(settings, parent_run_id)
    with _read_errors(f"cannot read the MLflow store {settings.uri}"):
        mlflow_client = _read_client(settings)
        found = _search_all(mlflow_client, [parent["experiment_id"]], f"tags.`{TAG_PARENT}` = '{parent_run_id}'")
    return _in_start_order([_run_info(r) for r in found if r.info.status == "FINISHED"])


def experiment_runs(settings: StoreSettings, experiment: str, filter_string: str = "") -> list[dict[str, Any]]:
    """The FINISHED job runs (not sweep parents) of an experiment matching an MLflow filter
    string, in start order; InputError for an unknown experiment or a bad filter."""
    source = f"mlflow-experiment:{experiment}"
    with _read_errors(f"cannot read the MLflow store {settings.uri}"):
        mlflow_client = _read_client(settings)
        found = mlflow_client.get_experiment_by_name(experiment)
        if found is None:
            raise InputError(f"no experiment {experiment!r} in {settings.uri}", source)
        try:
            runs = _search_all(mlflow_client, [found.experiment_id], filter_string)
        except Exception as exc:
            if "filter" in str(exc).lower() or getattr(exc, "error_code", "") == "INVALID_PARAMETER_VALUE":
                raise InputError(f"bad MLflow filter {filter_string!r}: {exc}", source) from None
            raise
    infos = [_run_info(r) for r in runs if r.info.status == "FINISHED"]
    return _in_start_order([r for r in infos if not r["is_sweep_parent"]])


def download_artifact(settings: StoreSettings, run_id: str, path: str, dst: Path) -> Path:
    """Download one artifact file of a run into the folder ``dst``; InputError when the run
    has no such artifact (e.g. a run not logged by this pipeline)."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    with _read_errors(f"cannot download {path} of run {run_id} from {settings.uri}"):
        mlflow_client = _read_client(settings)
        folder = str(PurePosixPath(path).parent)
        names = {a.path for a in mlflow_client.list_artifacts(run_id, None if folder == "." else folder)}
        if path not in names:
            raise InputError(f"run has no artifact {path}", f"mlflow:{run_id}")
        return Path(mlflow_client.download_artifacts(run_id, path, str(dst)))


def _default_artifact_root(settings: StoreSettings) -> str | None:
    """``<store folder>/mlartifacts`` for a sqlite store (the project's layout, conf/paths)."""
    if settings.artifact_root:
        return str(settings.artifact_root)
    db = sqlite_path(str(settings.uri))
    return str(db.parent / "mlartifacts") if db is not None else None


def log_report(
    settings: StoreSettings,
    folder: Path,
    *,
    parent_run_id: str | None = None,
    artifact_path: str | None = None,
    run_name: str = "compare",
    tags: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
) -> str:
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
        store = dataclasses.replace(settings, artifact_root=_default_artifact_root(settings))
        exp_id = retrying(lambda: experiment_id(mlflow_client, COMPARE_EXPERIMENT, store))
        run = mlflow_client.create_run(exp_id, run_name=run_name, tags=dict(tags or {}))
        run_id = run.info.run_id
        try:
            if params:
                mlflow_client.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
            mlflow_client.log_artifacts(run_id, str(folder), artifact_path=artifact_path)
        except Exception:
            mlflow_client.set_terminated(run_id, status="FAILED")
            raise
        mlflow_client.set_terminated(run_id, status="FINISHED")
        return run_id

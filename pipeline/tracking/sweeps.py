"""A sweep's parent run: made by the launching process before any job logs, found again by
its sweep id (one parent per sweep), and closed with the sweep's summary when it ends.

The jobs find the parent through the sweep file in the sweep folder
(``pipeline.io.results.SWEEP_FILE``), which the launcher writes; a job logged later by
``pipeline.sync`` finds (or makes) the same parent in the store.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.io import results as res
from pipeline.tracking.log import log_table
from pipeline.tracking.store import (StoreSettings, client, ensure_store, experiment_id, retrying, runs_with_tags,
                                     tracking_errors, writing)
from pipeline.tracking.tags import (SWEEP_TABLE_FILE, TAG_LOGGED_ARTIFACTS, TAG_NOTE, TAG_SWEEP, TAG_SWEEP_PARENT,
                                    table_tag)

if TYPE_CHECKING:
    import pandas as pd


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
            run = mlflow_client.create_run(
                exp_id, run_name=run_name or f"sweep {sweep_id}",
                tags={TAG_SWEEP: sweep_id, TAG_SWEEP_PARENT: "true", TAG_NOTE: note, **tags}
            )
            run_id = run.info.run_id
        return {"sweep_id": sweep_id, "parent_run_id": run_id, "experiment_id": exp_id, "uri": settings.uri}


def finish_sweep(
    settings: StoreSettings,
    parent_run_id: str,
    summary_dir: Path,
    table: pd.DataFrame,
    status: str = "FINISHED",
    tags: Mapping[str, str] | None = None,
    metrics: Mapping[str, float] | None = None,
    description: str | None = None,
) -> None:
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
            mlflow_client.log_batch(
                parent_run_id,
                metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
                tags=[RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()],
            )
        if len(table):
            log_table(mlflow_client, parent_run_id, table, SWEEP_TABLE_FILE)
        mlflow_client.log_artifacts(parent_run_id, str(summary_dir), artifact_path="summary")
        mlflow_client.set_terminated(parent_run_id, status=status)

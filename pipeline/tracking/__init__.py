"""MLflow tracking: the only code that imports mlflow.

One process per command. A job computes, writes its results folder (``pipeline.io.results``,
``record.json`` last), then logs it itself, in its own process, with plain client calls:
one MLflow run with the flattened resolved config as params, metrics and K-sweep curves in
one batch, the collection as the run's dataset input, the per-query table, the folder as
artifacts, and a description for the run's page. What a run holds is decided in one place,
``pipeline.tracking.mapping`` (the record -> MLflow mapping). A Hydra multirun is one sweep: its parent
run is made in the launching process before any job starts, the jobs nest under it, and the
launcher closes it with the sweep's summary when the sweep ends (``pipeline.sweep.summary``).

The disk is the queue. Logging a folder is idempotent (the record's ``job_key`` is a tag of
its run), so whatever a crash left unlogged, ``python -m pipeline.cli sync`` logs later, exactly
once. Writers to one sqlite store take turns (:func:`writing`, a lock file beside the
store), so the jobs of a parallel launcher never meet inside sqlite. Every failure of the
store or server is a :class:`TrackingError`; the results are already on disk.
"""

from __future__ import annotations

from pipeline.tracking.credentials import CREDENTIAL_ENV, auth_refusal, http_status, redact, without_credentials
from pipeline.tracking.log import (ADOPTED, ALREADY, FOLDER_LOCK_TIMEOUT_S, LOGGED, closed_run, discard_run,
                                   finish_sweep, finished_run, log_folder, log_folder_artifacts, log_results, log_run,
                                   log_table, recorded_uri, start_sweep, sweep_dir_of, sweep_parent)
from pipeline.tracking.mapping import RunRecord, run_of, shown_params, with_job_k
from pipeline.tracking.describe import (PUBLIC_ADVICE, coverage_warning, public_benchmark, run_description,
                                        sweep_coverage_warning)
from pipeline.tracking.read import (COMPARE_EXPERIMENT, child_runs, download_artifact, experiment_runs, get_run_info,
                                    log_report)
from pipeline.tracking.store import (EXPERIMENT_KIND, STORE_LOCK_TIMEOUT_S, SWEEP_TABLE_FILE, TABLE_FILE,
                                     TAG_EXPERIMENT_KIND, TAG_GIT, TAG_JOB_KEY, TAG_LOGGED_ARTIFACTS, TAG_NOTE,
                                     TAG_OVERRIDES, TAG_PARENT, TAG_RUN_NAME, TAG_SWEEP, TAG_SWEEP_PARENT, UI_WORKFLOW,
                                     VIEW_KEY, StoreSettings, TrackingError, client, ensure_store, experiment_id, folder_name,
                                     new_store_note, open_hint, retrying, runs_with_tags, sqlite_path, table_tag,
                                     tracking_errors, ui_url, writing)

__all__ = [
    "ADOPTED", "ALREADY", "LOGGED", "PUBLIC_ADVICE", "VIEW_KEY", "coverage_warning", "public_benchmark",
    "run_of", "shown_params", "sweep_coverage_warning", "with_job_k",
    "closed_run", "discard_run", "finished_run", "log_folder", "log_folder_artifacts",
    "sweep_dir_of", "without_credentials",
    "COMPARE_EXPERIMENT", "CREDENTIAL_ENV", "EXPERIMENT_KIND", "FOLDER_LOCK_TIMEOUT_S", "STORE_LOCK_TIMEOUT_S",
    "SWEEP_TABLE_FILE", "TABLE_FILE", "TAG_EXPERIMENT_KIND", "TAG_GIT", "TAG_JOB_KEY", "TAG_LOGGED_ARTIFACTS",
    "TAG_NOTE", "TAG_OVERRIDES", "TAG_PARENT", "TAG_RUN_NAME", "TAG_SWEEP", "TAG_SWEEP_PARENT", "UI_WORKFLOW",
    "RunRecord", "StoreSettings", "TrackingError",
    "auth_refusal", "child_runs", "client", "download_artifact", "ensure_store", "experiment_id", "experiment_runs",
    "finish_sweep", "folder_name", "get_run_info", "http_status", "log_report", "log_results", "log_run",
    "log_table", "new_store_note", "open_hint", "recorded_uri", "redact", "retrying", "run_description",
    "runs_with_tags", "sqlite_path", "start_sweep", "sweep_parent", "table_tag", "tracking_errors", "ui_url",
    "writing",
]

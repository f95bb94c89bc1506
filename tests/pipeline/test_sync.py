"""The disk is the queue: jobs are logged from their results folders, each exactly once.

``python -m pipeline.sync`` logs every finished job from its folder, and logging a folder
twice (marker or no marker, half-logged run or not) never makes a second run.

The job and the syncs run in this process (tests/commands.py drops MLflow's cached stores
before and after each command, so a later ``MlflowClient.load_table`` in the same process finds
its runs: tests/pipeline/test_tracking.py after this file passes). ``python -m pipeline.sync`` as
a process: tests/faults/test_tracking_faults.py (after ``kill -9``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from commands import job_in_process, run_command

from pipeline.io import results as res
from pipeline import tracking


def sync(*args: str):
    return run_command("sync", *args)


def _runs(store: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids, max_results=1000)  # active runs only: deleted ones do not count


@pytest.mark.slow  # three MLflow runs logged with their artifacts
def test_a_folder_is_logged_once_whatever_happened_before(tmp_path, store):
    import mlflow
    from mlflow import MlflowClient

    job_in_process("tracking=none", "k=5", f"paths.root={tmp_path / 'out'}", figures=True)
    (folder,) = res.find_results([tmp_path / "out"])
    record = res.read_record(folder)
    assert record["tracking"] is None and record["metrics"]["ndcg_at_5"] > 0.3

    skipped = sync(str(tmp_path / "out"))  # a tracking=none job is logged only when a store is named
    assert skipped.returncode == 0 and "sync: 0 logged, 0 already logged, 0 closed, 1 untracked" in skipped.stdout
    assert _runs(store) == []

    first = sync(str(tmp_path / "out"), "--tracking-uri", store)
    assert first.returncode == 0, first.stderr[-3000:]
    (run,) = _runs(store)
    assert res.read_marker(folder)["run_id"] == run.info.run_id
    assert run.info.run_name == record["run_name"] and run.data.tags[tracking.TAG_JOB_KEY] == record["job_key"]
    assert run.data.metrics["ndcg_at_5"] == record["metrics"]["ndcg_at_5"]

    (folder / res.MARKER).unlink()  # the marker is lost: the store is asked by the job key
    assert sync(str(tmp_path / "out"), "--tracking-uri", store).returncode == 0
    assert [r.info.run_id for r in _runs(store)] == [run.info.run_id]
    assert res.read_marker(folder)["run_id"] == run.info.run_id

    # A logger killed half-way left an unfinished run with the job key: it is replaced, and
    # removed for real with its artifacts (not left soft-deleted, filling the disk).
    client = MlflowClient(tracking_uri=store)
    client.set_terminated(run.info.run_id, status="RUNNING")
    (folder / res.MARKER).unlink()
    uri_before, env_before = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI")
    assert sync(str(tmp_path / "out"), "--tracking-uri", store).returncode == 0
    # Removing the run (``mlflow gc``, in this process) leaves MLflow's tracking URI as it was:
    # gc sets it to the store it cleans, where a later mlflow.search_runs would then look.
    assert (mlflow.get_tracking_uri(), os.environ.get("MLFLOW_TRACKING_URI")) == (uri_before, env_before)
    (rerun,) = _runs(store)
    assert rerun.info.run_id != run.info.run_id and rerun.info.status == "FINISHED"
    with pytest.raises(Exception, match="not found"):
        client.get_run(run.info.run_id)
    assert not Path(run.info.artifact_uri.removeprefix("file://")).exists()


def test_a_corrupt_record_is_reported_not_logged(tmp_path):
    results = tmp_path / "job" / "results"
    results.mkdir(parents=True)
    (results / res.RECORD).write_text('{"format": "rag-eval-record/1", "job_key": "x"')  # cut short
    done = sync(str(tmp_path))
    # bad input: one line naming the file, exit 2 (3 is for a store that failed)
    assert done.returncode == 2 and "unreadable record" in done.stderr and "Traceback" not in done.stderr
    (results / res.RECORD).write_text(json.dumps({"format": res.RECORD_FORMAT, "job_key": "x"}))
    done = sync(str(tmp_path))
    assert done.returncode == 2 and "record lacks" in done.stderr


def test_sync_of_a_missing_folder_fails_in_one_line(tmp_path):
    done = sync(str(tmp_path / "nowhere"))
    assert done.returncode == 2 and done.stderr.strip() == f"error: {tmp_path / 'nowhere'}: no such folder"



"""Sync asks the store (issue 28): a marker (``mlflow_run.json``, ``mlflow_sweep.json``) is
never trusted alone.

- The store moved away (``mv outputs/mlflow.db``): sync logs the job again into a new store
  and rewrites the marker; a lost marker is adopted from the store by the job key.
- A sweep folder moved elsewhere and synced to a new store: only the copy is written (the
  original path is not recreated), the new store is recorded beside the old one, and the
  new store's parent run is closed with the jobs nested under it.
- The store failed right after ``summary/sweep_table.csv`` was written (the parent left
  RUNNING): sync closes the parent.
- Sync's line counts what it logged, adopted, found already logged and closed.
- A record whose metric is a string: one line naming the file and the key, exit 2.

Sync and the single job run in this process (tests/commands.py); the sweep is a process, made
once for the module: a child forked from this one that runs pipeline/__main__.py (tests/forked.py),
its PNGs not rendered (tests/no_figures.py). The stores the job and the sweep log to, and the new
store the moved sweep is synced to, are copies of the session's migrated store (tests/conftest.py);
the store sync logs to after the job's store moved away is created by sync.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from commands import job_in_process, run_command
from forked import pipeline_child
from no_figures import figures_off

from pipeline import tracking
from pipeline.io import results as res

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1")
    return env


@pytest.fixture
def sync():
    """``python -m pipeline.sync ARGS`` in this process (mlflow is imported once): a result
    with ``returncode``, ``stdout`` and ``stderr``."""
    return lambda *args: run_command("sync", *args)


def _runs(store: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    return client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1000)


def _tree(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``folder``: its modification time and bytes."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*")
            if p.is_file()}


def _no_pngs() -> None:
    """In the sweep's child: its PNGs saved as empty files, not rendered (tests/no_figures.py):
    sync logs them as files, what they show is not checked here."""
    figures_off().__enter__()  # for the whole child, which ends with the sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, migrated_store) -> Path:
    """A finished sweep of two jobs logged to its own sqlite store (``<root>/mlflow.db``, a copy
    of the session's migrated store: what is checked here is sync, not a store's creation)."""
    root = tmp_path_factory.mktemp("sweep")
    shutil.copy(migrated_store, root / "mlflow.db")
    proc = pipeline_child("-m", "k=3,5", f"paths.root={root}", f"hydra.sweep.dir={root / 'sweep'}", env=_env(),
                          cwd=ROOT, prepare=_no_pngs).wait(TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "sweep"


@pytest.mark.slow  # a job, and an MLflow store created (its migrations)
def test_a_moved_store_gets_the_job_again_and_a_lost_marker_is_adopted(tmp_path, sync, migrated_store):
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(migrated_store, out / "mlflow.db")  # the job's store; the one sync makes after the move is new
    job_in_process(f"paths.root={out}", f"hydra.run.dir={tmp_path / 'job'}")
    results = tmp_path / "job" / "results"
    store = f"sqlite:///{out / 'mlflow.db'}"
    first = res.read_marker(results)["run_id"]

    (out / "mlflow.db").rename(tmp_path / "elsewhere.db")
    done = sync(str(tmp_path / "job"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sync: 1 logged, 0 already logged, 0 closed" in done.stdout and "synced" not in done.stdout
    (run,) = _runs(store)
    assert run.info.status == "FINISHED" and run.info.run_id != first
    assert run.data.tags[tracking.TAG_JOB_KEY] == res.read_record(results)["job_key"]
    assert res.read_marker(results)["run_id"] == run.info.run_id

    (results / res.MARKER).unlink()
    adopted = sync(str(tmp_path / "job"))
    assert adopted.returncode == 0 and "sync: 0 logged, 1 adopted, 0 already logged, 0 closed" in adopted.stdout
    again = sync(str(tmp_path / "job"))
    assert again.returncode == 0 and "sync: 0 logged, 1 already logged, 0 closed" in again.stdout
    assert [r.info.run_id for r in _runs(store)] == [run.info.run_id]


@pytest.mark.slow  # the sweep
def test_a_moved_sweep_synced_to_a_new_store_writes_only_its_copy(sweep, tmp_path, sync, migrated_store):
    original_store = f"sqlite:///{sweep.parent / 'mlflow.db'}"
    (tmp_path / "new").mkdir()
    shutil.copy(migrated_store, tmp_path / "new" / "mlflow.db")  # another store, empty (a store sync
    # creates: the moved store's test above)
    copy = tmp_path / "copy" / "sweep"
    shutil.copytree(sweep, copy)
    away = sweep.with_name("sweep.away")
    sweep.rename(away)  # a move: the path the records name is gone
    try:
        before = _tree(away)
        new_store = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
        done = sync(str(copy), "--tracking-uri", new_store)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "sync: 2 logged, 0 already logged, 1 closed" in done.stdout
        assert not sweep.exists(), "sync recreated the original sweep folder"
        assert _tree(away) == before, "sync wrote into the original sweep folder"
    finally:
        if sweep.exists():  # recreated by the sync: the failure shown above
            shutil.rmtree(sweep)
        away.rename(sweep)

    runs = _runs(new_store)
    (parent,) = [r for r in runs if r.data.tags.get(tracking.TAG_SWEEP_PARENT) == "true"]
    jobs = [r for r in runs if r is not parent]
    assert parent.info.status == "FINISHED" and len(jobs) == 2
    assert {r.data.tags[tracking.TAG_PARENT] for r in jobs} == {parent.info.run_id}
    assert all(r.info.artifact_uri.startswith((tmp_path / "new").as_uri()) for r in runs)
    info = json.loads((copy / res.SWEEP_FILE).read_text())
    assert info["uri"] == new_store and info["parent_run_id"] == parent.info.run_id
    assert set(info["stores"]) == {original_store, new_store}  # the old store is still recorded
    for results in res.find_results([copy]):
        marker = json.loads((results / res.MARKER).read_text())
        assert set(marker["stores"]) == {original_store, new_store}
        assert marker["run_id"] in {r.info.run_id for r in jobs}
    # and the original store's runs are still the copy's runs there
    assert sync(str(copy)).stdout.strip().endswith("sync: 0 logged, 2 already logged, 0 closed")


@pytest.mark.slow  # the sweep
def test_a_parent_left_running_after_the_summary_is_closed_by_sync(sweep, sync):
    from mlflow import MlflowClient

    store = f"sqlite:///{sweep.parent / 'mlflow.db'}"
    info = json.loads((sweep / res.SWEEP_FILE).read_text())
    assert (sweep / res.SUMMARY / "sweep_table.csv").is_file()
    client = MlflowClient(tracking_uri=store)
    client.set_terminated(info["parent_run_id"], status="RUNNING")  # the store failed before the close
    done = sync(str(sweep))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sync: 0 logged, 2 already logged, 1 closed" in done.stdout
    assert client.get_run(info["parent_run_id"]).info.status == "FINISHED"
    again = sync(str(sweep))
    assert again.returncode == 0 and "sync: 0 logged, 2 already logged, 0 closed" in again.stdout


@pytest.mark.slow  # the sweep
def test_a_metric_that_is_a_string_is_one_line_and_exit_2(sweep, tmp_path, sync):
    copy = tmp_path / "job"
    shutil.copytree(sweep / "0", copy)
    record = json.loads((copy / "results" / res.RECORD).read_text())
    record["metrics"]["ndcg_at_3"] = "0.5 (about)"
    (copy / "results" / res.RECORD).write_text(json.dumps(record))
    done = sync(str(copy), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip() == (f"error: {copy / 'results' / res.RECORD}: metrics key 'ndcg_at_3' "
                                   'is not a number: "0.5 (about)"')
    assert "sync: 0 logged, 0 already logged, 0 closed" in done.stdout

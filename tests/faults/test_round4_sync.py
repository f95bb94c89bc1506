"""Sync finds a job's own store from any folder (issue 33, items 4 and 9).

- ``pipeline.sync /abs/path/to/job`` run from another folder once created a store there and
  logged the job into it: the record names ``sqlite:///outputs/mlflow.db``, relative to the
  folder the job ran in, and sync resolved it against its own. Now the job's
  ``.hydra/hydra.yaml`` says where it ran: the job is found already logged, a lost marker is
  adopted, and a lost store is made again beside the job's tree, never in the current folder;
  a tree moved whole keeps working.
- A job folder sync cannot write in: one line, exit 2 (a job already logged there: nothing to
  write, exit 0), instead of a traceback from the lock file.
- A full disk under the store: exit 3 and one line, without MLflow's own two tracebacks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from commands import run_command, run_job_command
from forked import forked

from pipeline.io import results as res

pytestmark = pytest.mark.slow  # a tracked job for the module, a store made again, and a full disk in a child


@pytest.fixture(scope="module")
def tree(tmp_path_factory, migrated_store) -> Path:
    """A folder where ``python -m pipeline`` (the README's first command) ran with the default
    paths: ``outputs/runs/<date>/<time>`` and its store ``outputs/mlflow.db`` in the working
    folder (a copy of the session's migrated store, where a first job would have created it),
    named relatively in the record."""
    root = tmp_path_factory.mktemp("ran_here")
    (root / "outputs").mkdir()
    shutil.copy(migrated_store, root / "outputs" / "mlflow.db")
    here = os.getcwd()
    os.chdir(root)  # the job in this process, from that folder
    try:
        done = run_job_command()
    finally:
        os.chdir(here)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MLflow run " in done.stdout and (root / "outputs" / "mlflow.db").is_file()
    return root


def _job(tree: Path) -> Path:
    (job,) = (tree / "outputs" / "runs").glob("*/*")
    return job


@pytest.fixture
def sync(tmp_path):
    """``python -m pipeline.sync ARGS`` in this process, run from an empty folder ``elsewhere``."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args: str):
        return run_command("sync", *args, cwd=elsewhere)

    run.elsewhere = elsewhere
    return run


def _runs(db: Path) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=100)


def test_sync_from_another_folder_uses_the_store_beside_the_job(tree, tmp_path, sync):
    record = res.read_record(_job(tree) / "results")
    assert record["tracking"]["uri"] == "sqlite:///outputs/mlflow.db"  # relative, as the job ran (unchanged)
    moved = tmp_path / "moved"  # the whole tree, elsewhere: its store moves with it
    shutil.copytree(tree, moved)
    job, store = _job(moved), moved / "outputs" / "mlflow.db"
    (run,) = _runs(store)

    done = sync(str(job))
    assert done.returncode == 0, done.stderr
    assert "sync: 0 logged, 1 already logged" in done.stdout
    assert list(sync.elsewhere.iterdir()) == []  # no store, no outputs/ where sync ran

    (job / "results" / res.MARKER).unlink()
    done = sync(str(job))
    assert done.returncode == 0 and "1 adopted" in done.stdout, done.stdout + done.stderr
    assert res.read_marker(job / "results")["uri"] == "sqlite:///outputs/mlflow.db"  # the record's name for it
    assert [r.info.run_id for r in _runs(store)] == [run.info.run_id]



def test_a_lost_store_is_made_again_beside_the_job_not_where_sync_runs(tree, tmp_path, sync):
    moved = tmp_path / "moved"  # a fresh copy: this process has never opened its store
    shutil.copytree(tree, moved)
    job, store = _job(moved), moved / "outputs" / "mlflow.db"
    store.unlink()
    shutil.rmtree(moved / "outputs" / "mlartifacts")
    done = sync(str(job))
    assert done.returncode == 0, done.stderr
    assert f"creating a new one, {store}" in done.stdout and "sync: 1 logged" in done.stdout
    assert len(_runs(store)) == 1 and list(sync.elsewhere.iterdir()) == []
    assert any((moved / "outputs" / "mlartifacts").rglob("record.json"))  # the artifacts beside it too


def test_a_job_folder_sync_cannot_write_in_is_one_line(tree, tmp_path, sync, monkeypatch):
    """chmod does not stop root (the suite's user): the lock file's creation fails as it
    does on a read-only folder."""
    import filelock

    copy = tmp_path / "copy"
    shutil.copytree(tree, copy)
    job = _job(copy)
    acquire = filelock.FileLock.acquire

    def refuse(self, *args, **kwargs):
        if str(self.lock_file).endswith(".mlflow.lock"):
            raise PermissionError(13, "Permission denied", self.lock_file)
        return acquire(self, *args, **kwargs)

    monkeypatch.setattr(filelock.FileLock, "acquire", refuse)
    done = sync(str(job))  # already logged: nothing to write
    assert done.returncode == 0 and "sync: 0 logged, 1 already logged" in done.stdout, done.stderr

    other = tmp_path / "other.db"
    done = sync(str(job), "--tracking-uri", f"sqlite:///{other}")  # not in that store: it would write
    assert done.returncode == 2
    assert done.stderr == (f"error: {job}: cannot write in the job's folder (Permission denied): logging writes its "
                           "lock and marker there; copy the folder somewhere writable and sync the copy\n")
    assert "sync: 0 logged" in done.stdout


def _sync_on_a_full_disk(job: Path, db: Path) -> int:
    """``pipeline.sync JOB --tracking-uri sqlite:///DB`` with not a byte more for the store than
    its migrated size (RLIMIT_FSIZE; writes past it fail with EFBIG, as on a full disk)."""
    import resource

    from pipeline import tracking
    from pipeline.cli.sync import main

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    tracking.ensure_store(tracking.StoreSettings(f"sqlite:///{db}"))  # (a migrated copy: nothing to do)
    room = os.path.getsize(db)
    resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))
    return main([str(job), "--tracking-uri", f"sqlite:///{db}"])


def test_a_full_disk_under_the_store_is_one_line_without_mlflows_tracebacks(tree, tmp_path, migrated_store):
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy)
    job, db = _job(copy), tmp_path / "full" / "mlflow.db"
    db.parent.mkdir()
    shutil.copy(migrated_store, db)  # the session's migrated store, not one migrated in the child
    before = {p: p.read_bytes() for p in (job / "results").rglob("*") if p.is_file()}
    import pipeline.cli.sync  # noqa: F401 - imported before the fork (and the limit)

    proc = forked(lambda: _sync_on_a_full_disk(job, db))  # a child: the limit holds for its whole process
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "SQLAlchemy database error" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{job / 'results'}: MLflow tracking at sqlite:///{db} failed")
    assert "sync: 0 logged" in proc.stdout
    after = {p: p.read_bytes() for p in (job / "results").rglob("*") if p.is_file()}
    assert after == before  # nothing lost (and no marker for a run that is not there)
    assert json.loads((job / "results" / res.RECORD).read_text())["job_key"]

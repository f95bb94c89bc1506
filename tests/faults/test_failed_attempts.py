"""Failed attempts remove what they wrote, and only results are logged (issue 28).

- An artifact upload that fails on a full disk (simulated with RLIMIT_FSIZE, as
  test_tracking_faults does) leaves no run in the store, not even a deleted one, and no
  artifact file; with room again, one sync logs the job once.
- Lock files (a logger's ``.mlflow.lock``, the store's ``<db>.lock``) and the files of a store
  inside the folder are never logged as artifacts, however the folder is named (``.``).
- A ``hydra.run.dir`` Hydra cannot write in: one line naming the folder, exit 2.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from commands import job_in_process, run_command, run_job_command
from forked import forked

from pipeline import tracking
from pipeline.io import results as res

# The job, sync and Hydra's folder check run in this process (tests/commands.py); the full disk
# in a child forked from it (tests/forked.py: RLIMIT_FSIZE holds for a whole process).


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """The results folder of an untracked job on the sample."""
    root = tmp_path_factory.mktemp("job")
    job_in_process("tracking=none", f"paths.root={root / 'out'}", f"hydra.run.dir={root / 'job'}", figures=True)
    return root / "job" / "results"


def _all_runs(store: str) -> list:
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    client = MlflowClient(tracking_uri=store)
    ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    return client.search_runs(ids, run_view_type=ViewType.ALL, max_results=1000) if ids else []


def _log_on_a_full_disk(results: Path, store: str, artifacts: Path) -> int:
    """Three attempts to log ``results`` with room for the store and 512 KiB more in any file
    (RLIMIT_FSIZE; writes past it fail with EFBIG, as on a full disk): the padding file, sorted
    last, cannot be copied. Prints one line per failed attempt."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    settings = tracking.StoreSettings(store, artifact_root=str(artifacts))
    tracking.ensure_store(settings)
    room = os.path.getsize(store[len("sqlite:///"):]) + 512 * 1024
    (results / "zz_padding.bin").write_bytes(b"x" * (room + 1024 * 1024))  # sorted last: the rest is copied first
    resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))
    for _ in range(3):
        try:
            tracking.log_results(results, settings)
        except tracking.TrackingError as err:
            print("failed:", str(err).splitlines()[0])
    return 0


@pytest.mark.slow  # a forked child
def test_a_full_disk_during_the_artifact_upload_leaves_nothing_behind(job, tmp_path, store):
    import mlflow.cli  # noqa: F401 - imported before the fork (and the limit): imports may write caches

    results = tmp_path / "job" / "results"
    shutil.copytree(job, results)
    # the store: the ``store`` fixture's migrated copy (no run in it), not one migrated in the child
    assert store == f"sqlite:///{tmp_path / 'mlflow.db'}" and _all_runs(store) == []
    artifacts = tmp_path / "mlartifacts"
    proc = forked(lambda: _log_on_a_full_disk(results, store, artifacts))  # the limit holds for its whole process
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = proc.stdout.splitlines()
    assert len(failures) == 3 and all("File too large" in line for line in failures), proc.stdout
    assert _all_runs(store) == []  # not FAILED, not deleted: gone
    assert [p for p in artifacts.rglob("*") if p.is_file()] == []
    assert res.read_marker(results) is None

    (results / "zz_padding.bin").unlink()  # room again
    (run,) = [tracking.log_results(results, tracking.StoreSettings(store, artifact_root=str(artifacts)))]
    assert [r.info.run_id for r in _all_runs(store)] == [run]


@pytest.mark.slow  # a store
def test_lock_files_and_a_store_inside_the_folder_are_not_logged(job, tmp_path, migrated_store):
    from mlflow import MlflowClient

    results = tmp_path / "results"
    shutil.copytree(job, results)
    shutil.copy(migrated_store, results / "mlflow.db")  # a migrated store inside the folder (not made again)
    # "." as the folder: its lock file once landed inside it
    done = run_command("sync", ".", "--tracking-uri", "sqlite:///mlflow.db", cwd=results)
    assert done.returncode == 0, done.stderr
    assert "sync: 1 logged" in done.stdout
    assert (results / "mlflow.db").is_file() and (results / "mlflow.db.lock").is_file()
    run_id = res.read_marker(results)["run_id"]
    client = MlflowClient(tracking_uri=f"sqlite:///{results / 'mlflow.db'}")

    def names(path: str | None = None) -> list[str]:
        found = []
        for info in client.list_artifacts(run_id, path):
            found += names(info.path) if info.is_dir else [info.path]
        return found

    logged = names()
    assert "record.json" in logged and "plots/k_sweep.png" in logged
    assert [n for n in logged if n.endswith(".lock") or "mlflow.db" in n or n == res.MARKER] == []


@pytest.mark.parametrize("blocker", [".hydra", "pipeline.log"])
def test_a_run_dir_hydra_cannot_write_in_is_one_line_and_exit_2(tmp_path, blocker):
    folder = tmp_path / "run"
    folder.mkdir()
    if blocker == ".hydra":
        (folder / blocker).write_text("a file where Hydra makes its folder\n")
    else:
        (folder / blocker).mkdir()  # a folder where Hydra opens its log file
    proc = run_job_command("tracking=none", f"hydra.run.dir={folder}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"error: cannot write in the output folder {folder} (hydra.run.dir): ")
    assert blocker in proc.stderr and len(proc.stderr.strip().splitlines()) == 1

"""The shared tracking process (``python -m pipeline.sync --serve``): jobs of one user, code
and environment log through one process that keeps mlflow imported between them.

Each test gets a temporary folder of its own as TMPDIR (so its own shared process) and stops
what it started. The rest of the suite runs with ``PIPELINE_TRACKER_IDLE_S=0`` (one tracking
process per job; tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pipeline import tracking

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid") or not hasattr(__import__("socket"), "AF_UNIX"),
                                reason="the shared tracking process listens on a Unix socket")


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """A short TMPDIR (a socket path holds 108 bytes) for this test's shared process, stopped after.
    (``tmp_path`` first: pytest's own temporary folder must not be made under this one.)"""
    tmp = Path(tempfile.mkdtemp(prefix="pst", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv(tracking.TRACKER_IDLE_ENV, "120")
    monkeypatch.setattr(tracking, "_TRACKER", [])
    yield tmp
    tracking.stop_shared(wait_s=60)
    shutil.rmtree(tmp, ignore_errors=True)


def _job(cwd: Path, name: str) -> subprocess.CompletedProcess[str]:
    """A tracked sample job in ``cwd``, with the relative default store outputs/mlflow.db."""
    return subprocess.run([sys.executable, "-m", "pipeline", "paths.root=outputs", f"hydra.run.dir=outputs/{name}"],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=dict(os.environ))


def _runs(store: Path) -> list[str]:
    with sqlite3.connect(store) as db:
        return sorted(r[0] for r in db.execute("select run_uuid from runs where lifecycle_stage = 'active'"))


def _server_pid(folder: Path) -> int:
    locks = list((folder / f"pipeline-tracking-{os.getuid()}").glob("*.sock.lock"))
    assert len(locks) == 1, locks
    return int(locks[0].read_text().strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie (exited, not yet reaped) is gone too
        return fh.read().split(") ")[-1][0] != "Z"


def test_jobs_share_one_tracking_process_each_logging_into_its_own_relative_store(shared_tmp, tmp_path):
    """Three jobs from two working folders, each with the relative store outputs/mlflow.db:
    one process logs all three, each run into the store of its job's folder (the process
    changes to the job's folder per request; its sqlite clients are keyed by absolute path).
    Killed outright, the next job starts a new one."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for i, cwd in enumerate((a, b, a)):
        done = _job(cwd, f"job{i}")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "MLflow run " in done.stdout
    assert len(_runs(a / "outputs" / "mlflow.db")) == 2
    assert len(_runs(b / "outputs" / "mlflow.db")) == 1
    started = [(cwd / "outputs" / f"job{i}" / "pipeline.log").read_text().count("started the shared tracking process")
               for i, cwd in enumerate((a, b, a))]
    assert started == [1, 0, 0]  # the first job says so in its log; the others found it running
    folder = shared_tmp / f"pipeline-tracking-{os.getuid()}"
    journal = next(folder.glob("*.sock.log")).read_text()
    logged = [line for line in journal.splitlines() if " log " in line]
    assert len(logged) == 3 and all(line.endswith(" ok") for line in logged), journal
    assert sum(str(a) in line for line in logged) == 2 and sum(str(b) in line for line in logged) == 1
    # The jobs that found it running handed it their figures (matplotlib stays loaded there).
    drawn = [line for line in journal.splitlines() if " draw " in line]
    assert [line.split(" draw ")[1] for line in drawn] == [f"{b / 'outputs/job1/results/plots'} ok",
                                                           f"{a / 'outputs/job2/results/plots'} ok"], journal
    for i, cwd in enumerate((a, b, a)):
        for name in ("k_sweep.png", "precision_recall.png"):
            assert (cwd / "outputs" / f"job{i}" / "results" / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert oct(next(folder.glob("*.sock")).stat().st_mode & 0o777) == "0o600"

    first = _server_pid(shared_tmp)
    assert _alive(first)
    os.kill(first, signal.SIGKILL)  # leaves its socket behind, with nobody listening
    time.sleep(0.2)
    done = _job(b, "job3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_runs(b / "outputs" / "mlflow.db")) == 2
    second = _server_pid(shared_tmp)
    assert second != first and _alive(second)
    assert tracking.stop_shared(wait_s=60) == [second]
    assert not _alive(second) and not list(folder.glob("*.sock"))


def test_release_lets_the_shared_process_go_once_no_job_is_connected(shared_tmp):
    """What a job does before building a large index: the shared process leaves (its mlflow
    memory with it) when no other job is connected, and the next tracker() starts a new one."""
    first = tracking.tracker()
    assert first.shared
    assert first.call({"op": "flush"}, timeout=120) is None  # served (after its imports)
    pid = _server_pid(shared_tmp)
    assert _alive(pid)
    tracking.release()
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        tracking._STARTED[0].poll()  # reap it (this test's process started it)
        time.sleep(0.05)
    assert not _alive(pid)
    again = tracking.tracker()
    assert again.shared and again is not first
    assert again.call({"op": "flush"}, timeout=120) is None
    assert _server_pid(shared_tmp) != pid
    again.close()


def test_no_shared_process_where_it_is_off_or_its_folder_is_not_private(shared_tmp, monkeypatch, caplog):
    base = tracking.shared_address()
    assert base is not None and base == tracking.shared_address()  # the same process for the same settings
    monkeypatch.setenv("SOME_SETTING", "x")
    assert tracking.shared_address() != base  # another environment: another process
    monkeypatch.delenv("SOME_SETTING")
    monkeypatch.setenv("PWD", "/elsewhere")  # differs between shells, not in what tracking does
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # differs between a sweep's jobs
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # set in joblib's workers
    assert tracking.shared_address() == base
    folder = shared_tmp / f"pipeline-tracking-{os.getuid()}"
    folder.chmod(0o755)  # others could put a socket there
    assert tracking.shared_address() is None
    folder.chmod(0o700)
    monkeypatch.setenv(tracking.TRACKER_IDLE_ENV, "0")
    assert tracking.shared_address() is None
    monkeypatch.setenv(tracking.TRACKER_IDLE_ENV, "soon")
    with caplog.at_level("WARNING", logger="pipeline.tracking"):
        assert tracking.shared_address() is None
    assert "PIPELINE_TRACKER_IDLE_S='soon' is not a number" in caplog.text
    t = tracking.tracker()  # falls back to a tracking process of the job's own
    assert not t.shared and t.alive()
    t.close()


def test_two_started_at_once_make_one_and_it_leaves_when_idle(shared_tmp):
    """Two ``--serve`` processes for one socket: one serves (it holds the lock), the other
    waits; once no job has been connected for ``--idle`` seconds, the one serving removes its
    socket and exits, and the waiting one takes over and does the same."""
    folder = shared_tmp / "s"
    folder.mkdir(mode=0o700)
    address = folder / "x.sock"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pipeline.sync", "--serve", str(address), "--idle", "1"]
    procs = [subprocess.Popen(cmd, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        deadline, sock = time.monotonic() + 30, None
        while sock is None and time.monotonic() < deadline:
            sock = tracking._connect(address)
            time.sleep(0.02)
        assert sock is not None
        job = tracking.Tracker(sock=sock, address=address)
        assert job.call({"op": "flush"}, timeout=120) is None
        serving = int((folder / "x.sock.lock").read_text())
        assert serving in [p.pid for p in procs]
        assert all(p.poll() is None for p in procs)  # the other one waits for the lock
        job.close()
        for p in procs:
            assert p.wait(timeout=90) == 0
        assert not address.exists()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_figures_handed_to_a_tracking_process_that_died_are_drawn_by_the_job(tmp_path, caplog):
    """TrackerFigures: when the tracking process cannot draw them (here it was killed), the
    job draws its figures itself, says so, and they are the same as drawn anywhere else."""
    import numpy as np

    from pipeline.plots import save_run_figures

    t = tracking.Tracker()  # a process of its own (the shared one is the same protocol)
    assert t.call({"op": "flush"}, timeout=120) is None
    t._proc.kill()
    t._proc.wait()
    ks = np.arange(1, 21)
    curves = {"precision": 1 / ks, "recall": np.minimum(1.0, ks / 10), "ndcg": np.linspace(0.2, 0.6, 20),
              "context_utility": np.linspace(0.1, 0.5, 20)}
    figures = tracking.TrackerFigures(t)
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / ".k_sweep.png.x1y2.tmp").write_bytes(b"\x89PNG")  # as a process killed mid-write leaves it
    with caplog.at_level("WARNING", logger="pipeline.tracking"):
        figures.draw(tmp_path / "plots", curves, 5, "job")
        figures.wait(timeout=30)
    assert caplog.text.count("drawing the figures in") == 1 and "no answer from the tracking process" in caplog.text
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["k_sweep.png", "precision_recall.png"]
    save_run_figures(tmp_path / "again", curves, 5, "job")
    for name in ("k_sweep.png", "precision_recall.png"):
        assert (tmp_path / "plots" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()

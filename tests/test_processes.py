"""One process per command: after a job, a sweep or any command returns, no process it started is alive.

Each command runs with a marker of its own in its environment, which every process it starts
inherits; once the command has returned, no process on the machine may still carry the
marker in ``/proc/<pid>/environ`` (``carriers`` and ``assert_nothing_left``, shared with the
other files that check it: tests/e2e_servers.py). This is what keeps gone the failures of the
shared tracking process that jobs used to start: a job left it alive for minutes, one more per
differing environment variable, and a job could wait on it forever.

Here, each a process: an untracked job, ``score``, ``compare`` and ``sync`` (a tracked command:
it asks the store about a tracked job made in this process). The tracked jobs and the launchers
run where a test runs them as processes anyway, with the same marker and check
(``new_marker``, ``assert_none_outlive``), so that none runs twice in the suite; their
environments differ (never a second lingering helper):

- a tracked job that creates its store: tests/pipeline/test_guide.py::
  test_a_run_in_a_new_folder_says_so_names_and_describes_itself_and_says_how_to_open_it;
- a sweep of the basic launcher, tracked into an existing store, one job failing:
  tests/pipeline/test_app_sweeps.py::test_a_failing_job_does_not_stop_the_sweep (and
  tests/faults/test_no_tracker.py's sweep);
- joblib (two worker processes, a store the sweep creates):
  test_app_sweeps.py::test_joblib_sweep_on_a_fresh_store_loses_no_run;
- submitit_local (a process per tracked job): test_app_sweeps.py::test_submitit_local_launcher;
- Ray: tests/ray/test_ray.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from commands import job_in_process
from e2e_servers import RAY_MARKER, assert_nothing_left, carriers

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_QRELS = ROOT / "pipeline" / "sample" / "qrels" / "test.tsv"
TIMEOUT_S = 600
#: The environment variable that carries the marker (tests/e2e_servers.py's, Ray's too).
MARKER_KEY = RAY_MARKER
#: A process that is exiting when the command returns (its parent reaped, the kernel tearing it
#: down) may show its environment for a moment; a lingering helper shows it for minutes.
GRACE_S = 2.0

HAS_PROC = Path("/proc/self/environ").exists()

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAS_PROC, reason="needs Linux /proc")]


def new_marker() -> str:
    """A marker no other process carries: the value of ``MARKER_KEY`` for one command."""
    return f"outlive-{uuid.uuid4().hex}"


def assert_none_outlive(marker: str, what: str) -> None:
    """No process carries ``marker`` once ``GRACE_S`` has passed. (Without Linux's /proc, as
    for this module's tests, nothing to look at: the other files' tests that call it still run.)"""
    if HAS_PROC:
        assert_nothing_left(marker, what, grace_s=GRACE_S)


def run_marked(args: list[str], **env: str) -> tuple[subprocess.CompletedProcess, str]:
    marker = new_marker()
    full = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    full.update(MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1", **env, **{MARKER_KEY: marker})
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    return proc, marker


def test_the_marker_is_seen_in_a_live_process():
    """The check itself: a child that is still running is found by its marker."""
    marker = new_marker()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, MARKER_KEY: marker})
    try:
        deadline = time.monotonic() + 10
        while child.pid not in carriers(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in carriers(marker)
    finally:
        child.kill()
        child.wait()
    assert_none_outlive(marker, "the killed child")


def test_a_job_and_the_commands_leave_no_process(tmp_path, migrated_store):
    out = tmp_path / "outputs"
    out.mkdir()
    shutil.copy(migrated_store, out / "mlflow.db")
    job_in_process(f"paths.root={out}", f"hydra.run.dir={tmp_path / 'job'}")  # a tracked job for score, compare, sync
    runs = [
        ("an untracked job", ["-m", "pipeline", "tracking=none", "k=5", f"paths.root={out}",
                              f"hydra.run.dir={tmp_path / 'untracked'}"], {}),
        ("pipeline.score", ["-m", "pipeline.score", str(SAMPLE_QRELS),
                            str(tmp_path / "job" / "results" / "run.trec"), "--json"], {}),
        ("pipeline.compare", ["-m", "pipeline.compare", str(tmp_path / "job"), str(tmp_path / "untracked"), "--json",
                              "--out", str(tmp_path / "cmp")], {}),
        ("pipeline.sync", ["-m", "pipeline.sync", str(tmp_path / "job"), str(tmp_path / "untracked")],
         {"SOME_SETTING": "1"}),
    ]
    for what, args, env in runs:
        proc, marker = run_marked(args, **env)
        assert proc.returncode == 0, f"{what}: {proc.stderr[-3000:]}"
        assert_none_outlive(marker, what)
    # sync asked the store about the tracked job, and passed over the untracked one
    assert proc.stdout.startswith("sync: 0 logged, 1 already logged, 0 closed, 1 untracked"), proc.stdout

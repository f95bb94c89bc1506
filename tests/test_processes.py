"""One process per command: after a job, a sweep or any command returns, no process it started is alive.

Each command runs with a marker of its own in its environment, which every process it starts
inherits; once the command has returned, no process on the machine may still carry the
marker in ``/proc/<pid>/environ``. This is what keeps gone the failures of the shared tracking
process that jobs used to start: a job left it alive for minutes, one more per differing
environment variable (the tracked job and the sweep's job below differ in one), and a job
could wait on it forever.

Each launcher and command runs once, on as little work as shows it: the basic sweep is one
job (run in the other environment: it is the second tracked job), the joblib sweep two (one
per worker process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_QRELS = ROOT / "pipeline" / "sample" / "qrels" / "test.tsv"
TIMEOUT_S = 600
#: A process that is exiting when the command returns (its parent reaped, the kernel tearing it
#: down) may show its environment for a moment; a lingering helper shows it for minutes.
GRACE_S = 2.0

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")]


def carriers(marker: str) -> list[int]:
    """The processes whose environment holds ``marker``."""
    needle = marker.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def run_marked(args: list[str], **env: str) -> tuple[subprocess.CompletedProcess, str]:
    marker = f"PIPELINE_TEST_MARKER=outlive-{uuid.uuid4().hex}"
    key, value = marker.split("=", 1)
    full = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    full.update(MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1", **env, **{key: value})
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    return proc, marker


def assert_nothing_left(marker: str, what: str) -> None:
    deadline = time.monotonic() + GRACE_S
    while (left := carriers(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"{what} left processes alive: {[_cmdline(pid) for pid in left]}"


def _cmdline(pid: int) -> str:
    try:
        return f"{pid}: " + (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return f"{pid}: (gone)"


def test_the_marker_is_seen_in_a_live_process():
    """The check itself: a child that is still running is found by its marker."""
    marker = f"PIPELINE_TEST_MARKER=alive-{uuid.uuid4().hex}"
    key, value = marker.split("=", 1)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, key: value})
    try:
        deadline = time.monotonic() + 10
        while child.pid not in carriers(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in carriers(marker)
    finally:
        child.kill()
        child.wait()
    assert_nothing_left(marker, "the killed child")


def test_jobs_sweeps_and_commands_leave_no_process(tmp_path):
    out = tmp_path / "outputs"
    runs = [
        ("a tracked job", ["-m", "pipeline", f"paths.root={out}", f"hydra.run.dir={tmp_path / 'job'}"], {}),
        ("an untracked job", ["-m", "pipeline", "tracking=none", f"paths.root={out}"], {}),
        # a tracked job again (the sweep's), with one more variable in its environment: never a
        # second lingering helper
        ("a sweep (its job in another environment)", ["-m", "pipeline", "-m", "k=5", f"paths.root={out}",
                                                      f"hydra.sweep.dir={tmp_path / 'sweep'}"], {"SOME_SETTING": "1"}),
        ("a joblib sweep", ["-m", "pipeline", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "k=3,5",
                            f"paths.root={out}", f"hydra.sweep.dir={tmp_path / 'joblib'}"], {}),
        ("pipeline.score", ["-m", "pipeline.score", str(SAMPLE_QRELS),
                            str(tmp_path / "job" / "results" / "run.trec"), "--json"], {}),
        ("pipeline.compare", ["-m", "pipeline.compare", str(tmp_path / "job"), str(tmp_path / "sweep" / "0"), "--json",
                              "--out", str(tmp_path / "cmp")], {}),
        ("pipeline.sync", ["-m", "pipeline.sync", str(out)], {}),
    ]
    for what, args, env in runs:
        proc, marker = run_marked(args, **env)
        assert proc.returncode == 0, f"{what}: {proc.stderr[-3000:]}"
        assert_nothing_left(marker, what)

"""The shared tracking process is gone, and so are its three failures (issue 28):

- a job waited forever on a tracker that had stopped, and
- each differing environment variable started one more ~280 MB tracker: both are kept gone
  by ``tests/test_processes.py`` (tracked jobs in two environments end, exit 0, and leave no
  process carrying their marker);
- a sweep's end was lost when the tracker died: here, a sweep run with a marker ends within
  a bound, closes its parent FINISHED with the summary logged, its jobs nested under it, in
  its own process, and no process carrying the marker outlives it.

The sweep's process is a child forked from the test's (tests/forked.py: ``python -m pipeline``
run there by ``runpy``, its imports already done) with the marker in its environment: every
process it starts (a tracker, a worker) inherits the marker, and the child itself is waited
for within the bound. A new interpreter paid seconds of imports for nothing checked here;
tests/test_processes.py keeps a tracked sweep in a new interpreter.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from e2e_servers import carriers  # the processes whose environment holds a marker
from forked import pipeline_child

from pipeline import tracking

ROOT = Path(__file__).resolve().parents[2]
#: A job on the sample takes seconds; the old failure was a wait without end.
BOUND_S = 180

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")]


def _run_marked(*args: str, **extra: str):
    """``python -m pipeline ARGS`` in a forked child whose environment holds a marker; assert
    it ends within BOUND_S and leaves no process carrying the marker."""
    marker = f"outlive-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true", PIPELINE_TEST_MARKER=marker, **extra)
    start = time.monotonic()
    proc = pipeline_child(*args, env=env, cwd=ROOT).wait(timeout=BOUND_S)  # killed at BOUND_S
    assert time.monotonic() - start < BOUND_S, f"{args} did not end within {BOUND_S} s"
    deadline = time.monotonic() + 2.0  # a process being torn down may show its environment a moment
    while (left := carriers(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes outlived {args}: {left}"
    return proc


def _runs(store: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    return client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=100)


def test_a_sweep_closes_its_parent_with_its_summary_in_its_own_process(tmp_path, store):
    """A process of its own (forked, the marker in its environment); its store is the ``store``
    fixture's migrated copy at ``paths.root/mlflow.db``, where the sweep logs."""
    from mlflow import MlflowClient

    assert store == f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = tmp_path / "sweep"
    proc = _run_marked("-m", "k=3,5", f"paths.root={tmp_path}", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(store)
    (parent,) = [r for r in runs if r.data.tags.get(tracking.TAG_SWEEP_PARENT) == "true"]
    jobs = [r for r in runs if r is not parent]
    assert parent.info.status == "FINISHED" and len(jobs) == 2
    assert {r.info.status for r in jobs} == {"FINISHED"}
    assert {r.data.tags[tracking.TAG_PARENT] for r in jobs} == {parent.info.run_id}
    logged = {a.path for a in MlflowClient(tracking_uri=store).list_artifacts(parent.info.run_id, "summary")}
    assert "summary/sweep_table.csv" in logged
    assert "2 jobs, FINISHED" in parent.data.tags[tracking.TAG_NOTE]  # the sweep's description, at its end

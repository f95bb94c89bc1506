"""The disk is the queue: jobs are logged from their results folders, each exactly once.

A tracking process killed in the middle of a sequential sweep loses nothing: the sweep's end
and ``python -m pipeline.sync`` log every finished job from its folder, and logging a folder
twice (marker or no marker, half-logged run or not) never makes a second run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import results as res
from pipeline import tracking

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1")
    return env


def pipeline_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", *args]


def sync(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline.sync", *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)


def _runs(store: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids, max_results=1000)  # active runs only: deleted ones do not count


def _children(pid: int, word: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and word in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_killing_the_tracking_process_mid_sweep_loses_no_run_and_sync_logs_each_job_once(tmp_path, store):
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        pipeline_cmd("-m", "k=1,2,3,4,5", "reorder=none,reverse", f"paths.root={tmp_path / 'out'}",
                     f"tracking.uri={store}", f"hydra.sweep.dir={sweep}"),
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    killed = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None and not killed:
        if len(list(sweep.glob("*/results/record.json"))) >= 3:
            for child in _children(proc.pid, "pipeline.sync"):
                os.kill(child, signal.SIGKILL)
                killed.append(child)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=300)
    assert killed, f"the sweep ended before its tracking process could be killed:\n{out[-2000:]}"
    # The sweep's end logged what the dead process had not, or left it for sync; nothing is lost either way.
    assert proc.returncode in (0, 3), err[-3000:]
    done = sync(str(sweep))
    assert done.returncode == 0, done.stderr[-3000:]

    folders = res.find_results([sweep])
    assert len(folders) == 10
    runs = _runs(store)
    jobs = [r for r in runs if r.data.tags.get(tracking.TAG_SWEEP_PARENT) != "true"]
    parents = [r for r in runs if r.data.tags.get(tracking.TAG_SWEEP_PARENT) == "true"]
    keys = sorted(res.read_record(f)["job_key"] for f in folders)
    assert sorted(r.data.tags[tracking.TAG_JOB_KEY] for r in jobs) == keys  # each job exactly once
    assert {r.info.status for r in jobs} == {"FINISHED"}
    assert len(parents) == 1 and {r.data.tags[tracking.TAG_PARENT] for r in jobs} == {parents[0].info.run_id}
    by_key = {r.data.tags[tracking.TAG_JOB_KEY]: r for r in jobs}
    for folder in folders:
        record = res.read_record(folder)
        run = by_key[record["job_key"]]
        assert res.read_marker(folder)["run_id"] == run.info.run_id
        assert run.data.metrics[f"ndcg_at_{record['k']}"] == record["metrics"][f"ndcg_at_{record['k']}"]
        assert res.has_plots(folder)

    again = sync(str(sweep))  # a second sync changes nothing
    assert again.returncode == 0, again.stderr
    assert sorted(r.info.run_id for r in _runs(store)) == sorted(r.info.run_id for r in runs)


@pytest.mark.slow
def test_a_folder_is_logged_once_whatever_happened_before(tmp_path, store):
    from mlflow import MlflowClient

    proc = subprocess.run(pipeline_cmd("tracking=none", "k=5", f"paths.root={tmp_path / 'out'}"), cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (folder,) = res.find_results([tmp_path / "out"])
    record = res.read_record(folder)
    assert record["tracking"] is None and record["metrics"]["ndcg_at_5"] > 0.3

    skipped = sync(str(tmp_path / "out"))  # a tracking=none job is logged only when a store is named
    assert skipped.returncode == 0 and "synced 0 job(s)" in skipped.stdout
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

    # A logger killed half-way left an unfinished run with the job key: it is replaced.
    client = MlflowClient(tracking_uri=store)
    client.set_terminated(run.info.run_id, status="RUNNING")
    (folder / res.MARKER).unlink()
    assert sync(str(tmp_path / "out"), "--tracking-uri", store).returncode == 0
    (rerun,) = _runs(store)
    assert rerun.info.run_id != run.info.run_id and rerun.info.status == "FINISHED"
    assert client.get_run(run.info.run_id).info.lifecycle_stage == "deleted"


def test_a_corrupt_record_is_reported_not_logged(tmp_path):
    results = tmp_path / "job" / "results"
    results.mkdir(parents=True)
    (results / res.RECORD).write_text('{"format": "rag-eval-record/1", "job_key": "x"')  # cut short
    done = sync(str(tmp_path))
    assert done.returncode == 3 and "unreadable record" in done.stderr and "Traceback" not in done.stderr
    (results / res.RECORD).write_text(json.dumps({"format": res.RECORD_FORMAT, "job_key": "x"}))
    done = sync(str(tmp_path))
    assert done.returncode == 3 and "record lacks" in done.stderr


def test_sync_of_a_missing_folder_fails_in_one_line(tmp_path):
    done = sync(str(tmp_path / "nowhere"))
    assert done.returncode == 2 and done.stderr.strip() == f"error: {tmp_path / 'nowhere'}: no such folder"


@pytest.mark.slow
def test_the_tracking_process_logs_what_was_queued_after_the_job_is_gone(tmp_path, store):
    """A job that exits without reading the answers (it crashed, or was killed alone) leaves
    the tracking process a closed pipe: it logs every request already queued all the same."""
    for name in ("a", "b"):
        proc = subprocess.run(pipeline_cmd("tracking=none", f"paths.root={tmp_path / name}"), cwd=ROOT,
                              env=_env(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    folders = [res.find_results([tmp_path / name])[0] for name in ("a", "b")]
    settings = tracking.StoreSettings(uri=store, artifact_root=str(tmp_path / "artifacts"))
    server = subprocess.Popen([sys.executable, "-m", "pipeline.sync", "--stdin"], cwd=ROOT, env=_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    server.stdout.close()  # the job is gone before the first answer
    requests = "".join(json.dumps({"op": "log", "results": str(f), "tracking": settings.as_dict()}) + "\n"
                       for f in folders)
    server.stdin.write(requests.encode())
    server.stdin.close()
    assert server.wait(timeout=300) == 0, server.stderr.read().decode()[-3000:]
    runs = _runs(store)
    assert sorted(r.data.tags[tracking.TAG_JOB_KEY] for r in runs) == sorted(
        res.read_record(f)["job_key"] for f in folders)
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert all(res.read_marker(f)["run_id"] in {r.info.run_id for r in runs} for f in folders)

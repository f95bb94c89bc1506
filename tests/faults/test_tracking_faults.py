"""Lost runs and broken stores (issue 9), each reproduced as a user would meet it.

- SIGINT / SIGTERM in the middle of a sequential sweep: finished jobs reach the store within
  a bounded wait, the parent run is closed as KILLED, one line, exit 130 / 143.
- ``kill -9`` of the sweep's process: one ``python -m pipeline.sync`` logs every finished job
  exactly once, with its plots, and closes the parent as KILLED.
- Two sweeps started together on a fresh sqlite store: both land, the store stays usable.
- A store that cannot be made (a full disk, simulated with RLIMIT_FSIZE) leaves no
  half-migrated store; a folder where the store should be fails in seconds with one line.

The sweeps are real processes: the one stopped by SIGTERM is ``python -m pipeline`` (a new
interpreter: its exit status and line), the others children forked from this one that run
``pipeline/__main__.py`` (tests/forked.py: a real process that SIGINT or ``kill -9`` stops, a
store that two processes race to create, Hydra's exit; a fork spares the imports). The full
disk is a forked child too (the limit holds for a whole process); the job and the syncs that
check only the code's answer run in this process (tests/commands.py). The migrated stores are
copies of the session's (tests/conftest.py). Before the first fork this process imports what a
tracked sweep imports (tests/forked.py's ``import_what_a_sweep_imports``), once, for every child
to inherit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from commands import run_command, run_job_command
from forked import Forked, forked, import_what_a_sweep_imports, pipeline_child

from pipeline.io import results as res
from pipeline import tracking

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
#: The sweep a signal or SIGKILL stops: 16 jobs in a 4 x 4 grid (why 16: the signal test).
SIXTEEN_JOBS = ("k=1,2,3,4", "reorder=none,reverse,attention_optimal,lost_in_the_middle")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1")
    return env


def _sweep_args(tmp_path: Path, name: str, store: str, *args: str) -> list[str]:
    return ["-m", *args, f"paths.root={tmp_path / name}", f"tracking.uri={store}",
            f"hydra.sweep.dir={tmp_path / name / 'sweep'}"]


def _sweep(tmp_path: Path, name: str, store: str, *args: str) -> subprocess.Popen:
    """``python -m pipeline -m ARGS``: a new interpreter."""
    return subprocess.Popen([sys.executable, "-m", "pipeline", *_sweep_args(tmp_path, name, store, *args)],
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _sweep_child(tmp_path: Path, name: str, store: str, *args: str, prepare=None) -> Forked:
    """The same sweep in a child forked from this process (tests/forked.py): a real process
    that a signal or SIGKILL stops, without a new interpreter's imports (nor a tracked
    sweep's: tests/forked.py's ``import_what_a_sweep_imports``)."""
    import_what_a_sweep_imports()
    return pipeline_child(*_sweep_args(tmp_path, name, store, *args), env=_env(), cwd=ROOT, prepare=prepare)


def _wait_for_records(sweep: Path, proc: subprocess.Popen | Forked, n: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while len(list(sweep.glob("*/results/record.json"))) < n:
        if proc.poll() is not None:
            err = proc.stderr.read() if isinstance(proc, subprocess.Popen) else proc.wait().stderr
            raise AssertionError(f"the sweep ended before {n} jobs finished: {err[-2000:]}")
        assert time.monotonic() < deadline, "timed out waiting for the sweep's jobs"
        time.sleep(0.02)


def _runs(store: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1000)
    parents = [r for r in runs if r.data.tags.get(tracking.TAG_SWEEP_PARENT) == "true"]
    jobs = [r for r in runs if r.data.tags.get(tracking.TAG_SWEEP_PARENT) != "true"]
    return parents, jobs


def _assert_each_finished_job_once(sweep: Path, store: str, parent_status: str) -> int:
    folders = res.find_results([sweep])
    parents, jobs = _runs(store)
    assert sorted(r.data.tags[tracking.TAG_JOB_KEY] for r in jobs) == sorted(
        res.read_record(f)["job_key"] for f in folders)
    assert {r.info.status for r in jobs} <= {"FINISHED"}
    assert len(parents) == 1 and parents[0].info.status == parent_status
    assert {r.data.tags[tracking.TAG_PARENT] for r in jobs} <= {parents[0].info.run_id}
    for folder in folders:
        assert not res.has_plots(folder), folder  # a sweep's job draws no PNGs (docs/results.md)
        assert res.read_marker(folder) is not None
    return len(folders)


@pytest.mark.slow
@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_mid_sweep_lets_finished_jobs_reach_the_store(tmp_path, store, signum, code):
    """SIGTERM goes to ``python -m pipeline`` (a new interpreter: the status a shell or a
    scheduler sees); SIGINT to a child forked from this process that runs
    pipeline/__main__.py (its handlers the same, without the imports; ``python -m pipeline``
    exits 130 after Ctrl-C in tests/faults/test_user_code.py)."""
    # 16 jobs: a sweep's job takes well under a second now (no PNGs), and the signal must land
    # while jobs are left even on a loaded machine; it lands once 2 have finished (the test
    # polls every 20 ms), 14 jobs before the last (with 8, a loaded run once saw the sweep end
    # first). Not more: before the first job the sweeper composes the jobs that cover every
    # swept value (hydra_plugins/pipeline_grid_sweeper), as many as the longest value list: a
    # 4 x 4 grid composes 4 (8 x 2 composed 8), a fixed cost; jobs never started cost nothing.
    jobs = SIXTEEN_JOBS
    proc = (_sweep if signum == signal.SIGTERM else _sweep_child)(tmp_path, "s", store, *jobs)
    sweep = tmp_path / "s" / "sweep"
    _wait_for_records(sweep, proc, 2)
    proc.send_signal(signum)
    if isinstance(proc, Forked):
        done = proc.wait(TIMEOUT_S)
        status, out, err = done.returncode, done.stdout, done.stderr
    else:
        out, err = proc.communicate(timeout=TIMEOUT_S)
        status = proc.returncode
    assert status == code, (out[-2000:], err[-3000:])
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("interrupted")]
    assert f"interrupted ({signal.Signals(signum).name}):" in line and "KILLED" in line
    n = _assert_each_finished_job_once(sweep, store, "KILLED")
    assert 2 <= n < 16 and f"{n} finished job(s) logged to MLflow" in line


def _uncomposable() -> None:
    """The launcher fails on one job of the sweep after others ran (here a composition error at
    launch, with Hydra's up-front validation of the batch turned off): patched in the child."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.errors import ConfigCompositionException
    from hydra.plugins.sweeper import Sweeper

    Sweeper.validate_batch_is_legal = lambda self, batch: None
    original = ConfigLoaderImpl.load_sweep_config

    def load_sweep_config(self, master, overrides):
        if "reorder=reverse" in overrides:
            raise ConfigCompositionException("reorder=reverse cannot be composed")
        return original(self, master, overrides)

    ConfigLoaderImpl.load_sweep_config = load_sweep_config


@pytest.mark.slow
def test_a_sweep_stopped_by_a_job_it_cannot_compose_logs_the_finished_jobs(tmp_path, store):
    """Hydra reports the error and exits 1; the job that finished before it (the sweep's first
    of two) is in the store and the parent run is closed as FAILED, with one line that says so."""
    sweep = tmp_path / "s" / "sweep"
    proc = _sweep_child(tmp_path, "s", store, "reorder=none,reverse", prepare=_uncomposable).wait()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "reorder=reverse cannot be composed" in proc.stderr and "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("the sweep stopped")]
    assert line == ("the sweep stopped on that error: 1 finished job(s) logged to MLflow, "
                    "the sweep's parent run closed as FAILED")
    assert _assert_each_finished_job_once(sweep, store, "FAILED") == 1


@pytest.mark.slow
def test_kill_9_mid_sweep_then_one_sync_logs_every_finished_job_once(tmp_path, store):
    # 16 jobs: SIGKILL lands once 2 have finished, and nothing runs after it (as in the
    # signal test above: jobs enough that a loaded machine's late kill still finds some left)
    proc = _sweep_child(tmp_path, "s", store, *SIXTEEN_JOBS)
    sweep = tmp_path / "s" / "sweep"
    _wait_for_records(sweep, proc, 2)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait().returncode == -signal.SIGKILL
    # The syncs run in this process: what they check is the code's answer to what the killed
    # process left (``python -m pipeline.sync`` as a process: tests/test_processes.py).
    done = run_command("sync", str(sweep), env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert ", 1 closed" in done.stdout
    n = _assert_each_finished_job_once(sweep, store, "KILLED")
    assert n >= 2
    again = run_command("sync", str(sweep), env=_env())
    assert again.returncode == 0 and len(_runs(store)[1]) == n


@pytest.mark.slow
def test_two_sweeps_started_together_on_a_fresh_store_both_land(tmp_path):
    store = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"  # does not exist yet
    # one job each: the race is the store's creation, at the sweeps' start
    procs = [_sweep_child(tmp_path, name, store, k) for name, k in (("a", "k=3"), ("b", "k=5"))]
    for proc in procs:
        done = proc.wait()
        assert done.returncode == 0, done.stderr[-3000:]
    parents, jobs = _runs(store)
    assert len(parents) == 2 and len(jobs) == 2 and {r.info.status for r in jobs} == {"FINISHED"}
    later = run_job_command("k=7", f"paths.root={tmp_path / 'c'}", f"tracking.uri={store}",
                            f"hydra.run.dir={tmp_path / 'c' / 'job'}")  # a later job, in this process
    assert later.returncode == 0, later.stderr[-3000:]
    assert "MLflow run " in later.stdout and len(_runs(store)[1]) == 3
    assert not list((tmp_path / "fresh").glob(".*creating*"))


def _create_on_a_full_disk(uri: str):
    """ensure_store with files limited to 64 KiB: writes past the limit fail with EFBIG, as on a
    full disk (SIGXFSZ ignored); exit status 3 and the error's first line when it fails."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
    try:
        tracking.ensure_store(tracking.StoreSettings(uri))
    except tracking.TrackingError as err:
        print(str(err).splitlines()[0])
        return 3
    return 0


@pytest.mark.slow
def test_a_full_disk_during_store_creation_leaves_no_half_made_store(tmp_path):
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401 - imported before the limit (it may write caches)

    db = tmp_path / "store" / "mlflow.db"
    proc = forked(lambda: _create_on_a_full_disk(f"sqlite:///{db}"))
    assert proc.returncode == 3, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith(f"cannot create the MLflow store {db}")
    assert not db.exists() and not list(db.parent.glob(".mlflow.db.*"))
    # With room again, the same store is made and works.
    tracking.ensure_store(tracking.StoreSettings(f"sqlite:///{db}"))
    from mlflow import MlflowClient

    assert MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()


@pytest.mark.slow  # a job
def test_a_folder_where_the_store_should_be_fails_fast_in_one_line(tmp_path):
    """The job in this process: its status and stderr as ``python -m pipeline`` gives them
    (exit status 3 of a process: tests/faults/test_team_server.py, a refused job)."""
    (tmp_path / "out" / "mlflow.db").mkdir(parents=True)
    start = time.monotonic()
    proc = run_job_command(f"paths.root={tmp_path / 'out'}")
    assert time.monotonic() - start < 30  # the job itself takes a few seconds; the store check is instant
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert f"{tmp_path / 'out' / 'mlflow.db'} is a folder, not an MLflow sqlite store" in proc.stderr
    assert (next((tmp_path / "out" / "runs").rglob("record.json"))).exists()  # the results are on disk


def test_an_experiment_name_cannot_put_artifacts_outside_the_artifact_root():
    for name in ("..", ".", "../../etc", "/abs/path", "a/../../b", "~"):
        folder = tracking.folder_name(name)
        assert "/" not in folder and folder not in (".", "..", "") and (Path("/root") / folder).parent == Path("/root")
    assert tracking.folder_name("my/experiment") == "my_experiment"
    assert tracking.folder_name("sample") == "sample"

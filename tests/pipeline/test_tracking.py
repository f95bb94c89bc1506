"""Parallel jobs logging to one sqlite store lose no run (the races CI once hit)."""

from __future__ import annotations

import shutil
import time
from functools import partial
from pathlib import Path

import pytest
from forked import Forked


def _writer(uri: str, folder: Path, name: str, n: int) -> int:
    """One writer (a job's logging): waits until ``n`` writers are ready, then logs 6 runs with
    the same dataset inputs, in the same order, as every other writer."""
    from omegaconf import OmegaConf

    from pipeline import tracking
    from pipeline.config import TrackingConfig

    cfg = OmegaConf.structured(TrackingConfig(uri=uri, artifact_root=str(folder / "artifacts")))
    settings = tracking.StoreSettings.of(cfg)  # as a job makes them from its tracking config
    tracking.client(settings).search_experiments()  # the store opened before the race
    results = folder / name
    results.mkdir()
    (results / "metrics.json").write_text("{}")
    (folder / f"ready-{name}").touch()
    while len(list(folder.glob("ready-*"))) < n:  # start together
        time.sleep(0.01)
    for i in range(6):
        record = tracking.RunRecord(
            experiment="race", run_name=f"{name}-{i}", params={"i": str(i)}, metrics={"m": float(i)},
            curves={}, tags={}, artifacts_dir=results,
            dataset={"name": "sample", "digest": f"digest-{i}", "source": str(folder)},
        )
        tracking.log_run(settings, record)
    return 0


@pytest.mark.slow
def test_parallel_writers_with_the_same_dataset_inputs_lose_no_run(tmp_path):
    """Three writers in three processes, forked from this one (tests/forked.py: each opens its
    own store connection; a fork spares the ~3 s of imports of a new interpreter)."""
    from mlflow import MlflowClient

    from pipeline.config import TrackingConfig  # noqa: F401 - imported before the forks

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()  # the store exists before the jobs, as in a sweep
    writers = [Forked(partial(_writer, uri, tmp_path, f"w{j}", 3)) for j in range(3)]
    for writer in writers:
        done = writer.wait(timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id], max_results=100)
    assert sorted(r.info.run_name for r in runs) == sorted(f"w{j}-{i}" for j in range(3) for i in range(6))
    assert all(len(client.get_run(r.info.run_id).inputs.dataset_inputs) == 1 for r in runs)


def test_the_per_query_table_is_logged_as_mlflow_log_table_logs_it(tmp_path, store, monkeypatch):
    """tracking.log_table (with the tag set when the run is created) writes the file and the
    tag MlflowClient.log_table writes, so MLflow's UI and mlflow.load_table read it."""
    import json

    import pandas as pd
    from mlflow import MlflowClient

    from pipeline import tracking

    table = pd.DataFrame({"query_id": ["q1", "q2", "q3"], "ndcg_at_10": [0.5, 1.0, 0.0],
                          "query": ["what is \"BM25\"?", "été", None], "top_k": [["d1", "d2"], [], ["d3"]]})
    client = MlflowClient(tracking_uri=store)
    exp = client.create_experiment("tables", artifact_location=(tmp_path / "artifacts").as_uri())
    theirs = client.create_run(exp).info.run_id
    client.log_table(theirs, data=table.copy(), artifact_file=tracking.TABLE_FILE)
    ours = client.create_run(exp, tags={tracking.TAG_LOGGED_ARTIFACTS: json.dumps(
        [{"path": tracking.TABLE_FILE, "type": "table"}])}).info.run_id
    tracking.log_table(client, ours, table, tracking.TABLE_FILE)
    files = [Path(client.download_artifacts(run, tracking.TABLE_FILE, str(tmp_path / run))).read_bytes()
             for run in (theirs, ours)]
    assert files[0] == files[1] and b'"columns"' in files[0]
    tags = [client.get_run(run).data.tags[tracking.TAG_LOGGED_ARTIFACTS] for run in (theirs, ours)]
    assert tags[0] == tags[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)  # load_table searches through mlflow.search_runs
    loaded = client.load_table(exp, tracking.TABLE_FILE, run_ids=[ours])  # finds the run by the tag
    assert loaded["query_id"].tolist() == ["q1", "q2", "q3"] and loaded["ndcg_at_10"].tolist() == [0.5, 1.0, 0.0]


def test_a_sweeps_table_is_logged_as_mlflow_log_table_logs_it_into_a_folder(tmp_path, store, monkeypatch):
    """The parent run's summary/sweep_table.json through tracking.log_table and the tag
    finish_sweep sets: the file and the tag MlflowClient.log_table writes, found by load_table."""
    import pandas as pd
    from mlflow import MlflowClient

    from pipeline import tracking

    table = pd.DataFrame({"run_name": ["k3 bm25", "k5 bm25"], "ndcg_at_10": [0.5772, 0.5772]})
    client = MlflowClient(tracking_uri=store)
    exp = client.create_experiment("sweeps", artifact_location=(tmp_path / "artifacts").as_uri())
    theirs = client.create_run(exp).info.run_id
    client.log_table(theirs, data=table.copy(), artifact_file=tracking.SWEEP_TABLE_FILE)
    ours = client.create_run(exp, tags={tracking.TAG_LOGGED_ARTIFACTS: tracking.table_tag(
        tracking.SWEEP_TABLE_FILE)}).info.run_id
    tracking.log_table(client, ours, table, tracking.SWEEP_TABLE_FILE)
    files = [Path(client.download_artifacts(run, tracking.SWEEP_TABLE_FILE, str(tmp_path / run))).read_bytes()
             for run in (theirs, ours)]
    assert files[0] == files[1]
    assert [client.get_run(r).data.tags[tracking.TAG_LOGGED_ARTIFACTS] for r in (theirs, ours)] == [
        tracking.table_tag(tracking.SWEEP_TABLE_FILE)] * 2
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    loaded = client.load_table(exp, tracking.SWEEP_TABLE_FILE, run_ids=[ours])
    assert loaded["run_name"].tolist() == ["k3 bm25", "k5 bm25"]


def test_an_interrupt_during_a_write_takes_effect_after_it():
    """SIGINT inside ``signals_deferred`` (every write to a sqlite store) does not cut the
    write short: the block runs to its end, then the interrupt is raised as usual."""
    import signal

    from pipeline.tracking.store import signals_deferred

    steps = []
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            # raise(3): to this thread, so its C handler has run before the call returns
            # (os.kill may hand the process's signal to another thread, one that a loaded
            # machine runs only after the block has ended)
            signal.raise_signal(signal.SIGINT)
            for _ in range(1000):  # the signal is handled at some bytecode boundary in here
                pass
            steps.append("the write finished")
    assert steps == ["the write finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is back


def test_the_writer_lock_is_one_lock_however_the_store_is_named(tmp_path, monkeypatch, migrated_store):
    """Writing to a new store named by a relative path creates it inside the writer's lock,
    under the store's absolute path: one lock, not a second that waits on the first."""
    from pipeline import tracking
    from pipeline.tracking import store as store_mod

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(store_mod, "STORE_LOCK_TIMEOUT_S", 5)  # the bug waited out the timeout
    # The tables are the session's store's (tests/conftest.py, made by this same code), copied
    # where the migration would write them: the lock, not MLflow's ~2 s of migrations, is the
    # claim here, and the copy happens inside the lock as the migration does.
    monkeypatch.setattr(store_mod, "_migrate_into_place", lambda db: shutil.copy(migrated_store, db))
    relative = tracking.StoreSettings(uri="sqlite:///outputs/mlflow.db")
    with tracking.writing(relative):
        tracking.ensure_store(relative)
    assert (tmp_path / "outputs" / "mlflow.db").is_file()
    # The README's first command (``python -m pipeline`` in a folder: the store is made there by
    # the job that logs to it): tests/faults/test_round4_sync.py, its ``tree`` fixture.

"""Parallel jobs logging to one sqlite store lose no run (the races CI once hit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from omegaconf import OmegaConf
    from pipeline import tracking
    from pipeline.config import TrackingConfig

    import time

    uri, folder, name, n = sys.argv[1:5]
    cfg = OmegaConf.structured(TrackingConfig(uri=uri, artifact_root=folder + "/artifacts"))
    tracking.client(cfg).search_experiments()  # imports and store open done before the race
    results = Path(folder) / name
    results.mkdir()
    (results / "metrics.json").write_text("{}")
    (Path(folder) / f"ready-{name}").touch()
    while len(list(Path(folder).glob("ready-*"))) < int(n):  # start together
        time.sleep(0.01)
    for i in range(6):  # every writer logs the same dataset inputs, in the same order
        record = tracking.RunRecord(
            experiment="race", run_name=f"{name}-{i}", params={"i": str(i)}, metrics={"m": float(i)},
            curves={}, tags={}, artifacts_dir=results,
            dataset={"name": "sample", "digest": f"digest-{i}", "source": folder},
        )
        tracking.log_run(cfg, record)
    """
)


@pytest.mark.slow
def test_parallel_writers_with_the_same_dataset_inputs_lose_no_run(tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()  # the store exists before the jobs, as in a sweep
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, uri, str(tmp_path), f"w{j}", "3"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for j in range(3)
    ]
    for writer in writers:
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err[-2000:]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id], max_results=100)
    assert sorted(r.info.run_name for r in runs) == sorted(f"w{j}-{i}" for j in range(3) for i in range(6))
    assert all(len(client.get_run(r.info.run_id).inputs.dataset_inputs) == 1 for r in runs)

"""End to end against a real ``mlflow server``: a job's run lands on the server (metrics,
curves, artifacts), and a dead server fails the job cleanly with the results on disk.

The jobs run in this process (tests/commands.py ``run_job_command``: the status and output
``python -m pipeline`` gives); a job's exit status 3 from a process: tests/faults/test_team_server.py."""

from __future__ import annotations

import json
import re
import time

import pytest
from commands import run_job_command

pytestmark = pytest.mark.slow  # the session's mlflow server (tests/e2e_servers.py) and a job each

RUN_NAME = "bm25 k10"  # the default config's run name
K_MAX = 20
ARTIFACTS = {"plots/k_sweep.png", "run.trec", "per_query.csv", "definition_card.md", "config.yaml"}
RUN_LINE = re.compile(r"^MLflow run (?P<run_id>[0-9a-f]{32}) \((?P<name>[^)]*)\) in experiment '(?P<exp>[^']*)' at (?P<uri>\S+)$", re.M)


def _explain(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"


def _job(tmp_path, *overrides: str, figures: bool = False):
    """``python -m pipeline OVERRIDES`` with its folder at ``tmp_path/run`` (as run_pipeline)."""
    return run_job_command(*overrides, f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}",
                           figures=figures)


def _all_artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            found |= _all_artifacts(client, run_id, info.path)
        else:
            found.add(info.path)
    return found


def test_run_lands_on_server(mlflow_server, tmp_path):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    experiment = client.get_experiment_by_name("sample")  # the session's server: other tests' runs are not ours
    before = set() if experiment is None else {r.info.run_id for r in client.search_runs([experiment.experiment_id])}
    proc = _job(tmp_path, "tracking=server", f"tracking.uri={mlflow_server.uri}", figures=True)  # plots/ logged
    assert proc.returncode == 0, _explain(proc)
    match = RUN_LINE.search(proc.stdout)
    assert match, f"no 'MLflow run ...' line\n{_explain(proc)}"
    assert match["name"] == RUN_NAME
    assert match["exp"] == "sample"  # experiment named after the dataset
    assert match["uri"] == mlflow_server.uri
    run_id = match["run_id"]

    results = tmp_path / "run" / "results"
    local = json.loads((results / "metrics.json").read_text())

    experiment = client.get_experiment_by_name("sample")
    assert experiment is not None
    found = client.search_runs([experiment.experiment_id], filter_string=f"attributes.run_name = '{RUN_NAME}'")
    assert [r.info.run_id for r in found if r.info.run_id not in before] == [run_id]  # one new run, no other

    run = client.get_run(run_id)
    assert run.info.run_name == RUN_NAME
    assert run.info.status == "FINISHED"
    assert run.data.metrics["ndcg_at_10"] == pytest.approx(local["metrics"]["ndcg_at_10"], rel=1e-12, abs=1e-15)
    assert "tracking=server" in run.data.tags.get("hydra_overrides", "")
    assert run.data.params  # the flattened config

    history = sorted(client.get_metric_history(run_id, "curve/precision"), key=lambda m: m.step)
    assert [m.step for m in history] == list(range(1, K_MAX + 1))
    assert [m.value for m in history] == pytest.approx(local["curves"]["precision"], rel=1e-12, abs=1e-15)

    listed = _all_artifacts(client, run_id)
    assert ARTIFACTS <= listed, f"missing artifacts: {sorted(ARTIFACTS - listed)}; listed: {sorted(listed)}"
    # Proxied through the server: the file it stored is the job's file.
    stored = [p for p in mlflow_server.artifacts.rglob("run.trec") if run_id in p.parts]
    assert [p.read_bytes() for p in stored] == [(results / "run.trec").read_bytes()]


def test_dead_server_keeps_results(stopped_mlflow_server, tmp_path):
    start = time.monotonic()
    proc = _job(
        tmp_path,
        "tracking=server",
        f"tracking.uri={stopped_mlflow_server.uri}",
        "tracking.http_retries=0",
        "tracking.http_timeout_s=5",
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, _explain(proc)
    results = (tmp_path / "run" / "results").resolve()
    assert f"The results are safe on disk in {results}" in proc.stderr, _explain(proc)
    assert "error:" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, _explain(proc)
    assert "MLflow run" not in proc.stdout
    for name in ("metrics.json", "per_query.csv", "run.trec"):
        assert (results / name).is_file(), f"{name} missing in {results}"
    assert json.loads((results / "metrics.json").read_text())["metrics"]["ndcg_at_10"] > 0
    assert elapsed < 120, f"failing against a dead server took {elapsed:.0f} s (retries not limited?)"

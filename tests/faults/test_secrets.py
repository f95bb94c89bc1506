"""Secrets stay secret (issue 28): ``tracking.uri=http://alice:PASSWORD@host`` reaches a real
MLflow server with basic auth, and the password is in no file, param, tag, description or
log line: not in ``record.json``, ``config.yaml``, ``mlflow_run.json``, the ``.hydra/`` copies
Hydra saves, a sweep's ``multirun.yaml`` and ``mlflow_sweep.json``, the jobs' logs, the
console, nor in any run the server holds (the jobs' and the sweep parent's params, tags,
``hydra_overrides``, descriptions) or any artifact it stores. ``pipeline.sync`` later reaches
the server with MLFLOW_TRACKING_USERNAME/PASSWORD, the credentials the records do not hold;
``pipeline.sync --tracking-uri`` and ``pipeline.compare --log --tracking-uri`` with the password
in the URI show it nowhere either (issue 33): not on the console, in report.json or the runs.

The server is ``mlflow server --app-name basic-auth`` on sqlite stores (the team setup of
docs/team-server.md, without PostgreSQL), bound to 127.0.0.1 and stopped at the end.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def _helpers():
    """The server helpers of tests/pipeline/conftest.py (tests/ is not a package)."""
    name = "_pipeline_test_server_helpers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "pipeline" / "conftest.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    """A basic-auth MLflow server with users admin and alice; yields (server, alice's password)."""
    helpers = _helpers()
    root = tmp_path_factory.mktemp("auth_server")
    admin, alice = secrets.token_urlsafe(18), "Pw-" + secrets.token_urlsafe(18)
    ini = root / "basic_auth.ini"
    ini.write_text("[mlflow]\ndefault_permission = EDIT\n"
                   f"database_uri = sqlite:///{root / 'auth.db'}\nadmin_username = admin\n"
                   f"admin_password = {admin}\n"
                   "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    port = helpers._free_port()
    uri = f"http://127.0.0.1:{port}"
    env = helpers._quiet_env()
    env.update(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_AUTH_CONFIG_PATH=str(ini),
               MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_hex(16))
    with open(root / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth", "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
             "--artifacts-destination", str(root / "artifacts"),
             "--allowed-hosts", f"127.0.0.1:{port},localhost:{port},127.0.0.1,localhost"],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    server = helpers.MlflowServer(uri=uri, port=port, root=root, proc=proc, log_path=root / "server.log")
    try:
        deadline = time.monotonic() + helpers.SERVER_START_TIMEOUT_S
        while not helpers._health(uri):
            assert proc.poll() is None and time.monotonic() < deadline, server.log_tail()
            time.sleep(0.5)
        from mlflow.server.auth.client import AuthServiceClient

        saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
        os.environ.update(MLFLOW_TRACKING_USERNAME="admin", MLFLOW_TRACKING_PASSWORD=admin)
        try:
            AuthServiceClient(uri).create_user("alice", alice)
            yield server, alice, admin
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    finally:
        server.stop()


def _env(**extra: str) -> dict[str, str]:
    env = _helpers()._quiet_env()  # no MLFLOW_* credentials inherited
    env.update(HF_HUB_OFFLINE="1", **extra)
    return env


def _files_without(secret: str, folder: Path) -> int:
    """How many files under ``folder`` were read; fails on the first that holds ``secret``."""
    checked = 0
    for path in folder.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the password is in {path}"
            checked += 1
    return checked


@pytest.mark.slow
def test_a_password_in_the_tracking_uri_is_written_nowhere(auth_server, tmp_path, capsys):
    server, password, admin = auth_server
    uri_with_password = server.uri.replace("http://", f"http://alice:{password}@")
    sweep = tmp_path / "sweep"
    job = subprocess.run(
        [sys.executable, "-m", "pipeline", "tracking=server", f"tracking.uri={uri_with_password}",
         f"paths.root={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'job'}"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert job.returncode == 0, job.stderr[-3000:]
    swept = subprocess.run(
        [sys.executable, "-m", "pipeline", "-m", "k=3,5", "verbose=true", "tracking=server",
         f"tracking.uri={uri_with_password}",
         f"paths.root={tmp_path / 'out'}", f"hydra.sweep.dir={sweep}"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert swept.returncode == 0, swept.stderr[-3000:]
    for proc in (job, swept):
        assert password not in proc.stdout + proc.stderr
    assert "alice\\:***@" in swept.stdout  # verbose: the launcher's line of each job's overrides (Hydra escapes ":")
    # every file the job and the sweep wrote, and every artifact the server stores
    assert _files_without(password, tmp_path) > 40
    assert (tmp_path / "job" / ".hydra" / "overrides.yaml").read_text().count("alice:***@") == 1
    assert (sweep / "multirun.yaml").is_file() and (sweep / "0" / ".hydra" / "hydra.yaml").is_file()
    assert _files_without(password, server.root / "artifacts") > 10

    from mlflow import MlflowClient

    os.environ.update(MLFLOW_TRACKING_USERNAME="admin", MLFLOW_TRACKING_PASSWORD=admin)
    client = MlflowClient(tracking_uri=server.uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=100)
    assert len(runs) == 4  # the job, the sweep's parent and its two jobs
    assert {r.info.status for r in runs} == {"FINISHED"}
    for run in runs:
        for key, value in {**run.data.params, **run.data.tags}.items():
            assert password not in f"{key}={value}", f"param/tag {key} of {run.info.run_name}"
    jobs = [r for r in runs if r.data.tags.get("sweep_parent") != "true"]
    assert all(r.data.tags["hydra_overrides"].replace("\\", "").count("tracking.uri=http://alice:***@") == 1
               for r in jobs)
    assert all(r.data.params["tracking.uri"] == uri_with_password.replace(password, "***") for r in jobs)

    # The records name the server without the password; sync reaches it with the environment's.
    synced = subprocess.run([sys.executable, "-m", "pipeline.sync", str(tmp_path / "job"), str(sweep)], cwd=REPO,
                            env=_env(MLFLOW_TRACKING_USERNAME="alice", MLFLOW_TRACKING_PASSWORD=password),
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert synced.returncode == 0, synced.stderr[-3000:]
    assert "sync: 0 logged, 3 already logged, 0 closed" in synced.stdout
    assert password not in synced.stdout + synced.stderr
    assert _files_without(password, tmp_path) > 40

    # Every other command that takes a tracking URI, in this process (issue 33): sync and
    # compare --log, to a new run in "compare" and to the sweep's parent run.
    from pipeline.cli.compare import main as compare
    from pipeline.cli.sync import main as sync

    capsys.readouterr()
    assert sync([str(tmp_path / "job"), "--tracking-uri", uri_with_password]) == 0
    assert compare([str(tmp_path / "job"), str(sweep / "0"), "--log", "--tracking-uri", uri_with_password,
                    "--out", str(tmp_path / "compare"), "--n-resamples", "200", "--n-permutations", "200"]) == 0
    assert compare([str(sweep), "--log", "--tracking-uri", uri_with_password, "--out", str(tmp_path / "swept"),
                    "--n-resamples", "200", "--n-permutations", "200"]) == 0
    out, err = capsys.readouterr()
    assert password not in out + err
    assert f"at {server.uri}" in out and "sync: 0 logged, 1 already logged" in out
    import json

    logged = [json.loads((tmp_path / name / "report.json").read_text())["mlflow"] for name in ("compare", "swept")]
    assert [(m["uri"], m["sweep_parent"]) for m in logged] == [(server.uri, False), (server.uri, True)]
    assert _files_without(password, tmp_path) > 50
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=100)
    assert len(runs) == 5  # the comparison's own run besides the four
    for run in runs:
        for key, value in {**run.data.params, **run.data.tags}.items():
            assert password not in f"{key}={value}", f"param/tag {key} of {run.info.run_name}"
    assert _files_without(password, server.root / "artifacts") > 15

"""Shared fixtures for the pipeline tests: a real MLflow tracking server and a runner for
``python -m pipeline`` as a subprocess (cwd = the repo root, outputs under tmp_path)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Generous: on a loaded 2-core machine `mlflow server` takes ~25 s to answer /health.
SERVER_START_TIMEOUT_S = float(os.environ.get("MLFLOW_TEST_SERVER_TIMEOUT_S", "120"))
PIPELINE_TIMEOUT_S = 300


def _quiet_env() -> dict[str, str]:
    """The environment for the server and the jobs: no telemetry, no inherited MLflow
    settings that would redirect or slow the run, one thread per numeric library."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(
        MLFLOW_DISABLE_TELEMETRY="true",
        DO_NOT_TRACK="true",
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _health(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class MlflowServer:
    """A running ``mlflow server`` in its own process group."""

    uri: str
    port: int
    root: Path  # backend db and artifacts live here
    proc: subprocess.Popen
    log_path: Path

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no server log)"

    def alive(self) -> bool:
        return self.proc.poll() is None and _health(self.uri)

    def stop(self) -> None:
        """Terminate the whole process group (uvicorn workers included), then wait until
        the port no longer answers."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
        else:  # the leader is gone; its workers may not be
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while _health(self.uri, timeout=1.0) and time.monotonic() < deadline:
            time.sleep(0.5)


def start_mlflow_server(root: Path, timeout: float = SERVER_START_TIMEOUT_S) -> MlflowServer:
    """Start ``mlflow server`` on a free 127.0.0.1 port with a sqlite backend and proxied
    artifacts under ``root``; return once ``/health`` answers."""
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable, "-m", "mlflow", "server",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--workers", "1",
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        # Proxied artifacts (MLflow 3 default --serve-artifacts): new experiments get
        # mlflow-artifacts:/ locations, the client uploads over HTTP, the server stores here.
        "--artifacts-destination", str(root / "artifacts"),
        # The default already allows localhost; being explicit also ignores a stray
        # MLFLOW_SERVER_ALLOWED_HOSTS in the environment.
        "--allowed-hosts", f"127.0.0.1:{port},localhost:{port},127.0.0.1,localhost",
    ]
    log_path = root / "server.log"
    log = open(log_path, "wb")
    env = _quiet_env()
    # No GenAI job runner (~8 huey worker processes): it slows start and stop on a small
    # machine, and tracking runs, metrics and artifacts do not need it.
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )
    log.close()
    server = MlflowServer(uri=uri, port=port, root=root, proc=proc, log_path=log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            server.stop()
            pytest.fail(f"mlflow server exited with {proc.returncode}:\n{server.log_tail()}")
        if _health(uri):
            return server
        time.sleep(0.5)
    server.stop()
    pytest.fail(f"mlflow server did not answer {uri}/health within {timeout:.0f} s:\n{server.log_tail()}")


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    """A live MLflow tracking server for the module's tests, stopped at the end."""
    server = start_mlflow_server(tmp_path_factory.mktemp("mlflow_server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stopped_mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> MlflowServer:
    """A server that really ran and was then stopped: its URI now refuses connections."""
    server = start_mlflow_server(tmp_path_factory.mktemp("mlflow_server_stopped"))
    server.stop()
    assert not _health(server.uri), f"{server.uri} still answers after stop()"
    return server


@pytest.fixture
def run_pipeline(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``run_pipeline(*overrides)`` runs ``python -m pipeline`` from the repo root with its
    Hydra job folder at ``tmp_path/run`` and its cache at ``tmp_path/cache``."""

    def run(*overrides: str, timeout: float = PIPELINE_TIMEOUT_S) -> subprocess.CompletedProcess:
        cmd = [
            sys.executable, "-m", "pipeline", *overrides,
            f"hydra.run.dir={tmp_path / 'run'}",
            f"cache_dir={tmp_path / 'cache'}",
        ]
        return subprocess.run(
            cmd, cwd=REPO, env=_quiet_env(), capture_output=True, text=True,
            stdin=subprocess.DEVNULL, timeout=timeout,
        )

    run.results_dir = tmp_path / "run" / "results"  # type: ignore[attr-defined]
    return run


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory) -> Path:
    """One migrated MLflow sqlite store; tests copy it (creating one costs about a second)."""
    from mlflow import MlflowClient

    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def store(tmp_path, migrated_store) -> str:
    """A fresh copy of the migrated store in the test's folder: ``sqlite:///...``."""
    db = tmp_path / "mlflow.db"
    shutil.copy(migrated_store, db)
    return f"sqlite:///{db}"

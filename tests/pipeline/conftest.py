"""Shared fixtures for the pipeline tests: a runner for ``python -m pipeline`` as a subprocess
(cwd = the repo root, outputs under tmp_path). The migrated MLflow store (``store``) is the
suite's, in tests/conftest.py; the MLflow servers (``mlflow_server``, ``stopped_mlflow_server``)
are the session's, in tests/e2e_servers.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable

import e2e_servers
import pytest

REPO = Path(__file__).resolve().parents[2]

# The server helpers live in tests/e2e_servers.py (the session's servers); the names below
# stay for the modules that load this file for them.
SERVER_START_TIMEOUT_S = e2e_servers.SERVER_START_TIMEOUT_S
MlflowServer = e2e_servers.MlflowServer
start_mlflow_server = e2e_servers.start_mlflow_server
_quiet_env = e2e_servers.quiet_env
_free_port = e2e_servers.free_port
_health = e2e_servers.health
PIPELINE_TIMEOUT_S = 300


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

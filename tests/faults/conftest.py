"""Fixtures for the fault tests.

The team server (PostgreSQL + ``mlflow server --app-name basic-auth``) that
test_team_server.py uses is one of the session's servers: ``postgres`` and ``team_server``
in tests/e2e_servers.py, started once per session and shared.

``store``: a fresh copy of one migrated sqlite store of the session (as tests/pipeline/conftest.py
gives its tests): creating and migrating a store costs a second or more each time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory) -> Path:
    """One sqlite store made by ``tracking.ensure_store`` (as a job makes it), migrated."""
    from pipeline import tracking

    db = tmp_path_factory.mktemp("faults-store") / "mlflow.db"
    tracking.ensure_store(tracking.StoreSettings(f"sqlite:///{db}"))
    return db


@pytest.fixture
def store(tmp_path, migrated_store) -> str:
    """A fresh copy of the migrated store in the test's folder: ``sqlite:///<tmp_path>/mlflow.db``."""
    db = tmp_path / "mlflow.db"
    shutil.copy(migrated_store, db)
    return f"sqlite:///{db}"

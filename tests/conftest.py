"""Settings for the whole suite: the layers' servers (tests/e2e_servers.py) and the order of
the files for ``-n 2 --dist loadfile``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

#: The session-scoped servers of the end-to-end layer (MLflow, PostgreSQL, Chroma, Ray,
#: Label Studio), started once per session and shared between files; docs/testing.md.
pytest_plugins = ("e2e_servers",)

#: The longest files first, longest first (measured with ``--durations=0``, 2026-12-03 13:50,
#: after the suite's in-process and forked layers): with ``-n 2 --dist loadfile`` each worker
#: starts on long files while the short ones, which both workers share, fill the last minutes,
#: instead of one worker meeting a long file last and the suite waiting for it. Ray (117 s), the
#: app's sweeps (89 s), the team server (71 s) and the tracking faults (60 s) lead; re-order when
#: a file's time changes a lot.
FIRST = ("tests/ray/test_ray.py", "tests/pipeline/test_app_sweeps.py", "tests/faults/test_team_server.py",
         "tests/faults/test_tracking_faults.py", "tests/test_processes.py", "tests/pipeline/test_browser.py",
         "tests/pipeline/test_app.py", "tests/pipeline/test_sweep_output.py", "tests/benchmarks/test_scale.py",
         "tests/golden/test_golden.py", "tests/faults/test_chunk_memory.py", "tests/faults/test_sync_store.py",
         "tests/judging/test_labelstudio.py", "tests/retrievers/test_dense.py", "tests/pipeline/test_compare.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return FIRST.index(path) if path in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the order within each file, and of the other files, is kept


def pytest_configure(config):
    # pytest-xdist orders the files by their number of tests unless told not to: that put the
    # slowest files (few tests, minutes each) last on one worker. Keep the order of FIRST.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory) -> Path:
    """One sqlite store made by ``tracking.ensure_store`` (as a job makes it), migrated once a
    session: creating and migrating a store costs a second or more each time."""
    from pipeline import tracking

    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    tracking.ensure_store(tracking.StoreSettings(f"sqlite:///{db}"))
    return db


@pytest.fixture
def store(tmp_path, migrated_store) -> str:
    """A fresh copy of the migrated store in the test's folder: ``sqlite:///<tmp_path>/mlflow.db``."""
    db = tmp_path / "mlflow.db"
    shutil.copy(migrated_store, db)
    return f"sqlite:///{db}"
from sample_embeddings import sample_cache, sample_embeddings  # noqa: F401

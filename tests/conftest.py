"""Settings for the whole suite: the layers' servers (tests/e2e_servers.py) and the order of
the files for ``-n 2 --dist loadfile``."""

from __future__ import annotations

#: The session-scoped servers of the end-to-end layer (MLflow, PostgreSQL, Chroma, Ray,
#: Label Studio), started once per session and shared between files; docs/testing.md.
pytest_plugins = ("e2e_servers",)

#: Test files that take minutes on a fresh machine (MiniLM encodes SciFact), run first: with
#: ``-n 2 --dist loadfile`` one worker starts on them at once while the other takes the rest,
#: instead of one worker meeting them last and the suite waiting for it.
#: After them the files that take a minute or more anyway (servers, Ray, many sweeps), so the
#: last minutes hold short files that both workers share.
FIRST = ("tests/retrievers/test_scifact.py", "tests/golden/test_golden.py", "tests/ray/test_ray.py",
         "tests/faults/test_team_server.py", "tests/faults/test_secrets.py", "tests/pipeline/test_app.py",
         "tests/test_processes.py", "tests/faults/test_tracking_faults.py", "tests/pipeline/test_sweep_output.py",
         "tests/faults/test_sync_store.py")


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

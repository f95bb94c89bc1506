"""Settings for the whole suite."""

from __future__ import annotations

#: Test files that take minutes on a fresh machine (MiniLM encodes SciFact), run first: with
#: ``-n 2 --dist loadfile`` one worker starts on them at once while the other takes the rest,
#: instead of one worker meeting them last and the suite waiting for it.
FIRST = ("tests/retrievers/test_scifact.py", "tests/golden/test_golden.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return FIRST.index(path) if path in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the order within each file, and of the other files, is kept

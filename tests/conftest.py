"""Settings for the whole suite: the layers' servers (tests/e2e_servers.py) and the order of
the files for ``-n 2 --dist loadfile``."""

from __future__ import annotations

import ast
import gc
import os
import shutil
import signal
from functools import cache
from pathlib import Path

import pytest
from sample_embeddings import sample_cache, sample_embeddings, shared_root  # noqa: F401  (fixtures)

# ranx, an oracle of three tests (tests/pipeline/test_metrics.py, test_stats.py,
# tests/retrievers/test_hybrid.py), runs as its Python source instead of numba's compilation of
# it: on their few dozen queries that takes milliseconds, where compiling it cost 64 s of CPU on
# a machine whose numba cache is empty (a fresh clone's first run, CI's every run) and 10 s with
# the cache warm (measured 2026-12-03). The same code gives the same numbers; its Fisher test
# draws from NumPy's generator instead of numba's, a p within the Monte Carlo error the test
# allows. Read by numba when it is first imported; NUMBA_DISABLE_JIT=0 compiles it as before.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

#: The session-scoped servers of the end-to-end layer (MLflow, PostgreSQL, Chroma, Ray,
#: Label Studio), started once per session and shared between files; docs/testing.md.
pytest_plugins = ("e2e_servers",)

#: The longest files first, longest first (measured with ``--durations=0``, 2026-12-03 23:30,
#: in the suite's fifth round): with ``-n 2 --dist loadfile`` each worker
#: starts on long files while the short ones, which both workers share, fill the last minutes,
#: instead of one worker meeting a long file last and the suite waiting for it. Ray (81 s), the
#: app's sweeps (49 s), the team server (42 s) and the plain MLflow server (27 s) lead; re-order
#: when a file's time changes a lot.
FIRST = ("tests/ray/test_ray.py", "tests/pipeline/test_app_sweeps.py", "tests/faults/test_team_server.py",
         "tests/pipeline/test_server.py", "tests/faults/test_tracking_faults.py", "tests/benchmarks/test_scale.py",
         "tests/faults/test_chunk_memory.py", "tests/pipeline/test_sweep_output.py", "tests/pipeline/test_app.py",
         "tests/judging/test_labelstudio.py", "tests/retrievers/test_scifact.py", "tests/retrievers/test_dense.py",
         "tests/pipeline/test_compare.py", "tests/golden/test_golden.py", "tests/faults/test_sync_store.py",
         "tests/retrievers/test_chroma.py", "tests/test_processes.py", "tests/pipeline/test_sweep_report.py",
         "tests/pipeline/test_guide.py", "tests/pipeline/test_sweep_ties.py", "tests/faults/test_user_code.py",
         "tests/faults/test_comparable.py", "tests/pipeline/test_stats.py", "tests/retrievers/test_adapters.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return FIRST.index(path) if path in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the order within each file, and of the other files, is kept


#: The garbage collector's first threshold in a process that runs tests (Python's default: 700).
GC_THRESHOLD_0 = 7_000


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """After collection, the objects that imports made (MLflow, SQLAlchemy, pandas, scipy and
    the tests' modules: millions) move to the collector's permanent generation, where its
    collections no longer walk them, and it collects a tenth as often. Measured 2026-12-03 on
    the quick subset: each ``-n 2`` worker spent 5-8 s of its ~45 s of CPU in the collector
    (the full suite: 15-18 s each), about 4 s after this. Nothing that a test checks depends on
    when a cycle is collected (the memory tests run in children of their own, tests/forked.py)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD_0, *gc.get_threshold()[1:])


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Everything left is frozen before pytest's last collections (five, for unraisable
    exceptions) and the interpreter's exit: on a worker that had loaded torch, Ray and MLflow
    they took 4-6 s after its last test, while the run waited for it."""
    gc.freeze()


def pytest_configure(config):
    # pytest-xdist orders the files by their number of tests unless told not to: that put the
    # slowest files (few tests, minutes each) last on one worker. Keep the order of FIRST.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # A shell without job control starts a background command (`pytest &` in a script) with
    # SIGINT ignored, and every process started from it inherits that: the Ctrl-C tests' jobs
    # then never saw their SIGINT and failed. The suite's processes take SIGINT as a terminal's
    # command would, however pytest was started.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """Under ``-m "not slow"`` (the quick subset, docs/testing.md) a test file whose
    module-level ``pytestmark`` carries ``pytest.mark.slow`` is not imported: every one of its
    tests would be deselected, and importing it (assertion rewriting, and libraries such as
    sklearn or ray that only it uses) cost each ``-n`` worker seconds for nothing. Exact by
    construction: ``pytestmark`` marks every test the module yields, and any other mark
    expression (the full run has none) collects every file as before."""
    if not (collection_path.name.startswith("test_") and collection_path.suffix == ".py"):
        return None
    if not _deselects_slow(config.getoption("markexpr", "") or ""):
        return None
    return True if _marks_every_test_slow(collection_path) else None


@cache
def _deselects_slow(markexpr: str) -> bool:
    """Whether ``-m markexpr`` deselects every test marked slow, whatever its other marks:
    ``not slow``, alone or as one term of a chain of ``and`` (no ``or``, no parentheses, which
    could select a slow test again)."""
    if "(" in markexpr or ")" in markexpr:
        return False
    words = markexpr.split()
    if "or" in words:
        return False
    terms = " ".join(words).split(" and ")
    return "not slow" in terms


def _marks_every_test_slow(path: Path) -> bool:
    """Whether the module at ``path`` assigns, at its top level, ``pytestmark`` to
    ``pytest.mark.slow`` or to a list or tuple that holds it. Read from the file's syntax tree
    (parsed only when the file names ``pytestmark``): the module itself is not imported."""
    source = path.read_bytes()
    if b"pytestmark" not in source:
        return False
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError:
        return False  # let pytest import it and report the error
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            value = node.value
            marks = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            if any(_is_pytest_mark_slow(mark) for mark in marks):
                return True
    return False


def _is_pytest_mark_slow(node: ast.expr) -> bool:
    """``pytest.mark.slow`` spelled out, as the suite writes it (docs/testing.md)."""
    return (isinstance(node, ast.Attribute) and node.attr == "slow"
            and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest")


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory) -> Path:
    """One sqlite store made by ``tracking.ensure_store`` (as a job makes it), migrated once a
    session: creating and migrating a store costs seconds each time. Under ``-n`` the workers
    share it, in the session's temporary folder (the parent of each worker's): the first to
    need it migrates it (``ensure_store`` takes the lock beside the file and renames the
    finished tables into place), the others wait for that lock or find the file whole."""
    from pipeline import tracking

    db = shared_root(tmp_path_factory) / "shared-store" / "mlflow.db"
    if not db.exists():
        tracking.ensure_store(tracking.StoreSettings(f"sqlite:///{db}"))
    return db


@pytest.fixture
def store(tmp_path, migrated_store) -> str:
    """A fresh copy of the migrated store in the test's folder: ``sqlite:///<tmp_path>/mlflow.db``."""
    db = tmp_path / "mlflow.db"
    shutil.copy(migrated_store, db)
    return f"sqlite:///{db}"

"""Run a piece of a test in a child forked from the test's process: for checks that change
something for a whole process (a file-size limit that simulates a full disk, a signal's
handler) but not what a new interpreter prints before ``main`` (those stay ``subprocess``).

A fork costs milliseconds where ``python -c`` pays the imports again (MLflow alone ~2 s). The
child starts as a new process would for what the checks read: its own standard output and
error (pipes the parent reads), the root logger without pytest's handlers, no MLflow store or
database connection of the parent's (dropped without closing them: they are the parent's), and
at its end the exit handlers it registered (not the parent's), then ``os._exit``.
"""

from __future__ import annotations

import atexit
import gc
import io
import logging
import os
import signal
import sys
import threading
import time
import traceback
from typing import Callable, Mapping

from commands import Result, forget_stores, process_status

TIMEOUT_S = 300


class Forked:
    """A child forked to run ``task()``; ``wait()`` gives its status and output."""

    def __init__(self, task: Callable[[], int | None]) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            os.close(out_r)
            os.close(err_r)
            _child(task, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        self.pid = pid
        self._fds = (out_r, err_r)
        self._chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        self._readers = [threading.Thread(target=_drain, args=(fd, self._chunks[fd]), daemon=True)
                         for fd in self._fds]
        for reader in self._readers:
            reader.start()

        self._status: int | None = None

    def poll(self) -> int | None:
        """Its exit status once it has ended (then reaped), None while it runs."""
        if self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._status = os.waitstatus_to_exitcode(status)
        return self._status

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def wait(self, timeout: float = TIMEOUT_S) -> Result:
        """Its status (-9 when killed after ``timeout``), stdout and stderr."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                self._status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
                break
            time.sleep(0.01)
        for reader in self._readers:
            reader.join(timeout=30)
        out, err = (b"".join(self._chunks[fd]).decode(errors="replace") for fd in self._fds)
        return Result(self._status, out, err)


def pipeline_child(*args: str, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                   prepare: Callable[[], None] | None = None) -> Forked:
    """``python -m pipeline ARGS`` in a child forked from this process, started: ``runpy`` runs
    ``pipeline/__main__.py`` there as the interpreter would (its console set-up, its handlers of
    SIGINT and SIGTERM, Hydra's own exit), with ``env`` as its environment and ``cwd`` as its
    folder; ``prepare()`` runs first, in the child (a patch for that process only). For checks on
    what a sweep does when it is stopped or killed (a real process, real
    signals); what a new interpreter prints before ``main`` needs ``subprocess``."""
    import pipeline.__main__  # noqa: F401 - its imports done before the fork

    def task() -> int | None:
        import runpy

        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        if prepare is not None:
            prepare()
        sys.argv = ["pipeline", *args]
        sys.modules.pop("pipeline.__main__", None)  # run as __main__, as -m does (runpy warns otherwise)
        runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
        return 0

    return Forked(task)


def import_what_a_sweep_imports() -> None:
    """Import here, once, what a sweep imports on its way (MLflow with its sqlite and REST
    stores, pyplot, pandas, scipy.stats, the summary's modules, the BM25 retriever, Hydra's
    plugin scan), so that the sweeps forked from this process inherit them instead of each
    paying them again (~2-4 s of CPU a child; a launcher's workers that are new interpreters,
    loky's, pay their own). Only imports: no store, engine, client or thread is made (forking
    after one is what this module guards against). The exit handler MLflow registers at import
    (``mlflow.tracking.fluent._safe_end_run``: fluent runs, which the pipeline never starts) is
    the parent's, not the child's (:func:`_child` clears the parent's)."""
    import matplotlib.pyplot  # noqa: F401
    import mlflow.store.tracking.rest_store  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    import mlflow.tracking  # noqa: F401
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401
    from hydra.core.plugins import Plugins

    import pipeline.comparison.output  # noqa: F401
    import pipeline.figures  # noqa: F401
    import pipeline.sweep.summary  # noqa: F401
    import retrievers.bm25  # noqa: F401

    Plugins.instance()  # the scan of hydra_plugins (every launcher's and sweeper's module)


def forked(task: Callable[[], int | None], timeout: float = TIMEOUT_S) -> Result:
    """``task()`` in a forked child: its exit status (what it returns, ``SystemExit``'s code,
    or 1 and a traceback on stderr when it raised) and what it printed."""
    return Forked(task).wait(timeout)


def _drain(fd: int, into: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while chunk := pipe.read(65536):
            into.append(chunk)


def _child(task: Callable[[], int | None], out_w: int, err_w: int) -> None:
    # The parent's objects are never collected here: a cycle of a library's whose finalizer
    # needs the parent's threads (chromadb's Rust client, after an in-process Chroma test)
    # would wait forever for a thread a fork does not copy.
    gc.freeze()
    status = 1
    atexit._clear()  # the parent's exit handlers are the parent's; the child's own run at its end
    try:
        null = os.open(os.devnull, os.O_RDONLY)  # nothing to read, as with stdin=DEVNULL
        os.dup2(null, 0)
        os.close(null)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.close(out_w)
        os.close(err_w)
        sys.stdin = io.TextIOWrapper(os.fdopen(0, "rb", closefd=False))
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), line_buffering=True)
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
        logging.disable(logging.NOTSET)
        _drop_parent_stores()
        status = process_status(task)
    except BaseException:  # noqa: BLE001 - what the interpreter would print, and status 1
        traceback.print_exc(file=sys.stderr)
        status = 1
    finally:
        try:
            # What the interpreter does at exit, in its order (Py_FinalizeEx): the threading
            # shutdown (joblib's loky executor stops its workers there: left alive, they would
            # hold the output pipes open), then the exit handlers the child registered.
            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _drop_parent_stores() -> None:
    """Forget the MLflow stores, engines and clients cached before the fork, without closing
    their connections (the parent still uses them)."""
    forget_stores(close=False)

"""The boundary around a user's retriever code: every call runs in a daemon thread, and the
job's main thread only waits. Also here: importing and building the user's code
(:func:`load_callable`, :func:`build_from_factory`) and the one line that names a failure
(:func:`describe`).

Why threads the job never joins: a call that never returns cannot be stopped in Python, and
a pool that waits for its threads at exit (``ThreadPoolExecutor``, ``shutdown(wait=True)``)
turns one stuck call into a job that never ends, deaf to Ctrl-C. Here

- any exception a call raises, ``BaseException`` included (``SystemExit`` from ``sys.exit``,
  a ``KeyboardInterrupt`` the user's code raises itself), is that call's failure: signals
  are only ever delivered to the main thread, so nothing raised in a worker is the user
  pressing Ctrl-C;
- ``os._exit``, which no ``except`` can catch, is one too: while a thread runs the user's
  code (:func:`user_code`), ``os._exit`` raises :class:`ExitCalled` in it instead of ending
  the process (which had ended the job, or a whole sweep, with the status the code chose,
  0 included, and not a word). Anywhere else it ends the process as always: the job's own
  threads, a child the user's code forks (multiprocessing's children end with it), a thread
  the user's code starts;
- a call running longer than ``timeout_s`` fails with :class:`CallTimeout`; its thread is
  abandoned (it ends whenever the call returns, its result unread) and a fresh worker takes
  its place, so ``workers`` calls still run at once;
- the main thread waits on a queue with a timeout, so SIGINT interrupts it at once; when the
  consumer stops (Ctrl-C, an ``on_error=fail`` failure) no further call starts, and the
  stuck ones cannot keep the process alive: the threads are daemons.
"""

from __future__ import annotations

import importlib
import inspect
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pipeline.errors import InputError, Interrupted

#: How long the main thread waits on the results queue at a time (s) when no deadline is nearer.
POLL_S = 0.5


class BadResult(ValueError):
    """A result the adapter cannot use (not an id and a score, a missing key, a NaN score...)."""


class CallTimeout(Exception):
    """A call of the user's code ran past ``retriever.timeout_s``."""


class ExitCalled(BaseException):
    """The user's code called ``os._exit(status)`` (module docstring). A ``BaseException``, as
    ``SystemExit`` is, so that the code's own ``except Exception`` does not swallow it."""

    def __init__(self, status: Any) -> None:
        super().__init__(status)
        self.status = status


#: This thread runs the user's code in the process whose id ``pid`` holds (:func:`user_code`).
_inside = threading.local()
_install_lock = threading.Lock()
_real_exit: Callable[[int], Any] = os._exit


def _guarded_exit(status: int) -> None:
    """``os._exit`` once :func:`user_code` has first run: :class:`ExitCalled` in a thread that
    runs the user's code, in the process that runs it; the real ``os._exit`` anywhere else."""
    if getattr(_inside, "pid", None) == os.getpid():
        raise ExitCalled(status)
    _real_exit(status)


@contextmanager
def user_code() -> Iterator[None]:
    """Marks this thread as running the user's code while the block runs: ``os._exit`` raises
    :class:`ExitCalled` here. The guard, once put in ``os``, stays (it hands every other call to
    the real ``os._exit``): a call abandoned after its timeout may still run."""
    global _real_exit
    with _install_lock:
        if os._exit is not _guarded_exit:
            _real_exit, os._exit = os._exit, _guarded_exit
    outer = getattr(_inside, "pid", None)
    _inside.pid = os.getpid()
    try:
        yield
    finally:
        _inside.pid = outer


def run_calls(call: Callable[[int], Any], n: int, workers: int, timeout_s: float | None,
              name: str = "retriever") -> Iterator[tuple[Any, BaseException | None]]:
    """``call(0) .. call(n - 1)`` on ``workers`` daemon threads; yields ``(result, None)`` or
    ``(None, error)`` for each, in order. ``timeout_s`` (None or <= 0: no limit) bounds each
    call (module docstring). Closing the generator early stops the calls not yet started."""
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(n):
        todo.put(i)
    done: queue.SimpleQueue[tuple[int, Any, BaseException | None]] = queue.SimpleQueue()
    lock = threading.Lock()
    running: dict[int, float] = {}  # call -> when it started (time.monotonic)
    abandoned: set[int] = set()
    stop = threading.Event()
    limit = timeout_s if timeout_s is not None and timeout_s > 0 else None

    def worker() -> None:
        while not stop.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            with lock:
                running[i] = time.monotonic()
            try:
                with user_code():
                    outcome: tuple[Any, BaseException | None] = (call(i), None)
            except BaseException as err:  # noqa: BLE001  (the user's code: any exception is the call's failure)
                outcome = (None, err)
            with lock:
                running.pop(i, None)
                if i in abandoned:  # timed out meanwhile: a fresh worker has taken this one's place
                    return
            done.put((i, *outcome))

    started = 0

    def spawn() -> None:
        nonlocal started
        started += 1
        threading.Thread(target=worker, name=f"{name}-call-{started}", daemon=True).start()

    for _ in range(min(max(workers, 1), n)):
        spawn()
    ready: dict[int, tuple[Any, BaseException | None]] = {}
    try:
        for i in range(n):
            while i not in ready:
                try:
                    j, result, err = done.get(timeout=_next_wait(running, lock, limit))
                    ready[j] = (result, err)
                except queue.Empty:
                    pass
                if limit is not None:
                    for j in _expire(running, abandoned, lock, limit):
                        ready[j] = (None, CallTimeout(f"no answer after {limit:g} s (retriever.timeout_s)"))
                        spawn()
            yield ready.pop(i)
    finally:
        stop.set()


def _next_wait(running: dict[int, float], lock: threading.Lock, limit: float | None) -> float:
    """How long to wait for the next result: ``POLL_S``, or less when a running call's time
    runs out sooner (then just past it)."""
    if limit is None:
        return POLL_S
    with lock:
        first = min(running.values(), default=None)
    return POLL_S if first is None else min(POLL_S, max(first + limit - time.monotonic(), 0.0) + 0.01)


def _expire(running: dict[int, float], abandoned: set[int], lock: threading.Lock, limit: float) -> list[int]:
    """The running calls past ``limit`` seconds, now abandoned."""
    now = time.monotonic()
    with lock:
        late = [i for i, t0 in running.items() if now - t0 > limit]
        for i in late:
            running.pop(i)
            abandoned.add(i)
    return late


def describe(err: BaseException) -> str:
    """One line for a failed call of the user's code."""
    if isinstance(err, BadResult):
        return f"bad result: {err}"
    if isinstance(err, CallTimeout):
        return f"timed out: {err}; null or 0 = no limit"
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r})"
    if isinstance(err, ExitCalled):
        return f"it called os._exit({err.status!r})"
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}".strip().rstrip(":")


def user_code_failed(err: BaseException) -> bool:
    """Whether ``err``, caught around the user's code in the main thread (an import, a
    factory), is that code's failure: anything but a signal (Ctrl-C, the sweep's SIGTERM),
    which must end the job as it would anywhere else."""
    return not isinstance(err, (KeyboardInterrupt, Interrupted))


def load_callable(spec: str, key: str) -> Callable[..., Any]:
    """The function named by ``module:function`` (``module:Class.method`` too); InputError
    (one line naming the config key) when it cannot be imported or is not callable."""
    if not isinstance(spec, str) or ":" not in spec:
        raise InputError(f"{key}={spec!r}: expected module:function, e.g. {key}=my_package.search:search")
    module_name, _, attr = spec.partition(":")
    try:
        with user_code():
            module = importlib.import_module(module_name)
    except BaseException as err:  # ImportError, or the user's module failing (or exiting) at import time
        if not user_code_failed(err):
            raise
        raise InputError(f"{key}={spec}: cannot import {module_name!r}: {describe(err)}") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InputError(f"{key}={spec}: module {module_name!r} has no {attr!r}")
    if not callable(target):
        raise InputError(f"{key}={spec}: {attr!r} is a {type(target).__name__}, not a function")
    return target


def build_from_factory(spec: str, k: int, options: Mapping[str, Any], kind: Any, kind_name: str) -> Any:
    """``factory(**options)`` of the ``module:function`` ``spec`` (``retriever.factory``), with
    ``k=k`` added when the factory has a parameter named ``k`` (the results wanted per query);
    InputError unless it returns an instance of ``kind``."""
    factory = load_callable(spec, "retriever.factory")
    kwargs = dict(options)
    try:
        takes_k = "k" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        takes_k = False
    if takes_k:
        kwargs.setdefault("k", k)
    try:
        with user_code():
            built = factory(**kwargs)
    except BaseException as err:  # the user's factory: any exception, sys.exit included
        if not user_code_failed(err):
            raise
        raise InputError(f"retriever.factory={spec} failed: {describe(err)}") from None
    if not isinstance(built, kind):
        raise InputError(f"retriever.factory={spec} returned a {type(built).__name__}, not a {kind_name}")
    return built

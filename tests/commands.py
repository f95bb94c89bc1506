"""Run a command (``python -m pipeline.cli NAME ARGS``) in this process, as the tests' one way to
call a command when what they check is the command's behaviour, not a process's.

``run_command("score", qrels, run, "--json")`` calls the command's ``main(argv)`` and returns
its exit status and what it printed, as a process would have: ``SystemExit`` (argparse's
errors, ``--help``) becomes the status, an uncaught exception becomes a traceback on stderr
and status 1 (what the interpreter does), standard output and error are captured apart, and
the logging a command sets up (``logging.basicConfig`` on a root logger without handlers, as
in a fresh process) writes to the captured stderr.

What a command may change in the process is put back afterwards: the root logger's handlers
and level and the levels of the loggers that existed before, ``logging.disable``, the warnings
filters, ``os.environ``, the working folder, ``sys.argv``, ``sys.stdin`` and the handlers of
SIGINT, SIGTERM and SIGPIPE. MLflow's cached stores and database engines (and the pipeline's
cached clients) are dropped before and after, as a new process would start without them and
an ended one leaves none: a store moved or deleted between two commands is not reached through
a connection opened before.

``job_in_process(*overrides)`` is ``python -m pipeline OVERRIDES`` in this process
(``pipeline.api.run_job``: the same folder, record and files), without the figures unless asked
(drawing them is most of a small job's time; tests/pipeline/test_plots.py and the golden test
check them): for tests that check a job's outputs or its InputError, not a process;
``run_job_command(*overrides)`` gives its status and output as ``python -m pipeline`` would.

``run_pipeline_command(*args)`` is ``python -m pipeline ARGS`` in this process, sweeps (``-m``)
included: it calls ``pipeline.__main__.entry`` (the module's main block calls it too: one code
path for the console set-up, ``-v``, the command-line checks, Hydra, Ctrl-C and a stopped
sweep) and returns the status and the two streams as the process would give them. Hydra's
global state is cleared before and after, as are the pipeline's per-process sweep state (the
active sweep, its progress, the brief console's warnings already shown), and what a sweep
sets up goes away with the rest: Hydra's logging config (its console handlers on the captured
streams, the job's ``pipeline.log`` file handler) is closed and the root logger put back, and
the sweep's SIGINT/SIGTERM handlers are restored. It is for checks of the pipeline's
behaviour; launchers that start processes (joblib, submitit) run there as they would.

Checks that need a real process (the exit status of ``python -m pipeline``, signals, a closed
pipe, what the interpreter prints before ``main`` runs) keep ``subprocess``: they are named
as process-level checks where they are.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import signal
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

#: The signals whose handlers a command may set (the tracking code's and the progress bar's).
_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGPIPE", None)) if s is not None)


@dataclass
class Result:
    """A command's exit status and what it printed (``returncode`` as subprocess names it)."""

    status: int
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int:
        return self.status


def run_command(name: str, *argv: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None,
                env: Mapping[str, str] | None = None, stdin: str | bytes | None = None) -> Result:
    """``python -m pipeline.cli NAME *argv`` in this process: its status, stdout and stderr.

    ``cwd``: the working folder during the command; ``env``: the environment it sees instead of
    this process's (put back afterwards); ``stdin``: what it reads from standard input."""
    args = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with _process_state(name, args, cwd, env, stdin), _fresh_mlflow():
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _fresh_root_logger():
            status = _call(name, args)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
    return Result(status, out.getvalue(), err.getvalue())


def job_in_process(*overrides: str, figures: bool = False) -> Any:
    """``pipeline.api.run_job(overrides)``; ``figures=False``: ``results/plots`` is not drawn.
    What the job changes in the process (the environment: tracking sets MLflow's HTTP settings;
    signal handlers, warnings filters) is put back afterwards."""
    from pipeline.api import run_job

    import pipeline.figures

    draw = pipeline.figures.save_run_figures
    if not figures:
        pipeline.figures.save_run_figures = lambda *args, **kwargs: None
    try:
        with _process_state("__main__", list(overrides), None, None, None), _fresh_mlflow():
            return run_job(list(overrides))
    finally:
        pipeline.figures.save_run_figures = draw


def run_job_command(*overrides: str, figures: bool = False) -> Result:
    """``python -m pipeline OVERRIDES`` (one job) in this process, as its status and output:
    0 and what the job printed and logged to the console; for a user mistake or a tracking
    failure (an error with an ``exit_code``: ``InputError``, ``TrackingFailed``) the one line
    ``pipeline.job.run_job`` prints and that status; ``sys.exit(N)``: N; for another error a
    traceback and 1."""
    out, err = io.StringIO(), io.StringIO()
    with _process_state("__main__", [str(o) for o in overrides], None, None, None):
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _fresh_root_logger():
            try:
                job_in_process(*overrides, figures=figures)
                status = 0
            except SystemExit as stop:  # a check that ends the process (console.make_output_dir)
                status = 0 if stop.code is None else int(stop.code)
            except Exception as exc:  # noqa: BLE001 - what the command prints for it
                code = getattr(exc, "exit_code", None)
                if isinstance(code, int):
                    print(str(exc), file=sys.stderr)
                    status = code
                else:
                    traceback.print_exc(file=sys.stderr)
                    status = 1
    return Result(status, out.getvalue(), err.getvalue())


def run_pipeline_command(*args: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None,
                         env: Mapping[str, str] | None = None) -> Result:
    """``python -m pipeline ARGS`` (one job, or a sweep with ``-m``) in this process: its status,
    stdout and stderr. ``SystemExit`` is the status (Hydra's errors, a sweep with a failed job,
    a bad command line), an exception that escapes is a traceback and 1, as the interpreter
    would print it (under a tracer such as coverage, or a debugger, Hydra re-raises an error it
    would print briefly: the full traceback, the same status 1). ``cwd``/``env``: as for
    :func:`run_command`."""
    import pipeline.__main__ as app

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with _process_state("__main__", argv, cwd, env, None), _fresh_mlflow(), _fresh_pipeline_state():
        _forget_hydra()
        _process_warnings()
        try:
            with _quiet_hub_bars(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                    _fresh_root_logger():
                status = process_status(lambda: app.entry(argv))
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
        finally:
            _forget_hydra()
    return Result(status, out.getvalue(), err.getvalue())


def _forget_hydra() -> None:
    """Hydra's process-wide state as a new process has it: not initialized, and no
    ``HydraConfig`` (``--help``, ``--cfg`` and ``--info`` set it and never unset it; a later
    in-process job would read that half-made config as its own)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None


@contextlib.contextmanager
def _quiet_hub_bars() -> Iterator[None]:
    """Hugging Face's progress bars ("Loading weights") off during the block while standard
    error is not a terminal, as ``pipeline.console.setup`` has them in a new process: there the
    environment variable it sets is read when huggingface_hub and transformers are imported
    (transformers keeps its own copy of the setting), here they were imported before."""
    hub = sys.modules.get("huggingface_hub.utils")
    hf_logging = sys.modules.get("transformers.utils.logging")
    undo = []
    if not sys.stderr.isatty():
        if hub is not None and not hub.are_progress_bars_disabled():
            hub.disable_progress_bars()
            undo.append(hub.enable_progress_bars)
        if hf_logging is not None and hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()
            undo.append(hf_logging.enable_progress_bar)
    try:
        yield
    finally:
        for on in reversed(undo):
            on()


def _process_warnings() -> None:
    """Python's warnings as a new interpreter shows them: its default filters (deprecations
    shown for ``__main__`` only) and each warning written to ``sys.stderr``, not recorded by
    pytest (``_process_state`` puts the filters and ``showwarning`` back)."""
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.simplefilter("ignore", category)
    warnings.filterwarnings("default", category=DeprecationWarning, module=r"__main__\Z")

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


def process_status(entry: Any) -> int:
    """``entry()``'s status as the process's: its return value or ``SystemExit``'s code; an
    uncaught exception's traceback on stderr and 1."""
    try:
        code = entry()
    except SystemExit as stop:
        code = stop.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except Exception:  # noqa: BLE001 - the traceback a process would print, and status 1
        traceback.print_exc(file=sys.stderr)
        code = 1
    return 0 if code is None else int(code)


@contextlib.contextmanager
def _fresh_pipeline_state() -> Iterator[None]:
    """The pipeline's per-process state of a sweep as a new process has it during the block
    (no active sweep, no progress, the console not brief, no warning shown yet), and as it was
    afterwards."""
    from pipeline import console
    from pipeline.sweep import callback

    state = [console._BRIEF, console._SHOWN, callback._ACTIVE, callback._PROGRESS]
    saved = [dict(console._BRIEF), set(console._SHOWN), dict(callback._ACTIVE), dict(callback._PROGRESS)]
    console._BRIEF["on"] = False
    for held in state[1:]:
        held.clear()
    try:
        yield
    finally:
        for held, value in zip(state, saved):
            held.clear()
            held.update(value)


def _call(name: str, args: list[str]) -> int:
    """The command's status; what the interpreter would print for an uncaught exception."""
    return process_status(lambda: importlib.import_module(f"pipeline.cli.{name}").main(list(args)))


def forget_stores(close: bool = True) -> None:
    """Drop the MLflow stores, database engines and clients this process has cached (the
    pipeline's ``tracking.store._client``, MLflow's store registry and SQLAlchemy engines),
    closing their connections; ``close=False``: without closing them (a forked child's, which
    are its parent's, tests/forked.py). Nothing to do when neither was imported."""
    store = sys.modules.get("pipeline.tracking.store")
    if store is not None:
        store._client.cache_clear()
    registry = sys.modules.get("mlflow.tracking._tracking_service.utils")
    if registry is not None:
        registry._tracking_store_registry._get_store_with_resolved_uri.cache_clear()
    sqlalchemy_store = sys.modules.get("mlflow.store.tracking.sqlalchemy_store")
    if sqlalchemy_store is not None:
        engines = sqlalchemy_store.SqlAlchemyStore._engine_map
        for engine in list(engines.values()):
            engine.dispose(close=close)
        engines.clear()


@contextlib.contextmanager
def _fresh_mlflow() -> Iterator[None]:
    """No MLflow store cached when the block starts, and none left cached when it ends."""
    forget_stores()
    try:
        yield
    finally:
        forget_stores()


@contextlib.contextmanager
def _fresh_root_logger() -> Iterator[None]:
    """The root logger as a new process has it (no handlers, level WARNING) during the block,
    so that the command's ``logging.basicConfig`` takes effect and writes to the captured stderr;
    the logging of before afterwards (pytest's capture handlers included)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    loggers = {name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
               for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    disabled = logging.root.manager.disable
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            if handler not in handlers:
                handler.close()
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        for name, (lvl, hs, propagate, was_disabled) in loggers.items():
            lg = logging.getLogger(name)
            lg.setLevel(lvl)
            lg.handlers[:] = hs
            lg.propagate, lg.disabled = propagate, was_disabled
        logging.disable(disabled)


@contextlib.contextmanager
def _process_state(name: str, args: list[str], cwd: str | os.PathLike[str] | None, env: Mapping[str, str] | None,
                   stdin: str | bytes | None) -> Iterator[None]:
    """Environment, folder, argv, stdin, warnings filters and signal handlers, put back after."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_argv, saved_stdin = sys.argv, sys.stdin
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    try:
        with warnings.catch_warnings():
            if env is not None:
                os.environ.clear()
                os.environ.update(env)
            if cwd is not None:
                os.chdir(Path(cwd))
            sys.argv = [f"pipeline.{name}", *args]
            if stdin is not None:
                data = stdin.encode() if isinstance(stdin, str) else stdin
                sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
            yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv, sys.stdin = saved_argv, saved_stdin
        for s, handler in handlers.items():
            if handler is not None:
                signal.signal(s, handler)

"""What the command line shows: quiet when it is not a terminal, one line per failure.

- ``setup()`` runs first in ``python -m pipeline``, before torch, transformers or
  huggingface_hub are imported: when standard error is not a terminal it turns their progress
  bars off (``HF_HUB_DISABLE_PROGRESS_BARS``, ``TQDM_DISABLE``), so logs and CI output hold
  no carriage-return animations. On a terminal the bars stay (encoding a corpus shows one).
- ``ConsoleCallback`` (a Hydra callback, ``conf/config.yaml``) sends Optuna's messages
  through Hydra's logging instead of Optuna's own colour handler, which writes ANSI escape
  codes even into files.
- ``tolerate_no_completed_trial`` makes a study whose every trial failed end in one line
  (and the sweep's usual end) instead of a traceback from ``study.best_trial``.
- ``QuietSweeper`` (a logging filter, ``conf/hydra/hydra_logging/pipeline.yaml``) drops the
  Optuna sweeper's two lines about a trial that failed as a ``JobFailed``: the job has
  already said why in one line.
- ``OutputDirCheck`` (a Hydra callback) makes the output folder before Hydra does: Hydra
  makes ``hydra.run.dir`` / ``hydra.sweep.dir`` inside its own error handling, so a folder that
  cannot be created (a path under a file, a read-only mount) would end in its traceback and
  exit 1; here it is one line naming the folder and the setting to change, and exit 2.
- ``to_log_file`` writes a line (or a traceback) to the job's log file only, so that the
  log of a failed job holds its error while the console shows it once.

The Hydra logging configs (``conf/hydra/job_logging/pipeline.yaml``,
``conf/hydra/hydra_logging/pipeline.yaml``) also raise the level of libraries that chat at
INFO (alembic's ``setup plugin ...`` when the MLflow store is created, sentence-transformers'
model loading).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

#: Marks a failed sweep job's objective (see ``JobFailed``) in log records.
FAILED_MARK = "[job failed]"


def interactive(stream: Any = None) -> bool:
    """Whether ``stream`` (default: standard error, where progress bars go) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def setup() -> None:
    """Progress bars off unless standard error is a terminal; colour off unless stdout is.
    Explicit settings in the environment win."""
    if not interactive(sys.stderr):
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # huggingface_hub, transformers
        os.environ.setdefault("TQDM_DISABLE", "1")  # any other tqdm bar left at its default
    if not interactive(sys.stdout):
        os.environ.setdefault("NO_COLOR", "1")


def quiet_optuna() -> None:
    """Optuna's messages through the root logger (Hydra's format, the log file), not through
    its colorlog handler."""
    try:
        import optuna
    except ImportError:
        return
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()


try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - hydra is a dependency
    Callback = object  # type: ignore[misc,assignment]


def tolerate_no_completed_trial() -> None:
    """When every trial of an Optuna sweep failed, the sweeper's ``study.best_trial`` raises
    ``ValueError: No trials are completed yet`` and Hydra prints its traceback, skipping the
    sweep's end. Wrapped here: one line instead, and the sweep ends as usual (its summary
    lists the failed jobs and it exits non-zero)."""
    try:
        from hydra_plugins.hydra_optuna_sweeper import _impl
    except ImportError:
        return
    sweep = getattr(getattr(_impl, "OptunaSweeperImpl", None), "sweep", None)
    if sweep is None or getattr(sweep, "pipeline_wrapped", False):
        return

    def wrapped(self: Any, arguments: list[str]) -> Any:
        try:
            return sweep(self, arguments)
        except ValueError as err:
            if "No trials are completed" not in str(err):
                raise
            print("error: no trial of the Optuna study completed (each one failed, see above)", file=sys.stderr)
            return None

    wrapped.pipeline_wrapped = True  # type: ignore[attr-defined]
    _impl.OptunaSweeperImpl.sweep = wrapped


class ConsoleCallback(Callback):  # type: ignore[misc]
    """Hydra callback: route Optuna's logging before the sweeper creates its study, and let
    a study whose every trial failed end in one line."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        sweeper = str(config.hydra.sweeper.get("_target_", "")) if "hydra" in config else ""
        if "optuna" in sweeper.lower():
            quiet_optuna()
            tolerate_no_completed_trial()


class JobFailed(Exception):
    """Raised by ``FailedObjective.__float__``: an Optuna sweeper that reads the objective
    of a failed job marks the trial FAIL (the study goes on) instead of being told NaN, which
    Optuna refuses with two chained tracebacks."""


class FailedObjective:
    """The objective a failed sweep job returns to a sweeper. ``float()`` of it raises
    ``JobFailed``; the basic sweeper ignores it (the sweep's summary reads the job's folder)."""

    def __init__(self, message: str):
        self.message = message

    def __float__(self) -> float:
        raise JobFailed(f"{FAILED_MARK} {self.message}")

    def __repr__(self) -> str:
        return f"FailedObjective({self.message!r})"


class QuietSweeper(logging.Filter):
    """Drops the Optuna sweeper's ``Failed experiment: ...`` and ``Failed [...] times out of
    N`` lines about a ``JobFailed``: the job printed its one line already."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("hydra_plugins.hydra_optuna_sweeper"):
            return True
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted is not ours to judge
            return True
        return FAILED_MARK not in message and "JobFailed(" not in message


def log_files() -> list[logging.FileHandler]:
    """The file handlers of the root logger (a Hydra job's ``<job dir>/pipeline.log``)."""
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]


def to_log_file(message: str, exc: BaseException | None = None, name: str = "pipeline",
                level: int = logging.ERROR) -> None:
    """Write ``message`` (and ``exc``'s traceback) at ``level`` to the job's log file(s) only
    (what the console shows already, in its own words)."""
    logger = logging.getLogger(name)
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logger.makeRecord(name, level, __file__, 0, "%s", (message,), exc_info)
    for handler in log_files():
        try:
            handler.handle(record)
        except Exception:  # a full disk must not hide the error itself
            pass


def make_output_dir(folder: str, setting: str) -> None:
    """Create ``folder`` (and its parents); on failure print one line and exit 2."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        print(f"error: cannot create the output folder {folder} ({setting}): {reason}; "
              "choose a writable paths.root=DIR (or set hydra.run.dir / hydra.sweep.dir)", file=sys.stderr)
        sys.exit(2)


class OutputDirCheck(Callback):  # type: ignore[misc]
    """Hydra callback: make the run or sweep folder first, one line and exit 2 if it cannot be made."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        make_output_dir(str(config.hydra.run.dir), "hydra.run.dir")

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        make_output_dir(str(config.hydra.sweep.dir), "hydra.sweep.dir")

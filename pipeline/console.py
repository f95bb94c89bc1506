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
  cannot be created or written (a path under a file, a read-only mount, a ``.hydra`` file)
  would end in its traceback and exit 1; here it is one line naming the folder and the
  setting to change, and exit 2. It also hides credentials in the config copies Hydra saves.
- ``Redacting`` (a logging filter on the Hydra logging configs) hides credentials in log lines.
- ``to_log_file`` writes a line (or a traceback) to the job's log file only, so that the
  log of a failed job holds its error while the console shows it once.
- A sweep prints one line per job, then its summary (``brief``): ``BriefJobLog`` (on the
  job's console handler) keeps a sweep job's INFO lines (stage times) in its ``pipeline.log``
  and shows each distinct warning once per process; ``BriefLauncher`` (on Hydra's console
  handler) drops the launcher's own line per job (``#3 : k=5 ...``) and Optuna's per-trial
  line. ``verbose=true``, or ``-v`` on the command line (``verbose_argv``), brings back every
  job's full block.

The Hydra logging configs (``conf/hydra/job_logging/pipeline.yaml``,
``conf/hydra/hydra_logging/pipeline.yaml``) also raise the level of libraries that chat at
INFO (alembic's ``setup plugin ...`` when the MLflow store is created, sentence-transformers'
model loading).
"""

from __future__ import annotations

import logging
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipeline.io import results as res
# A failed sweep job's objective: pipeline.io.results's (the Ray launcher, below the app tier, makes one too).
from pipeline.io.results import FAILED_MARK, FailedObjective, JobFailed  # noqa: F401  (console.FailedObjective)
from pipeline.tracking.credentials import redact
from pipeline.io.progress import quiet_without_terminal



#: Whether this process prints a sweep briefly (``brief``), and the warnings it has shown.
_BRIEF: dict[str, bool] = {"on": False}
_SHOWN: set[str] = set()
#: The command-line flags that mean ``verbose=true``.
VERBOSE_FLAGS = ("-v", "--verbose")


def brief(on: bool) -> None:
    """Print a sweep briefly (True: one line per job) or in full, from here on in this process."""
    _BRIEF["on"] = bool(on)


def verbose_argv(argv: list[str]) -> list[str]:
    """``argv`` with ``-v`` / ``--verbose`` as the override ``verbose=true`` (Hydra owns the
    command line and has no such flag)."""
    return ["verbose=true" if arg in VERBOSE_FLAGS else arg for arg in argv]


class BriefJobLog(logging.Filter):
    """On a job's console handler (``conf/hydra/job_logging``): in a brief sweep, records below
    WARNING stay in the job's log file, and a warning is shown the first time this process
    sees its text (the same data warning from 18 jobs is one line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _BRIEF["on"]:
            return True
        if record.levelno < logging.WARNING:
            return False
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted is shown as it is
            return True
        if message in _SHOWN:
            return False
        _SHOWN.add(message)
        return True


class BriefLauncher(logging.Filter):
    """On Hydra's console handler (``conf/hydra/hydra_logging``): in a brief sweep, the
    launcher's line per job (``#3 : retriever=dense k=5``; the job prints its own line, with
    its result) and Optuna's ``Trial 3 finished with value ...`` are dropped."""

    PER_JOB = re.compile(r"^\s*#\d+ : ")

    def filter(self, record: logging.LogRecord) -> bool:
        if not _BRIEF["on"]:
            return True
        try:
            message = record.getMessage()
        except Exception:
            return True
        if self.PER_JOB.match(message):
            return False
        return not (record.name.startswith("optuna") and record.levelno < logging.WARNING
                    and message.startswith("Trial "))


def setup() -> None:
    """Progress bars off unless standard error is a terminal; colour off unless stdout is.
    Explicit settings in the environment win (``pipeline.io.progress.quiet_without_terminal``,
    which the commands' runner calls too)."""
    quiet_without_terminal()


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
    """Hydra callback: a sweep prints one line per job unless ``verbose=true`` (:func:`brief`);
    route Optuna's logging before the sweeper creates its study, and let a study whose every
    trial failed end in one line."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        brief(not bool(config.get("verbose", False)))  # one line per job unless verbose=true
        sweeper = str(config.hydra.sweeper.get("_target_", "")) if "hydra" in config else ""
        if "optuna" in sweeper.lower():
            quiet_optuna()
            tolerate_no_completed_trial()

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        brief(False)


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


def _unwritable(folder: Path, files: list[str], subdirs: list[str]) -> str | None:
    """Why Hydra could not write its files in ``folder`` (a file in it it cannot create, a
    folder where its log file goes, a file where its ``.hydra`` folder goes), or None."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err.strerror or type(err).__name__
    for name in files:
        if (folder / name).is_dir():
            return f"{folder / name} is a folder"
    for name in subdirs:
        if (folder / name).exists() and not (folder / name).is_dir():
            return f"{folder / name} is not a folder"
    return None


def make_output_dir(folder: str, setting: str, files: list[str] = (), subdirs: list[str] = ()) -> None:
    """Create ``folder`` (and its parents) and check that the ``files`` and ``subdirs`` Hydra
    writes there can be made; on failure print one line and exit 2."""
    verb = "create"
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        verb = "write in"
        reason = _unwritable(Path(folder), list(files), list(subdirs))
    except OSError as err:
        reason = err.strerror or type(err).__name__
    if reason is not None:
        print(f"error: cannot {verb} the output folder {folder} ({setting}): {reason}; "
              "choose a writable paths.root=DIR (or set hydra.run.dir / hydra.sweep.dir)", file=sys.stderr)
        sys.exit(2)


def _hydra_files(config: Any) -> tuple[list[str], list[str]]:
    """The files (log files) and folders (``.hydra``) Hydra makes in a job's folder."""
    from omegaconf import OmegaConf

    files = []
    handlers = OmegaConf.to_container(config.hydra.job_logging.get("handlers") or {}, resolve=False)
    for handler in handlers.values() if isinstance(handlers, dict) else ():
        name = str(handler.get("filename", "")) if isinstance(handler, dict) else ""
        if name.startswith("${hydra.runtime.output_dir}/"):
            files.append(name.split("/", 1)[1])
    subdir = config.hydra.get("output_subdir")
    return files, [] if subdir is None else [str(subdir)]


def redact_file(path: Path) -> None:
    """Rewrite ``path`` (atomically) with every credential hidden, if it holds any."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    if (hidden := redact(text)) != text:
        res.write_text(path, hidden)


class OutputDirCheck(Callback):  # type: ignore[misc]
    """Hydra callback for the folders Hydra writes: make the run or sweep folder first (one line
    and exit 2 if it, or the files Hydra puts in it, cannot be made), and hide credentials
    (``tracking.uri=http://alice:PW@host``) in the copies of the config Hydra saves there
    (``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml``; a sweep's ``multirun.yaml``)
    before the job runs: Hydra writes them before any job code, and the job keeps the
    credentials in memory only."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        make_output_dir(str(config.hydra.run.dir), "hydra.run.dir", *_hydra_files(config))

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        make_output_dir(str(config.hydra.sweep.dir), "hydra.sweep.dir", ["multirun.yaml"])

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        subdir = config.hydra.get("output_subdir")
        if subdir is not None:
            for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
                redact_file(Path(str(config.hydra.runtime.output_dir)) / str(subdir) / name)
        if str(config.hydra.mode) == "RunMode.MULTIRUN":  # the sweeper saved it after on_multirun_start
            redact_file(Path(str(config.hydra.sweep.dir)) / "multirun.yaml")

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        redact_file(Path(str(config.hydra.sweep.dir)) / "multirun.yaml")


class Redacting(logging.Filter):
    """A logging filter that hides credentials in every record it passes (``tracking.redact``):
    on the handlers of ``conf/hydra/job_logging`` and ``hydra_logging``, so neither the log
    file nor the console shows a password (the launcher logs each job's overrides)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted is shown as it is
            return True
        if (hidden := redact(message)) != message:
            record.msg, record.args = hidden, None
        return True

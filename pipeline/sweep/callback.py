"""Hydra callback that makes a multirun one sweep, in MLflow and on disk.

- ``on_multirun_start`` (in the launching process, before any job): writes
  ``<sweep dir>/mlflow_sweep.json`` (the sweep id, what it varies and, when tracking, its
  experiment) and, when tracking, creates the store once (parallel jobs creating a new
  sqlite store lose runs), the experiment and the sweep's parent run, whose id goes into the
  sweep file: every launcher's jobs find it there.
- Each job logs itself in its own process (``pipeline.job``): its run carries the tag
  ``sweep_id`` and is nested under the parent run.
- Progress (``on_job_end``, in the launching process): the jobs done of how many, the rate
  and the time left, one line per 10% of the jobs or per 30 s (``pipeline.io.progress``,
  after the first 10 s; the jobs print their own line each), and at the end how long the
  sweep took. The count needs the jobs to run in the launching process (the basic launcher);
  a parallel launcher's sweep says how long it took.
- ``on_multirun_end`` (in the launching process): every finished job that has not reached
  the store is logged, and the summary (``pipeline.sweep.summary``: table, figure, comparison,
  built from the jobs' folders) is written to ``<sweep dir>/summary``, for tracked and
  untracked sweeps alike, and logged to the parent run when tracking.

- A sweep that stops early (Ctrl-C, SIGTERM, or an error Hydra reports, such as a job whose
  config cannot be composed) still lets its finished jobs reach the store and closes its
  parent run (KILLED or FAILED): ``on_interrupt``, ``on_sweep_error``.

Works with any launcher (basic, joblib, submitit) and sweeper (basic, Optuna).
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipeline import config as pconfig
from pipeline.naming import sweep_name, swept_overrides
from pipeline.io import results as res
from pipeline import tracking
from pipeline.errors import InputError, Interrupted, exit_line
from pipeline.io.progress import Progress
from pipeline.stats import DEFAULT_MARGIN, check_margin

log = logging.getLogger(__name__)


#: The sweep running in this process, for the interrupt handler: folder, store, objective.
_ACTIVE: dict[str, Any] = {}
#: The progress of the sweep launched from this process (module state, not the callback's:
#: parallel launchers pickle the callback to their workers).
_PROGRESS: dict[str, Progress] = {}


def planned_jobs(config: DictConfig) -> int | None:
    """How many jobs the sweep of ``config`` runs, known before it starts: the product of the
    swept value counts for the grid and basic sweepers (``hydra.sweeper.params`` and the
    command line, a key's last value list winning, as theirs does), ``n_trials`` for Optuna;
    None for any other sweeper, or sweep values only a config loader can list (``glob``)."""
    sweeper = config.hydra.sweeper
    target = str(sweeper.get("_target_", ""))
    if "optuna" in target.lower():
        trials = sweeper.get("n_trials")
        return int(trials) if trials else None
    if not target.endswith((".GridSweeper", ".BasicSweeper")):
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    counts: dict[str, int] = {}
    try:
        for override in OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task]):
            counts[override.get_key_element()] = (len(list(override.sweep_string_iterator()))
                                                  if override.is_sweep_override() else 1)
    except Exception:  # glob(), interval(): the sweeper itself says what it makes of them
        return None
    return math.prod(counts.values())


def _progress_logger() -> logging.Logger:
    """Plain lines on standard output, beside the jobs' own lines: a logger outside the logging
    tree, which Hydra configures anew for every job (and where a brief sweep keeps a job's INFO
    lines in its pipeline.log); the sweep's progress is the sweep's, not a job's."""
    logger = logging.Logger(f"{__name__}.progress", logging.INFO)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    return logger


def _start_progress(config: DictConfig) -> None:
    _PROGRESS.clear()
    total = planned_jobs(config)
    if total:  # lines, not a bar: the jobs print a line each, which would tear a bar
        _PROGRESS["sweep"] = Progress("sweep", total, "jobs", logger=_progress_logger(), terminal=False)


def _end_progress(sweep_dir: Path, in_this_process: bool) -> None:
    """The closing line (how many jobs in how long); a parallel launcher's jobs are counted
    now, from the sweep's job folders."""
    progress = _PROGRESS.pop("sweep", None)
    if progress is None:
        return
    if not in_this_process:  # (less those a thread-based launcher's jobs counted themselves)
        folders = sum(1 for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())
        progress.update(max(0, folders - progress.done))
    progress.close()


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def on_interrupt(signum: int) -> int:
    """After SIGINT/SIGTERM: let the finished jobs of the sweep reach the store, close its
    parent run as KILLED, say in one line what is not logged, and return the exit status
    (128 + the signal: 130, 143). A second Ctrl-C meanwhile ends it at once."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    line, code = exit_line(Interrupted(signum))  # the commands' line and status (pipeline.errors)
    print(f"{line}: {_end_active('KILLED')}" if _ACTIVE else line, file=sys.stderr)
    return code


def on_sweep_error() -> None:
    """After an error that stops a sweep before its end (Hydra reports it and exits 1: a job
    whose config cannot be composed, a launcher failure): as :func:`on_interrupt`, the
    finished jobs reach the store and the parent run is closed, as FAILED."""
    if _ACTIVE:
        print(f"the sweep stopped on that error: {_end_active('FAILED')}", file=sys.stderr)


def _end_active(status: str) -> str:
    """Log the finished jobs of the active sweep, write its summary, close its parent run with
    ``status``, and say in a line what is logged and what is not."""
    sweep_dir: Path = _ACTIVE["sweep_dir"]
    settings: tracking.StoreSettings | None = _ACTIVE.get("settings")
    objective = str(_ACTIVE["objective"])
    margin = float(_ACTIVE.get("margin", DEFAULT_MARGIN))
    budget = _ACTIVE.get("budget")
    _ACTIVE.clear()  # once
    done = res.find_results([sweep_dir])
    if done or settings is not None:  # (a parent run is closed even when no job finished)
        from pipeline.sweep.summary import end_sweep  # the sweep's end only: a job never loads it

        try:
            end_sweep(sweep_dir, objective, settings, status, margin, budget)
        except (tracking.TrackingError, InputError) as err:
            log.warning("%s", err)
    missing = [r.parent.name for r in done if settings is not None and res.read_marker(r) is None]
    what = (f"{len(done)} finished job(s) logged to MLflow, the sweep's parent run closed as {status}"
            if settings is not None and not missing else f"{len(done)} finished job(s) on disk")
    if missing:
        what += (f"; not in MLflow yet: job(s) {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}: "
                 f"python -m pipeline.cli sync {sweep_dir}")
    return what


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:  # the sweep's verdict needs it: a bad one stops the sweep before any job
            check_margin(config.compare.margin)
        except ValueError as err:
            print(f"error: compare.margin: {err}", file=sys.stderr)
            sys.exit(2)
        try:  # the latency budget too (pipeline.sweep.pareto)
            budget = pconfig.latency_budget(config)
        except InputError as err:
            print(str(err), file=sys.stderr)
            sys.exit(2)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        settings = tracking.StoreSettings.of(config.tracking) if config.tracking.enabled else None
        if _jobs_in_this_process(config):  # parallel launchers' workers handle signals themselves
            _ACTIVE.update(sweep_dir=sweep_dir, objective=str(config.objective), settings=settings,
                           margin=float(config.compare.margin), budget=budget)
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, _raise_interrupted)
        sweep_id = f"{sweep_dir.parent.name}_{sweep_dir.name}_{uuid.uuid4().hex[:6]}"
        swept = swept_overrides(config)
        # The jobs read "swept" to put what differs first in their run names (pipeline.job).
        info: dict[str, Any] = {"sweep_id": sweep_id, "run_name": sweep_name(config, swept),
                                "swept": " ".join(dict.fromkeys(key for key, _ in swept))}
        if settings is not None:
            info["experiment"] = config.tracking.experiment or pconfig.dataset_name(config.dataset)
            if note := tracking.new_store_note(settings.uri):
                print(note)
            try:  # the store, the experiment and the parent run, before any job logs
                info.update(tracking.start_sweep(settings, info["experiment"], sweep_id,
                                                 {tracking.TAG_OVERRIDES: " ".join(config.hydra.overrides.task)},
                                                 run_name=info["run_name"]))
            except tracking.TrackingError as err:
                _ACTIVE.clear()
                print(f"error: {err}", file=sys.stderr)
                sys.exit(3)
        res.write_json(sweep_dir / res.SWEEP_FILE, info)
        log.info("sweep %s started in %s", sweep_id, sweep_dir)
        _start_progress(config)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if progress := _PROGRESS.get("sweep"):  # (a job of the launching process: the basic launcher)
            progress.update(1)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        _ACTIVE.clear()
        _end_progress(sweep_dir, _jobs_in_this_process(config))
        settings = tracking.StoreSettings.of(config.tracking) if config.tracking.enabled else None
        from pipeline.sweep.summary import end_sweep  # the sweep's end only: a job never loads it

        try:
            print(end_sweep(sweep_dir, str(config.objective), settings, margin=float(config.compare.margin),
                            budget=pconfig.latency_budget(config)))
        except tracking.TrackingError as err:
            print(f"error: {err}\nThe jobs' results are on disk under {sweep_dir.resolve()}; "
                  f"`python -m pipeline.cli sync {sweep_dir}` logs them later.", file=sys.stderr)
            sys.exit(3)
        failed = sorted(sweep_dir.glob(f"*/{res.FAILED}"))
        if failed:
            print(f"error: {len(failed)} job(s) of the sweep failed:", file=sys.stderr)
            for note in failed:
                overrides, _, message = note.read_text().partition("\n")
                print(f"  {note.parent}: {overrides}: {message.strip()}", file=sys.stderr)
            sys.exit(2)


def _jobs_in_this_process(config: DictConfig) -> bool:
    return str(config.hydra.launcher.get("_target_", "")).endswith("BasicLauncher")

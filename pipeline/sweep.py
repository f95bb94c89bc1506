"""Hydra callback that makes a multirun one sweep in MLflow.

- ``on_multirun_start`` (in the launching process, before any job): writes
  ``<sweep dir>/mlflow_sweep.json`` (the sweep id and experiment) and has the tracking
  process create the store once (parallel jobs creating a new sqlite store lose runs), the
  experiment and the sweep's parent run. With the basic launcher the jobs run in this
  process and log through the same tracking process, so nothing waits here; with parallel
  launchers the parent exists before any job starts.
- Each job's run carries the tag ``sweep_id`` and is nested under the parent run.
- ``on_multirun_end``: every finished job that has not reached the store is logged, and a
  summary (table + figure built from the jobs' folders) is written to
  ``<sweep dir>/summary`` and logged to the parent run (``pipeline.summary``).

- A sweep that stops early (Ctrl-C, SIGTERM, or an error Hydra reports, such as a job whose
  config cannot be composed) still lets its finished jobs reach the store and closes its
  parent run (KILLED or FAILED): ``on_interrupt``, ``on_sweep_error``.

Works with any launcher (basic, joblib, submitit) and sweeper (basic, Optuna).

How Hydra composes a sweep's jobs is changed for ``python -m pipeline -m``
(``pipeline/__main__.py``): the basic sweeper's validation composes only the jobs that cover
every swept value (:func:`validate_covering_jobs`), the launcher takes the compositions it
made (:func:`compose_each_job_once`), and config files are parsed once per process
(:func:`cache_config_files`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipeline import config as pconfig
from pipeline import results as res
from pipeline import tracking

log = logging.getLogger(__name__)


class Interrupted(BaseException):
    """SIGINT or SIGTERM during a sweep (a BaseException, like KeyboardInterrupt, so that no
    job's ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The sweep running in this process, for the interrupt handler: folder, store, objective.
_ACTIVE: dict[str, Any] = {}
#: How long an interrupted sweep waits for its finished jobs to reach the store.
INTERRUPT_WAIT_S = float(os.environ.get("PIPELINE_INTERRUPT_WAIT_S", "60"))


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def on_interrupt(signum: int) -> int:
    """After SIGINT/SIGTERM: let the finished jobs of the sweep reach the store (bounded by
    ``PIPELINE_INTERRUPT_WAIT_S``), close its parent run as KILLED, say in one line what is
    not logged, and return the exit status (128 + the signal: 130, 143)."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C during the wait ends it
        signal.signal(sig, signal.SIG_DFL)
    code = 128 + signum
    if not _ACTIVE:
        print(f"interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return code
    print(f"interrupted ({signal.Signals(signum).name}): {_end_active('KILLED')}", file=sys.stderr)
    return code


def on_sweep_error() -> None:
    """After an error that stops a sweep before its end (Hydra reports it and exits 1: a job
    whose config cannot be composed, a launcher failure): as :func:`on_interrupt`, the
    finished jobs reach the store and the parent run is closed, as FAILED. Without this the
    tracking process lost the queued jobs when the launching process exited."""
    if _ACTIVE:
        print(f"the sweep stopped on that error: {_end_active('FAILED')}", file=sys.stderr)


def _end_active(status: str) -> str:
    """Let the finished jobs of the active sweep reach the store (bounded by
    ``PIPELINE_INTERRUPT_WAIT_S``), close its parent run with ``status``, and say in a line
    what is logged and what is not."""
    sweep_dir: Path = _ACTIVE["sweep_dir"]
    settings: tracking.StoreSettings | None = _ACTIVE.get("settings")
    objective = str(_ACTIVE["objective"])
    _ACTIVE.clear()  # once
    if settings is not None:
        request = {"op": "sweep_end", "sweep_dir": str(sweep_dir.resolve()), "objective": objective,
                   "tracking": settings.as_dict(), "status": status}
        try:
            tracking.tracker(settings).call(request, timeout=INTERRUPT_WAIT_S)
        except tracking.TrackingError as err:
            log.warning("%s", err)
    done = res.find_results([sweep_dir])
    missing = [r.parent.name for r in done if settings is not None and res.read_marker(r) is None]
    what = (f"{len(done)} finished job(s) logged to MLflow, the sweep's parent run closed as {status}"
            if settings is not None and not missing else f"{len(done)} finished job(s) on disk")
    if missing:
        what += (f"; not in MLflow yet: job(s) {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}: "
                 f"python -m pipeline.sync {sweep_dir}")
    return what


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if _jobs_in_this_process(config):  # parallel launchers' workers handle signals themselves
            _ACTIVE.update(sweep_dir=sweep_dir, objective=str(config.objective),
                           settings=tracking.StoreSettings.of(config.tracking) if config.tracking.enabled else None)
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, _raise_interrupted)
        sweep_id = f"{sweep_dir.parent.name}_{sweep_dir.name}_{uuid.uuid4().hex[:6]}"
        swept = swept_overrides(config)
        # The jobs read "swept" to put what differs first in their run names (pipeline.run).
        info: dict[str, Any] = {"sweep_id": sweep_id, "run_name": sweep_name(config, swept),
                                "swept": " ".join(dict.fromkeys(key for key, _ in swept))}
        if config.tracking.enabled:
            experiment = config.tracking.experiment or pconfig.dataset_name(config.dataset)
            info["experiment"] = experiment
            settings = tracking.StoreSettings.of(config.tracking)
            res.write_json(sweep_dir / res.SWEEP_FILE, info)
            request = {"op": "sweep_start", "sweep_dir": str(sweep_dir.resolve()), "experiment": experiment,
                       "sweep_id": sweep_id, "tracking": settings.as_dict(),
                       "tags": {tracking.TAG_OVERRIDES: " ".join(config.hydra.overrides.task),
                                tracking.TAG_RUN_NAME: info["run_name"]}}
            if note := tracking.new_store_note(settings.uri):
                print(note)
            tracker = tracking.tracker(settings)
            if _jobs_in_this_process(config):
                tracker.send(request)  # the jobs' logging queues behind it in the same process
            else:  # jobs in other processes read the parent run from the sweep file
                try:
                    tracker.call(request)
                except tracking.TrackingError as err:
                    print(f"error: {err}", file=sys.stderr)
                    sys.exit(3)
        else:
            res.write_json(sweep_dir / res.SWEEP_FILE, info)
        log.info("sweep %s started in %s", sweep_id, sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        _ACTIVE.clear()
        if config.tracking.enabled and (sweep_dir / res.SWEEP_FILE).exists():
            settings = tracking.StoreSettings.of(config.tracking)
            request = {"op": "sweep_end", "sweep_dir": str(sweep_dir.resolve()), "objective": str(config.objective),
                       "tracking": settings.as_dict()}
            try:
                print(tracking.tracker(settings).call(request))
            except tracking.TrackingError as err:
                print(f"error: {err}\nThe jobs' results are on disk under {sweep_dir.resolve()}; "
                      f"`python -m pipeline.sync {sweep_dir}` logs them later.", file=sys.stderr)
                sys.exit(3)
        failed = sorted(sweep_dir.glob(f"*/{res.FAILED}"))
        if failed:
            print(f"error: {len(failed)} job(s) of the sweep failed:", file=sys.stderr)
            for note in failed:
                overrides, _, message = note.read_text().partition("\n")
                print(f"  {note.parent}: {overrides}: {message.strip()}", file=sys.stderr)
            sys.exit(2)


def swept_overrides(config: DictConfig) -> list[tuple[str, str]]:
    """(key, values) of what the sweep varies: the command line's sweep overrides
    (``k=3,5``, ``range(...)``, ``interval(...)``) and a sweeper's own ``params`` (Optuna's
    search space, e.g. from ``experiment=tune_bm25``), in that order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    found: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(config.hydra.overrides.task)):
        if override.is_sweep_override():
            found[override.get_key_element().lstrip("+~")] = override.input_line.split("=", 1)[1]
    for key, spec in (config.hydra.sweeper.get("params") or {}).items():
        found.setdefault(str(key), str(spec))
    return list(found.items())


def sweep_name(config: DictConfig, swept: list[tuple[str, str]]) -> str:
    """The parent run's name: the sweep's overrides, short (``sweep retriever=bm25,dense k=3,5``;
    Optuna: ``sweep tune_bm25 k1=interval(0.2,3.0) b=interval(0.0,1.0)``), so sweeps differ
    in MLflow's truncated name column."""
    parts = ["sweep"]
    overlay = config.hydra.runtime.choices.get("experiment") if config.hydra.get("runtime") else None
    if overlay:
        parts.append(str(overlay))
    for key, values in swept:
        key = key if key in ("k", "k_max") or "." not in key else key.rsplit(".", 1)[-1]
        parts.append(f"{key}={values.replace(' ', '')}")
    if len(parts) == 1:  # nothing swept (``-m k=3``): the overrides it ran with
        parts += [o for o in config.hydra.overrides.task
                  if o.lstrip("+~").split("=", 1)[0].split(".", 1)[0].split("/", 1)[0] not in _NOT_NAMED]
    return " ".join(parts)


#: Overrides that never go into a name: where things are written and logged.
_NOT_NAMED = {"paths", "tracking", "hydra", "cache_dir"}


def _jobs_in_this_process(config: DictConfig) -> bool:
    return str(config.hydra.launcher.get("_target_", "")).endswith("BasicLauncher")


def compose_each_job_once() -> None:
    """Compose each sweep job's config once instead of twice.

    Hydra's basic sweeper first composes jobs of a batch to reject a bad one before any job
    runs (``Sweeper.validate_batch_is_legal``); the basic launcher then composes each job
    again to run it. A composition costs about 0.2 s of the launching process, so a
    100-job sweep spent 20 s composing configs it had already composed. This keeps the
    validation (a bad job still fails the sweep before any job starts) and hands its result to
    the launcher: ``load_sweep_config`` remembers what it composed for (master config,
    overrides), and the next call with the same arguments takes it (once: the launcher mutates
    it). Launchers that compose in other processes (joblib, submitit) are unaffected.
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    original = ConfigLoaderImpl.load_sweep_config
    if getattr(original, "_pipeline_once", False):
        return
    composed: dict[tuple, DictConfig] = {}

    def load_sweep_config(self: Any, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = (id(self), id(master_config), tuple(sweep_overrides))
        if key in composed:
            return composed.pop(key)
        config = original(self, master_config, sweep_overrides)
        if len(composed) >= 10_000:  # validated and never launched (a failed batch): forget them
            composed.clear()
        composed[key] = config.copy()  # the launcher's own copy: the caller may change this one
        return config

    load_sweep_config._pipeline_once = True  # type: ignore[attr-defined]
    ConfigLoaderImpl.load_sweep_config = load_sweep_config  # type: ignore[method-assign]


def covering_jobs(batch: Sequence[Sequence[str]]) -> list[Sequence[str]]:
    """The jobs of a batch that bring an override (``key=value``) no earlier job has, in order.

    Every value of every swept setting appears in one of them: composing them finds every
    value that cannot be composed (an unknown option, a key an option lacks, a bad type). A
    grid of 5 x 5 x 4 jobs has 12 such jobs."""
    seen: set[str] = set()
    chosen = []
    for overrides in batch:
        if any(override not in seen for override in overrides):
            chosen.append(overrides)
            seen.update(overrides)
    return chosen or list(batch[:1])


def validate_covering_jobs() -> None:
    """Before a batch runs, compose the jobs that cover every swept value, not every job.

    Hydra's basic sweeper composes every job of a batch before the first one starts, to fail early;
    at 0.14 s a composition a 100-job sweep waited 14 s for that while the tracking process
    idled. Composing the jobs of :func:`covering_jobs` still stops the sweep before any job
    runs for any value that cannot be composed. What it cannot see is a combination of
    values that compose one by one but not together: that job fails when it is launched,
    which stops the sweep there (:func:`on_sweep_error` logs the jobs before it)."""
    from hydra.plugins.sweeper import Sweeper

    original = Sweeper.validate_batch_is_legal
    if getattr(original, "_pipeline_covering", False):
        return

    def validate_batch_is_legal(self: Any, batch: Sequence[Sequence[str]]) -> None:
        original(self, covering_jobs(batch))

    validate_batch_is_legal._pipeline_covering = True  # type: ignore[attr-defined]
    Sweeper.validate_batch_is_legal = validate_batch_is_legal  # type: ignore[method-assign]


def cache_config_files() -> None:
    """Load each config file once per process, not once per composition.

    Hydra reads and parses every YAML file of the defaults tree again for each composition
    (about a fifth of its 0.2 s), and a sweep composes every job. The parsed result is kept by
    (search path, config path) and each composition gets its own deep copy, so nothing one
    composition does to it reaches the next. For one command's process: files edited while it
    runs are not read again.
    """
    import copy

    from hydra._internal.config_repository import ConfigRepository

    original = ConfigRepository.load_config
    if getattr(original, "_pipeline_cached", False):
        return
    loaded: dict[tuple, Any] = {}

    def load_config(self: Any, config_path: str) -> Any:
        key = (tuple((source.provider, source.path) for source in self.sources), config_path)
        if key not in loaded:
            loaded[key] = original(self, config_path)
        return copy.deepcopy(loaded[key])

    load_config._pipeline_cached = True  # type: ignore[attr-defined]
    ConfigRepository.load_config = load_config  # type: ignore[method-assign]

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

Works with any launcher (basic, joblib, submitit) and sweeper (basic, Optuna).
"""

from __future__ import annotations

import logging
import sys
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipeline import config as pconfig
from pipeline import results as res
from pipeline import tracking

log = logging.getLogger(__name__)


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        sweep_id = f"{sweep_dir.parent.name}_{sweep_dir.name}_{uuid.uuid4().hex[:6]}"
        info: dict[str, str] = {"sweep_id": sweep_id}
        if config.tracking.enabled:
            experiment = config.tracking.experiment or pconfig.dataset_name(config.dataset)
            info["experiment"] = experiment
            settings = tracking.StoreSettings.of(config.tracking)
            res.write_json(sweep_dir / res.SWEEP_FILE, info)
            request = {"op": "sweep_start", "sweep_dir": str(sweep_dir.resolve()), "experiment": experiment,
                       "sweep_id": sweep_id, "tracking": settings.as_dict(),
                       "tags": {tracking.TAG_OVERRIDES: " ".join(config.hydra.overrides.task)}}
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


def _jobs_in_this_process(config: DictConfig) -> bool:
    return str(config.hydra.launcher.get("_target_", "")).endswith("BasicLauncher")

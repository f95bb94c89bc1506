"""``python -m pipeline.sync [FOLDER ...]``: log to MLflow every finished job that is not there yet.

The disk is the queue. Each job writes its results folder, ``record.json`` last, before any
MLflow call; logging a folder is idempotent (see ``pipeline.tracking.log_results``). Sync
walks the folders (default: ``outputs``), logs each complete job that has no
``mlflow_run.json`` marker for its store, and closes the parent run of each sweep that
never wrote its summary (a sweep that was interrupted) as KILLED, with its finished jobs
nested under it. Running it twice logs nothing twice.

``--tracking-uri`` logs to another store than the one each record names.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

from pipeline.io import results as res
from pipeline import tracking
from pipeline.errors import InputError

log = logging.getLogger(__name__)


def sync(folders: Sequence[Path], uri: str | None = None) -> tuple[int, int, list[str]]:
    """Log every finished job under ``folders`` and close interrupted sweeps.

    Returns (jobs logged or found logged, sweeps closed, errors)."""
    from pipeline.report.summary import log_pending, summarize

    errors: list[str] = []
    logged = 0
    for results in res.find_results(list(folders)):
        try:
            record = res.read_record(results)
            if record["tracking"] is None and uri is None:
                continue  # a job run with tracking=none: logged only when asked (--tracking-uri)
            run_id = tracking.log_results(results, _store(record, uri))
        except (tracking.TrackingError, InputError) as err:
            errors.append(f"{results}: {err}")
            continue
        logged += 1
        failed = results.parent / res.FAILED
        if failed.exists():  # the job had finished; only its logging had failed
            failed.unlink()
        print(f"{results.parent}: MLflow run {run_id}")
    closed = 0
    sweeps = sorted({p.parent for folder in folders for p in _sweep_files(Path(folder))})
    for sweep_dir in sweeps:
        if (sweep_dir / res.SUMMARY / "sweep_table.csv").exists():
            continue  # the sweep ended and closed its parent itself
        jobs = res.find_results([sweep_dir])
        if not jobs:
            continue
        record = res.read_record(jobs[0])
        if record["tracking"] is None and uri is None:
            continue
        settings = _store(record, uri)
        objective = str(record["params"].get("objective", "ndcg_at_10"))
        try:
            log_pending(sweep_dir, settings, retry_failed=True)
            print(summarize(sweep_dir, objective, settings, status="KILLED"))
            closed += 1
        except (tracking.TrackingError, InputError) as err:
            errors.append(f"{sweep_dir}: {err}")
    return logged, closed, errors


def _store(record: dict[str, Any], uri: str | None) -> tracking.StoreSettings:
    """The store a record names, or ``uri`` (--tracking-uri) with the record's other settings."""
    settings = tracking.StoreSettings.of(record["tracking"] or {"uri": uri})
    return settings if uri is None else dataclasses.replace(settings, uri=uri)


def _sweep_files(folder: Path) -> list[Path]:
    if (folder / res.SWEEP_FILE).is_file():
        return [folder / res.SWEEP_FILE]
    return list(folder.rglob(res.SWEEP_FILE))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.sync",
        description="Log to MLflow every finished job (results/record.json) that is not in its store yet, "
                    "and close the parent runs of interrupted sweeps as KILLED. Safe to run any number of times.",
    )
    parser.add_argument("folders", nargs="*", type=Path, help="job, sweep or outputs folders (default: outputs)")
    parser.add_argument("--tracking-uri", help="log to this store instead of the one each job recorded")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    folders = args.folders or [Path("outputs")]
    for folder in folders:
        if not folder.exists():
            print(f"error: {folder}: no such folder", file=sys.stderr)
            return 2
    logged, closed, errors = sync(folders, args.tracking_uri)
    print(f"synced {logged} job(s), closed {closed} interrupted sweep(s)")
    for error in errors:
        print(error, file=sys.stderr)
    return 3 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

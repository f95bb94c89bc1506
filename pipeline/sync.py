"""``python -m pipeline.sync [FOLDER ...]``: log to MLflow every finished job that is not there yet.

The disk is the queue. Each job writes its results folder, ``record.json`` last, before any
MLflow call; logging a folder is idempotent (see ``pipeline.tracking.log_results``). Sync
walks the folders (default: ``outputs``), logs each complete job that has no
``mlflow_run.json`` marker for its store, and closes the parent run of each sweep that
never wrote its summary (a sweep that was interrupted) as KILLED, with its finished jobs
nested under it. Running it twice logs nothing twice.

``--tracking-uri`` logs to another store than the one each record names.

``python -m pipeline.sync --stdin`` is the tracking process of a job (``tracking.Tracker``):
it imports mlflow at once, then serves one JSON request per line of standard input and
answers one JSON line each, in order, on standard output:

- ``{"op": "open", "tracking": {...}}``: open (create) the store;
- ``{"op": "log", "results": DIR, "tracking": {...}, "note_failure": bool}``: log a folder;
- ``{"op": "sweep_start", "sweep_dir": DIR, "experiment": NAME, "sweep_id": ID, "tags": {...}, "tracking": {...}}``;
- ``{"op": "sweep_end", "sweep_dir": DIR, "objective": KEY, "status": S, "tracking": {...}}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from pipeline import results as res
from pipeline import tracking
from pipeline.errors import InputError

log = logging.getLogger(__name__)


def _settings(request: dict[str, Any]) -> tracking.StoreSettings:
    return tracking.StoreSettings.of(request["tracking"])


def _log(request: dict[str, Any]) -> str:
    results = Path(request["results"])
    try:
        return tracking.log_results(results, _settings(request))
    except (tracking.TrackingError, InputError) as err:
        if request.get("note_failure"):
            record_tags: dict[str, str] = {}
            try:
                record_tags = res.read_record(results)["tags"]
            except InputError:
                pass
            res.write_failed(results.parent, record_tags.get(tracking.TAG_OVERRIDES, ""),
                             f"error: {err}\nThe results are safe on disk in {results.resolve()}.")
        raise


def _sweep_start(request: dict[str, Any]) -> dict[str, str]:
    settings = _settings(request)
    found = tracking.start_sweep(settings, request["experiment"], request["sweep_id"], request.get("tags", {}))
    sweep_dir = Path(request["sweep_dir"])
    info = tracking.read_sweep_file(sweep_dir)
    res.write_json(sweep_dir / res.SWEEP_FILE, {**info, **found, "experiment": request["experiment"]})
    import scipy.stats  # noqa: F401  (~1.4 s, now while the jobs compute: the summary's tests need it)

    return found


def _sweep_end(request: dict[str, Any]) -> str:
    from pipeline.summary import end_sweep

    return end_sweep(Path(request["sweep_dir"]), request["objective"], _settings(request),
                     request.get("status", "FINISHED"))


def _handle(request: dict[str, Any]) -> Any:
    op = request.get("op")
    if op == "open":
        if tracking._sqlite_path(_settings(request).uri) is not None:
            tracking.ensure_store(_settings(request))
        return None
    if op == "log":
        return _log(request)
    if op == "sweep_start":
        return _sweep_start(request)
    if op == "sweep_end":
        return _sweep_end(request)
    if op == "flush":
        return None
    raise ValueError(f"unknown request {op!r}")


def serve() -> None:
    """The tracking process: answer requests from standard input until it closes.

    The answers own the real standard output; anything mlflow prints goes to stderr."""
    # Ctrl-C reaches the whole process group: the job handles it and lets this process
    # finish logging what was queued (bounded by the job's wait), so ignore it here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers: Any = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    tracking.warm()  # ~4 s of imports, before the first request arrives
    # mlflow's imports leave ~270k objects for the cyclic garbage collector: its first full
    # pass then fell inside the job's first log (~0.23 s of the job's wait). Do it now,
    # while the job computes, and move them out of its sight (they live as long as we do).
    gc.collect()
    gc.freeze()

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = {"ok": True, "result": _handle(json.loads(line))}
        except Exception as exc:
            text = str(exc) if isinstance(exc, (tracking.TrackingError, InputError)) else f"{type(exc).__name__}: {exc}"
            answer = {"ok": False, "error": text}
        if answers is None:
            continue
        try:
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
        except OSError:  # the job is gone (a closed pipe): log what it queued, answer no more
            try:
                answers.close()
            except OSError:
                pass
            answers = None


def sync(folders: Sequence[Path], uri: str | None = None) -> tuple[int, int, list[str]]:
    """Log every finished job under ``folders`` and close interrupted sweeps.

    Returns (jobs logged or found logged, sweeps closed, errors)."""
    from pipeline.summary import log_pending, summarize

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
    parser.add_argument("--stdin", action="store_true", help=argparse.SUPPRESS)  # the tracking process
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.stdin:
        serve()
        return 0
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

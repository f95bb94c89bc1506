"""Sync: log to MLflow every finished job that is not there yet, and close the sweeps left open
(``python -m pipeline.cli sync [FOLDER ...]`` is its command).

The disk is the queue. Each job writes its results folder, ``record.json`` last, before any
MLflow call; logging a folder is idempotent (see ``pipeline.tracking.log_folder``). Sync
walks the folders (default: ``outputs``) and asks the store about each complete job: a
marker (``mlflow_run.json``) counts only when its run is in the store, finished, with the
record's job key; otherwise a finished run with that key is adopted, or the job is logged
again and the marker rewritten. A sweep counts as closed only when its parent run is
terminated in the store; any other (interrupted, or its store failed after the summary was
written) gets its summary and its parent closed: KILLED when it never reached its end, else
FINISHED (FAILED when a job failed). Running it twice logs nothing twice.

A record's relative sqlite store (``sqlite:///outputs/mlflow.db``, as ``tracking=local``
names it) is read from the folder the job ran in (its ``.hydra/hydra.yaml`` says where), not
from sync's working directory: ``python -m pipeline.cli sync /abs/path/to/job`` works from any folder and
never logs a job into a store of the folder it is run from.
``--tracking-uri`` logs to another store than the one each record names; only files inside
the folders given are written (a copied sweep is synced in its copy), and the folder keeps
its run in every store it reached. Exit status 2 when a record is unreadable or corrupt
(one line naming the file and the key), 3 when a store failed; the other jobs are synced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pipeline import tracking
from pipeline.errors import InputError
from pipeline.io import results as res
from pipeline.stats import DEFAULT_MARGIN, check_margin

log = logging.getLogger(__name__)


@dataclass
class Synced:
    """What a sync did: jobs logged, adopted (found finished in the store) and already logged
    (marker and store agree), sweeps closed, jobs skipped as untracked, and the errors."""

    logged: int = 0
    adopted: int = 0
    already: int = 0
    closed: int = 0
    untracked: int = 0
    errors: list[str] = field(default_factory=list)
    bad_input: bool = False

    def line(self) -> str:
        """``sync: 1 logged, 22 already logged, 0 closed``."""
        parts = [f"{self.logged} logged"] + ([f"{self.adopted} adopted"] if self.adopted else [])
        parts += [f"{self.already} already logged", f"{self.closed} closed"]
        if self.untracked:
            parts.append(f"{self.untracked} untracked (tracking=none: --tracking-uri names a store for them)")
        return "sync: " + ", ".join(parts)

    def fail(self, where: Path, err: Exception) -> None:
        self.errors.append(f"{where}: {err}" if isinstance(err, tracking.TrackingError) else str(err))
        self.bad_input = self.bad_input or isinstance(err, InputError)


def sync(folders: Sequence[Path], uri: str | None = None, say: Any = print) -> Synced:
    """Log every finished job under ``folders`` and close the sweeps whose parent run the
    store does not hold as terminated; ``say`` gets a line per job logged and per sweep closed."""
    done = Synced()
    noted: set[str] = set()
    for results in res.find_results(list(folders)):
        try:
            record = res.read_record(results)
            if record["tracking"] is None and uri is None:
                done.untracked += 1  # a job run with tracking=none: logged only when asked (--tracking-uri)
                continue
            settings = _store(record, uri, results)
            if settings.uri not in noted and (note := tracking.new_store_note(settings.uri)):
                say(note)
            noted.add(settings.uri)
            run_id, how = tracking.log_folder(results, settings)
        except (tracking.TrackingError, InputError) as err:
            done.fail(results, err)
            continue
        (results.parent / res.FAILED).unlink(missing_ok=True)  # the job had finished; only its logging had failed
        if how == tracking.ALREADY:
            done.already += 1
        else:
            done.adopted += how == tracking.ADOPTED
            done.logged += how == tracking.LOGGED
            say(f"{results.parent}: MLflow run {run_id} ({how})")
    for sweep_dir in sorted({p.parent for folder in folders for p in _sweep_files(Path(folder))}):
        try:
            if _close_sweep(sweep_dir, uri, say):
                done.closed += 1
        except (tracking.TrackingError, InputError) as err:
            done.fail(sweep_dir, err)
    return done


def _close_sweep(sweep_dir: Path, uri: str | None, say: Any) -> bool:
    """Close the sweep's parent run unless the store holds it terminated; True when closed now."""
    from pipeline.sweep.summary import log_pending, summarize  # the comparison, SciPy, figures: for a sweep only

    jobs = res.find_results([sweep_dir])
    if not jobs:
        return False
    record = res.read_record(jobs[0])
    if record["tracking"] is None and uri is None:
        return False
    settings = _store(record, uri, jobs[0])
    info = res.read_sweep(sweep_dir)
    known = (res.sweep_parent_in(info, settings.uri)
             or res.sweep_parent_in(info, tracking.recorded_uri(jobs[0], record, settings)))
    if known is not None and tracking.closed_run(settings, known["parent_run_id"]):
        return False
    if (sweep_dir / res.SUMMARY / "sweep_table.csv").exists():  # it reached its end; closing it failed
        status = "FAILED" if any(sweep_dir.glob(f"*/{res.FAILED}")) else "FINISHED"
    else:
        status = "KILLED"
    log_pending(sweep_dir, settings, retry_failed=True)
    if status == "FINISHED" and any(sweep_dir.glob(f"*/{res.FAILED}")):
        status = "FAILED"
    say(summarize(sweep_dir, str(record["params"].get("objective", "ndcg_at_10")), settings, status=status,
                  margin=_margin(record["params"])))
    return True


def _margin(params: dict[str, Any]) -> float:
    """The sweep's practical margin (``compare.margin``; an older record: the default)."""
    try:
        return check_margin(params.get("compare.margin", DEFAULT_MARGIN))
    except ValueError:
        return DEFAULT_MARGIN


def _store(record: dict[str, Any], uri: str | None, results: Path) -> tracking.StoreSettings:
    """The store a record names, or ``uri`` (--tracking-uri) with the record's other settings.
    A relative sqlite store (``sqlite:///outputs/mlflow.db``) is the one beside the folder the
    job ran in (``pipeline.io.results.job_root``), whichever folder sync runs from."""
    if uri is None:
        return tracking.StoreSettings.of(record["tracking"]).anchored(res.job_root(results.parent))
    base = tracking.StoreSettings.of(record["tracking"]) if record["tracking"] else tracking.StoreSettings(uri=uri)
    return base.to(uri)


def _sweep_files(folder: Path) -> list[Path]:
    if (folder / res.SWEEP_FILE).is_file():
        return [folder / res.SWEEP_FILE]
    return list(folder.rglob(res.SWEEP_FILE))

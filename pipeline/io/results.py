"""The results folder of a job: a contract on disk that tracking, ``pipeline.sync`` and users read.

A job writes everything it computed under ``<job folder>/results/`` before MLflow sees any
of it, and writes ``record.json`` last: a results folder with a record is complete. The
record holds everything tracking logs (params, metrics, curves, tags, dataset input,
timings, run name, sweep), under the names ``pipeline.tracking.mapping`` gives them, and that
one mapping turns it into the MLflow run, so any process can log the job from the folder
alone, today or after the job's process was killed. Every file is written to a temporary name in the same
folder and renamed (``os.replace``), so a reader never sees half a file.

=====================  ==========================================================  ==============
file                   what                                                        written by
=====================  ==========================================================  ==============
metrics.json           headline means, curves, the collection's counts             the job
per_query.csv          every metric at every K, one row per query, and the         the job
                       drill-down (``pipeline.io.drilldown``: query text, first
                       relevant rank, judged share, top k with snippets)
failures.md            the queries with no relevant document in the top k          the job
run.trec               the ranking as a TREC run (``qid Q0 docid rank score tag``)  the job
context.tsv            the placed order fed to the generator (query, slot, doc)    the job
latency.csv            each query's retrieval latency in ms (query_id, latency_ms;  the job
                       when cost is measured; ``pipeline.compare`` pairs them)
config.yaml            the resolved config                                         the job
definition_card.md     the metric definitions of this run                          the job
plots/*.png            K-sweep and precision-recall figures                        the job
record.json            what tracking logs (written last: the folder is complete)   the job
mlflow_run.json        the MLflow run the folder was logged as (uri, run id; and   whoever logs
                       under ``stores`` its run in every store it reached)           the folder
=====================  ==========================================================  ==============

Whoever logs the folder writes ``mlflow_run.json``: the job itself, the end of its sweep, or
``python -m pipeline.cli sync`` after a crash (``pipeline.tracking.log_folder``, in that process).
A job that failed leaves ``<job folder>/FAILED`` (its overrides on the first line, the error
after), and a sweep's job returns a ``FailedObjective`` to the sweeper. Logging is idempotent:
the record's ``job_key`` is a tag on the MLflow run, so a second attempt finds the first run
instead of making another (``pipeline.tracking``).

This module is an input/output module: it imports no hydra, mlflow or retrievers.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from pipeline.errors import InputError

RESULTS = "results"
#: Each query's retrieval latency in ms (``pipeline.stages``; ``pipeline.comparison.latency``).
LATENCY_FILE = "latency.csv"
RECORD = "record.json"
MARKER = "mlflow_run.json"
FAILED = "FAILED"
SWEEP_FILE = "mlflow_sweep.json"  #: in a sweep folder: the sweep id, its experiment and, once made, its parent run
SUMMARY = "summary"  #: in a sweep folder: the jobs' summary (written when the sweep ends or is synced)
PLOTS = ("plots/k_sweep.png", "plots/precision_recall.png")
RECORD_FORMAT = "rag-eval-record/1"
#: Keys every record has; a record without one of them is corrupt.
RECORD_KEYS = ("format", "job_key", "experiment", "run_name", "params", "metrics", "curves", "tags", "dataset",
               "tracking", "k", "start_time_ms")
TAG_JOB_KEY = "job_key"  #: the tag that identifies a job on its MLflow run (a second log of the folder finds it)


@contextmanager
def atomic_open(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Write ``path`` through a temporary file in its folder, renamed into place on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        binary = "b" in mode
        with os.fdopen(fd, mode, **({} if binary else {"encoding": "utf-8", "newline": ""})) as fh:
            yield fh
        os.chmod(tmp, 0o644)  # mkstemp makes 0600: results are for the team to read
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text(path: Path, text: str) -> None:
    with atomic_open(path) as fh:
        fh.write(text)


def write_json(path: Path, payload: Any, indent: int | None = 1) -> None:
    write_text(path, json.dumps(payload, indent=indent) + "\n")


def results_dir(job_dir: Path) -> Path:
    return Path(job_dir) / RESULTS


def write_record(results: Path, record: dict[str, Any]) -> Path:
    """Write ``record.json`` (last: from now on the folder is complete and can be logged)."""
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise ValueError(f"record lacks {missing}")
    path = Path(results) / RECORD
    write_json(path, record)
    return path


def read_record(results: Path) -> dict[str, Any]:
    """The job's record; InputError naming the file when it is missing, unreadable or partial."""
    path = Path(results) / RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no record: the job did not finish writing its results", path) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"unreadable record ({exc})", path) from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise InputError(f"not a {RECORD_FORMAT} record", path)
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise InputError(f"record lacks {', '.join(missing)}", path)
    check_numbers(record, path)
    return record


def _number(value: Any) -> bool:
    """A finite number: a job never records NaN or infinity (JSON's ``NaN`` in a record is damage)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_numbers(record: dict[str, Any], path: Path) -> None:
    """InputError naming the key when a metric, a curve point or a stepped value of the
    record is not a number (a hand-edited or damaged record): logging it would fail half-way
    with a message that names neither the file nor the key."""
    parts = [("metrics", record["metrics"]), ("curves", record["curves"]), ("stepped", record.get("stepped") or {}),
             ("cost metrics", (record.get("cost") or {}).get("metrics") or {})]  # logged as metrics too
    for part, values in parts:
        if not isinstance(values, dict):
            raise InputError(f"{part} is not a mapping of names to numbers", path)
        for key, value in values.items():
            if part in ("metrics", "cost metrics"):
                points = [value]
            elif part == "curves":
                points = value if isinstance(value, list) else [value]
            else:
                points = list(value.values()) if isinstance(value, dict) else [value]
            bad = next((point for point in points if not _number(point)), None)
            if bad is not None:
                kind = "a finite number" if isinstance(bad, float) else "a number"  # NaN, Infinity
                raise InputError(f"{part} key {key!r} is not {kind}: {json.dumps(bad)[:40]}", path)
    for part in ("params", "tags"):
        if not isinstance(record[part], dict) or not all(isinstance(v, str) for v in record[part].values()):
            raise InputError(f"{part} must map names to strings", path)


def read_marker(results: Path, uri: str | None = None) -> dict[str, str] | None:
    """``{"uri": ..., "run_id": ..., "experiment_id": ...}`` once the folder was logged, else None:
    the store it was last logged to, or with ``uri`` the run in that store (a folder synced to
    another store keeps every store it reached, see :func:`write_marker`)."""
    try:
        marker = json.loads((Path(results) / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # missing or half-written: the store is asked instead (by the job key)
    if not isinstance(marker, dict) or not marker.get("run_id"):
        return None
    if uri is None or marker.get("uri") == uri:
        return marker
    found = (marker.get("stores") or {}).get(uri) if isinstance(marker.get("stores"), dict) else None
    if isinstance(found, dict) and found.get("run_id"):
        return {"uri": uri, "run_id": str(found["run_id"]), "experiment_id": str(found.get("experiment_id", ""))}
    return None


def sweep_parent_in(info: dict[str, Any], uri: str) -> dict[str, str] | None:
    """``{"parent_run_id": ..., "experiment_id": ...}`` of the sweep's parent run in the store
    ``uri``, as its sweep file remembers it; None when the sweep has none there yet."""
    if info.get("uri") == uri and info.get("parent_run_id"):
        return {"parent_run_id": str(info["parent_run_id"]), "experiment_id": str(info.get("experiment_id", ""))}
    found = (info.get("stores") or {}).get(uri) if isinstance(info.get("stores"), dict) else None
    if isinstance(found, dict) and found.get("parent_run_id"):
        return {"parent_run_id": str(found["parent_run_id"]), "experiment_id": str(found.get("experiment_id", ""))}
    return None


def remember_sweep_parent(sweep_dir: Path, uri: str, parent_run_id: str, experiment_id: str,
                          experiment: str) -> None:
    """Write the sweep's parent run in the store ``uri`` into its sweep file: the top-level
    keys name that store from now on (what ``pipeline.sweep.summary`` reads), ``stores``
    keeps the parent of every store the sweep reached (syncing a copy of a sweep to a second
    store does not lose the first)."""
    info = read_sweep(sweep_dir)
    stores = dict(info["stores"]) if isinstance(info.get("stores"), dict) else {}
    if info.get("uri") and info.get("parent_run_id"):
        stores.setdefault(str(info["uri"]), {"parent_run_id": info["parent_run_id"],
                                             "experiment_id": info.get("experiment_id")})
    stores[uri] = {"parent_run_id": parent_run_id, "experiment_id": experiment_id}
    write_json(Path(sweep_dir) / SWEEP_FILE, {**info, "uri": uri, "parent_run_id": parent_run_id,
                                              "experiment_id": experiment_id, "experiment": experiment,
                                              "stores": stores})


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    """The sweep file of a sweep folder (sweep id, run name, experiment, parent run, store);
    ``{}`` when it is missing or unreadable."""
    try:
        info = json.loads((Path(sweep_dir) / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return info if isinstance(info, dict) else {}


def write_marker(results: Path, uri: str, run_id: str, experiment_id: str) -> None:
    """Record that the folder is run ``run_id`` in the store ``uri``: the top-level keys name
    the store it was logged to last (what the sweep summary and ``pipeline.compare`` read);
    ``stores`` keeps the run of every store it reached, so a folder synced to a second
    store still knows its run in the first."""
    stores: dict[str, Any] = {}
    try:
        old = json.loads((Path(results) / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        old = None
    if isinstance(old, dict):
        if isinstance(old.get("stores"), dict):
            stores.update(old["stores"])
        if old.get("uri") and old.get("run_id"):
            stores.setdefault(str(old["uri"]), {"run_id": old["run_id"], "experiment_id": old.get("experiment_id")})
    stores[uri] = {"run_id": run_id, "experiment_id": experiment_id}
    write_json(Path(results) / MARKER, {"uri": uri, "run_id": run_id, "experiment_id": experiment_id,
                                        "stores": stores})


def job_root(job_dir: Path) -> Path | None:
    """The folder a job ran in (its working directory), which the relative paths of its record
    name (``sqlite:///outputs/mlflow.db``), found from where the job's folder is now. Hydra's
    ``.hydra/hydra.yaml`` in the job folder says where the job ran (``runtime.cwd``) and where
    its folder was (``runtime.output_dir``): when the folder is still as deep below some folder
    as it was below the working directory (the tree was moved or copied whole), that folder;
    else the working directory, if it is still there; None when neither is known."""
    import yaml

    job_dir = Path(job_dir)
    try:
        hydra = yaml.load((job_dir / ".hydra" / "hydra.yaml").read_text(encoding="utf-8"),
                          Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        runtime = hydra["hydra"]["runtime"]
        cwd, output_dir = Path(str(runtime["cwd"])), Path(str(runtime["output_dir"]))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None
    here = job_dir.absolute()
    try:
        below = output_dir.relative_to(cwd).parts
    except ValueError:
        below = ()
    if below and here.parts[-len(below):] == below:
        return Path(*here.parts[: -len(below)])
    return cwd if cwd.is_absolute() and cwd.is_dir() else None


def has_plots(results: Path) -> bool:
    return all((Path(results) / name).is_file() for name in PLOTS)


def find_results(folders: list[Path]) -> list[Path]:
    """Every complete results folder (one with a record) under ``folders``, in path order;
    numbered job folders of a sweep come in job order."""
    found: set[Path] = set()
    for folder in folders:
        folder = Path(folder)
        if (folder / RECORD).is_file():
            found.add(folder)
        elif (folder / RESULTS / RECORD).is_file():
            found.add(folder / RESULTS)
        else:
            found.update(p.parent for p in folder.rglob(f"{RESULTS}/{RECORD}"))
    return sorted(found, key=lambda path: [(0, int(part), "") if part.isdigit() else (1, 0, part)
                                           for part in path.parts])


def write_failed(job_dir: Path, overrides: str, message: str) -> None:
    write_text(Path(job_dir) / FAILED, f"{overrides}\n{message.strip()}\n")


#: Marks a failed sweep job's objective (see ``JobFailed``) in log records.
FAILED_MARK = "[job failed]"


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

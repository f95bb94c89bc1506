"""MLflow tracking: the only module that imports mlflow.

One MLflow run per job, logged from the job's results folder (``pipeline.results``): params
(the flattened resolved config), metrics and K-sweep curves in one batch, artifacts (the
folder), the collection as the run's dataset input, tags. A Hydra multirun is one sweep: a
parent run, the jobs nested under it, and a summary logged to it when the sweep ends
(``pipeline.summary``).

Logging is idempotent. The record's ``job_key`` is a tag of the run: logging a folder that
is already in the store finds its run (and writes the ``mlflow_run.json`` marker) instead of
making a second one; a run left half-logged by a killed process is deleted and logged again.

MLflow work runs in a tracking process, ``python -m pipeline.sync --stdin`` (:class:`Tracker`):
it imports mlflow and opens the store while the job computes, then logs the folders it is
sent, one JSON line each way per request. Nothing but folder paths and settings cross the
pipe: what is logged is on disk, so a killed tracking process loses nothing that
``python -m pipeline.sync`` cannot finish.

Every failure of the store or server surfaces as :class:`TrackingError`; the caller has
already written the results to disk and says where they are.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import numpy as np

from pipeline import results as res
from pipeline.console import child_env

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: Tag names (contracts: the sweep summary and users' searches rely on them).
TAG_SWEEP = "sweep_id"
TAG_OVERRIDES = "hydra_overrides"
TAG_GIT = "git_commit"
TAG_PARENT = "mlflow.parentRunId"
TAG_SWEEP_PARENT = "sweep_parent"
TAG_RUN_NAME = "mlflow.runName"
TAG_JOB_KEY = res.TAG_JOB_KEY


class TrackingError(RuntimeError):
    """The tracking store or server failed; the results are on disk nonetheless."""


@dataclass(frozen=True)
class StoreSettings:
    """Where and how to log: the ``tracking`` config's store keys (what a record carries)."""

    uri: str
    artifact_root: str | None = None
    http_retries: int = 2
    http_timeout_s: int = 20

    @classmethod
    def of(cls, cfg: Any) -> "StoreSettings":
        """From a tracking config (DictConfig, dataclass) or a record's ``tracking`` dict."""
        get = cfg.get if isinstance(cfg, Mapping) or hasattr(cfg, "get") else (lambda k, d=None: getattr(cfg, k, d))
        root = get("artifact_root", None)
        return cls(uri=str(get("uri")), artifact_root=None if root is None else str(root),
                   http_retries=int(get("http_retries", 2)), http_timeout_s=int(get("http_timeout_s", 20)))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunRecord:
    """Everything one job logs (read from its record; see ``pipeline.results``)."""

    experiment: str
    run_name: str
    params: dict[str, str]
    metrics: dict[str, float]
    curves: dict[str, Any]  # name -> values for K = 1..k_max (logged with step = K)
    tags: dict[str, str]
    artifacts_dir: Path  # every file below is logged, keeping the layout
    dataset: dict[str, str]  # name, digest, source
    table: "pd.DataFrame | None" = None  # shown in the UI through log_table
    start_time_ms: int | None = None  # when the job started (the UI's duration)
    stepped: dict[str, dict[str, float]] | None = None  # name -> {step: value}, e.g. budget/* with step = B tokens


def _configure_http(settings: Any) -> None:
    # Fail fast against a dead server instead of MLflow's default ~2 minutes of retries.
    # The config wins over the environment: it is what the run logs as its params.
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(settings.http_retries)
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] = "1"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(settings.http_timeout_s)


def _sqlite_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    return None


@contextmanager
def _errors(what: str, uri: str | None = None) -> Iterator[None]:
    try:
        yield
    except TrackingError:
        raise
    except Exception as exc:  # MlflowException, requests errors, sqlalchemy errors...
        refusal = auth_refusal(exc, uri) if uri is not None else None
        if refusal is not None:
            raise TrackingError(refusal) from exc
        raise TrackingError(redact(f"{what}: {type(exc).__name__}: {exc}")) from exc


def client(settings: Any):
    """An MlflowClient on the configured store (a new sqlite store is created safely first)."""
    _configure_http(settings)
    uri = str(settings.uri)
    db = _sqlite_path(uri)
    if db is not None and not db.is_absolute():
        # a path relative to the working folder, which a shared tracking process changes per job
        uri = f"sqlite:///{Path.cwd() / db}"
    try:
        return _client(uri)
    except TrackingError:
        raise
    except Exception as exc:
        raise TrackingError(f"cannot open the MLflow store {settings.uri}: {type(exc).__name__}: {exc}") from exc


@lru_cache(maxsize=4)
def _client(uri: str):
    import mlflow  # noqa: F401  (heavy: imported only when tracking)
    from mlflow import MlflowClient

    db = _sqlite_path(uri)
    if db is not None:
        _create_sqlite_store(db)
    return MlflowClient(tracking_uri=uri)


#: How long a process waits for another one that is creating the same sqlite store.
STORE_LOCK_TIMEOUT_S = 120


def _create_sqlite_store(db: Path) -> None:
    """Make sure a usable sqlite store is at ``db``, creating it if missing: serialized across
    processes by a lock file beside it (``<db>.lock``, the filelock package) and atomic (the
    tables are made in a temporary file renamed into place), so two processes never migrate
    one file at once and a crash or a full disk never leaves a half-made store."""
    if db.is_dir():
        raise TrackingError(f"{db} is a folder, not an MLflow sqlite store: remove it or point "
                            "tracking.uri (or paths.store) at a file")
    if db.exists():
        return
    from filelock import FileLock, Timeout

    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrackingError(f"cannot create the folder of the MLflow store {db}: {exc}") from None
    lock = FileLock(str(db) + ".lock")
    try:
        with lock.acquire(timeout=STORE_LOCK_TIMEOUT_S):
            if db.exists():  # another process made it while this one waited
                return
            fd, tmp = tempfile.mkstemp(prefix=f".{db.name}.", suffix=".creating", dir=db.parent)
            os.close(fd)
            os.unlink(tmp)  # sqlite makes the file itself
            try:
                from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

                store = SqlAlchemyStore(f"sqlite:///{tmp}", str(db.parent / "mlartifacts"))
                store.engine.dispose()
                os.replace(tmp, db)
            except BaseException as exc:
                for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
                    try:
                        os.unlink(leftover)
                    except OSError:
                        pass
                if isinstance(exc, Exception):
                    raise TrackingError(f"cannot create the MLflow store {db}: {type(exc).__name__}: {exc}") from None
                raise
    except Timeout:
        raise TrackingError(f"another process has held {lock.lock_file} for {STORE_LOCK_TIMEOUT_S} s while "
                            f"creating {db}; if none is running, delete the lock file") from None


def warm() -> None:
    """Import what logging needs (~4 s): the tracking process does it while the job computes.

    Also what a first log would import on its way (the folder lock, pyarrow's pandas
    bridge for the per-query table), ~30 ms of the job's wait otherwise."""
    import netrc  # noqa: F401
    import filelock  # noqa: F401
    import mlflow.entities  # noqa: F401  (~2 s)
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (~1.7 s; the default store is sqlite)
    import pyarrow as pa
    import pyarrow.csv  # noqa: F401

    pa.table({"x": [0]}).to_pandas().to_dict()  # imports pyarrow.pandas_compat and pandas' to_dict


def ensure_store(settings: Any) -> None:
    """Create (migrate) the tracking store now, once, before parallel jobs start.

    Two jobs creating a new sqlite store at once lose runs ("table ... already exists").
    """
    with _errors(f"cannot open the MLflow store {settings.uri}"):
        client(settings).search_experiments(max_results=1)


#: The experiment tag that tells MLflow's UI what kind of work an experiment holds, and its
#: value for model training (the classic runs table, metrics and charts, not the GenAI views):
#: ``ExperimentKind.CUSTOM_MODEL_DEVELOPMENT`` of MLflow 3.17's UI
#: (``mlflow/server/js/build/static/js/main.*.js``). MLflow 3.17.2's UI reads it only when its
#: global workflow-type switch is off, and that switch is on in this build: the UI opens in its
#: GenAI view unless the URL carries ``?workflowType=machine_learning`` (what :func:`ui_url`
#: adds) or the user clicked "Model training" once (remembered by the browser).
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: A run's (or experiment's) description: markdown shown on its page in the UI.
TAG_NOTE = "mlflow.note.content"
#: The UI's query parameter that selects its model-training view.
UI_WORKFLOW = "workflowType=machine_learning"


def experiment_id(mlflow_client: Any, name: str, settings: Any) -> str:
    """The experiment's id, created (with artifacts under ``artifact_root`` and the tag
    :data:`TAG_EXPERIMENT_KIND`) if missing; an existing experiment without the tag (made by
    an older version) gets it.

    Parallel jobs may race to create it: the loser reads the winner's.
    """
    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        if TAG_EXPERIMENT_KIND not in (found.tags or {}):
            mlflow_client.set_experiment_tag(found.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND)
        return found.experiment_id
    location = None
    if settings.artifact_root and _sqlite_path(settings.uri) is not None:
        location = (Path(settings.artifact_root).resolve() / _folder_name(name)).as_uri()
    try:
        return mlflow_client.create_experiment(name, artifact_location=location,
                                               tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND})
    except Exception:
        found = mlflow_client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def ui_url(uri: str, experiment_id: str, run_id: str | None = None) -> str:
    """The UI page of a run (or of an experiment's runs table) on the server at ``uri``, in
    the model-training view."""
    page = f"#/experiments/{experiment_id}/runs" + (f"/{run_id}" if run_id else "")
    return f"{redact(uri).rstrip('/')}/{page}?{UI_WORKFLOW}"


def open_hint(uri: str, experiment_id: str, run_id: str | None = None) -> str:
    """One line telling the user how to see a run in the UI: for a sqlite store the ``mlflow
    ui`` command with the store's absolute path (it works from any folder) and the page to
    open; for a server, the run's URL."""
    db = _sqlite_path(uri)
    if db is None:
        return f"open it: {ui_url(uri, experiment_id, run_id)}"
    store = f"sqlite:///{db.resolve()}"
    return (f"open it: mlflow ui --backend-store-uri {store}   then "
            f"{ui_url('http://127.0.0.1:5000', experiment_id, run_id)}")


def new_store_note(uri: str) -> str | None:
    """The line to print when a job is about to create a sqlite store where none is (a run
    from another folder silently starting a new store confuses); None otherwise. Call it
    before the store is opened."""
    db = _sqlite_path(uri)
    if db is None or db.exists():
        return None
    return (f"note: no MLflow store in {db.resolve().parent}; creating a new one, {db.resolve()} "
            "(runs logged to other stores are not in it; paths.root or tracking.uri picks the store)")


def _folder_name(name: str) -> str:
    """An experiment's artifact folder under the artifact root: one path component, never
    ``.`` or ``..`` (``tracking.experiment=..`` must not escape the root)."""
    import re

    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "experiment"
    return folder if folder.strip(".") else "_" + folder


#: Errors that parallel writers to one store cause and a second attempt resolves: sqlite's
#: lock, and two jobs inserting the same dataset input at once (MLflow checks, then inserts).
_RETRYABLE = ("database is locked", "UNIQUE constraint failed", "Duplicate entry", "duplicate key")


def _retrying(fn, attempts: int = 5):
    """Call ``fn``, trying again after the races of parallel jobs on one store."""
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if not any(marker in str(exc) for marker in _RETRYABLE) or attempt == attempts - 1:
                raise
            time.sleep(0.1 * 2**attempt)


#: The run tag that lists the tables MLflow's UI shows (``MlflowClient.log_table`` sets it).
TAG_LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"
#: A run's per-query table, as MLflow's UI and ``mlflow.load_table`` read it.
TABLE_FILE = "per_query_table.json"
#: A sweep's table of jobs on its parent run.
SWEEP_TABLE_FILE = "summary/sweep_table.json"


def _table_tag(artifact_file: str) -> str:
    """The value of :data:`TAG_LOGGED_ARTIFACTS` for a run whose one table is ``artifact_file``."""
    return json.dumps([{"path": artifact_file, "type": "table"}])


def _log_table(mlflow_client: Any, run_id: str, table: "pd.DataFrame", artifact_file: str) -> None:
    """``MlflowClient.log_table`` for a run whose :data:`TAG_LOGGED_ARTIFACTS` the caller sets
    in a request it makes anyway (:func:`_table_tag`): the same file (pandas' split JSON,
    MLflow 3.17's writer) without log_table's three store round trips (list the artifacts,
    read the run, set the tag) and its scan of every text column for images; a tenth of a
    sweep's tracking time. It replaces an existing file (log_table appends to it). Tested
    against log_table."""
    folder, name = posixpath.split(artifact_file)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        table.to_json(path, orient="split", index=False, date_format="iso")
        mlflow_client.log_artifact(run_id, str(path), artifact_path=folder or None)


def log_run(
    settings: Any,
    record: RunRecord,
    parent_run_id: str | None = None,
    before_finish: Callable[[Any, str], None] | None = None,
    exp_id: str | None = None,
) -> str:
    """Log one job as one MLflow run; returns its run id. Raises TrackingError.

    ``before_finish(client, run_id)`` runs after everything else is logged and before the run
    is marked FINISHED: a FINISHED run is a complete one. ``exp_id``: the id of the record's
    experiment when the caller has just looked it up."""
    with _errors(f"MLflow tracking at {settings.uri} failed", settings.uri):
        mlflow_client = client(settings)
        from mlflow.entities import DatasetInput, InputTag, Metric, Param
        from mlflow.entities import Dataset as DatasetEntity

        if exp_id is None:
            exp_id = _retrying(lambda: experiment_id(mlflow_client, record.experiment, settings))
        tags = dict(record.tags)
        if parent_run_id:
            tags[TAG_PARENT] = parent_run_id
        if record.table is not None:  # what MlflowClient.log_table sets, set with the run (see _log_table)
            tags[TAG_LOGGED_ARTIFACTS] = _table_tag(TABLE_FILE)
        run = _retrying(
            lambda: mlflow_client.create_run(exp_id, run_name=record.run_name, tags=tags, start_time=record.start_time_ms)
        )
        run_id = run.info.run_id
        try:
            now = int(time.time() * 1000)
            metrics = [Metric(key, float(value), now, 0) for key, value in record.metrics.items()]
            for name, values in record.curves.items():
                metrics += [Metric(name, float(v), now, step) for step, v in enumerate(values, start=1)]
            for name, points in (record.stepped or {}).items():
                metrics += [Metric(name, float(v), now, int(step)) for step, v in points.items()]
            params = [Param(key, value[:6000]) for key, value in record.params.items()]
            _retrying(lambda: mlflow_client.log_batch(run_id, metrics=metrics, params=params))
            dataset = DatasetEntity(
                name=record.dataset["name"],
                digest=record.dataset["digest"][:36],
                source_type="local" if Path(record.dataset["source"]).exists() else "code",
                source=json.dumps({"uri": record.dataset["source"]}),
            )
            _retrying(
                lambda: mlflow_client.log_inputs(
                    run_id, datasets=[DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "evaluation")])]
                )
            )
            if record.table is not None:
                _log_table(mlflow_client, run_id, record.table, TABLE_FILE)
            mlflow_client.log_artifacts(run_id, str(record.artifacts_dir))
            if before_finish is not None:
                before_finish(mlflow_client, run_id)
        except Exception:
            try:  # keep the original error: marking the run may fail for the same reason
                mlflow_client.set_terminated(run_id, status="FAILED")
            except Exception as exc:
                log.warning("could not mark run %s as FAILED: %s", run_id, exc)
            raise
        _retrying(lambda: mlflow_client.set_terminated(run_id, status="FINISHED"))
        return run_id


# --------------------------------------------------------------------------- from disk


def _runs_with_tags(mlflow_client: Any, exp_id: str, tags: Mapping[str, str]) -> list[Any]:
    filters = " and ".join(f"tags.{key} = '{value}'" for key, value in tags.items())
    return mlflow_client.search_runs([exp_id], filter_string=filters, max_results=100)


#: Headline metrics of a run's description, at the run's k (label, metric key pattern).
_DESCRIBED = (("nDCG", "ndcg_at_{k}"), ("precision", "precision_at_{k}"), ("recall", "recall_at_{k}"),
              ("MRR", "mrr_at_{k}"), ("MAP", "map_at_{k}"), ("context utility", "context_utility_at_{k}"))
#: Artifacts a description points to, when the run has them (path, what it is).
_POINTERS = (("plots/k_sweep.png", "every metric vs K, k marked"), ("plots/precision_recall.png", "precision vs recall"),
             ("per_query_table.json", "one row per query: its metrics, text and top k"), ("failures.md", "queries with no relevant document in the top k"),
             ("definition_card.md", "how each number is defined"))


def _settings_of(params: Mapping[str, str], group: str) -> str:
    """``k1=1.2, b=0.75`` from the flattened params of a config group (no ``_target_``)."""
    return ", ".join(f"{key[len(group) + 1:]}={value}" for key, value in params.items()
                     if key.startswith(group + ".") and not key.rsplit(".", 1)[-1].startswith("_")
                     and value not in ("null", "None"))


def _choice(record: Mapping[str, Any], group: str) -> str:
    target = str(record["params"].get(f"{group}._target_", group))
    return str(record["tags"].get(f"choice.{group}") or target.rsplit(".", 1)[-1])


def run_description(record: Mapping[str, Any], results: Path | None = None) -> str:
    """A job's description (``mlflow.note.content``, markdown, shown on its run page): the
    dataset, the retriever and its settings, k, the placement and attention curve, the
    headline metrics, how to read the curves, and where the plots and tables are."""
    params, metrics, k = record["params"], record["metrics"], int(record["k"])
    k_max = params.get("k_max", "?")
    objective = str(record.get("objective") or params.get("objective", ""))
    n_q, n_docs = metrics.get("n_queries"), None
    if results is not None:
        try:
            n_docs = json.loads((Path(results) / "metrics.json").read_text())["collection"]["n_docs"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    counts = f"{int(n_q)} queries" if n_q is not None else ""
    if n_docs is not None:
        counts += f", {int(n_docs)} documents"
    # First what a reader wants at a glance (the UI shows the first lines; "Show more" the rest).
    shown = [(label, key.format(k=k)) for label, key in _DESCRIBED if key.format(k=k) in metrics]
    lines = [f"On **{record['dataset']['name']}**" + (f" ({counts})" if counts else "") + f", at k = {k}: "
             + ", ".join(f"{label} {metrics[key]:.4f}" for label, key in shown)
             + "".join(f"; {key.upper()} at full depth {metrics[key]:.4f}" for key in ("mrr", "map") if key in metrics)
             + "."]
    low, high = metrics.get(f"{objective}_ci_low"), metrics.get(f"{objective}_ci_high")
    if objective in metrics:
        ci = f" (95% CI {low:.4f} to {high:.4f}, bootstrap over queries)" if low is not None and high is not None else ""
        lines += ["", f"**Objective** `{objective}` = {metrics[objective]:.4f}{ci}."]
    rows = [("retriever", f"{_choice(record, 'retriever')}"
                          + (f" ({s})" if (s := _settings_of(params, 'retriever')) else "")),
            ("k", f"{k} chunks placed in the context; metrics for every K = 1..{k_max}"),
            ("placement", f"reorder {_choice(record, 'reorder')}, attention curve {_choice(record, 'attention')}"
                          + (f" ({s})" if (s := _settings_of(params, 'attention')) else ""))]
    chunker = str(params.get("chunker._target_", ""))
    if chunker and not chunker.endswith("NoChunker"):
        rows.append(("chunking", chunker.rsplit(".", 1)[-1] + (f" ({s})" if (s := _settings_of(params, 'chunker')) else "")))
    rows.append(("scoring", f"gain {params.get('gain', 'exp')}, relevant when grade >= {params.get('relevance_level', 1)}"
                 + (", judged documents only (trec_eval -J)" if params.get("judged_only") in ("True", "true") else "")))
    if overrides := record["tags"].get(TAG_OVERRIDES):
        rows.append(("command line", f"`{overrides}`"))
    lines += ["", "| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
    lines += ["", f"**Curves:** the `curve/*` metrics (Model metrics tab) have **step = K**, the cut-off, "
              f"for K = 1..{k_max}; the other metrics are single values (`ndcg_at_{k}` is nDCG at K = {k})."]
    have = [(path, what) for path, what in _POINTERS
            if results is None or (Path(results) / path).is_file() or path == "per_query_table.json"
            and record.get("table_columns")]
    if have:
        lines += ["", "**Where things are** (Artifacts tab): " + "; ".join(f"`{path}` ({what})" for path, what in have) + "."]
    return "\n".join(lines) + "\n"


def _record_of(results: Path, record: dict[str, Any]) -> RunRecord:
    table = None
    columns = record.get("table_columns")
    if columns:
        import pyarrow.csv as pa_csv

        # Only the table's columns are parsed (19 of ~200 on SciFact: 4 ms instead of 14 of the job's wait).
        per_query = pa_csv.read_csv(results / "per_query.csv", convert_options=pa_csv.ConvertOptions(
            column_types={"query_id": "string"}, include_columns=list(columns)))
        table = per_query.select(list(columns)).to_pandas()
    return RunRecord(
        experiment=record["experiment"], run_name=record["run_name"], params=record["params"],
        metrics=record["metrics"], curves=record["curves"], stepped=record.get("stepped"),
        tags={TAG_NOTE: run_description(record, results)[:8000], **record["tags"], TAG_JOB_KEY: record["job_key"]},
        artifacts_dir=results, dataset=record["dataset"], table=table, start_time_ms=record["start_time_ms"],
    )


def ensure_plots(results: Path, record: dict[str, Any]) -> None:
    """Draw the run's figures from its record when the job left them to the tracker."""
    if res.has_plots(results):
        return
    from pipeline.plots import save_run_figures

    curves = {name.removeprefix("curve/"): np.asarray(values, np.float64) for name, values in record["curves"].items()}
    save_run_figures(results / "plots", curves, int(record["k"]), record["run_name"])


def log_results(results: Path, settings: Any | None = None) -> str:
    """Log a results folder as one MLflow run, exactly once; returns the run id.

    A folder whose marker names this store is done already; otherwise the store is asked
    for a run with the record's job key (a FINISHED one is adopted; unfinished ones, left by
    a killed logger, are deleted and the job is logged again). Raises TrackingError, or
    InputError for a corrupt record."""
    results = Path(results)
    record = res.read_record(results)
    if settings is None:
        if record["tracking"] is None:
            raise TrackingError(f"{results}: the job ran with tracking=none: name a store to log it to")
        settings = StoreSettings.of(record["tracking"])
    from filelock import FileLock, Timeout

    try:  # one logger per folder at a time: the job's tracking process and a sync may overlap
        # (the lock file lives beside the results folder, which is logged whole as artifacts)
        with FileLock(str(results.parent / f".{results.name}.mlflow.lock"), timeout=FOLDER_LOCK_TIMEOUT_S):
            return _log_results_locked(results, record, settings)
    except Timeout:
        raise TrackingError(f"{results}: another process has been logging this folder for "
                            f"{FOLDER_LOCK_TIMEOUT_S} s") from None


#: How long a logger waits for another one logging the same folder.
FOLDER_LOCK_TIMEOUT_S = 300


def _log_results_locked(results: Path, record: dict[str, Any], settings: Any) -> str:
    marker = res.read_marker(results)
    if marker is not None and marker.get("uri") == settings.uri:
        return marker["run_id"]
    start = time.perf_counter()
    ensure_plots(results, record)
    with _errors(f"MLflow tracking at {settings.uri} failed", settings.uri):
        mlflow_client = client(settings)
        exp_id = _retrying(lambda: experiment_id(mlflow_client, record["experiment"], settings))
        for found in _runs_with_tags(mlflow_client, exp_id, {TAG_JOB_KEY: record["job_key"]}):
            if found.info.status == "FINISHED":
                res.write_marker(results, settings.uri, found.info.run_id, exp_id)
                return found.info.run_id
            mlflow_client.delete_run(found.info.run_id)  # half-logged by a process that died
        parent = sweep_parent(settings, record)

        def track_time(mlflow_client: Any, run_id: str) -> None:
            mlflow_client.log_metric(run_id, "time_track_s", time.perf_counter() - start)

        run_id = log_run(settings, _record_of(results, record), parent, before_finish=track_time, exp_id=exp_id)
        res.write_marker(results, settings.uri, run_id, exp_id)
        return run_id


# --------------------------------------------------------------------------- sweeps


def read_sweep_file(sweep_dir: Path) -> dict[str, Any]:
    try:
        info = json.loads((Path(sweep_dir) / res.SWEEP_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return info if isinstance(info, dict) else {}


def sweep_parent(settings: Any, record: dict[str, Any]) -> str | None:
    """The parent run of the job's sweep (found or created, and remembered in the sweep
    file), when the job is part of a sweep that logs to the job's experiment."""
    sweep = record.get("sweep") or {}
    if not sweep.get("sweep_id"):
        return None
    sweep_dir = Path(sweep.get("dir", ""))
    info = read_sweep_file(sweep_dir) if sweep.get("dir") else {}
    if info.get("experiment", record["experiment"]) != record["experiment"]:
        return None
    if info.get("parent_run_id") and info.get("uri", settings.uri) == settings.uri:
        return str(info["parent_run_id"])
    found = start_sweep(settings, record["experiment"], sweep["sweep_id"], {}, run_name=info.get("run_name"))
    if sweep.get("dir"):
        res.write_json(sweep_dir / res.SWEEP_FILE, {**info, **found, "experiment": record["experiment"]})
    return found["parent_run_id"]


def start_sweep(settings: Any, experiment: str, sweep_id: str, tags: Mapping[str, str],
                run_name: str | None = None) -> dict[str, str]:
    """Create the store and the sweep's parent run before any job tracks (or find the
    parent a previous attempt made: one parent per sweep id). The parent is named
    ``run_name`` (the sweep's overrides, ``pipeline.sweep.sweep_name``) and described as
    running until :func:`finish_sweep` describes its result. ``tags`` may carry the name
    instead (``mlflow.runName``: what the sweep callback sends through the tracking process)."""
    tags = dict(tags)
    run_name = run_name or tags.pop(TAG_RUN_NAME, None)
    with _errors(f"cannot start the sweep's MLflow parent run at {settings.uri}", settings.uri):
        ensure_store(settings)
        mlflow_client = client(settings)
        exp_id = _retrying(lambda: experiment_id(mlflow_client, experiment, settings))
        found = _runs_with_tags(mlflow_client, exp_id, {TAG_SWEEP: sweep_id, TAG_SWEEP_PARENT: "true"})
        if found:
            run_id = found[0].info.run_id
        else:
            note = (f"**{run_name or 'sweep'}**: a sweep, running; its jobs are nested under this run. When it "
                    "ends, this description gives the best job and the summary is under `summary/`.\n")
            run = mlflow_client.create_run(
                exp_id, run_name=run_name or f"sweep {sweep_id}",
                tags={TAG_SWEEP: sweep_id, TAG_SWEEP_PARENT: "true", TAG_NOTE: note, **tags}
            )
            run_id = run.info.run_id
        return {"sweep_id": sweep_id, "parent_run_id": run_id, "experiment_id": exp_id, "uri": settings.uri}


def finish_sweep(
    settings: Any,
    parent_run_id: str,
    summary_dir: Path,
    table: "pd.DataFrame",
    status: str = "FINISHED",
    tags: Mapping[str, str] | None = None,
    metrics: Mapping[str, float] | None = None,
    description: str | None = None,
) -> None:
    """Log the summary folder (table, figure), the table itself, the best job's tags and
    metrics and the sweep's ``description`` (markdown) to the parent run, then close it with
    ``status``."""
    if description:
        tags = {**(tags or {}), TAG_NOTE: description[:8000]}
    if len(table):  # what MlflowClient.log_table sets, set with the batch below (see _log_table)
        tags = {**(tags or {}), TAG_LOGGED_ARTIFACTS: _table_tag(SWEEP_TABLE_FILE)}
    with _errors(f"cannot log the sweep summary to {settings.uri}", settings.uri):
        mlflow_client = client(settings)
        if tags or metrics:
            from mlflow.entities import Metric, RunTag

            now = int(time.time() * 1000)
            mlflow_client.log_batch(
                parent_run_id,
                metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
                tags=[RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()],
            )
        if len(table):
            _log_table(mlflow_client, parent_run_id, table, SWEEP_TABLE_FILE)
        mlflow_client.log_artifacts(parent_run_id, str(summary_dir), artifact_path="summary")
        mlflow_client.set_terminated(parent_run_id, status=status)


# --------------------------------------------------------------------------- the process


#: The environment variable that sets how long (seconds) the shared tracking process waits
#: for the next job before it exits; ``0`` gives every job a tracking process of its own.
TRACKER_IDLE_ENV = "PIPELINE_TRACKER_IDLE_S"
TRACKER_IDLE_S = 600.0
#: How long a job waits for a shared tracking process it started to listen before it starts
#: one of its own instead.
SHARED_START_S = 3.0
#: Variables that differ between shells, terminals, launchers' jobs and workers but not in
#: what tracking does: they do not make another shared tracking process (a sweep's parallel
#: jobs, each with its own SLURM_JOB_ID or SUBMITIT_* or thread limits, share one).
_VOLATILE_ENV = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "LINES", "COLUMNS", "WINDOWID", "TERM_SESSION_ID",
                           "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "TMUX_PANE", "PS1", "PROMPT_COMMAND",
                           "CUDA_VISIBLE_DEVICES"})
_VOLATILE_ENV_PREFIXES = ("SLURM_", "SUBMITIT_", "LOKY_", "JOBLIB_", "PBS_", "LSB_", "SGE_", "PMI_", "OMPI_",
                          "OMP_", "MKL_", "OPENBLAS_", "NUMEXPR_", "VECLIB_", "KMP_", "PYTEST_")


def tracker_idle_s() -> float:
    text = os.environ.get(TRACKER_IDLE_ENV, "").strip()
    if not text:
        return TRACKER_IDLE_S
    try:
        value = float(text)
    except ValueError:
        log.warning("%s=%r is not a number of seconds: each job starts its own tracking process", TRACKER_IDLE_ENV, text)
        return 0.0
    return value if value > 0 else 0.0


def shared_address() -> Path | None:
    """The socket of this user's shared tracking process for this code, Python and environment,
    or None when there is none to use (``PIPELINE_TRACKER_IDLE_S=0``, no Unix sockets, or a
    folder for it that is not this user's alone).

    The name hashes what the process depends on: the interpreter, this package's source
    files (path, size, time), mlflow's installation and the environment (less
    ``_VOLATILE_ENV`` and ``_VOLATILE_ENV_PREFIXES``), so a job never talks to a process
    running other code or settings."""
    import hashlib
    import socket

    if tracker_idle_s() <= 0 or not hasattr(socket, "AF_UNIX") or not hasattr(os, "getuid"):
        return None
    folder = _shared_folder()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.stat()
        here = Path(__file__).resolve().parent
        stamps = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(here.glob("*.py"))]
        from importlib.util import find_spec

        spec = find_spec("mlflow")
        if spec is not None and spec.origin:
            stamps.append((spec.origin, os.stat(spec.origin).st_mtime_ns, 0))
    except (OSError, ImportError, ValueError):
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # someone else's, or open to others: never send requests through it
    env = sorted((k, v) for k, v in os.environ.items()
                 if k not in _VOLATILE_ENV and not k.startswith(_VOLATILE_ENV_PREFIXES))
    key = hashlib.sha256(json.dumps([sys.executable, sys.version, str(here), stamps, env]).encode()).hexdigest()
    path = folder / f"{key[:20]}.sock"
    return path if len(str(path)) < 100 else None  # sun_path holds 108 bytes


_STARTED: list[subprocess.Popen] = []


def _shared_folder() -> Path:
    return Path(tempfile.gettempdir()) / f"pipeline-tracking-{os.getuid()}"


def stop_shared(wait_s: float = 30.0) -> list[int]:
    """Ask every shared tracking process of this user to leave (SIGTERM: no new job is
    served; the jobs connected now are served to their end) and wait up to ``wait_s`` for
    them to exit. Returns their process ids. A lock file that no process holds names no one
    (its process id may be another process's by now) and is left alone."""
    import fcntl
    import signal

    folder = _shared_folder() if hasattr(os, "getuid") else None
    stopped = []
    for lock_path in sorted(folder.glob("*.sock.lock")) if folder is not None and folder.is_dir() else []:
        with open(lock_path, "r+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                continue  # nobody holds it: no process serves there
            except OSError:
                pass
            try:
                pid = int(lock.read().strip() or 0)
            except ValueError:
                continue
        if pid > 0:
            try:
                os.kill(pid, signal.SIGTERM)
                stopped.append(pid)
            except OSError:
                pass
    deadline = time.monotonic() + wait_s
    for pid in stopped:
        mine = [proc for proc in _STARTED if proc.pid == pid]  # a child of ours: reap it
        if mine:
            try:
                mine[0].wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            continue
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.05)
    return stopped


def _connect(address: Path) -> Any:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(address))
    except OSError:
        sock.close()
        return None
    return sock


def _shared_tracker() -> Tracker | None:
    """A connection to the shared tracking process, started first if none listens; None
    when there is none to use or it did not start within ``SHARED_START_S``."""
    address = shared_address()
    if address is None:
        return None
    sock = _connect(address)
    started = None
    if sock is None:
        with open(str(address) + ".log", "ab") as err:
            _STARTED[:] = [subprocess.Popen(
                [sys.executable, "-m", "pipeline.sync", "--serve", str(address), "--idle", str(tracker_idle_s())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=child_env(),
                cwd=str(address.parent), start_new_session=True,  # Ctrl-C in the job's terminal is not for it
            )]  # held, not waited for: it outlives the job
        started = (f"started the shared tracking process (pid {_STARTED[0].pid}, {address}); it exits after "
                   f"{tracker_idle_s():.0f} s without a job (python -m pipeline.sync --stop stops it)")
        deadline = time.monotonic() + SHARED_START_S
        while sock is None and time.monotonic() < deadline:
            time.sleep(0.01)
            sock = _connect(address)
        if sock is None:
            log.debug("the shared tracking process did not start within %.0f s; using one of this job's own", SHARED_START_S)
            return None
    tracker = Tracker(sock=sock, address=address)
    tracker.started = started
    return tracker


class Tracker:
    """The job's line to a tracking process, started before the job computes anything.

    Importing mlflow and opening a sqlite store take ~4 s of CPU, more than a small job
    computes. So jobs share one tracking process, ``python -m pipeline.sync --serve SOCKET``
    (:func:`shared_address`): the first job starts it, and it waits ``PIPELINE_TRACKER_IDLE_S``
    (600 s) for the next job before it exits, so that a later job's logging takes a fraction
    of a second. Where there is none to use (``PIPELINE_TRACKER_IDLE_S=0``), the job starts
    its own, ``python -m pipeline.sync --stdin``, whose imports overlap with loading,
    retrieval and scoring. Requests are JSON lines (an operation, folder paths and the job's
    working folder); answers come back in order, one JSON line each. A plain ``python``
    child, not multiprocessing, which cannot start from joblib's workers.
    """

    def __init__(self, sock: Any = None, address: Path | None = None) -> None:
        self._buffer = b""  # answers read but not yet taken (os.read, so select sees every byte)
        self._pending = 0
        self._opened: set[str] = set()
        self._sock, self._address, self._gone = sock, address, False
        #: What the job should log once its logging is set up: it started the shared process.
        self.started: str | None = None
        if sock is not None:  # a connection to the shared tracking process
            self._proc = None
            self._fd = sock.fileno()
            return
        # Its own stderr file: holding the job's stderr open would keep a pipe reading the
        # job (`python -m pipeline | tee`) waiting for mlflow's shutdown after the job ends.
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.sync", "--stdin"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=child_env(), bufsize=0,
        )
        self._fd = self._proc.stdout.fileno()

    @property
    def shared(self) -> bool:
        """True when this talks to the shared tracking process (:func:`shared_address`)."""
        return self._sock is not None

    def alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        if self._gone:
            return False
        import select
        import socket

        try:  # readable with nothing to read: the other end closed
            if self._pending == 0 and select.select([self._fd], [], [], 0)[0]:
                self._gone = self._sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            self._gone = True
        return not self._gone

    def send(self, request: dict[str, Any]) -> None:
        """Queue a request without waiting for its answer (requests run one at a time, in order)."""
        data = (json.dumps({**request, "cwd": os.getcwd()}) + "\n").encode()
        try:
            if self._proc is not None:
                self._proc.stdin.write(data)
            else:
                self._sock.sendall(data)
        except (BrokenPipeError, OSError, ValueError) as exc:
            self._gone = True
            raise TrackingError(f"the MLflow tracking process is gone ({exc})") from None
        self._pending += 1

    def call(self, request: dict[str, Any], timeout: float | None = None) -> Any:
        """Send a request and return its answer's result (answers of earlier requests that
        failed are logged as warnings); TrackingError when it failed or ``timeout`` seconds
        passed without its answer."""
        self.send(request)
        deadline = None if timeout is None else time.monotonic() + timeout
        answer: dict[str, Any] = {}
        while self._pending:
            line = self._read_line(deadline)
            if line is None:
                raise TrackingError(f"no answer from the MLflow tracking process within {timeout:.0f} s")
            if not line:
                self._gone = True
                if self._proc is None:
                    raise TrackingError(f"the shared MLflow tracking process closed the connection (it died?); "
                                        f"its log: {Path(str(self._address) + '.log')}")
                code = self._proc.wait()
                self._log.seek(0)
                tail = self._log.read().decode(errors="replace")[-2000:]
                raise TrackingError(f"the MLflow tracking process died (exit status {code}):\n{tail}")
            self._pending -= 1
            answer = json.loads(line)
            if not answer["ok"] and self._pending:
                log.warning("an earlier tracking request failed: %s", answer["error"])
        if not answer.get("ok"):
            raise TrackingError(answer.get("error", "no answer"))
        return answer.get("result")

    def _read_line(self, deadline: float | None) -> bytes | None:
        """One answer line; b"" when the process is gone, None when ``deadline`` passed."""
        import select

        fd = self._fd
        while b"\n" not in self._buffer:
            if deadline is not None:
                ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    return None
            try:
                chunk = os.read(fd, 65536)
            except ConnectionError:
                chunk = b""
            if not chunk:
                return b""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def open(self, settings: StoreSettings) -> None:
        """Open (create) the store in the background, once per store."""
        if settings.uri not in self._opened:
            self.send({"op": "open", "tracking": settings.as_dict()})
            self._opened.add(settings.uri)

    def log(self, results: Path, settings: StoreSettings, wait: bool = True, note_failure: bool = False) -> str | None:
        """Log a results folder; ``wait=False`` returns at once (a failure then leaves a
        FAILED note in the job's folder when ``note_failure``)."""
        request = {"op": "log", "results": str(Path(results).resolve()), "tracking": settings.as_dict(),
                   "note_failure": note_failure}
        if wait:
            return self.call(request)
        self.send(request)
        return None

    def close(self) -> None:
        """Close the pipe: the process exits on its own once every request is done, and the
        job does not wait ~1 s for mlflow's interpreter shutdown. The shared process finishes
        the connection's requests and waits for the next job."""
        try:
            if self._proc is not None:
                self._proc.stdin.close()
            else:
                self._sock.close()
        except OSError:
            pass


class TrackerFigures:
    """A single job's figures, drawn by the shared tracking process when it is already running.

    There matplotlib is imported once (:func:`pipeline.sync.serve_shared` loads it once its
    first job is done), not in every job: that import was ~1 s of a warm single job's 2.7 s.
    The interface of ``pipeline.plots.FigureProcess``: :meth:`draw` queues the request and
    returns, :meth:`wait` returns once the figures are on disk, drawn here when the tracking
    process failed, died or took longer than ``timeout`` (``mkstemp`` names: two writers of
    one figure never meet)."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker
        self._queued: list[dict[str, Any]] = []  # plots.figure_request()s

    def draw(self, folder: str | Path, curves: Mapping[str, Any], k: int, title: str) -> None:
        from pipeline.plots import figure_request

        request = figure_request(folder, curves, k, title)
        self._queued.append(request)
        try:
            self._tracker.send({"op": "draw", **request})
        except TrackingError:
            pass  # wait() draws them here

    def wait(self, timeout: float = 120.0) -> None:
        queued, self._queued = self._queued, []
        if not queued:
            return
        from pipeline import plots

        reason = "the tracking process did not draw them"
        try:  # answered in order: once "flush" is, every draw before it is done (or failed)
            self._tracker.call({"op": "flush"}, timeout=timeout)
        except TrackingError as err:
            reason = f"no answer from the tracking process ({err})"
        for request in queued:
            if not all((Path(request["folder"]) / name).is_file() for name in plots.RUN_FIGURES):
                log.warning("%s; drawing the figures in %s here", reason, request["folder"])
                plots.draw_here(request)


_TRACKER: list[Tracker] = []  # the process's tracking process (one, reused by a sequential sweep)


def tracker(settings: StoreSettings | None = None) -> Tracker:
    """This process's tracking process, started on first use (and again if it died), with
    the store opened in the background."""
    if not _TRACKER or not _TRACKER[0].alive():
        if not _TRACKER:
            import atexit

            atexit.register(lambda: [t.close() for t in _TRACKER])
        _TRACKER[:] = [_shared_tracker() or Tracker()]
    if settings is not None:
        _TRACKER[0].open(settings)
    return _TRACKER[0]


def release() -> None:
    """Let this process's tracking process go: it finishes what it was sent, then exits, and
    the next :func:`tracker` call starts a fresh one. A job does this before building a large
    index (``pipeline.run.TRACKER_RELEASE_DOCS``), so that mlflow's ~210 MiB are not held
    beside it; the fresh process imports mlflow while the job places, scores and writes.

    The shared tracking process is asked to leave as soon as no job is connected to it,
    unless another job connects first: while it serves other jobs, it stays."""
    if _TRACKER:
        done = _TRACKER.pop()
        if done.shared:
            try:
                done.send({"op": "release"})
            except TrackingError:
                pass
        done.close()


def prestart() -> None:
    """Start the tracking process before the config is even composed (``python -m
    pipeline`` does, unless told ``tracking=none``): mlflow's import then overlaps with
    Hydra's start-up too."""
    tracker()


# --------------------------------------------------------------------------- reading runs (pipeline.compare)
#: Experiment of the runs that ``python -m pipeline.compare --log`` makes (outside a sweep).
COMPARE_EXPERIMENT = "compare"


@contextmanager
def _read_errors(what: str) -> Iterator[None]:
    """:func:`_errors` that lets the user's mistakes (InputError: no such run) through."""
    from pipeline.errors import InputError

    try:
        yield
    except (TrackingError, InputError):
        raise
    except Exception as exc:
        raise TrackingError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _read_client(settings: Any) -> Any:
    """A client on an existing store: reading must not create an empty sqlite store."""
    from pipeline.errors import InputError

    db = _sqlite_path(str(settings.uri))
    if db is not None and not db.is_file():
        raise InputError("no MLflow store there (--tracking-uri names the store)", db)
    return client(settings)


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(exc).lower()


def _run_info(run: Any) -> dict[str, Any]:
    """What the comparison needs of a run, as plain data."""
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name or run.data.tags.get("mlflow.runName", run.info.run_id),
        "experiment_id": run.info.experiment_id,
        "status": run.info.status,
        "start_time": run.info.start_time or 0,
        "tags": dict(run.data.tags),
        "params": dict(run.data.params),
        "parent_run_id": run.data.tags.get(TAG_PARENT),
        "is_sweep_parent": run.data.tags.get(TAG_SWEEP_PARENT) == "true",
    }


def get_run_info(settings: Any, run_id: str) -> dict[str, Any]:
    """One run as plain data (see :func:`_run_info`); InputError when the store lacks it."""
    from pipeline.errors import InputError

    with _read_errors(f"cannot read the MLflow store {settings.uri}"):
        mlflow_client = _read_client(settings)
        try:
            run = mlflow_client.get_run(run_id)
        except Exception as exc:
            if _not_found(exc):
                raise InputError(f"no MLflow run {run_id} in {settings.uri}", f"mlflow:{run_id}") from None
            raise
        return _run_info(run)


def _search_all(mlflow_client: Any, exp_ids: list[str], filter_string: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = mlflow_client.search_runs(exp_ids, filter_string=filter_string, max_results=5000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def child_runs(settings: Any, parent_run_id: str) -> list[dict[str, Any]]:
    """The FINISHED runs nested under ``parent_run_id`` (a sweep's jobs), in start order."""
    parent = get_run_info(settings, parent_run_id)
    with _read_errors(f"cannot read the MLflow store {settings.uri}"):
        mlflow_client = _read_client(settings)
        found = _search_all(mlflow_client, [parent["experiment_id"]], f"tags.`{TAG_PARENT}` = '{parent_run_id}'")
    runs = [_run_info(r) for r in found if r.info.status == "FINISHED"]
    return sorted(runs, key=lambda r: (r["start_time"], r["run_name"], r["run_id"]))


def experiment_runs(settings: Any, experiment: str, filter_string: str = "") -> list[dict[str, Any]]:
    """The FINISHED job runs (not sweep parents) of an experiment matching an MLflow filter
    string, in start order; InputError for an unknown experiment or a bad filter."""
    from pipeline.errors import InputError

    source = f"mlflow-experiment:{experiment}"
    with _read_errors(f"cannot read the MLflow store {settings.uri}"):
        mlflow_client = _read_client(settings)
        found = mlflow_client.get_experiment_by_name(experiment)
        if found is None:
            raise InputError(f"no experiment {experiment!r} in {settings.uri}", source)
        try:
            runs = _search_all(mlflow_client, [found.experiment_id], filter_string)
        except Exception as exc:
            if "filter" in str(exc).lower() or getattr(exc, "error_code", "") == "INVALID_PARAMETER_VALUE":
                raise InputError(f"bad MLflow filter {filter_string!r}: {exc}", source) from None
            raise
    infos = [_run_info(r) for r in runs if r.info.status == "FINISHED"]
    infos = [r for r in infos if not r["is_sweep_parent"]]
    return sorted(infos, key=lambda r: (r["start_time"], r["run_name"], r["run_id"]))


def download_artifact(settings: Any, run_id: str, path: str, dst: Path) -> Path:
    """Download one artifact file of a run into the folder ``dst``; InputError when the run
    has no such artifact (e.g. a run not logged by this pipeline)."""
    from pathlib import PurePosixPath

    from pipeline.errors import InputError

    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    with _read_errors(f"cannot download {path} of run {run_id} from {settings.uri}"):
        mlflow_client = _read_client(settings)
        folder = str(PurePosixPath(path).parent)
        names = {a.path for a in mlflow_client.list_artifacts(run_id, None if folder == "." else folder)}
        if path not in names:
            raise InputError(f"run has no artifact {path}", f"mlflow:{run_id}")
        return Path(mlflow_client.download_artifacts(run_id, path, str(dst)))


def _default_artifact_root(settings: Any) -> str | None:
    """``<store folder>/mlartifacts`` for a sqlite store (the project's layout, conf/paths)."""
    if getattr(settings, "artifact_root", None):
        return str(settings.artifact_root)
    db = _sqlite_path(str(settings.uri))
    return str(db.parent / "mlartifacts") if db is not None else None


def log_report(
    settings: Any,
    folder: Path,
    *,
    parent_run_id: str | None = None,
    artifact_path: str | None = None,
    run_name: str = "compare",
    tags: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
) -> str:
    """Log a comparison report folder; returns the run id it went to.

    With ``parent_run_id`` (a sweep's parent run) the folder goes under ``artifact_path`` of
    that run, which keeps its status. Otherwise a new FINISHED run named ``run_name`` in the
    experiment :data:`COMPARE_EXPERIMENT` gets the folder at its root, ``tags`` and ``params``.
    Raises TrackingError."""
    from mlflow.entities import Param

    with _errors(f"cannot log the comparison to {settings.uri}"):
        mlflow_client = client(settings)
        if parent_run_id:
            mlflow_client.log_artifacts(parent_run_id, str(folder), artifact_path=artifact_path)
            return parent_run_id
        store = StoreSettings(uri=str(settings.uri), artifact_root=_default_artifact_root(settings))
        exp_id = _retrying(lambda: experiment_id(mlflow_client, COMPARE_EXPERIMENT, store))
        run = mlflow_client.create_run(exp_id, run_name=run_name, tags=dict(tags or {}))
        run_id = run.info.run_id
        try:
            if params:
                mlflow_client.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
            mlflow_client.log_artifacts(run_id, str(folder), artifact_path=artifact_path)
        except Exception:
            mlflow_client.set_terminated(run_id, status="FAILED")
            raise
        mlflow_client.set_terminated(run_id, status="FINISHED")
        return run_id


# --------------------------------------------------------------------------- credentials
import re  # noqa: E402  (only this section needs it)

#: Where MLflow's client reads a team server's credentials from (docs/team-server.md). The
#: values must never reach a param, a tag, a record, a message or a log.
CREDENTIAL_ENV = ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/?#@\s]*):(?P<secret>[^@/?#\s]*)@")


def redact(text: str) -> str:
    """``text`` (a URI, a message, a config dump) with every password hidden: the password of
    a ``scheme://user:password@host`` URL becomes ``***``, and so does any occurrence of the
    values of :data:`CREDENTIAL_ENV` in this process's environment."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", str(text))
    for name in CREDENTIAL_ENV:
        secret = os.environ.get(name, "")
        if len(secret) >= 4:  # a one-letter "password" would mangle every message
            text = text.replace(secret, "***")
    return text


def _http_status(exc: BaseException) -> int | None:
    """401 or 403 when ``exc`` (or an exception it wraps) is the server refusing a request:
    MLflow's REST errors carry an error code, the artifact uploads a requests response."""
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        code = getattr(err, "error_code", None)
        if code == "UNAUTHENTICATED":
            return 401
        if code == "PERMISSION_DENIED":
            return 403
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status in (401, 403):
            return int(status)
        found = re.search(r"\berror code (401|403)\b|\b(401|403) Client Error\b", str(err))
        if found:
            return int(found.group(1) or found.group(2))
        err = err.__cause__ or err.__context__
    return None


def auth_refusal(exc: BaseException, uri: str) -> str | None:
    """One line for a tracking server that refused the job's credentials (HTTP 401) or its
    user's permission (HTTP 403), None for any other failure. No password in it."""
    status = _http_status(exc)
    if status == 401:
        return (f"the MLflow server at {redact(uri)} refused the credentials "
                "(set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)")
    if status == 403:
        user = os.environ.get("MLFLOW_TRACKING_USERNAME") or "this user"
        return (f"the MLflow server at {redact(uri)} denied {user} permission (HTTP 403): an admin grants "
                "EDIT on the experiment, or sets default_permission = EDIT (docs/team-server.md)")
    return None

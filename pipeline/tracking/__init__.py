"""MLflow tracking: the only module that imports mlflow.

One MLflow run per job, logged from the job's results folder (``pipeline.io.results``): params
(the flattened resolved config), metrics and K-sweep curves in one batch, artifacts (the
folder), the collection as the run's dataset input, tags. A Hydra multirun is one sweep: a
parent run, the jobs nested under it, and a summary logged to it when the sweep ends
(``pipeline.report.summary``).

Logging is idempotent. The record's ``job_key`` is a tag of the run: logging a folder that
is already in the store finds its run (and writes the ``mlflow_run.json`` marker) instead of
making a second one; a run left half-logged by a killed process is deleted and logged again.

A job logs itself, in its own process, with plain client calls, after its results folder is
complete; a sweep's parent run is made and closed in the launching process. Writers to one
sqlite store take turns (:func:`writing`: a lock file beside the store), so the jobs of a
parallel launcher never meet inside sqlite. Whatever a crash left unlogged is on disk, and
``python -m pipeline.sync`` logs it later.

Every failure of the store or server surfaces as :class:`TrackingError`; the caller has
already written the results to disk and says where they are.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping


from pipeline.io import results as res

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
    """Everything one job logs (read from its record; see ``pipeline.io.results``)."""

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
        uri = f"sqlite:///{db.resolve()}"  # one client per store, wherever it is named from
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
    from filelock import Timeout

    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrackingError(f"cannot create the folder of the MLflow store {db}: {exc}") from None
    lock = _store_lock(db)
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


@lru_cache(maxsize=None)
def _store_lock(db: Path) -> Any:
    """The lock file beside a sqlite store (``<db>.lock``): one object per store in a process,
    so that taking it again inside (creating the store while writing) does not wait on itself."""
    from filelock import FileLock

    return FileLock(str(db.resolve()) + ".lock")


@contextmanager
def writing(settings: Any) -> Iterator[None]:
    """Hold the store's writer lock while logging to a sqlite store (no lock for a server):
    the jobs of a parallel launcher then write one after another, never into a locked
    database. TrackingError after ``STORE_LOCK_TIMEOUT_S``."""
    db = _sqlite_path(str(settings.uri))
    if db is None:
        yield
        return
    from filelock import Timeout

    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        lock = _store_lock(db)
        lock.acquire(timeout=STORE_LOCK_TIMEOUT_S)
    except Timeout:
        raise TrackingError(f"another process has held {db}.lock for {STORE_LOCK_TIMEOUT_S} s while writing "
                            "to the store; if none is running, delete the lock file") from None
    except OSError as exc:
        raise TrackingError(f"cannot lock the MLflow store {db}: {exc}") from None
    try:
        yield
    finally:
        lock.release()


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

    try:  # one logger per folder at a time: a job and a sync may overlap
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
    with _errors(f"MLflow tracking at {settings.uri} failed", settings.uri), writing(settings):
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
    with _errors(f"cannot start the sweep's MLflow parent run at {settings.uri}", settings.uri), writing(settings):
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
    with _errors(f"cannot log the sweep summary to {settings.uri}", settings.uri), writing(settings):
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

    with _errors(f"cannot log the comparison to {settings.uri}"), writing(settings):
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

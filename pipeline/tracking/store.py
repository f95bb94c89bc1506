"""The tracking store: its settings, the client on it, safe creation of a sqlite store, the
writers' lock (:func:`writing`), :func:`retrying` for the races of writers that take no lock
(the clients of a server, another tool on the sqlite file), experiments, the names written
into a store, and the lines that tell a user where to look."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pipeline.errors import StoreError
from pipeline.io import results as res
from pipeline.tracking.credentials import auth_refusal, redact, without_credentials

if TYPE_CHECKING:
    from filelock import FileLock
    from mlflow import MlflowClient

T = TypeVar("T")

# The names written into a store are contracts: the sweep summary, ``pipeline.compare``,
# MLflow's UI and users' searches (``tags.sweep_id = '...'``) rely on them.
TAG_SWEEP = "sweep_id"  # a job's sweep; its parent run also carries TAG_SWEEP_PARENT = "true"
TAG_SWEEP_PARENT = "sweep_parent"
TAG_OVERRIDES = "hydra_overrides"  # the job's Hydra overrides, as typed on the command line
TAG_GIT = "git_commit"
TAG_JOB_KEY = res.TAG_JOB_KEY  # what makes logging a results folder idempotent (pipeline.io.results)
TAG_PARENT = "mlflow.parentRunId"  # MLflow's: a nested run's parent
TAG_RUN_NAME = "mlflow.runName"  # MLflow's: a run's name
TAG_NOTE = "mlflow.note.content"  # MLflow's: a run's (or experiment's) description, markdown shown on its page
#: The experiment tag that tells MLflow's UI what an experiment holds, and its value for model
#: training (the runs table and charts, not the GenAI views): ``ExperimentKind.CUSTOM_MODEL_DEVELOPMENT``
#: of MLflow 3.17's UI (``mlflow/server/js/build/static/js/main.*.js``). MLflow 3.17.2's UI reads it
#: only when its global workflow-type switch is off, and it is on in this build: the UI opens in its
#: GenAI view unless the URL carries :data:`UI_WORKFLOW` (``ui_url`` adds it) or the user once clicked
#: "Model training" (the browser remembers it).
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
UI_WORKFLOW = "workflowType=machine_learning"  # the UI's query parameter for its model-training view
#: The experiment's runs table as a newcomer should first see it (the headline columns, sorted by
#: the objective) is a "shared view" of MLflow's UI: an experiment tag ``mlflow.sharedViewState.<key>``
#: that a URL with ``viewStateShareKey=<key>`` applies (``pipeline.tracking.view``).
VIEW_KEY = "headline"
#: The run tag that lists the tables MLflow's UI shows (``MlflowClient.log_table`` sets it).
TAG_LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"
TABLE_FILE = "per_query_table.json"  # a run's per-query table, as the UI and mlflow.load_table read it
SWEEP_TABLE_FILE = "summary/sweep_table.json"  # a sweep's table of jobs, on its parent run


def table_tag(artifact_file: str) -> str:
    """The value of :data:`TAG_LOGGED_ARTIFACTS` for a run whose one table is ``artifact_file``:
    what ``MlflowClient.log_table`` would set, set by the caller in a request it makes anyway
    (``pipeline.tracking.log.log_table``)."""
    return json.dumps([{"path": artifact_file, "type": "table"}])


#: The default store, where ``tracking=local`` (``conf/tracking/local.yaml``) puts it: the one
#: definition that ``pipeline.config`` and ``pipeline.comparison`` (``--tracking-uri``) name.
DEFAULT_STORE = "outputs/mlflow.db"
DEFAULT_TRACKING_URI = f"sqlite:///{DEFAULT_STORE}"


class TrackingError(StoreError):
    """The tracking store or server failed; the results are on disk nonetheless (exit status 3)."""


@dataclass(frozen=True)
class StoreSettings:
    """Where and how to log: the ``tracking`` config's store keys (what a record carries).

    ``uri`` never holds a credential: a ``tracking.uri`` given as ``http://user:password@host``
    is kept whole in ``login`` (memory only: not in ``as_dict``, ``repr`` or equality), which
    the client connects with; ``uri`` is ``http://host``, what records, markers and messages
    name."""

    uri: str
    artifact_root: str | None = None
    http_retries: int = 2
    http_timeout_s: int = 20
    login: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        clean = without_credentials(self.uri)
        if clean != self.uri:
            object.__setattr__(self, "login", self.uri)
            object.__setattr__(self, "uri", clean)

    @classmethod
    def of(cls, source: Mapping[str, Any] | Any) -> StoreSettings:
        """The one conversion into settings: from a record's ``tracking`` dict, a ``tracking``
        config node (DictConfig) or any object with these attributes (a dataclass)."""
        if isinstance(source, StoreSettings):
            return source
        if isinstance(source, Mapping) or hasattr(source, "get"):
            get = source.get
        else:
            def get(key: str, default: Any = None) -> Any:
                return getattr(source, key, default)
        root = get("artifact_root", None)
        return cls(uri=str(get("uri")), artifact_root=None if root is None else str(root),
                   http_retries=int(get("http_retries", 2)), http_timeout_s=int(get("http_timeout_s", 20)))

    def as_dict(self) -> dict[str, Any]:
        """The settings as a record stores them (``StoreSettings.of`` reads them back): no credential."""
        return {key: value for key, value in asdict(self).items() if key != "login"}

    def anchored(self, root: Path | None) -> StoreSettings:
        """These settings with a relative sqlite store and artifact root taken from ``root`` (the
        folder the job ran in: ``pipeline.io.results.job_root``) instead of this process's working
        directory, so ``pipeline.sync /abs/job`` run from any folder logs to the job's own store.
        Unchanged when ``root`` is None, the store is a server or an absolute path, or both name
        the same file (sync run where the job ran: the URI its files hold stays as it is)."""
        db = sqlite_path(self.uri)
        if root is None or db is None or db.is_absolute() or (Path(root) / db).resolve() == db.resolve():
            return self
        artifacts = self.artifact_root
        if artifacts is not None and not Path(artifacts).is_absolute():
            artifacts = str(Path(root) / artifacts)
        return StoreSettings(uri=f"sqlite:///{Path(root) / db}", artifact_root=artifacts,
                             http_retries=self.http_retries, http_timeout_s=self.http_timeout_s)

    def to(self, uri: str) -> StoreSettings:
        """These settings for another store (``pipeline.sync --tracking-uri``): a sqlite store
        keeps the artifacts of the experiments it creates beside it (``mlartifacts/``, as
        ``paths.root`` lays it out), never under the first store's artifact root; a server
        keeps them itself."""
        db = sqlite_path(without_credentials(uri))
        root = None if db is None else str(db.resolve().parent / "mlartifacts")
        return StoreSettings(uri=uri, artifact_root=root, http_retries=self.http_retries,
                             http_timeout_s=self.http_timeout_s)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI; None for a server."""
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


@contextmanager
def tracking_errors(what: str, uri: str | None = None) -> Iterator[None]:
    """Turn any failure inside (MlflowException, requests, sqlalchemy...) into one
    TrackingError that starts with ``what`` and shows no password; with ``uri``, a server's
    refusal of the credentials says what to set instead."""
    try:
        yield
    except TrackingError:
        raise
    except Exception as exc:
        refusal = auth_refusal(exc, uri) if uri is not None else None
        if refusal is not None:
            raise TrackingError(refusal) from exc
        raise TrackingError(redact(f"{what}: {type(exc).__name__}: {_one_line(exc)}")) from exc


def _one_line(exc: BaseException) -> str:
    """The error's message without SQLAlchemy's second line ("(Background on this error at:
    https://sqlalche.me/...)"): the user's error is one line."""
    return " ".join(line for line in str(exc).splitlines() if not line.startswith("(Background on this error at"))


def client(settings: StoreSettings) -> MlflowClient:
    """An MlflowClient on the configured store (a new sqlite store is created safely first)."""
    # Fail fast against a dead server instead of waiting through MLflow's default retries.
    # The config wins over the environment: it is what the run logs as its params.
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(settings.http_retries)
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] = "1"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(settings.http_timeout_s)
    # MLflow prints "View run ... at: <the URI as given>" when a server's run ends: with a
    # password in tracking.uri, that line would show it. The job prints its own (redacted) link.
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    uri = str(settings.login or settings.uri)
    db = sqlite_path(uri)
    if db is not None and not db.is_absolute():
        uri = f"sqlite:///{db.resolve()}"  # one client per store, wherever it is named from
    try:
        return _client(uri)
    except TrackingError:
        raise
    except Exception as exc:
        raise TrackingError(redact(f"cannot open the MLflow store {settings.uri}: {type(exc).__name__}: {exc}")) from exc


class _RaisedAnyway(logging.Filter):
    """Drops MLflow's "SQLAlchemy database error" log record (a full traceback, some 40 lines,
    per failed request): the same error is raised right after it as an MlflowException, which
    reaches the user as one TrackingError line (``mlflow/store/db/utils.py``, MLflow 3.17)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SQLAlchemy database error")


@lru_cache(maxsize=4)
def _client(uri: str) -> MlflowClient:
    from mlflow import MlflowClient  # heavy: imported only when a job tracks

    chatty = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _RaisedAnyway) for f in chatty.filters):
        chatty.addFilter(_RaisedAnyway())
    db = sqlite_path(uri)
    if db is not None:
        _create_sqlite_store(db)
    return MlflowClient(tracking_uri=uri)


#: How long a process waits for another one that is creating or writing the same sqlite store.
STORE_LOCK_TIMEOUT_S = 120


def _create_sqlite_store(db: Path) -> None:
    """Make sure a usable sqlite store is at ``db``, creating it if missing: serialized across
    processes by the lock file beside it and atomic (the tables are made in a temporary file
    renamed into place), so two processes never migrate one file at once and a crash or a
    full disk never leaves a half-made store."""
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
            if not db.exists():  # else another process made it while this one waited
                _migrate_into_place(db)
    except Timeout:
        raise TrackingError(f"another process has held {lock.lock_file} for {STORE_LOCK_TIMEOUT_S} s while "
                            f"creating {db}; if none is running, delete the lock file") from None


def _migrate_into_place(db: Path) -> None:
    """MLflow's tables made in a temporary file beside ``db``, renamed to ``db``; on any
    failure, every file sqlite left is removed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{db.name}.", suffix=".creating", dir=db.parent)
    os.close(fd)
    os.unlink(tmp)  # sqlite makes the file itself
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        # MLflow logs "Creating initial MLflow database tables..." at INFO on its own handler: the
        # job or sweep has said in its own line that it creates the store (``new_store_note``).
        chatty = logging.getLogger("mlflow.store.db.utils")
        level = chatty.level
        chatty.setLevel(logging.WARNING)
        try:
            SqlAlchemyStore(f"sqlite:///{tmp}", str(db.parent / "mlartifacts")).engine.dispose()
        finally:
            chatty.setLevel(level)
        os.replace(tmp, db)
    except BaseException as exc:
        for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
            with suppress(OSError):
                os.unlink(leftover)
        if isinstance(exc, Exception):
            raise TrackingError(f"cannot create the MLflow store {db}: {type(exc).__name__}: {exc}") from None
        raise


def _store_lock(db: Path) -> FileLock:
    """The lock file beside a sqlite store (``<db>.lock``): one object per store in a process,
    however the store's path is written (relative or absolute), so that taking it again
    inside (creating the store while writing) does not wait on itself."""
    return _lock_file(str(db.resolve()) + ".lock")


@cache
def _lock_file(path: str) -> FileLock:
    from filelock import FileLock

    return FileLock(path)


@contextmanager
def writing(settings: StoreSettings) -> Iterator[None]:
    """Hold the store's writer lock while logging to a sqlite store (no lock for a server):
    the jobs of a parallel launcher then write one after another, never into a locked
    database. TrackingError after ``STORE_LOCK_TIMEOUT_S``. A SIGINT or SIGTERM that arrives
    meanwhile takes effect once the writes are done (:func:`signals_deferred`)."""
    db = sqlite_path(str(settings.uri))
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
        with signals_deferred():
            yield
    finally:
        lock.release()


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then act as they would have.

    A sweep's launching process logs its jobs and, when interrupted, logs what is left: an
    interrupt inside a sqlite commit would leave this process's own connection holding the
    database lock, and that last logging would then find the store locked. Only the main
    thread can change handlers; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            handler = previous[caught[0]]
            if callable(handler):
                handler(caught[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(caught[0])


def ensure_store(settings: StoreSettings) -> None:
    """Create (migrate) the tracking store now, once, before parallel jobs start: two jobs
    creating a new sqlite store at once lose runs ("table ... already exists")."""
    with tracking_errors(f"cannot open the MLflow store {settings.uri}"):
        client(settings).search_experiments(max_results=1)


#: Errors that parallel writers to one store cause and a second attempt resolves: sqlite's
#: lock, and two jobs inserting the same dataset input at once (MLflow checks, then inserts).
RETRYABLE = ("database is locked", "UNIQUE constraint failed", "Duplicate entry", "duplicate key")


def retrying(fn: Callable[[], T], attempts: int = 5) -> T:
    """Call ``fn``, trying again (with a growing pause) after the races of parallel jobs on one
    store (:data:`RETRYABLE`); any other error, or the last attempt's, is raised."""
    for attempt in range(attempts - 1):
        try:
            return fn()
        except Exception as exc:
            if not any(marker in str(exc) for marker in RETRYABLE):
                raise
        time.sleep(0.1 * 2**attempt)
    return fn()


def experiment_id(mlflow_client: MlflowClient, name: str, settings: StoreSettings) -> str:
    """The experiment's id, created (with artifacts under ``artifact_root`` and the tag
    :data:`TAG_EXPERIMENT_KIND`) if missing; an existing experiment without the tag (made by
    an older version) gets it. Parallel jobs may race to create it: the loser reads the winner's."""
    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        if TAG_EXPERIMENT_KIND not in (found.tags or {}):
            mlflow_client.set_experiment_tag(found.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND)
        return found.experiment_id
    location = None
    if settings.artifact_root and sqlite_path(settings.uri) is not None:
        location = (Path(settings.artifact_root).resolve() / folder_name(name)).as_uri()
    try:
        return mlflow_client.create_experiment(name, artifact_location=location,
                                               tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND})
    except Exception:
        found = mlflow_client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def folder_name(name: str) -> str:
    """An experiment's artifact folder under the artifact root: one path component, never
    ``.`` or ``..`` (``tracking.experiment=..`` must not escape the root)."""
    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "experiment"
    return folder if folder.strip(".") else "_" + folder


def runs_with_tags(mlflow_client: MlflowClient, exp_id: str, tags: Mapping[str, str]) -> list[Any]:
    """The runs of an experiment that carry every tag of ``tags`` with its value."""
    filters = " and ".join(f"tags.{key} = '{value}'" for key, value in tags.items())
    return mlflow_client.search_runs([exp_id], filter_string=filters, max_results=100)


def ui_url(uri: str, experiment_id: str) -> str:
    """The experiment's runs table on the server at ``uri``, in the model-training view, with
    the headline columns (:data:`VIEW_KEY`: the objective and its CI, recall, MRR, context
    utility, the dataset and its digest) shown and the runs sorted by the objective."""
    page = f"#/experiments/{experiment_id}/runs"
    return f"{redact(uri).rstrip('/')}/{page}?viewStateShareKey={VIEW_KEY}&{UI_WORKFLOW}"


def open_hint(uri: str, experiment_id: str) -> str:
    """One line telling the user how to see the runs in the UI: for a sqlite store the ``mlflow
    ui`` command with the store's absolute path (it works from any folder) and the page to
    open; for a server, the page's URL. The page is the experiment's runs table
    (:func:`ui_url`); a run's name there opens its page."""
    db = sqlite_path(uri)
    if db is None:
        return f"open it: {ui_url(uri, experiment_id)}"
    return (f"open it: mlflow ui --backend-store-uri sqlite:///{db.resolve()}   then "
            f"{ui_url('http://127.0.0.1:5000', experiment_id)}")


def new_store_note(uri: str) -> str | None:
    """The line to print when a job is about to create a sqlite store where none is (a run
    from another folder silently starting a new store confuses); None otherwise. Call it
    before the store is opened."""
    db = sqlite_path(uri)
    if db is None or db.exists():
        return None
    return (f"note: no MLflow store in {db.resolve().parent}; creating a new one, {db.resolve()} "
            "(runs logged to other stores are not in it; paths.root or tracking.uri picks the store)")

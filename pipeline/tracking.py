"""MLflow tracking: the only module that imports mlflow.

One MLflow run per Hydra job: params (the flattened resolved config), metrics and K-sweep
curves in batches, artifacts (plots, per-query table, TREC run, resolved config, definition
card), the collection as the run's dataset input, and tags (Hydra overrides, git commit,
sweep id). A Hydra multirun is one sweep: a parent run created before any job starts, the
jobs nested under it, and a summary logged to it when the sweep ends (``pipeline.sweep``).

Every failure of the store or server surfaces as :class:`TrackingError`; the caller has
already written the results to disk and says where they are.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from types import SimpleNamespace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: Tag names (contracts: the sweep summary and users' searches rely on them).
TAG_SWEEP = "sweep_id"
TAG_OVERRIDES = "hydra_overrides"
TAG_GIT = "git_commit"
TAG_PARENT = "mlflow.parentRunId"
TAG_SWEEP_PARENT = "sweep_parent"


class TrackingError(RuntimeError):
    """The tracking store or server failed; the results are on disk nonetheless."""


@dataclass
class RunRecord:
    """Everything one job logs."""

    experiment: str
    run_name: str
    params: dict[str, str]
    metrics: dict[str, float]
    curves: dict[str, np.ndarray]  # name -> values for K = 1..k_max (logged with step = K)
    tags: dict[str, str]
    artifacts_dir: Path  # every file below is logged, keeping the layout
    dataset: dict[str, str]  # name, digest, source
    table: "pd.DataFrame | None" = None  # shown in the UI through log_table
    start_time_ms: int | None = None  # when the job started (the UI's duration)


def _configure_http(tracking_cfg: Any) -> None:
    # Fail fast against a dead server instead of MLflow's default ~2 minutes of retries.
    # The config wins over the environment: it is what the run logs as its params.
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(tracking_cfg.http_retries)
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] = "1"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(tracking_cfg.http_timeout_s)


def _sqlite_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    return None


@contextmanager
def _errors(what: str) -> Iterator[None]:
    try:
        yield
    except TrackingError:
        raise
    except Exception as exc:  # MlflowException, requests errors, sqlalchemy errors...
        raise TrackingError(f"{what}: {type(exc).__name__}: {exc}") from exc


_CLIENTS: dict[str, Any] = {}


def client(tracking_cfg: Any):
    """The process's MlflowClient on the configured store (a sqlite store's folder is made)."""
    if tracking_cfg.uri in _CLIENTS:
        return _CLIENTS[tracking_cfg.uri]
    _configure_http(tracking_cfg)
    import mlflow  # noqa: F401  (heavy: imported only when tracking)
    from mlflow import MlflowClient

    db = _sqlite_path(tracking_cfg.uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    _CLIENTS[tracking_cfg.uri] = MlflowClient(tracking_uri=tracking_cfg.uri)
    return _CLIENTS[tracking_cfg.uri]


def ensure_store(tracking_cfg: Any) -> None:
    """Create (migrate) the tracking store now, once, before parallel jobs start.

    Two jobs creating a new sqlite store at once lose runs ("table ... already exists").
    """
    with _errors(f"cannot open the MLflow store {tracking_cfg.uri}"):
        client(tracking_cfg).search_experiments(max_results=1)


def experiment_id(mlflow_client: Any, name: str, tracking_cfg: Any) -> str:
    """The experiment's id, created (with artifacts under ``artifact_root``) if missing.

    Parallel jobs may race to create it: the loser reads the winner's.
    """
    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = None
    if tracking_cfg.artifact_root and _sqlite_path(tracking_cfg.uri) is not None:
        location = (Path(tracking_cfg.artifact_root).resolve() / name.replace("/", "_")).as_uri()
    try:
        return mlflow_client.create_experiment(name, artifact_location=location)
    except Exception:
        found = mlflow_client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


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


def log_run(tracking_cfg: Any, record: RunRecord, parent_run_id: str | None = None) -> str:
    """Log one job as one MLflow run; returns its run id. Raises TrackingError."""
    with _errors(f"MLflow tracking at {tracking_cfg.uri} failed"):
        mlflow_client = client(tracking_cfg)
        from mlflow.entities import DatasetInput, InputTag, Metric, Param
        from mlflow.entities import Dataset as DatasetEntity

        exp_id = _retrying(lambda: experiment_id(mlflow_client, record.experiment, tracking_cfg))
        tags = dict(record.tags)
        parent_run_id = parent_run_id or sweep_parent(tags.get(TAG_SWEEP), record.experiment)
        if parent_run_id:
            tags[TAG_PARENT] = parent_run_id
        run = _retrying(
            lambda: mlflow_client.create_run(exp_id, run_name=record.run_name, tags=tags, start_time=record.start_time_ms)
        )
        run_id = run.info.run_id
        try:
            now = int(time.time() * 1000)
            metrics = [Metric(key, float(value), now, 0) for key, value in record.metrics.items()]
            for name, values in record.curves.items():
                metrics += [Metric(name, float(v), now, step) for step, v in enumerate(values, start=1)]
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
                mlflow_client.log_table(run_id, data=record.table, artifact_file="per_query_table.json")
            mlflow_client.log_artifacts(run_id, str(record.artifacts_dir))
        except Exception:
            try:  # keep the original error: marking the run may fail for the same reason
                mlflow_client.set_terminated(run_id, status="FAILED")
            except Exception as exc:
                log.warning("could not mark run %s as FAILED: %s", run_id, exc)
            raise
        _retrying(lambda: mlflow_client.set_terminated(run_id, status="FINISHED"))
        return run_id


def log_run_deferred(
    tracking_cfg: Any, record: RunRecord, plots_dir: Path, k: int, failed_note: Path
) -> str | None:
    """For a job that did not wait: draw its figures into its results, log the run (nested
    under its sweep's parent) with ``time_track_s``, and on failure leave a FAILED note in
    the job's folder for the sweep to report. Runs in the tracking process."""
    from pipeline.plots import save_run_figures

    start = time.perf_counter()
    try:
        curves = {name.removeprefix("curve/"): values for name, values in record.curves.items()}
        save_run_figures(plots_dir, curves, k, record.run_name)
        run_id = log_run(tracking_cfg, record)
        log_metric_now(tracking_cfg, run_id, "time_track_s", time.perf_counter() - start)
        return run_id
    except Exception as exc:
        overrides = record.tags.get(TAG_OVERRIDES, "")
        failed_note.write_text(
            f"{overrides}\nerror: {exc}\nThe results are safe on disk in {record.artifacts_dir.resolve()}.\n"
        )
        return None


def log_metric_now(tracking_cfg: Any, run_id: str, key: str, value: float) -> None:
    with _errors(f"MLflow tracking at {tracking_cfg.uri} failed"):
        client(tracking_cfg).log_metric(run_id, key, value)


def _worker_open(tracking_cfg: Any) -> None:
    """Runs in the tracking process as soon as the store is known: open it."""
    try:
        if _sqlite_path(tracking_cfg.uri) is not None:
            client(tracking_cfg).search_experiments(max_results=1)
    except Exception:  # reported by the first real call, with its own message
        _CLIENTS.pop(tracking_cfg.uri, None)


def _worker_warm(_: Any) -> None:
    """Imports, before the store is known: most of the ~4 s that tracking costs."""
    import mlflow.entities  # noqa: F401  (~2 s)
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (~1.7 s; the default store is sqlite)
    import pandas  # noqa: F401


def flush(_: Any = None) -> None:
    """Nothing: its answer comes after every call queued before it."""


def _resolve(name: str) -> Any:
    """``module:function`` of this project, for the tracking process to call."""
    import importlib

    module, _, attr = name.partition(":")
    if not module.startswith("pipeline.") or not attr:
        raise ValueError(f"not a pipeline function: {name!r}")
    return getattr(importlib.import_module(module), attr)


def _encode(obj: Any) -> Any:
    """JSON for the pipe (no pickle: nothing that arrives can run code). Tagged objects:
    RunRecord, Path, numpy arrays, a pandas table, and settings (a DictConfig)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(obj, RunRecord):
        return {"__record__": {f.name: _encode(getattr(obj, f.name)) for f in fields(obj)}}
    if isinstance(obj, DictConfig):
        return {"__settings__": OmegaConf.to_container(obj, resolve=True, enum_to_str=True)}
    if isinstance(obj, Path):
        return {"__path__": str(obj)}
    if isinstance(obj, np.ndarray):
        return {"__array__": obj.tolist()}
    if isinstance(obj, np.generic):
        return obj.item()
    if type(obj).__name__ == "DataFrame":
        return {"__table__": obj.to_json(orient="split", double_precision=15)}
    if isinstance(obj, dict):
        return {str(k): _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    return obj


def _decode(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (tag, value), = obj.items()
        if tag == "__record__":
            return RunRecord(**{k: _decode(v) for k, v in value.items()})
        if tag == "__settings__":
            return SimpleNamespace(**value)
        if tag == "__path__":
            return Path(value)
        if tag == "__array__":
            return np.asarray(value, dtype=np.float64)
        if tag == "__table__":
            import io

            import pandas as pd

            return pd.read_json(io.StringIO(value), orient="split")
    return {k: _decode(v) for k, v in obj.items()}


def _send(stream: Any, obj: Any) -> None:
    data = json.dumps(_encode(obj)).encode()
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: Any) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    return _decode(json.loads(stream.read(size)))


def serve() -> None:
    """The tracking process: answer calls from the job over stdin/stdout until stdin closes.

    The protocol owns the real stdout; anything mlflow prints goes to stderr instead.
    """
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    while True:
        try:
            name, args = _receive(requests)
        except EOFError:
            return
        try:
            answer = [True, _resolve(name)(*args)]
        except Exception as exc:
            answer = [False, str(exc) if isinstance(exc, TrackingError) else f"{type(exc).__name__}: {exc}"]
        _send(answers, answer)


class Tracker:
    """MLflow in a separate process, started before the job computes anything.

    Importing mlflow and opening a sqlite store take ~3 s of CPU; done in a process of its
    own, they overlap with loading, retrieval and scoring instead of adding to the job, and
    ``log_run`` only waits for the logging itself. The process is a plain ``python`` child
    talking over a pipe (not multiprocessing, which cannot start from joblib's workers).
    Failures come back as TrackingError.
    """

    def __init__(self, tracking_cfg: Any | None) -> None:
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self.tracking_cfg = tracking_cfg
        # Its own stderr file: holding the job's stderr open would keep a pipe reading the
        # job (`python -m pipeline | tee`) waiting for mlflow's shutdown after the job ends.
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from pipeline.tracking import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env,
        )
        self._pending = 0
        self.submit("pipeline.tracking:_worker_warm", None)  # import mlflow now
        if tracking_cfg is not None:
            self.submit("pipeline.tracking:_worker_open", tracking_cfg)  # answered while the job computes

    def submit(self, name: str, *args: Any) -> None:
        """Queue a call of ``module:function`` in the tracking process without waiting.

        Calls run one at a time in order, so a later ``call`` sees its effects; a failure of
        a submitted call is logged when a later ``call`` collects its answer."""
        try:
            _send(self._proc.stdin, (name, args))
        except (BrokenPipeError, OSError) as exc:
            raise TrackingError(f"the MLflow tracking process is gone ({exc})") from None
        self._pending += 1

    def call(self, name: str, *args: Any) -> Any:
        """Call ``module:function`` in the tracking process and return its result."""
        self.submit(name, *args)
        result: Any = None
        while self._pending:  # answers come in order: skip those of earlier requests
            try:
                ok, result = _receive(self._proc.stdout)
            except (EOFError, OSError, ValueError):
                code = self._proc.wait()
                self._log.seek(0)
                tail = self._log.read().decode(errors="replace")[-2000:]
                raise TrackingError(f"the MLflow tracking process died (exit status {code}):\n{tail}") from None
            self._pending -= 1
            if not ok and self._pending:
                log.warning("an earlier tracking call failed: %s", result)
                continue
            if not ok:
                raise TrackingError(result)
        return result

    def log_run(self, record: RunRecord, parent_run_id: str | None = None) -> str:
        return self.call("pipeline.tracking:log_run", self.tracking_cfg, record, parent_run_id)

    def log_metric(self, run_id: str, key: str, value: float) -> None:
        self.call("pipeline.tracking:log_metric_now", self.tracking_cfg, run_id, key, value)

    def close(self) -> None:
        """Close the pipe: the process exits on its own (every call was already answered),
        and the job does not wait ~1 s for mlflow's interpreter shutdown."""
        try:
            self._proc.stdin.close()
        except OSError:
            pass

    _shared: dict[str | None, "Tracker"] = {}

    @classmethod
    def prestart(cls) -> None:
        """Start a tracking process before the config is even composed (``python -m
        pipeline`` does, unless told ``tracking=none``): mlflow's import then overlaps with
        Hydra's start-up too. The first ``shared()`` adopts it; unused, it exits with us."""
        cls._keep(None, cls(None))

    @classmethod
    def shared(cls, tracking_cfg: Any) -> "Tracker":
        """One tracking process per job process and store, reused by the jobs of a sequential
        sweep (each would otherwise pay the mlflow import again); closed at exit."""
        tracker = cls._shared.get(tracking_cfg.uri)
        if tracker is None or tracker._proc.poll() is not None:
            spare = cls._shared.pop(None, None)
            if spare is not None and spare._proc.poll() is None:
                tracker = spare
                tracker.submit("pipeline.tracking:_worker_open", tracking_cfg)
            else:
                tracker = cls(tracking_cfg)
            cls._keep(tracking_cfg.uri, tracker)
        tracker.tracking_cfg = tracking_cfg
        return tracker

    @classmethod
    def _keep(cls, key: str | None, tracker: "Tracker") -> None:
        if not cls._shared:
            import atexit

            atexit.register(lambda: [t.close() for t in list(cls._shared.values())])
        cls._shared[key] = tracker


# --------------------------------------------------------------------------- sweeps


#: sweep id -> (parent run id, experiment name), in the process that started the sweep.
_SWEEP_PARENTS: dict[str, tuple[str, str]] = {}


def sweep_parent(sweep_id: str | None, experiment: str) -> str | None:
    """The parent run of a sweep started in this process, if the run goes to its experiment."""
    found = _SWEEP_PARENTS.get(sweep_id or "")
    return found[0] if found and found[1] == experiment else None


def start_sweep(tracking_cfg: Any, experiment: str, sweep_id: str, tags: Mapping[str, str]) -> dict[str, str]:
    """Create the store and the sweep's parent run before any job tracks."""
    with _errors(f"cannot start the sweep's MLflow parent run at {tracking_cfg.uri}"):
        ensure_store(tracking_cfg)
        mlflow_client = client(tracking_cfg)
        exp_id = experiment_id(mlflow_client, experiment, tracking_cfg)
        run = mlflow_client.create_run(
            exp_id,
            run_name=f"sweep-{sweep_id}",
            tags={TAG_SWEEP: sweep_id, TAG_SWEEP_PARENT: "true", **tags},
        )
        _SWEEP_PARENTS[sweep_id] = (run.info.run_id, experiment)
        return {"sweep_id": sweep_id, "parent_run_id": run.info.run_id, "experiment_id": exp_id}


def sweep_runs(tracking_cfg: Any, sweep_id: str) -> list[Any]:
    """The job runs of a sweep (any experiment), oldest first."""
    with _errors(f"cannot read the sweep's runs from {tracking_cfg.uri}"):
        mlflow_client = client(tracking_cfg)
        exp_ids = [e.experiment_id for e in mlflow_client.search_experiments()]
        runs = mlflow_client.search_runs(
            exp_ids,
            filter_string=f"tags.{TAG_SWEEP} = '{sweep_id}'",
            max_results=5000,
            order_by=["attributes.start_time ASC"],
        )
        return [run for run in runs if run.data.tags.get(TAG_SWEEP_PARENT) != "true"]


def metric_history(tracking_cfg: Any, run_id: str, key: str) -> np.ndarray:
    with _errors(f"cannot read metric {key} of run {run_id}"):
        history = client(tracking_cfg).get_metric_history(run_id, key)
        return np.array([m.value for m in sorted(history, key=lambda m: m.step)], dtype=np.float64)


def finish_sweep(
    tracking_cfg: Any,
    parent_run_id: str,
    summary_dir: Path,
    table: "pd.DataFrame",
    status: str = "FINISHED",
) -> None:
    """Log the summary folder (table, figure) and the table itself to the parent run."""
    with _errors(f"cannot log the sweep summary to {tracking_cfg.uri}"):
        mlflow_client = client(tracking_cfg)
        mlflow_client.log_table(parent_run_id, data=table, artifact_file="summary/sweep_table.json")
        mlflow_client.log_artifacts(parent_run_id, str(summary_dir), artifact_path="summary")
        mlflow_client.set_terminated(parent_run_id, status=status)

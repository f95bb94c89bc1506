"""One job: its stages in order, its results folder, its MLflow run.

``run(cfg)`` is a plain function (tests call it with a composed config); under Hydra it also
reads the job's output folder, overrides and sweep from ``HydraConfig``. It returns the
sweep objective (``cfg.objective``), so a sweeper can optimize it.

Nothing computed is lost: the results are written to the job's output folder, ``record.json``
last, before the job logs itself to MLflow in its own process; a tracking failure names that
folder (``python -m pipeline.sync`` logs it later) and exits non-zero.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from pipeline import config, console, naming, stages, tracking
from pipeline.config import Settings
from pipeline.errors import InputError, Interrupted
from pipeline.io import results as res
from pipeline.io.collection import Collection
from pipeline.metrics import FULL_DEPTH, metric_key
from retrievers.cost import block as cost_block
from retrievers.cost import describe as describe_cost

log = logging.getLogger(__name__)

__all__ = ["run", "run_job", "job_line", "JobContext", "job_context"]


class TrackingFailed(RuntimeError):
    exit_code = 3


@dataclass
class JobContext:
    """Where a job writes and how it was launched (from Hydra, or made up without it)."""

    output_dir: Path
    overrides: list[str] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    sweep_dir: Path | None = None
    job_num: int | None = None  # the job's number in its sweep
    searched: list[str] = field(default_factory=list)  # keys a sweeper samples (Optuna's params)


def job_context(runs_dir: str | Path = "outputs/runs") -> JobContext:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized():
        hc = HydraConfig.get()
        choices = {k: str(v) for k, v in hc.runtime.choices.items() if v is not None and "/" not in k}
        sweep = Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None
        num = hc.job.get("num") if sweep is not None else None
        searched = []
        if sweep is not None and "optuna" in str(hc.sweeper.get("_target_", "")).lower():
            searched = [str(key) for key in (hc.sweeper.get("params") or {})]
        # Credentials hidden here, once: the overrides become tags, run names, FAILED notes.
        overrides = [tracking.redact(o) for o in hc.overrides.task]
        return JobContext(Path(hc.runtime.output_dir), overrides, choices, sweep,
                          None if num is None else int(num), searched)
    stamp = time.strftime("%Y-%m-%d/%H-%M-%S") + f"-{uuid.uuid4().hex[:6]}"
    return JobContext(Path(runs_dir) / stamp)


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timings[f"time_{stage}_s"] = time.perf_counter() - start
    log.info("%s: %.2f s", stage, timings[f"time_{stage}_s"])


def run(cfg: DictConfig) -> float:
    """Run one experiment and return its objective (``cfg.objective``)."""
    settings = Settings.of(cfg)
    ctx = job_context(settings.runs_dir)
    # A sweep's job prints one line (job_line) unless verbose=true (-v): its stage times go to
    # its pipeline.log only, a warning to the console once per process (pipeline.console).
    brief = ctx.sweep_dir is not None and not bool(cfg.get("verbose", False))
    console.brief(brief)
    if settings.store is not None and ctx.sweep_dir is None and (note := tracking.new_store_note(settings.store.uri)):
        print(note)  # a sweep says it once, before its jobs (pipeline.sweep)
    timings: dict[str, float] = {}
    started_at, start = time.time(), time.perf_counter()
    with _timed(timings, "load"):
        collection = stages.load(settings)
    chunk_start = time.perf_counter()
    stage = stages.chunk(settings, collection)  # None for chunker=none without a budget
    if stage is not None:
        timings["time_chunk_s"] = time.perf_counter() - chunk_start
    with _timed(timings, "retrieve"):
        retrieved = stages.retrieve_documents(settings, collection, stage)
    with _timed(timings, "place"):
        placement = stages.place(settings, retrieved)
    with _timed(timings, "score"):
        scores = stages.score(settings, collection, retrieved, placement, stage)
    names = {g: ctx.choices.get(g) or str(getattr(settings, g).get("_target_", g)).rsplit(".", 1)[-1]
             for g in ("retriever", "reorder", "attention")}
    sweep = _sweep_info(ctx)
    run_name = settings.run_name or naming.run_name(names, settings.k, ctx.overrides, ctx.choices,
                                                    (sweep or {}).get("swept", "").split(), ctx.searched)
    with _timed(timings, "write"):
        results = stages.write_results(ctx.output_dir, settings, collection, retrieved, placement, scores, stage,
                                       run_name)
    timings["time_total_s"] = time.perf_counter() - start
    record = _record(settings, ctx, collection, retrieved, scores, run_name, names, sweep, timings, started_at)
    res.write_record(results, record)  # last: from here on the folder is complete and can be logged
    if brief:
        print(job_line(ctx.job_num, run_name, settings.k, settings.objective, scores.metrics))
    else:
        if stage is not None:
            print(stages.chunk_summary(stage, settings, scores.metrics))
        _print_summary(run_name, collection, settings, scores.metrics, retrieved, results, record["params"])
    if settings.store is not None:
        _track(settings.store, results, run_name, record["experiment"], in_sweep=ctx.sweep_dir is not None,
               quiet=brief)
    return float(scores.metrics[settings.objective])


def job_line(job_num: int | None, run_name: str, k: int, objective: str, metrics: dict[str, float]) -> str:
    """A sweep job's one line: its number in the sweep (its folder's name), its run name, the
    objective, then recall and context utility at its k and MRR (those it has), each once: a
    job-relative objective (``context_utility_at_k``) is the same number as its key at k."""
    same = metric_key(objective).at(k) if metric_key(objective).relative else objective
    keys = dict.fromkeys([objective, f"recall_at_{k}", "mrr", f"context_utility_at_{k}"])
    shown = ", ".join(f"{key} {metrics[key]:.4f}" for key in keys
                      if key in metrics and (key == objective or key != same))
    return f"#{'?' if job_num is None else job_num} {run_name}: {shown}"


def _record(settings: Settings, ctx: JobContext, collection: Collection, retrieved: stages.Retrieved,
            scores: stages.Scores, run_name: str, names: dict[str, str], sweep: dict[str, str] | None,
            timings: dict[str, float], started_at: float) -> dict[str, Any]:
    """What the job's MLflow run holds (``pipeline.io.results``: any process can log it from this)."""
    ranking = retrieved.ranking
    return {
        "format": res.RECORD_FORMAT,
        "job_key": uuid.uuid4().hex,
        "experiment": settings.experiment or collection.name,
        "run_name": run_name,
        "params": {key: tracking.redact(value) for key, value in config.flatten(config.resolved(settings.config)).items()},
        "metrics": {**scores.metrics, **timings, **{f"data_{k}": float(v) for k, v in collection.report.items()},
                    **retrieved.report},  # e.g. chroma_recall_at_k, external_failed_queries, run_unknown_docs
        "curves": {f"curve/{family}": values.tolist() for family, values in scores.curves.items()},
        **({"stepped": scores.stepped} if scores.stepped else {}),  # budget curves, step = B tokens
        "tags": {**_tags(ctx, names, retrieved.cache_hit, sweep), "judged_only": str(settings.judged_only).lower(),
                 **cost_tags(retrieved.cost)},
        # Cost metrics (latency, throughput, index): logged as MLflow metrics, kept apart from the
        # quality metrics above so that no comparison or sweep treats them as one (retrievers.cost).
        **({"cost": cost_block(retrieved.cost)} if retrieved.cost else {}),
        "dataset": {"name": collection.name, "digest": collection.digest, "source": str(collection.source)},
        "table_columns": stages.per_query_columns(scores.ev, settings.k) if settings.log_per_query_table else None,
        "start_time_ms": int(started_at * 1000),
        "k": settings.k,
        "objective": settings.objective,
        "ranking_digest": hashlib.sha256(np.ascontiguousarray(ranking.doc_idx).tobytes()).hexdigest()[:16],
        "sweep": sweep,
        "tracking": None if settings.store is None else settings.store.as_dict(),
    }


def cost_tags(cost: dict[str, Any]) -> dict[str, str]:
    """The run's tags of its cost summary: where the latency comes from (``measured``,
    ``cache``, ``not measured``), how (``per_query``, ``batch_share``) and the machine."""
    if not cost:
        return {}
    tags = {"cost.latency_source": str(cost.get("latency_source", ""))}
    if cost.get("latency_mode"):
        tags["cost.latency_mode"] = str(cost["latency_mode"])
    for key, value in (cost.get("machine") or {}).items():
        tags[f"cost.machine.{key}"] = str(value)
    return tags


def _sweep_info(ctx: JobContext) -> dict[str, str] | None:
    """The job's sweep, as its record names it (the logger finds the parent run from it)."""
    if ctx.sweep_dir is None:
        return None
    info = res.read_sweep(ctx.sweep_dir)
    sweep = {"sweep_id": info.get("sweep_id", ctx.sweep_dir.name), "dir": str(ctx.sweep_dir.resolve())}
    if info.get("experiment"):
        sweep["experiment"] = info["experiment"]
    if info.get("swept"):  # the keys the sweep varies (pipeline.sweep): first in the run names
        sweep["swept"] = str(info["swept"])
    return sweep


@functools.cache
def _git_commit() -> str | None:
    """The checkout's commit, asked of git once per process (a sequential sweep runs many jobs)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _tags(ctx: JobContext, names: dict[str, str], cache_hit: bool, sweep: dict[str, str] | None) -> dict[str, str]:
    tags = {
        tracking.TAG_OVERRIDES: " ".join(ctx.overrides),
        "ranking_cache": "hit" if cache_hit else "miss",
        **{f"choice.{g}": n for g, n in names.items()},
    }
    if sweep:
        tags[tracking.TAG_SWEEP] = sweep["sweep_id"]
    if ctx.job_num is not None:
        tags["job_num"] = str(ctx.job_num)
    if ctx.searched:
        tags["optuna_trial"] = str(ctx.job_num)
    if commit := _git_commit():
        tags[tracking.TAG_GIT] = commit
        tags["mlflow.source.git.commit"] = commit
    return tags


def _track(settings: tracking.StoreSettings, results: Path, run_name: str, experiment: str,
           in_sweep: bool = False, quiet: bool = False) -> str | None:
    """Log the job's folder in this process. A single job's failure is TrackingFailed, naming
    the results; a sweep job's is one line and a FAILED note (the sweep ends non-zero, and
    ``pipeline.sync`` logs the folder later). ``quiet``: no line on success (a sweep's job: the
    sweep names its parent run and the runs table at its end)."""
    t0 = time.perf_counter()
    try:
        run_id = tracking.log_results(results, settings)
    except (tracking.TrackingError, InputError) as err:
        if in_sweep:
            message = (f"error: {err}\nThe results are safe on disk in {results.resolve()}; "
                       f"`python -m pipeline.sync {results.parent}` logs them later.")
            res.write_failed(results.parent, res.read_record(results)["tags"].get(tracking.TAG_OVERRIDES, ""), message)
            print(f"job {results.parent.name}: {message.splitlines()[0]}", file=sys.stderr)
            return None
        raise TrackingFailed(
            f"error: {err}\nThe results are safe on disk in {results.resolve()} "
            "(metrics.json, per_query.csv, run.trec, plots/); `python -m pipeline.sync "
            f"{results.parent}` logs them once the store is back."
        ) from err
    log.info("track: %.2f s", time.perf_counter() - t0)
    if quiet:
        return str(run_id)
    print(f"MLflow run {run_id} ({run_name}) in experiment {experiment!r} at {tracking.redact(settings.uri)}")
    if marker := res.read_marker(results):
        print(tracking.open_hint(settings.uri, str(marker.get("experiment_id", ""))))
    return str(run_id)


def _print_summary(run_name: str, collection: Collection, settings: Settings, metrics: dict[str, float],
                   retrieved: stages.Retrieved, results: Path, params: dict[str, str]) -> None:
    """The job's block: the headline at its k, then mrr, map and bpref at the ranking's full
    depth, labelled with it (``mrr (depth 20)``: max(k, k_max) results per query, so a ranking
    cut shallower elsewhere gives another mrr), and the judged-coverage warning at its k."""
    k, depth = settings.k, int(retrieved.ranking.doc_idx.shape[1])
    keys = [f"ndcg_at_{k}", f"precision_at_{k}", f"recall_at_{k}", f"map_at_{k}", f"mrr_at_{k}",
            f"context_utility_at_{k}", f"judged_at_{k}", *FULL_DEPTH]
    if settings.objective not in keys:
        keys.append(settings.objective)
    lines = [f"{run_name} on {collection.name}: {int(metrics['n_queries'])} queries "
             f"({int(metrics['n_queries_no_relevant'])} without relevant documents left out), "
             f"{collection.n_docs} documents, ranking cache {'hit' if retrieved.cache_hit else 'miss'}"]
    if settings.judged_only:
        lines.append("  judged_only: condensed lists (unjudged documents removed before scoring, trec_eval -J)")
    lines += [f"  {key + (f' (depth {depth})' if key in FULL_DEPTH else ''):<24} {metrics[key]:.4f}"
              for key in keys if key in metrics]
    if warning := tracking.coverage_warning(metrics, params, k):  # on the console once (here), in pipeline.log too
        lines.append(warning)
        console.to_log_file(warning, name=__name__, level=logging.WARNING)
    if line := describe_cost(retrieved.cost):
        lines.append(f"  {line}")
    lines.append(f"results: {results}")
    print("\n".join(lines))


def _user_error(exc: BaseException) -> tuple[str, int] | None:
    """(message, exit status) when ``exc`` is the user's mistake or a tracking failure."""
    err: BaseException | None = exc
    while err is not None:  # instantiate() wraps the loader's own error
        if isinstance(err, (InputError, TrackingFailed)):
            return str(err), err.exit_code
        if isinstance(err, MissingMandatoryValue):
            key = getattr(err, "full_key", None) or str(err)
            return f"error: {key} is required: set it on the command line, e.g. {key}=...", 2
        if type(err).__name__ == "InstantiationException" and isinstance(err.__cause__, ValueError):
            # a retriever, reorder or attention constructor refused a value (retriever.k1=-1)
            key = next((line.split(":", 1)[1].strip() for line in str(err).splitlines()
                        if line.startswith("full_key:")), "config")
            return f"error: {key}: {err.__cause__}", 2
        err = err.__cause__ or err.__context__
    return None


def run_job(cfg: DictConfig) -> Any:
    """``run(cfg)`` for the command line: a user mistake or a tracking failure prints one
    message and no traceback (``HYDRA_FULL_ERROR=1`` shows one). A single run then exits
    with its status (2: bad input, 3: tracking); any other error of a single run is Hydra's
    traceback. A sweep job that fails, for any reason, prints one line, leaves a ``FAILED``
    note in its folder and returns NaN, so the other jobs still run and the sweep ends
    non-zero after its summary (``pipeline.sweep``); in an Optuna sweep it returns a
    ``console.FailedObjective`` instead, which the sweeper records as a failed trial.
    Ctrl-C (SIGTERM in a sweep) is the job's log file's last line, and goes on up.
    The job's log file always gets the error (and the traceback of an unexpected one)."""
    try:
        return run(cfg)
    except (KeyboardInterrupt, Interrupted) as stop:  # Ctrl-C, SIGTERM: pipeline.__main__ says it, exits 130/143
        name = signal.Signals(getattr(stop, "signum", signal.SIGINT)).name
        console.to_log_file(f"interrupted ({name}): the job stopped before its end (a results folder without "
                            "record.json is never logged)", level=logging.WARNING)
        raise
    except Exception as exc:
        found = _user_error(exc)
        ctx = job_context(OmegaConf.select(cfg, "paths.runs", default="outputs/runs"))
        console.to_log_file(found[0] if found else f"the job failed: {type(exc).__name__}: {exc}",
                            None if found else exc)
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or (found is None and ctx.sweep_dir is None):
            raise
        if found is None:  # a sweep job's unexpected error: one line here, the traceback in its log
            logs = console.log_files()
            first = (str(exc).strip().splitlines() or [""])[0]
            where = f" (traceback in {logs[0].baseFilename})" if logs else ""
            found = (f"error: {type(exc).__name__}: {first}{where}", 1)
        message, code = found
        if ctx.sweep_dir is None:
            print(message, file=sys.stderr)
            sys.exit(code)
        line = f"job {ctx.output_dir.name} ({' '.join(ctx.overrides)}): {message}"
        print(line, file=sys.stderr)
        res.write_failed(ctx.output_dir, " ".join(ctx.overrides), message)
        return console.FailedObjective(line) if ctx.searched else float("nan")

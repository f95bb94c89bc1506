"""One job: its stages in order, its results folder, its MLflow run.

``run(cfg)`` is a plain function (tests call it with a composed config); under Hydra it also
reads the job's output folder, overrides and sweep from ``HydraConfig``. It returns the
sweep objective (``cfg.objective``), so a sweeper can optimize it.

Nothing computed is lost: the results are written to the job's output folder, ``record.json``
last, before the job logs itself to MLflow in its own process; a tracking failure names that
folder (``python -m pipeline.cli sync`` logs it later) and exits non-zero.
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
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from pipeline import config, console, naming, stages, tracking
from pipeline.config import Settings
from pipeline.errors import InputError, Interrupted, PipelineError, StoreError, exit_line
from pipeline.io import results as res
from pipeline.io.collection import Collection
from pipeline.metrics import FULL_DEPTH, metric_key
from pipeline.tracking import mapping
from retrievers.cost import block as cost_block
from retrievers.cost import describe as describe_cost

log = logging.getLogger(__name__)

__all__ = ["run", "run_job", "job_line", "user_error", "JobContext", "job_context", "TrackingFailed"]


class TrackingFailed(StoreError):
    """A single job's results are on disk, its logging to the store failed: exit status 3."""


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
    timings[mapping.timing_key(stage)] = time.perf_counter() - start
    log.info("%s: %.2f s", stage, timings[mapping.timing_key(stage)])


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
        timings[mapping.timing_key("chunk")] = time.perf_counter() - chunk_start
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
        # A sweep's job draws no PNGs (docs/results.md): the sweep's summary figure has every job's
        # curves, its MLflow run the same curves as curve/* (step = K), draw_job_figures the PNGs.
        results = stages.write_results(ctx.output_dir, settings, collection, retrieved, placement, scores, stage,
                                       run_name, figures=ctx.sweep_dir is None)
    timings[mapping.timing_key("total")] = time.perf_counter() - start
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
    """The job's record (``pipeline.io.results``): what it computed and how it was launched,
    under the names ``pipeline.tracking.mapping`` gives them; the same mapping turns it into
    the MLflow run, so any process can log the job from it."""
    ranking = retrieved.ranking
    launch = mapping.Launch(ctx.overrides, names, retrieved.cache_hit, (sweep or {}).get("sweep_id"), ctx.job_num,
                            bool(ctx.searched), _git_commit())
    return {
        "format": res.RECORD_FORMAT,
        "job_key": uuid.uuid4().hex,
        "experiment": settings.experiment or collection.name,
        "run_name": run_name,
        "params": {key: tracking.redact(value) for key, value in config.flatten(config.resolved(settings.config)).items()},
        "metrics": mapping.record_metrics(scores.metrics, timings, collection.report, retrieved.report),
        "curves": mapping.record_curves(scores.curves),
        **({"stepped": mapping.record_stepped(scores.stepped)} if scores.stepped else {}),  # step = B tokens
        "tags": mapping.job_tags(launch, settings.judged_only, retrieved.cost),
        # Cost metrics (latency, throughput, index): logged as MLflow metrics, kept apart from the
        # quality metrics above so that no comparison or sweep treats them as one (retrievers.cost).
        **({"cost": cost_block(retrieved.cost)} if retrieved.cost else {}),
        "dataset": {"name": collection.name, "digest": collection.digest, "source": str(collection.source)},
        "table_columns": mapping.table_columns(
            [*(f"{family}_at_{settings.k}" for family in scores.ev.families()), *scores.ev.full, "n_relevant",
             "evaluated"], settings.k) if settings.log_per_query_table else None,
        "start_time_ms": int(started_at * 1000),
        "k": settings.k,
        "objective": settings.objective,
        "ranking_digest": hashlib.sha256(np.ascontiguousarray(ranking.doc_idx).tobytes()).hexdigest()[:16],
        "sweep": sweep,
        "tracking": None if settings.store is None else settings.store.as_dict(),
    }


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
                       f"`python -m pipeline.cli sync {results.parent}` logs them later.")
            res.write_failed(results.parent, res.read_record(results)["tags"].get(tracking.TAG_OVERRIDES, ""), message)
            print(f"job {results.parent.name}: {message.splitlines()[0]}", file=sys.stderr)
            return None
        raise TrackingFailed(
            f"error: {err}\nThe results are safe on disk in {results.resolve()} "
            "(metrics.json, per_query.csv, run.trec, plots/); `python -m pipeline.cli sync "
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


def user_error(exc: BaseException) -> PipelineError | None:
    """The error model's error behind a job's failure (``pipeline.errors``): a PipelineError
    in ``exc``'s chain (``instantiate()`` wraps the loader's own), or an InputError for a
    mandatory key left unset or a constructor that refused a value; None for anything else.
    Used by the job here and by the Python API's ``run_job``."""
    err: BaseException | None = exc
    while err is not None:
        if isinstance(err, PipelineError):
            return err
        if isinstance(err, MissingMandatoryValue):
            key = getattr(err, "full_key", None) or str(err)
            return InputError(f"{key} is required: set it on the command line, e.g. {key}=...")
        if isinstance(err, InstantiationException) and isinstance(err.__cause__, ValueError):
            # a retriever, reorder or attention constructor refused a value (retriever.k1=-1)
            key = next((line.split(":", 1)[1].strip() for line in str(err).splitlines()
                        if line.startswith("full_key:")), "config")
            return InputError(f"{key}: {err.__cause__}")
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
        known = user_error(exc)
        found = exit_line(known) if known is not None else None
        ctx = job_context(OmegaConf.select(cfg, "paths.runs", default="outputs/runs"))
        console.to_log_file(found[0] if found else f"the job failed: {type(exc).__name__}: {exc}",
                            None if found else exc)
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or (found is None and ctx.sweep_dir is None):
            raise
        if found is None:  # a sweep job's unexpected error: one line here, the traceback in its log
            logs = console.log_files()
            line, code = exit_line(exc)
            found = (line + (f" (traceback in {logs[0].baseFilename})" if logs else ""), code)
        message, code = found
        if ctx.sweep_dir is None:
            print(message, file=sys.stderr)
            sys.exit(code)
        line = f"job {ctx.output_dir.name} ({' '.join(ctx.overrides)}): {message}"
        print(line, file=sys.stderr)
        res.write_failed(ctx.output_dir, " ".join(ctx.overrides), message)
        return console.FailedObjective(line) if ctx.searched else float("nan")

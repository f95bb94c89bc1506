"""One experiment: load -> retrieve -> place -> score -> write -> track.

``run(cfg)`` is a plain function (tests call it with a composed config); under Hydra it also
reads the job's output folder, overrides and sweep from ``HydraConfig``. It returns the
sweep objective (``cfg.objective``), so a sweeper can optimize it.

Nothing computed is lost: the results are written to the job's output folder before
tracking, and a tracking failure names that folder and exits non-zero.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from pipeline import config, tracking
from pipeline import results as res
from pipeline.data import Collection
from pipeline.errors import InputError
from pipeline.formats import write_run
from pipeline.metrics import (CURVES, Evaluation, definition_card, evaluate, grade_matrix, ideal_matrix, parse_key,
                              report_ks)
from pipeline.placement import context_utility, place
from retrievers.base import Ranking, load_or_compute_ranking

log = logging.getLogger(__name__)

__all__ = ["CURVES", "run", "run_job", "load", "retrieve", "score", "headline", "write_results"]
FAILED_FILE = res.FAILED
TIE_RULE = "score descending, then document index ascending (the retrievers' order)"


class TrackingFailed(RuntimeError):
    exit_code = 3


@dataclass
class JobContext:
    """Where a job writes and how it was launched (from Hydra, or made up without it)."""

    output_dir: Path
    overrides: list[str] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    sweep_dir: Path | None = None
    in_process_sweep: bool = False  # a multirun whose jobs run one after another in this process
    job_num: int | None = None  # the job's number in its sweep
    searched: list[str] = field(default_factory=list)  # keys a sweeper samples (Optuna's params)


def job_context(runs_dir: str | Path = "outputs/runs") -> JobContext:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized():
        hc = HydraConfig.get()
        choices = {k: str(v) for k, v in hc.runtime.choices.items() if v is not None and "/" not in k}
        sweep = Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None
        in_process = sweep is not None and str(hc.launcher.get("_target_", "")).endswith("BasicLauncher")
        num = hc.job.get("num") if sweep is not None else None
        searched = []
        if sweep is not None and "optuna" in str(hc.sweeper.get("_target_", "")).lower():
            searched = [str(key) for key in (hc.sweeper.get("params") or {})]
        return JobContext(Path(hc.runtime.output_dir), list(hc.overrides.task), choices, sweep, in_process,
                          None if num is None else int(num), searched)
    stamp = time.strftime("%Y-%m-%d/%H-%M-%S") + f"-{uuid.uuid4().hex[:6]}"
    return JobContext(Path(runs_dir) / stamp)


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timings[f"time_{stage}_s"] = time.perf_counter() - start
    log.info("%s: %.2f s", stage, timings[f"time_{stage}_s"])


_LOADED: dict[str, tuple[tuple, Collection]] = {}


def load(cfg: DictConfig) -> Collection:
    """``instantiate(cfg.dataset)``, remembered for the life of the process so that the jobs
    of a sequential sweep load a collection once. The memo is keyed by the resolved dataset
    config and the size and mtime of every file or folder it names; it holds one collection."""
    spec = OmegaConf.to_container(cfg.dataset, resolve=True)
    key = json.dumps(spec, sort_keys=True, default=str)
    stamp = _file_stamps(spec)
    if key in _LOADED and _LOADED[key][0] == stamp:
        return _LOADED[key][1]
    collection = instantiate(cfg.dataset)
    if not isinstance(collection, Collection):
        raise InputError(f"dataset config produced {type(collection).__name__}, not a Collection")
    _LOADED.clear()
    _LOADED[key] = (stamp, collection)
    return collection


def _file_stamps(spec: Any) -> tuple:
    stamps = []
    for value in spec.values() if isinstance(spec, dict) else ():
        if not isinstance(value, str) or not value or not os.path.exists(value):
            continue
        files = [Path(value)] if os.path.isfile(value) else sorted(p for p in Path(value).rglob("*") if p.is_file())
        stamps += [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return tuple(stamps)


def retrieve(cfg: DictConfig, collection: Collection, depth: int) -> tuple[Ranking, bool]:
    """The retriever's Ranking at ``depth``, from the on-disk cache when it has one."""
    retriever = _computing(lambda: instantiate(cfg.retriever))
    key = {"collection": collection.digest, "retriever": retriever.cache_key(), "depth": depth}

    def compute() -> Ranking:
        retriever.index(collection.doc_ids, collection.doc_texts)
        return retriever.search(collection.query_ids, collection.query_texts, depth)

    return load_or_compute_ranking(
        Path(cfg.cache_dir), key, compute, reuse_deeper=getattr(retriever, "prefix_stable", False),
        n_queries=collection.n_queries, n_docs=collection.n_docs,
    )


def score(cfg: DictConfig, collection: Collection, ranking: Ranking, strategy: Any, curve: Any) -> Evaluation:
    """Retrieval metrics on the ranking, context utility on the placed order, K = 1..k_max."""
    gain = config.gain_name(cfg)
    grades = grade_matrix(ranking.doc_idx, collection.qrels)
    ev = evaluate(ranking.doc_idx, collection.qrels, cfg.k_max, gain=gain,  # type: ignore[arg-type]
                  relevance_level=cfg.relevance_level, grades=grades)
    ideal = ideal_matrix(collection.qrels, collection.n_queries, cfg.k_max)
    ev.add("context_utility", context_utility(grades, ideal, cfg.k_max, strategy, curve, gain))
    return ev


def headline(ev: Evaluation, k: int, k_max: int, objective: str) -> dict[str, float]:
    """Every family at k and at the standard cut-offs, mrr, map, the objective and counts."""
    return ev.means(report_ks(k, k_max, [config.objective_k(objective, k_max)]))


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def write_results(
    out: Path,
    cfg: DictConfig,
    collection: Collection,
    ranking: Ranking,
    placed: np.ndarray,
    ev: Evaluation,
    per_query: Any,
    metrics: dict[str, float],
    title: str,
    with_plots: bool = True,
) -> Path:
    """Everything the run produced, on disk under ``out/results`` (``pipeline.results``), each
    file written atomically. ``with_plots=False`` leaves the figures to the tracking process
    (see ``run``). The record is written by the caller, last."""
    results = res.results_dir(out)
    results.mkdir(parents=True, exist_ok=True)
    curves = {family: ev.curve(family) for family in CURVES}
    payload = {
        "metrics": metrics,
        "curves": {name: values.tolist() for name, values in curves.items()},
        "collection": {"name": collection.name, "digest": collection.digest, "source": collection.source,
                       "n_docs": collection.n_docs, "n_queries": collection.n_queries, "report": collection.report},
    }
    res.write_json(results / "metrics.json", payload)
    _write_csv(per_query, results / "per_query.csv")
    write_run(results / "run.trec", collection.query_ids, collection.doc_ids, ranking.doc_idx, ranking.scores, tag=title)
    with res.atomic_open(results / "context.tsv") as fh:  # the placed order fed to the generator
        fh.write("query_id\tslot\tdoc_id\n")
        docs = np.asarray(collection.doc_ids, dtype=object)
        for q, row in zip(collection.query_ids, placed):
            fh.writelines(f"{q}\t{slot}\t{docs[d]}\n" for slot, d in enumerate(row, start=1) if d >= 0)
    res.write_text(results / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    res.write_text(results / "definition_card.md",
                   definition_card(config.gain_name(cfg), cfg.relevance_level, TIE_RULE))  # type: ignore[arg-type]
    if with_plots:
        from pipeline.plots import save_run_figures

        save_run_figures(results / "plots", curves, cfg.k, title)
    return results


def _write_csv(table: Any, path: Path) -> None:
    """Columns as CSV through pyarrow's writer: pandas formats 50k floats one by one (~0.2 s a job)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    with res.atomic_open(path, "wb") as fh:
        pa_csv.write_csv(pa.table(table), fh)


def _per_query_columns(ev: Evaluation, k: int) -> list[str]:
    """The per-query table at k (the UI's table view; the full table is an artifact)."""
    return ["query_id", *[f"{family}_at_{k}" for family in ev.families()], "mrr", "map", "n_relevant", "evaluated"]


def _sweep_info(ctx: JobContext) -> dict[str, str] | None:
    """The job's sweep, as its record names it (the logger finds the parent run from it)."""
    if ctx.sweep_dir is None:
        return None
    info = tracking.read_sweep_file(ctx.sweep_dir)
    sweep = {"sweep_id": info.get("sweep_id", ctx.sweep_dir.name), "dir": str(ctx.sweep_dir.resolve())}
    if info.get("experiment"):
        sweep["experiment"] = info["experiment"]
    return sweep


def run(cfg: DictConfig) -> float:
    """Run one experiment and return its objective (``cfg.objective``)."""
    config.check(cfg)
    ctx = job_context(cfg.paths.runs)
    timings: dict[str, float] = {}
    started_at, start = time.time(), time.perf_counter()
    settings = tracking.StoreSettings.of(cfg.tracking) if cfg.tracking.enabled else None
    # The tracking process imports mlflow and opens the store while this one computes.
    tracker = tracking.tracker(settings) if settings is not None else None

    with _timed(timings, "load"):
        collection = load(cfg)
    # Never deeper than the corpus; metrics still go to k_max (missing ranks are empty).
    depth = min(max(cfg.k, cfg.k_max), collection.n_docs)
    with _timed(timings, "retrieve"):
        ranking, cache_hit = retrieve(cfg, collection, depth)
    with _timed(timings, "place"):
        curve, strategy = _computing(lambda: (instantiate(cfg.attention), instantiate(cfg.reorder)))
        placed = _computing(lambda: place(ranking.doc_idx, cfg.k, strategy, curve(cfg.k)))
    with _timed(timings, "score"):
        ev = _computing(lambda: score(cfg, collection, ranking, strategy, curve))
        metrics = headline(ev, cfg.k, cfg.k_max, cfg.objective)
        metrics.update(objective_ci(ev, cfg.objective, int(cfg.seed)))
        per_query = ev.per_query(collection.query_ids)  # columns: written by pyarrow, no pandas

    names = {g: ctx.choices.get(g) or str(cfg[g].get("_target_", g)).rsplit(".", 1)[-1]
             for g in ("retriever", "reorder", "attention")}
    run_name = cfg.tracking.run_name or _run_name(names, cfg.k, ctx)
    # In a sequential sweep, drawing the figures and logging go to the tracking process and
    # the next job starts at once; the sweep's end waits for them (pipeline.sweep).
    deferred = tracker is not None and ctx.in_process_sweep
    with _timed(timings, "write"):
        try:
            results = write_results(ctx.output_dir, cfg, collection, ranking, placed, ev, per_query, metrics,
                                    run_name, with_plots=not deferred)
        except OSError as err:  # the ranking stays in the cache: a rerun with a usable folder is quick
            raise InputError(f"cannot write the results to {ctx.output_dir}: {err.strerror or err} "
                             "(set paths.root or hydra.run.dir to a writable folder)") from err
    objective = float(metrics[cfg.objective])
    timings["time_total_s"] = time.perf_counter() - start
    experiment = cfg.tracking.experiment or collection.name
    sweep = _sweep_info(ctx)
    res.write_record(results, {  # last: from here on the folder is complete and can be logged
        "format": res.RECORD_FORMAT,
        "job_key": uuid.uuid4().hex,
        "experiment": experiment,
        "run_name": run_name,
        "params": {key: tracking.redact(value) for key, value in config.flatten(config.resolved(cfg)).items()},
        "metrics": {**metrics, **timings, **{f"data_{k}": float(v) for k, v in collection.report.items()}},
        "curves": {f"curve/{family}": ev.curve(family).tolist() for family in CURVES},
        "tags": _tags(ctx, names, cache_hit, sweep),
        "dataset": {"name": collection.name, "digest": collection.digest, "source": str(collection.source)},
        "table_columns": _per_query_columns(ev, cfg.k) if cfg.tracking.log_per_query_table else None,
        "start_time_ms": int(started_at * 1000),
        "k": int(cfg.k),
        "objective": str(cfg.objective),
        "ranking_digest": hashlib.sha256(np.ascontiguousarray(ranking.doc_idx).tobytes()).hexdigest()[:16],
        "sweep": sweep,
        "tracking": None if settings is None else settings.as_dict(),
    })
    _print_summary(run_name, collection, cfg, metrics, cache_hit, results)

    if tracker is not None and settings is not None:
        if deferred:
            try:
                tracker.log(results, settings, wait=False, note_failure=True)
            except tracking.TrackingError as err:  # the sweep's end (or pipeline.sync) logs it
                log.warning("%s; the sweep's end will log %s", err, results)
            print(f"MLflow run queued ({run_name}) in experiment {experiment!r} at {tracking.redact(settings.uri)}")
        else:
            _track(tracker, settings, results, run_name, experiment)
    return objective


def _run_name(names: dict[str, str], k: int, ctx: JobContext) -> str:
    """``<retriever>-<reorder>-k<k>``; an Optuna trial adds the values it sampled, so its
    trials differ by name (``bm25-none-k10 k1=1.53 b=0.612``)."""
    name = f"{names['retriever']}-{names['reorder']}-k{k}"
    sampled = dict(o.split("=", 1) for o in ctx.overrides if "=" in o and o.split("=", 1)[0] in ctx.searched)
    if sampled:
        name += " " + " ".join(f"{key.rsplit('.', 1)[-1]}={_short(value)}" for key, value in sampled.items())
    return name


def _short(value: str) -> str:
    try:
        return f"{float(value):.4g}"
    except ValueError:
        return value


#: Bootstrap resamples of a job's objective CI (BCa, seeded by ``seed``).
CI_RESAMPLES = 10_000


def objective_ci(ev: Evaluation, objective: str, seed: int) -> dict[str, float]:
    """``<objective>_ci_low`` and ``_ci_high``: the 95% BCa bootstrap interval of the
    objective's mean over the evaluated queries (``pipeline.stats``)."""
    from pipeline import stats

    family, k = parse_key(objective)
    values = ev.full[family] if k is None else ev.values(family)[:, k - 1]
    values = values[ev.evaluated]
    if len(values) < 2:
        return {}
    low, high = stats.bootstrap_ci(values[None, :], method="BCa", n_resamples=CI_RESAMPLES, seed=seed)
    return {f"{objective}_ci_low": float(low[0]), f"{objective}_ci_high": float(high[0])}


def _computing(fn: Any) -> Any:
    """Computing modules raise ValueError on bad values; for the user it is bad input."""
    try:
        return fn()
    except ValueError as err:
        raise InputError(str(err)) from err


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


def _track(tracker: tracking.Tracker, settings: tracking.StoreSettings, results: Path, run_name: str,
           experiment: str) -> str:
    """Log the job's folder and wait; TrackingFailed names the results."""
    t0 = time.perf_counter()
    try:
        run_id = tracker.log(results, settings, wait=True)
    except tracking.TrackingError as err:
        raise TrackingFailed(
            f"error: {err}\nThe results are safe on disk in {results.resolve()} "
            "(metrics.json, per_query.csv, run.trec, plots/); `python -m pipeline.sync "
            f"{results.parent}` logs them once the store is back."
        ) from err
    log.info("track: %.2f s", time.perf_counter() - t0)
    print(f"MLflow run {run_id} ({run_name}) in experiment {experiment!r} at {tracking.redact(settings.uri)}")
    return str(run_id)


def _print_summary(run_name: str, collection: Collection, cfg: DictConfig, metrics: dict[str, float],
                   cache_hit: bool, results: Path) -> None:
    k = cfg.k
    keys = [f"ndcg_at_{k}", f"precision_at_{k}", f"recall_at_{k}", f"map_at_{k}", f"mrr_at_{k}",
            f"context_utility_at_{k}", "mrr", "map"]
    if cfg.objective not in keys:
        keys.append(cfg.objective)
    lines = [f"{run_name} on {collection.name}: {int(metrics['n_queries'])} queries "
             f"({int(metrics['n_queries_no_relevant'])} without relevant documents left out), "
             f"{collection.n_docs} documents, ranking cache {'hit' if cache_hit else 'miss'}"]
    lines += [f"  {key:<24} {metrics[key]:.4f}" for key in keys]
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
        err = err.__cause__ or err.__context__
    return None


def run_job(cfg: DictConfig) -> float:
    """``run(cfg)`` for the command line: a user mistake or a tracking failure prints one
    message and no traceback (``HYDRA_FULL_ERROR=1`` shows one). A single run then exits
    with its status (2: bad input, 3: tracking); a sweep job returns NaN and leaves a
    ``FAILED`` note in its folder, so the other jobs still run and the sweep ends non-zero
    after its summary (``pipeline.sweep``)."""
    try:
        return run(cfg)
    except Exception as exc:
        found = _user_error(exc)
        if found is None or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        message, code = found
        ctx = job_context(OmegaConf.select(cfg, "paths.runs", default="outputs/runs"))
        if ctx.sweep_dir is None:
            print(message, file=sys.stderr)
            sys.exit(code)
        print(f"job {ctx.output_dir.name} ({' '.join(ctx.overrides)}): {message}", file=sys.stderr)
        res.write_failed(ctx.output_dir, " ".join(ctx.overrides), message)
        return float("nan")

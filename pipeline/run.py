"""One experiment: load -> retrieve -> place -> score -> write -> track.

``run(cfg)`` is a plain function (tests call it with a composed config); under Hydra it also
reads the job's output folder, overrides and sweep from ``HydraConfig``. It returns the
sweep objective (``cfg.objective``), so a sweeper can optimize it.

Nothing computed is lost: the results are written to the job's output folder before
tracking, and a tracking failure names that folder and exits non-zero.
"""

from __future__ import annotations

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

from pipeline import cache, config, tracking
from pipeline.data import Collection
from pipeline.errors import InputError
from pipeline.formats import write_run
from pipeline.metrics import Evaluation, definition_card, evaluate, grade_matrix, ideal_matrix
from pipeline.placement import context_utility, place
from retrievers.base import Ranking

log = logging.getLogger(__name__)

#: Cut-offs logged besides the configured k (those <= k_max), so runs with different k compare.
STANDARD_KS = (1, 3, 5, 10, 20, 50, 100)
#: The K-sweep curves logged as stepped metrics ``curve/<family>`` (step = K).
CURVES = ("precision", "recall", "ndcg", "map", "mrr", "context_utility")
SWEEP_FILE = "mlflow_sweep.json"
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


def job_context() -> JobContext:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized():
        hc = HydraConfig.get()
        choices = {k: str(v) for k, v in hc.runtime.choices.items() if v is not None and "/" not in k}
        sweep = Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None
        in_process = sweep is not None and str(hc.launcher.get("_target_", "")).endswith("BasicLauncher")
        return JobContext(Path(hc.runtime.output_dir), list(hc.overrides.task), choices, sweep, in_process)
    stamp = time.strftime("%Y-%m-%d/%H-%M-%S") + f"-{uuid.uuid4().hex[:6]}"
    return JobContext(Path("outputs/runs") / stamp)


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
    retriever = instantiate(cfg.retriever)
    key = {"collection": collection.digest, "retriever": retriever.cache_key(), "depth": depth}

    def compute() -> Ranking:
        retriever.index(collection.doc_ids, collection.doc_texts)
        return retriever.search(collection.query_ids, collection.query_texts, depth)

    return cache.load_or_compute_ranking(
        Path(cfg.cache_dir), key, compute, reuse_deeper=getattr(retriever, "prefix_stable", False)
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
    ks = sorted({k, *(c for c in STANDARD_KS if c <= k_max)})
    obj_k = config.objective_k(objective, k_max)
    if obj_k is not None:
        ks = sorted({*ks, obj_k})
    return ev.means(ks)


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
    """Everything the run produced, on disk under ``out/results`` (what tracking uploads).

    ``with_plots=False`` leaves the figures to the tracking process (see ``run``)."""
    results = out / "results"
    results.mkdir(parents=True, exist_ok=True)
    curves = {family: ev.curve(family) for family in CURVES}
    payload = {
        "metrics": metrics,
        "curves": {name: values.tolist() for name, values in curves.items()},
        "collection": {"name": collection.name, "digest": collection.digest, "source": collection.source,
                       "n_docs": collection.n_docs, "n_queries": collection.n_queries, "report": collection.report},
    }
    (results / "metrics.json").write_text(json.dumps(payload, indent=1))
    _write_csv(per_query, results / "per_query.csv")
    write_run(results / "run.trec", collection.query_ids, collection.doc_ids, ranking.doc_idx, ranking.scores, tag=title)
    with open(results / "context.tsv", "w", encoding="utf-8") as fh:  # the placed order fed to the generator
        fh.write("query_id\tslot\tdoc_id\n")
        docs = np.asarray(collection.doc_ids, dtype=object)
        for q, row in zip(collection.query_ids, placed):
            fh.writelines(f"{q}\t{slot}\t{docs[d]}\n" for slot, d in enumerate(row, start=1) if d >= 0)
    (results / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (results / "definition_card.md").write_text(definition_card(config.gain_name(cfg), cfg.relevance_level, TIE_RULE))  # type: ignore[arg-type]
    if with_plots:
        from pipeline.plots import save_run_figures

        save_run_figures(results / "plots", curves, cfg.k, title)
    return results


def _write_csv(table: Any, path: Path) -> None:
    """CSV through pyarrow's writer: pandas formats 50k floats one by one (~0.2 s a job)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    pa_csv.write_csv(pa.Table.from_pandas(table, preserve_index=False), path)


def _per_query_view(ev: Evaluation, table: Any, k: int) -> Any:
    """The per-query table at k (the UI's table view; the full table is an artifact)."""
    cols = ["query_id", *[f"{family}_at_{k}" for family in ev.families()], "mrr", "map", "n_relevant", "evaluated"]
    return table[cols]


def _sweep_info(ctx: JobContext) -> dict[str, str]:
    if ctx.sweep_dir is None:
        return {}
    path = ctx.sweep_dir / SWEEP_FILE
    if path.exists():
        return json.loads(path.read_text())
    return {"sweep_id": ctx.sweep_dir.name}


def run(cfg: DictConfig) -> float:
    """Run one experiment and return its objective (``cfg.objective``)."""
    config.check(cfg)
    ctx = job_context()
    timings: dict[str, float] = {}
    started_at, start = time.time(), time.perf_counter()
    # The tracking process imports mlflow and opens the store while this one computes.
    tracker = tracking.Tracker.shared(cfg.tracking) if cfg.tracking.enabled else None

    with _timed(timings, "load"):
        collection = load(cfg)
    depth = max(cfg.k, cfg.k_max)
    with _timed(timings, "retrieve"):
        ranking, cache_hit = retrieve(cfg, collection, depth)
    with _timed(timings, "place"):
        curve, strategy = instantiate(cfg.attention), instantiate(cfg.reorder)
        placed = place(ranking.doc_idx, cfg.k, strategy, curve(cfg.k))
    with _timed(timings, "score"):
        ev = score(cfg, collection, ranking, strategy, curve)
        metrics = headline(ev, cfg.k, cfg.k_max, cfg.objective)
        per_query = ev.per_query(collection.query_ids)

    names = {g: ctx.choices.get(g) or str(cfg[g].get("_target_", g)).rsplit(".", 1)[-1]
             for g in ("retriever", "reorder", "attention")}
    run_name = cfg.tracking.run_name or f"{names['retriever']}-{names['reorder']}-k{cfg.k}"
    # In a sequential sweep, drawing the figures and logging go to the tracking process and
    # the next job starts at once; the sweep's end waits for them (pipeline.sweep).
    deferred = tracker is not None and ctx.in_process_sweep
    with _timed(timings, "write"):
        results = write_results(ctx.output_dir, cfg, collection, ranking, placed, ev, per_query, metrics, run_name,
                                with_plots=not deferred)
    objective = float(metrics[cfg.objective])
    _print_summary(run_name, collection, cfg, metrics, cache_hit, results)

    if tracker is not None:
        timings["time_total_s"] = time.perf_counter() - start
        sweep = _sweep_info(ctx)
        record = tracking.RunRecord(
            experiment=cfg.tracking.experiment or collection.name,
            run_name=run_name,
            params=config.flatten(config.resolved(cfg)),
            metrics={**metrics, **timings, **{f"data_{k}": float(v) for k, v in collection.report.items()}},
            curves={f"curve/{family}": ev.curve(family) for family in CURVES},
            tags=_tags(ctx, names, cache_hit, sweep),
            artifacts_dir=results,
            dataset={"name": collection.name, "digest": collection.digest, "source": str(collection.source)},
            table=_per_query_view(ev, per_query, cfg.k) if cfg.tracking.log_per_query_table else None,
            start_time_ms=int(started_at * 1000),
        )
        if deferred:
            tracker.submit("pipeline.tracking:log_run_deferred", cfg.tracking, record, results / "plots",
                           cfg.k, ctx.output_dir / FAILED_FILE)
            print(f"MLflow run queued ({run_name}) in experiment {record.experiment!r} at {cfg.tracking.uri}")
        else:
            _track(cfg, tracker, record, sweep, results)
    return objective


def _tags(ctx: JobContext, names: dict[str, str], cache_hit: bool, sweep: dict[str, str]) -> dict[str, str]:
    tags = {
        tracking.TAG_OVERRIDES: " ".join(ctx.overrides),
        "ranking_cache": "hit" if cache_hit else "miss",
        **{f"choice.{g}": n for g, n in names.items()},
    }
    if sweep:
        tags[tracking.TAG_SWEEP] = sweep["sweep_id"]
    if commit := _git_commit():
        tags[tracking.TAG_GIT] = commit
        tags["mlflow.source.git.commit"] = commit
    return tags


def _track(cfg: DictConfig, tracker: tracking.Tracker, record: tracking.RunRecord, sweep: dict[str, str],
           results: Path) -> str:
    """Log the run (nested under the sweep's parent when in one); TrackingFailed names the results."""
    parent = sweep.get("parent_run_id") if sweep.get("experiment") in (None, record.experiment) else None
    t0 = time.perf_counter()
    try:
        run_id = tracker.log_run(record, parent_run_id=parent)
        tracker.log_metric(run_id, "time_track_s", time.perf_counter() - t0)
    except tracking.TrackingError as err:
        raise TrackingFailed(
            f"error: {err}\nThe results are safe on disk in {results.resolve()} "
            "(metrics.json, per_query.csv, run.trec, plots/)."
        ) from err
    log.info("track: %.2f s", time.perf_counter() - t0)
    print(f"MLflow run {run_id} ({record.run_name}) in experiment {record.experiment!r} at {cfg.tracking.uri}")
    return run_id


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


FAILED_FILE = "FAILED"


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
        ctx = job_context()
        if ctx.sweep_dir is None:
            print(message, file=sys.stderr)
            sys.exit(code)
        print(f"job {ctx.output_dir.name} ({' '.join(ctx.overrides)}): {message}", file=sys.stderr)
        ctx.output_dir.mkdir(parents=True, exist_ok=True)
        (ctx.output_dir / FAILED_FILE).write_text(f"{' '.join(ctx.overrides)}\n{message}\n")
        return float("nan")

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

from pipeline import chunkers, config, console, tracking
from pipeline.report import drilldown
from pipeline.io import results as res
from pipeline.io.collection import Collection
from pipeline.errors import InputError
from pipeline.io.formats import arrow_array, write_run
from pipeline.metrics import (CURVES, UNJUDGED, Evaluation, condense, definition_card, evaluate, grade_matrix,
                              ideal_matrix, judged_warning, parse_key, report_ks)
from pipeline.context.placement import context_utility, place
from retrievers.base import Ranking, load_or_compute_ranking

log = logging.getLogger(__name__)

__all__ = ["CURVES", "run", "run_job", "load", "retrieve", "score", "headline", "write_results"]
FAILED_FILE = res.FAILED
#: per_query.csv holds every K = 1..k_max up to this k_max, else the reported cut-offs only.
PER_QUERY_ALL_K = 1000
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
        return JobContext(Path(hc.runtime.output_dir), list(hc.overrides.task), choices, sweep,
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
    """Retrieval metrics on the ranking, context utility on the placed order, K = 1..k_max.

    With ``judged_only`` both score the condensed ranking (unjudged documents removed, trec_eval
    ``-J``); judged_at_K always describes the ranking as retrieved."""
    gain = config.gain_name(cfg)
    judged_only = judged_only_of(cfg)
    lookup = grade_matrix(ranking.doc_idx, collection.qrels, unjudged=UNJUDGED)
    ev = evaluate(ranking.doc_idx, collection.qrels, cfg.k_max, gain=gain,  # type: ignore[arg-type]
                  relevance_level=cfg.relevance_level, lookup=lookup, judged_only=judged_only)
    if judged_only:
        lookup = condense(ranking.doc_idx, lookup)[1]
    ideal = ideal_matrix(collection.qrels, collection.n_queries, cfg.k_max)
    ev.add("context_utility", context_utility(np.maximum(lookup, 0), ideal, cfg.k_max, strategy, curve, gain))
    return ev


def judged_only_of(cfg: DictConfig) -> bool:
    """``judged_only`` of a config (False when a hand-made config has no such key)."""
    return bool(cfg.get("judged_only", False))


def headline(ev: Evaluation, k: int, k_max: int, objective: str) -> dict[str, float]:
    """Every family at k and at the standard cut-offs, mrr, map, bpref, the objective and counts."""
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
    curves: dict[str, np.ndarray],
) -> Path:
    """Everything the run produced, on disk under ``out/results`` (``pipeline.io.results``), each
    file written atomically, the figures included. The record is written by the caller, last.
    ``curves``: the mean of each family of :data:`CURVES` at every K."""
    results = res.results_dir(out)
    results.mkdir(parents=True, exist_ok=True)
    payload = {
        "judged_only": judged_only_of(cfg),  # condensed lists (trec_eval -J): not comparable with full rankings
        "metrics": metrics,
        "curves": {name: values.tolist() for name, values in curves.items()},
        "collection": {"name": collection.name, "digest": collection.digest, "source": collection.source,
                       "n_docs": collection.n_docs, "n_queries": collection.n_queries, "report": collection.report},
    }
    res.write_json(results / "metrics.json", payload)
    # First: it refuses ids a TREC file cannot hold (a lone surrogate) with one line naming the id.
    write_run(results / "run.trec", collection.query_ids, collection.doc_ids, ranking.doc_idx, ranking.scores, tag=title)
    # The drill-down (pipeline.report.drilldown): query text, first relevant rank, judged share, top k.
    drill = drilldown.of_collection(collection, ranking.doc_idx, cfg.k, cfg.relevance_level)
    _write_csv(drilldown.with_columns(per_query, drill), results / "per_query.csv")
    res.write_text(results / drilldown.FAILURES_FILE, drill.failures_markdown())
    with res.atomic_open(results / "context.tsv") as fh:  # the placed order fed to the generator
        fh.write("query_id\tslot\tdoc_id\n")
        docs = np.asarray(collection.doc_ids, dtype=object)
        for q, row in zip(collection.query_ids, placed):
            fh.writelines(f"{q}\t{slot}\t{docs[d]}\n" for slot, d in enumerate(row, start=1) if d >= 0)
    res.write_text(results / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    res.write_text(results / "definition_card.md",
                   definition_card(config.gain_name(cfg), cfg.relevance_level, TIE_RULE,  # type: ignore[arg-type]
                                   judged_only=judged_only_of(cfg)))
    from pipeline.report.figures import save_run_figures  # matplotlib: imported where figures are drawn

    save_run_figures(results / "plots", curves, cfg.k, title)
    return results


def _write_csv(table: Any, path: Path) -> None:
    """Columns as CSV through pyarrow's writer: pandas formats 50k floats one by one (~0.2 s a job)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    with res.atomic_open(path, "wb") as fh:
        pa_csv.write_csv(pa.table({name: arrow_array(values) for name, values in table.items()}), fh)


def _per_query_columns(ev: Evaluation, k: int) -> list[str]:
    """The per-query table at k (the UI's table view; the full table is an artifact), with
    the drill-down's columns (``pipeline.report.drilldown.table_columns``)."""
    return drilldown.table_columns(
        [*[f"{family}_at_{k}" for family in ev.families()], *ev.full, "n_relevant", "evaluated"], k)


def _sweep_info(ctx: JobContext) -> dict[str, str] | None:
    """The job's sweep, as its record names it (the logger finds the parent run from it)."""
    if ctx.sweep_dir is None:
        return None
    info = tracking.read_sweep_file(ctx.sweep_dir)
    sweep = {"sweep_id": info.get("sweep_id", ctx.sweep_dir.name), "dir": str(ctx.sweep_dir.resolve())}
    if info.get("experiment"):
        sweep["experiment"] = info["experiment"]
    if info.get("swept"):  # the keys the sweep varies (pipeline.sweep): first in the run names
        sweep["swept"] = str(info["swept"])
    return sweep


def run(cfg: DictConfig) -> float:
    """Run one experiment and return its objective (``cfg.objective``)."""
    config.check(cfg)
    ctx = job_context(cfg.paths.runs)
    timings: dict[str, float] = {}
    started_at, start = time.time(), time.perf_counter()
    settings = tracking.StoreSettings.of(cfg.tracking) if cfg.tracking.enabled else None
    if settings is not None and ctx.sweep_dir is None and (note := tracking.new_store_note(settings.uri)):
        print(note)  # a sweep says it once, before its jobs (pipeline.sweep)

    with _timed(timings, "load"):
        collection = load(cfg)
    # The chunker stage (pipeline.chunkers): None for chunker=none without a budget.
    chunk_start = time.perf_counter()
    stage = chunkers.prepare(cfg, collection)
    if stage is not None:
        timings["time_chunk_s"] = time.perf_counter() - chunk_start
    # Never deeper than the corpus; metrics still go to k_max (missing ranks are empty).
    depth = min(max(cfg.k, cfg.k_max), collection.n_docs)
    with _timed(timings, "retrieve"):
        if stage is None:
            ranking, cache_hit = retrieve(cfg, collection, depth)
            chunk_ranking = ranking
        else:  # chunks are retrieved; the document ranking is their fold (chunker.fold)
            chunk_ranking, cache_hit = retrieve(cfg, stage.collection, stage.depth(depth))
            ranking = Ranking(*_computing(lambda: chunkers.fold_ranking(
                stage, chunk_ranking.doc_idx, chunk_ranking.scores, depth)))
    with _timed(timings, "place"):
        curve, strategy = _computing(lambda: (instantiate(cfg.attention), instantiate(cfg.reorder)))
        placed = _computing(lambda: place(chunk_ranking.doc_idx, cfg.k, strategy, curve(cfg.k)))
    stepped: dict[str, dict[str, float]] = {}
    with _timed(timings, "score"):
        ev = _computing(lambda: score(cfg, collection, ranking, strategy, curve))
        if stage is not None:  # context families on the chunks, and per budget
            gain = config.gain_name(cfg)
            _computing(lambda: chunkers.context_scores(stage, ev, chunk_ranking.doc_idx, collection.qrels, cfg.k_max,
                                                       cfg.relevance_level, strategy, curve, gain))
            budget_metrics, stepped, _ = _computing(lambda: chunkers.budget_scores(
                stage, ev, chunk_ranking.doc_idx, collection.qrels, cfg.relevance_level, strategy, curve, gain))
        metrics = headline(ev, cfg.k, cfg.k_max, cfg.objective)
        if stage is not None:
            metrics.update(budget_metrics)
        metrics.update(objective_ci(ev, cfg.objective, int(cfg.seed)))
        # Columns, written by pyarrow (no pandas): every K up to PER_QUERY_ALL_K, else the
        # reported cut-offs (k_max=100000 would make a CSV of millions of columns).
        per_query_ks = None if cfg.k_max <= PER_QUERY_ALL_K else report_ks(
            cfg.k, cfg.k_max, [config.objective_k(cfg.objective, cfg.k_max)])
        if per_query_ks is not None:
            log.info("per_query.csv: the cut-offs %s only (k_max %d > %d)", per_query_ks, cfg.k_max, PER_QUERY_ALL_K)
        per_query = ev.per_query(collection.query_ids, per_query_ks)
        curves = {family: ev.curve(family) for family in CURVES}  # the figures, metrics.json, the record

    names = {g: ctx.choices.get(g) or str(cfg[g].get("_target_", g)).rsplit(".", 1)[-1]
             for g in ("retriever", "reorder", "attention")}
    sweep = _sweep_info(ctx)
    run_name = cfg.tracking.run_name or _run_name(names, cfg.k, ctx, sweep)
    with _timed(timings, "write"):
        try:
            results = write_results(ctx.output_dir, cfg, collection, ranking,
                                    placed if stage is None else stage.chunk_docs(placed), ev, per_query, metrics,
                                    run_name, curves)
            if stage is not None:  # chunk_run.trec, chunks.tsv and context.tsv with chunk ids
                contexts = (list(placed) if cfg.get("budget") is None else
                            chunkers.budget_context(stage, chunk_ranking.doc_idx, int(cfg.budget), strategy, curve))
                chunkers.write_chunk_results(results, stage, collection, chunk_ranking.doc_idx, chunk_ranking.scores,
                                             contexts, run_name)
        except OSError as err:  # the ranking stays in the cache: a rerun with a usable folder is quick
            raise InputError(f"cannot write the results to {ctx.output_dir}: {err.strerror or err} "
                             "(set paths.root or hydra.run.dir to a writable folder)") from err
    objective = float(metrics[cfg.objective])
    timings["time_total_s"] = time.perf_counter() - start
    experiment = cfg.tracking.experiment or collection.name
    res.write_record(results, {  # last: from here on the folder is complete and can be logged
        "format": res.RECORD_FORMAT,
        "job_key": uuid.uuid4().hex,
        "experiment": experiment,
        "run_name": run_name,
        "params": {key: tracking.redact(value) for key, value in config.flatten(config.resolved(cfg)).items()},
        "metrics": {**metrics, **timings, **{f"data_{k}": float(v) for k, v in collection.report.items()}},
        "curves": {f"curve/{family}": values.tolist() for family, values in curves.items()},
        **({"stepped": stepped} if stepped else {}),  # budget curves, step = B tokens (pipeline.chunkers)
        "tags": {**_tags(ctx, names, cache_hit, sweep), "judged_only": str(judged_only_of(cfg)).lower()},
        "dataset": {"name": collection.name, "digest": collection.digest, "source": str(collection.source)},
        "table_columns": _per_query_columns(ev, cfg.k) if cfg.tracking.log_per_query_table else None,
        "start_time_ms": int(started_at * 1000),
        "k": int(cfg.k),
        "objective": str(cfg.objective),
        "ranking_digest": hashlib.sha256(np.ascontiguousarray(ranking.doc_idx).tobytes()).hexdigest()[:16],
        "sweep": sweep,
        "tracking": None if settings is None else settings.as_dict(),
    })
    if stage is not None:
        print(chunkers.summary_text(stage, cfg, metrics))
    _print_summary(run_name, collection, cfg, metrics, cache_hit, results)

    if settings is not None:
        _track(settings, results, run_name, experiment, in_sweep=ctx.sweep_dir is not None)
    return objective


#: Groups whose choice is in a run name, each with the default it omits (None: always named).
NAMED_GROUPS = {"retriever": None, "reorder": "none", "attention": "liu2023", "chunker": "none"}
#: Short forms of long option names, so names survive MLflow's truncated name column.
SHORT_NAMES = {"lost_in_the_middle": "litm", "lost_in_the_middle_langchain": "litm_lc",
               "attention_optimal": "attn_opt", "hybrid_convex": "convex"}
#: Overrides that never go into a name: where things are written and logged, the dataset
#: (the experiment's name), the objective and seed (they change no retrieval or placement).
_NOT_NAMED = {"paths", "tracking", "hydra", "cache_dir", "dataset", "experiment", "objective", "seed"}


def _run_name(names: dict[str, str], k: int, ctx: JobContext, sweep: dict[str, str] | None = None) -> str:
    """A short name that tells runs apart in MLflow's truncated name column: what the sweep
    varies first (its keys in order, then the values an Optuna trial sampled), then the
    retriever, k, and every other non-default choice: reorder, attention curve, chunker (when
    not their defaults) and the command line's other overrides (``retriever.k1=0.9`` ->
    ``k1=0.9``). ``bm25 k10``; a sweep over k and reorder: ``k3 litm bm25``; an Optuna trial:
    ``k1=1.534 b=0.6121 bm25 k10``."""
    overrides = {}
    for o in ctx.overrides:
        key, eq, value = o.lstrip("+").partition("=")
        if eq and not key.startswith("~"):
            overrides[key] = value
    choices = {g: names.get(g) or ctx.choices.get(g) for g in NAMED_GROUPS}

    def token(key: str) -> str:
        if key == "k":
            return f"k{k}"
        if key in NAMED_GROUPS:
            return SHORT_NAMES.get(str(choices[key]), str(choices[key]))
        return f"{key.rsplit('.', 1)[-1]}={_short(overrides.get(key, '?'))}"

    tokens: dict[str, str] = {}
    for key in [*(sweep or {}).get("swept", "").split(), *ctx.searched]:
        if key in overrides or key in NAMED_GROUPS or key == "k":
            tokens.setdefault(key, token(key))
    for group, default in NAMED_GROUPS.items():
        if group == "retriever":
            tokens.setdefault("retriever", token("retriever"))
            tokens.setdefault("k", token("k"))
        elif choices[group] and choices[group] != default:
            tokens.setdefault(group, token(group))
    for key in overrides:
        if key not in NAMED_GROUPS and key.split(".", 1)[0] not in _NOT_NAMED and "/" not in key:
            tokens.setdefault(key, token(key))
    return " ".join(tokens.values())


def _short(value: str) -> str:
    """A value as a name shows it: numbers to 4 significant digits, paths by their last part."""
    try:
        return f"{float(value):.4g}"
    except ValueError:
        value = value.strip("'\"")
        return value.rstrip("/").rsplit("/", 1)[-1][:24] if "/" in value else value[:24]


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
    # The interval is a function of the values and the seed: the jobs of a sweep over placement
    # and k share one ranking, so one process's jobs compute it once (0.09 s each at 300 queries).
    key = (hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest(), seed, CI_RESAMPLES)
    if key not in _CI_MEMO:
        low, high = stats.bootstrap_ci(values[None, :], method="BCa", n_resamples=CI_RESAMPLES, seed=seed)
        if len(_CI_MEMO) >= 64:
            _CI_MEMO.clear()
        _CI_MEMO[key] = (float(low[0]), float(high[0]))
    low, high = _CI_MEMO[key]
    return {f"{objective}_ci_low": low, f"{objective}_ci_high": high}


_CI_MEMO: dict[tuple, tuple[float, float]] = {}


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


def _track(settings: tracking.StoreSettings, results: Path, run_name: str, experiment: str,
           in_sweep: bool = False) -> str | None:
    """Log the job's folder in this process. A single job's failure is TrackingFailed, naming
    the results; a sweep job's is one line and a FAILED note (the sweep ends non-zero, and
    ``pipeline.sync`` logs the folder later)."""
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
    print(f"MLflow run {run_id} ({run_name}) in experiment {experiment!r} at {tracking.redact(settings.uri)}")
    if marker := res.read_marker(results):
        print(tracking.open_hint(settings.uri, str(marker.get("experiment_id", "")), str(run_id)))
    return str(run_id)


def _print_summary(run_name: str, collection: Collection, cfg: DictConfig, metrics: dict[str, float],
                   cache_hit: bool, results: Path) -> None:
    k = cfg.k
    keys = [f"ndcg_at_{k}", f"precision_at_{k}", f"recall_at_{k}", f"map_at_{k}", f"mrr_at_{k}",
            f"context_utility_at_{k}", f"judged_at_{k}", "mrr", "map", "bpref"]
    if cfg.objective not in keys:
        keys.append(cfg.objective)
    lines = [f"{run_name} on {collection.name}: {int(metrics['n_queries'])} queries "
             f"({int(metrics['n_queries_no_relevant'])} without relevant documents left out), "
             f"{collection.n_docs} documents, ranking cache {'hit' if cache_hit else 'miss'}"]
    if judged_only_of(cfg):
        lines.append("  judged_only: condensed lists (unjudged documents removed before scoring, trec_eval -J)")
    lines += [f"  {key:<24} {metrics[key]:.4f}" for key in keys if key in metrics]
    if warning := judged_warning(metrics):  # on the console once (here), in pipeline.log too
        lines.append(warning)
        console.to_log_file(warning, name=__name__, level=logging.WARNING)
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
    The job's log file always gets the error (and the traceback of an unexpected one)."""
    try:
        return run(cfg)
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

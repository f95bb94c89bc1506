"""The stages of a job, in order: load -> chunk -> retrieve -> place -> score -> write.

Each stage is a plain function of the job's :class:`~pipeline.config.Settings` and of what
the stage before it produced, so tests call them without Hydra; ``pipeline.job`` calls them
in order. The option groups are built here (``hydra.utils.instantiate``); a computing
module's ``ValueError`` becomes the user's one-line ``InputError``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
from hydra.utils import instantiate
from numpy.typing import NDArray
from omegaconf import OmegaConf

from pipeline import chunkers, stats
from pipeline.config import Settings
from pipeline.context.placement import context_utility, place as place_ranking
from pipeline.errors import InputError
from pipeline.io import results as res
from pipeline.io.collection import Collection
from pipeline.io.formats import arrow_array, write_run
from pipeline.io.scored import qrels_digest
from pipeline.metrics import (BUDGET_FAMILIES, CURVES, UNJUDGED, Evaluation, Qrels, condense, definition_card, evaluate,
                              grade_matrix, ideal_matrix, metric_key, report_ks, unevaluable)
from pipeline.io import drilldown
from pipeline.io.cache import load_or_compute_ranking
from pipeline.ranking import Ranking
from retrievers.cost import CACHED, NOT_MEASURED, PER_QUERY_KEY, block, measured_index, measured_search

log = logging.getLogger(__name__)

#: per_query.csv holds every K = 1..k_max up to this k_max, else the reported cut-offs only
#: (k_max=100000 would make a CSV of millions of columns).
PER_QUERY_ALL_K = 1000
TIE_RULE = "score descending, then document index ascending (the retrievers' order)"
#: Bootstrap resamples of a job's objective CI (BCa, seeded by ``seed``).
CI_RESAMPLES = 10_000


def computing(fn: Callable[[], Any]) -> Any:
    """``fn()``, with a computing module's ValueError (a bad value) as the user's InputError."""
    try:
        return fn()
    except ValueError as err:
        raise InputError(str(err)) from err


# --------------------------------------------------------------------------- load

_LOADED: dict[str, tuple[tuple, Collection]] = {}


def load(settings: Settings) -> Collection:
    """The collection of ``settings.dataset``, remembered for the life of the process so that
    the jobs of a sequential sweep load it once. The memo is keyed by the resolved dataset
    config and the size and mtime of every file or folder it names; it holds one collection."""
    spec = OmegaConf.to_container(settings.dataset, resolve=True)
    key = json.dumps(spec, sort_keys=True, default=str)
    stamp = _file_stamps(spec)
    if key in _LOADED and _LOADED[key][0] == stamp:
        return _LOADED[key][1]
    collection = instantiate(settings.dataset)
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


# --------------------------------------------------------------------------- chunk


def chunker(settings: Settings) -> chunkers.Chunker | None:
    """The configured chunker, or None when the config has no ``chunker`` node."""
    if settings.chunker is None:
        return None
    try:
        built = instantiate(settings.chunker)
    except ValueError as err:
        raise InputError(str(err)) from None
    if not isinstance(built, chunkers.Chunker):
        raise InputError(f"chunker config produced {type(built).__name__}, not a Chunker")
    return built


def chunk(settings: Settings, collection: Collection) -> chunkers.ChunkStage | None:
    """The chunker stage, between load and retrieve. None for ``chunker=none`` without a
    ``budget`` (the run is then exactly the unchunked one)."""
    built = chunker(settings)
    if built is None or (built.name == "none" and settings.budget is None):
        return None
    chunks, hit = chunkers.chunk_documents(built, collection.doc_ids, collection.doc_texts, settings.cache_dir)
    if built.name == "none":  # the documents themselves are the chunks: same ids, same retrieval
        chunk_collection = collection
    else:
        empty = np.zeros(0, np.int64)
        chunk_collection = replace(
            collection, doc_ids=chunks.ids, doc_texts=chunks.texts, qrels=Qrels(empty, empty.copy(), empty.copy()),
            digest=hashlib.sha256(f"{collection.digest}|{chunks.digest}".encode()).hexdigest())
    return chunkers.ChunkStage(built, chunks, chunk_collection, hit, list(settings.budgets), collection.n_docs)


# --------------------------------------------------------------------------- retrieve


@dataclass(frozen=True)
class Retrieved:
    """The document ranking that is scored, the ranking that is placed (the chunks' for a
    chunked run, else the same), whether the ranking came from the cache, and the retriever's
    own numbers when it computed the ranking (its ``report``: e.g. Chroma's recall against
    exact search, the user retriever's failed queries; logged as metrics of the run), and what
    retrieval cost (``retrievers.cost``: latency, throughput, index build and size, the machine;
    from the cache entry on a hit, ``latency_source: cache``; empty with ``cost.enabled=false``)."""

    ranking: Ranking
    placed_from: Ranking
    cache_hit: bool
    report: dict[str, float] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)


def retrieve(settings: Settings, collection: Collection, depth: int,
             report: dict[str, float] | None = None, cost: dict[str, Any] | None = None) -> tuple[Ranking, bool]:
    """The retriever's Ranking of ``collection`` at ``depth``, from the on-disk cache when it
    has one. ``report`` receives the numeric entries of the retriever's ``report`` when the
    ranking was computed (a cache hit computes nothing to report); ``cost`` the cost summary
    (``retrievers.cost``), measured, or kept with the cached ranking when it was computed."""
    retriever = computing(lambda: instantiate(settings.retriever))
    key = {"collection": collection.digest, "retriever": retriever.cache_key(), "depth": depth}
    kept: dict[str, Any] = {}

    def compute() -> Ranking:
        if not settings.cost.enabled:
            retriever.index(collection.doc_ids, collection.doc_texts)
            ranking = retriever.search(collection.query_ids, collection.query_texts, depth)
        else:
            built = measured_index(retriever, collection.doc_ids, collection.doc_texts)
            ranking, kept["cost"] = measured_search(retriever, collection.query_ids, collection.query_texts, depth,
                                                    settings.cost)
            kept["cost"]["metrics"] = {**kept["cost"].get("metrics", {}), **built}
        if report is not None:
            report.update({name: float(value) for name, value in (getattr(retriever, "report", None) or {}).items()
                           if isinstance(value, (int, float)) and not isinstance(value, bool)})
        return ranking

    # A cache_key() of None: never cached (the user's own retriever without retriever.version).
    ranking, hit = load_or_compute_ranking(
        None if key["retriever"] is None else settings.cache_dir, key, compute,
        reuse_deeper=getattr(retriever, "prefix_stable", False),
        n_queries=collection.n_queries, n_docs=collection.n_docs, extra=kept,
    )
    if cost is not None and settings.cost.enabled:
        cost.update(cached_cost(kept.get("cost")) if hit else kept.get("cost", {}))
    return ranking, hit


def cached_cost(stored: dict[str, Any] | None) -> dict[str, Any]:
    """The cost summary of a cached ranking: as measured when it was computed, marked
    ``latency_source: cache``; an entry written before cost metrics has none (``not measured``)."""
    if not stored:
        return {"latency_source": NOT_MEASURED, "note": "the cached ranking predates cost metrics"}
    if stored.get("latency_source") == NOT_MEASURED:
        return dict(stored)
    return {**stored, "latency_source": CACHED}


def check_evaluable(settings: Settings, collection: Collection) -> None:
    """InputError when no query of the collection has a document graded >= relevance_level:
    every mean would be 0 from no query (``pipeline.metrics.unevaluable`` says why)."""
    if problem := unevaluable(collection.qrels, collection.n_queries, settings.relevance_level):
        raise InputError(f"{collection.name} ({collection.source}): {problem}")


#: The deepest cut-off allowed past the corpus size (ten times trec_eval's deepest default
#: cut-off): metrics past the corpus only repeat, and every K costs a column per query.
MAX_CUTOFF = 10_000


def check_cutoffs(settings: Settings, collection: Collection) -> None:
    """InputError when ``k_max`` (and so ``k``) is past both the corpus size and
    :data:`MAX_CUTOFF`: a cut-off of a billion would allocate a billion columns per query
    before anything useful is computed."""
    limit = max(collection.n_docs, MAX_CUTOFF)
    if settings.k_max > limit:
        raise InputError(f"k_max={settings.k_max} (k={settings.k}) is past the corpus ({collection.n_docs} "
                         f"documents) and past {MAX_CUTOFF}: metrics there only repeat; use k_max <= {limit}")


def retrieve_documents(settings: Settings, collection: Collection, stage: chunkers.ChunkStage | None) -> Retrieved:
    """Retrieve at ``max(k, k_max)``, never deeper than the corpus (metrics still go to
    k_max: missing ranks are empty). A chunked run retrieves chunks and folds them into the
    document ranking (``chunker.fold``). A collection with no query to evaluate is refused
    first (:func:`check_evaluable`), before any retrieval is paid for."""
    check_evaluable(settings, collection)
    check_cutoffs(settings, collection)
    depth = min(max(settings.k, settings.k_max), collection.n_docs)
    report: dict[str, float] = {}
    cost: dict[str, Any] = {}
    if stage is None:
        ranking, hit = retrieve(settings, collection, depth, report, cost)
        return Retrieved(ranking, ranking, hit, report, cost)
    chunk_ranking, hit = retrieve(settings, stage.collection, stage.depth(depth), report, cost)
    folded = computing(lambda: chunkers.fold_ranking(stage, chunk_ranking.doc_idx, chunk_ranking.scores, depth))
    return Retrieved(Ranking(*folded), chunk_ranking, hit, report, cost)


# --------------------------------------------------------------------------- place


@dataclass(frozen=True)
class Placement:
    """Each query's top k in the order the generator reads it, and what placed it."""

    placed: NDArray[np.int64]
    strategy: Any  # reorder: (k, weights) -> the rank placed at each slot
    curve: Any  # attention: K -> the weight of each slot


def place(settings: Settings, retrieved: Retrieved) -> Placement:
    curve, strategy = computing(lambda: (instantiate(settings.attention), instantiate(settings.reorder)))
    placed = computing(lambda: place_ranking(retrieved.placed_from.doc_idx, settings.k, strategy, curve(settings.k)))
    return Placement(placed, strategy, curve)


# --------------------------------------------------------------------------- score


@dataclass
class Scores:
    """What scoring produced: the per-query evaluation, the headline means (with the
    objective's CI and any budget metrics), the budget curves (step = B tokens), the
    per-query table's columns and the mean curves of :data:`CURVES`."""

    ev: Evaluation
    metrics: dict[str, float]
    stepped: dict[str, dict[str, float]]
    per_query: dict[str, Any]
    curves: dict[str, NDArray[np.float64]]


def evaluation(settings: Settings, collection: Collection, ranking: Ranking, placement: Placement) -> Evaluation:
    """Retrieval metrics on the ranking, context utility on the placed order, K = 1..k_max.

    With ``judged_only`` both score the condensed ranking (unjudged documents removed, trec_eval
    ``-J``); judged_at_K always describes the ranking as retrieved."""
    lookup = grade_matrix(ranking.doc_idx, collection.qrels, unjudged=UNJUDGED)
    ev = evaluate(ranking.doc_idx, collection.qrels, settings.k_max, gain=settings.gain,  # type: ignore[arg-type]
                  relevance_level=settings.relevance_level, lookup=lookup, judged_only=settings.judged_only)
    if settings.judged_only:
        lookup = condense(ranking.doc_idx, lookup)[1]
    ideal = ideal_matrix(collection.qrels, collection.n_queries, settings.k_max)
    ev.add("context_utility", context_utility(np.maximum(lookup, 0), ideal, settings.k_max, placement.strategy,
                                              placement.curve, settings.gain))
    return ev


def score(settings: Settings, collection: Collection, retrieved: Retrieved, placement: Placement,
          stage: chunkers.ChunkStage | None) -> Scores:
    """Every metric at every K, the context metrics of a chunked run (per budget too: a
    per-query column ``<name>_budget_<B>`` each, so any of them can be an objective or a
    ``compare --metric``), the headline means and the objective's CI. A job-relative
    objective (``ndcg_at_k``) is also logged under its own name, the value at the job's k."""
    ev = computing(lambda: evaluation(settings, collection, retrieved.ranking, placement))
    stepped: dict[str, dict[str, float]] = {}
    budget_metrics: dict[str, float] = {}
    by_budget: dict[int, dict[str, NDArray[np.float64]]] = {}
    if stage is not None:  # context families on the chunks, and per budget
        chunk_idx = retrieved.placed_from.doc_idx
        computing(lambda: chunkers.context_scores(stage, ev, chunk_idx, collection.qrels, settings.k_max,
                                                  settings.relevance_level, placement.strategy, placement.curve,
                                                  settings.gain))
        budget_metrics, stepped, by_budget = computing(lambda: chunkers.budget_scores(
            stage, ev, chunk_idx, collection.qrels, settings.relevance_level, placement.strategy, placement.curve,
            settings.gain))
    budget_columns = {f"{name}_budget_{b}": np.asarray(values[name], np.float64)
                      for b, values in by_budget.items() for name in BUDGET_FAMILIES if name in values}
    objective = metric_key(settings.objective)
    metrics = headline(ev, settings.k, settings.k_max, settings.objective)
    metrics.update(budget_metrics)
    if objective.relative:
        metrics[objective.key] = metrics[objective.at(settings.k)]
    metrics.update(objective_ci(ev, settings.objective, settings.seed, settings.k, budget_columns))
    per_query_ks = None if settings.k_max <= PER_QUERY_ALL_K else report_ks(
        settings.k, settings.k_max, [objective.k])
    if per_query_ks is not None:
        log.info("per_query.csv: the cut-offs %s only (k_max %d > %d)", per_query_ks, settings.k_max, PER_QUERY_ALL_K)
    per_query = ev.per_query(collection.query_ids, per_query_ks)
    per_query.update(budget_columns)
    curves = {family: ev.curve(family) for family in CURVES}  # the figures, metrics.json, the record
    return Scores(ev, metrics, stepped, per_query, curves)


def headline(ev: Evaluation, k: int, k_max: int, objective: str) -> dict[str, float]:
    """Every family at k and at the standard cut-offs, mrr, map, bpref, the objective and counts."""
    return ev.means(report_ks(k, k_max, [metric_key(objective).k]))


def objective_ci(ev: Evaluation, objective: str, seed: int, k: int | None = None,
                 budget_columns: dict[str, NDArray[np.float64]] | None = None) -> dict[str, float]:
    """``<objective>_ci_low`` and ``_ci_high``: the 95% BCa bootstrap interval of the
    objective's mean over the evaluated queries (``pipeline.stats``). A job-relative objective
    is taken at the job's ``k``, a budget one from ``budget_columns`` (per query)."""
    key = metric_key(objective)
    if key.budget is not None:
        values = (budget_columns or {}).get(objective)
        if values is None:
            return {}
    elif key.full_depth:
        values = ev.full[key.family]
    else:
        values = ev.values(key.family)[:, (key.k if key.k is not None else int(k or 0)) - 1]
    values = np.asarray(values, np.float64)[ev.evaluated]
    if len(values) < 2:
        return {}
    # The interval is a function of the values and the seed: the jobs of a sweep over placement
    # and k share one ranking, so one process's jobs compute it once.
    key = (hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest(), seed, CI_RESAMPLES)
    if key not in _CI_MEMO:
        low, high = stats.bootstrap_ci(values[None, :], method="BCa", n_resamples=CI_RESAMPLES, seed=seed)
        if len(_CI_MEMO) >= 64:
            _CI_MEMO.clear()
        _CI_MEMO[key] = (float(low[0]), float(high[0]))
    low, high = _CI_MEMO[key]
    return {f"{objective}_ci_low": low, f"{objective}_ci_high": high}


_CI_MEMO: dict[tuple, tuple[float, float]] = {}


# --------------------------------------------------------------------------- write


def write_results(out: Path, settings: Settings, collection: Collection, retrieved: Retrieved, placement: Placement,
                  scores: Scores, stage: chunkers.ChunkStage | None, title: str, figures: bool = True) -> Path:
    """Everything the run produced, on disk under ``out/results`` (``pipeline.io.results``), each
    file written atomically, the figures too unless ``figures`` is false (a sweep's job: drawing
    them was a third of its time; ``pipeline.figures.draw_job_figures`` draws them later from
    the folder). The record is written by the caller, last. A folder that cannot be written is
    the user's InputError (the ranking stays cached, so a rerun with a usable folder is quick)."""
    try:
        return _write_results(out, settings, collection, retrieved, placement, scores, stage, title, figures)
    except OSError as err:
        raise InputError(f"cannot write the results to {out}: {err.strerror or err} "
                         "(set paths.root or hydra.run.dir to a writable folder)") from err


def _write_results(out: Path, settings: Settings, collection: Collection, retrieved: Retrieved,
                   placement: Placement, scores: Scores, stage: chunkers.ChunkStage | None, title: str,
                   figures: bool = True) -> Path:
    results = res.results_dir(out)
    results.mkdir(parents=True, exist_ok=True)
    ranking = retrieved.ranking
    res.write_json(results / "metrics.json", {
        "judged_only": settings.judged_only,  # condensed lists (trec_eval -J): not comparable with full rankings
        "scoring": scoring_definition(settings, collection, ranking.doc_idx.shape[1]),
        "metrics": scores.metrics,
        "curves": {name: values.tolist() for name, values in scores.curves.items()},
        "collection": {"name": collection.name, "digest": collection.digest, "source": collection.source,
                       "n_docs": collection.n_docs, "n_queries": collection.n_queries, "report": collection.report},
        # latency, throughput, index build and size, the machine (retrievers.cost; docs/metrics.md "Cost")
        **({"cost": block(retrieved.cost)} if retrieved.cost else {}),
    })
    # each query's latency (ms; the mean over cost.repeat passes; a batch's per-query share unless the
    # cost block's latency_mode is per_query): pipeline.compare pairs them by query
    if latencies := retrieved.cost.get(PER_QUERY_KEY):
        write_csv({"query_id": list(collection.query_ids), "latency_ms": latencies}, results / res.LATENCY_FILE)
    # First: it refuses ids a TREC file cannot hold (a lone surrogate) with one line naming the id.
    write_run(results / "run.trec", collection.query_ids, collection.doc_ids, ranking.doc_idx, ranking.scores, tag=title)
    # The drill-down (pipeline.io.drilldown): query text, first relevant rank, judged share, top k.
    drill = drilldown.of_collection(collection, ranking.doc_idx, settings.k, settings.relevance_level)
    write_csv(drilldown.with_columns(scores.per_query, drill), results / "per_query.csv")
    res.write_text(results / drilldown.FAILURES_FILE, drill.failures_markdown())
    placed = placement.placed if stage is None else stage.chunk_docs(placement.placed)
    with res.atomic_open(results / "context.tsv") as fh:  # the placed order fed to the generator
        fh.write("query_id\tslot\tdoc_id\n")
        docs = np.asarray(collection.doc_ids, dtype=object)
        for q, row in zip(collection.query_ids, placed):
            fh.writelines(f"{q}\t{slot}\t{docs[d]}\n" for slot, d in enumerate(row, start=1) if d >= 0)
    res.write_text(results / "config.yaml", OmegaConf.to_yaml(settings.config, resolve=True))
    res.write_text(results / "definition_card.md", definition_card(settings.gain, settings.relevance_level, TIE_RULE,  # type: ignore[arg-type]
                                                                   judged_only=settings.judged_only, k=settings.k))
    if figures:
        from pipeline.figures import save_run_figures  # matplotlib: imported where figures are drawn

        save_run_figures(results / "plots", scores.curves, settings.k, title)
    if stage is not None:  # chunk_run.trec, chunks.tsv and context.tsv with chunk ids
        chunk_idx = retrieved.placed_from.doc_idx
        contexts = (list(placement.placed) if settings.budget is None else
                    chunkers.budget_context(stage, chunk_idx, settings.budget, placement.strategy, placement.curve))
        chunkers.write_chunk_results(results, stage, collection, chunk_idx, retrieved.placed_from.scores, contexts,
                                     title)
    return results


def scoring_definition(settings: Settings, collection: Collection, depth: int) -> dict[str, Any]:
    """What a score of this run means (``metrics.json`` ``scoring``): a comparison refuses
    systems that differ in any of it (``pipeline.comparison.systems``). ``depth`` is the cut-off of
    mrr, map and bpref; ``qrels_digest`` is None when a judged document is missing from the
    corpus (its id is not kept), and the collection's digest covers the judgments anyway."""
    qrels = collection.qrels
    known = bool((qrels.doc_idx >= 0).all())
    docs = collection.doc_ids
    digest = qrels_digest((collection.query_ids[q] for q in qrels.query_idx.tolist()),
                          (docs[d] for d in qrels.doc_idx.tolist()), qrels.grade.tolist()) if known else None
    return {"gain": settings.gain, "relevance_level": settings.relevance_level, "judged_only": settings.judged_only,
            "k_max": settings.k_max, "depth": int(depth), "qrels_digest": digest,
            "collection_digest": collection.digest}


def write_csv(table: dict[str, Any], path: Path) -> None:
    """Columns as CSV through pyarrow's writer (no pandas), atomically."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    with res.atomic_open(path, "wb") as fh:
        pa_csv.write_csv(pa.table({name: arrow_array(values) for name, values in table.items()}), fh)


def chunk_summary(stage: chunkers.ChunkStage, settings: Settings, metrics: dict[str, float]) -> str:
    """The console lines of the chunker stage: chunks, and the context at k and per budget."""
    c = stage.chunks
    k = settings.k
    mean = c.tokens.mean() if c.n_chunks else 0.0
    head = (f"chunker {stage.chunker.name}: {c.n_chunks} chunks of {stage.n_docs} documents "
            f"(mean {mean:.1f} tokens), chunk cache {'hit' if stage.cache_hit else 'miss'}"
            + (f", fold {stage.chunker.fold}" if stage.is_chunked else ""))
    lines = [head, f"  context at k={k}: precision {metrics.get(f'context_precision_at_{k}', float('nan')):.4f}, "
                   f"recall {metrics.get(f'context_recall_at_{k}', float('nan')):.4f}"]
    for budget in stage.budgets:
        mark = " (the run's budget)" if settings.budget == budget else ""
        lines.append(f"  budget {budget:>5} tokens: {metrics[f'n_chunks_budget_{budget}']:.1f} chunks, context "
                     f"precision {metrics[f'context_precision_budget_{budget}']:.4f}, recall "
                     f"{metrics[f'context_recall_budget_{budget}']:.4f}, relevant token share "
                     f"{metrics[f'relevant_token_share_budget_{budget}']:.4f}{mark}")
    return "\n".join(lines)

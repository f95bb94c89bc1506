"""What the chunker stage hands to retrieval and scoring, and what it computes on chunks.

A chunked run retrieves chunks; its document ranking is their fold (``chunker.fold``), its
context metrics are computed on the chunks (``context_precision``, ``context_recall``,
``context_utility``) and per token budget (``<metric>_budget_<B>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.chunkers.splitters import Chunker, Chunks
from pipeline.context import chunking
from pipeline.context.placement import context_utility
from pipeline.io import results as res
from pipeline.metrics import Qrels, grade_matrix, ideal_matrix

#: Context metrics logged per budget B as ``<name>_budget_<B>`` and stepped ``budget/<name>`` (step = B;
#: the name is ``pipeline.tracking.mapping.budget_key``'s).
BUDGET_METRICS = ("context_precision", "context_recall", "context_utility", "relevant_token_share", "n_chunks",
                  "tokens")


@dataclass
class ChunkStage:
    """What the chunker stage hands to retrieve and score: the chunker, the chunks, and the
    collection the retriever indexes (chunk ids and texts; the documents' queries)."""

    chunker: Chunker
    chunks: Chunks
    collection: Any  # pipeline.io.collection.Collection of chunks
    cache_hit: bool
    budgets: list[int]
    n_docs: int

    @property
    def is_chunked(self) -> bool:
        return self.chunker.name != "none"

    def depth(self, doc_depth: int) -> int:
        """Chunk ranking depth: ``chunker.depth``, at least the document depth, at most every chunk."""
        return min(max(self.chunker.depth, doc_depth), self.chunks.n_chunks)

    def chunk_docs(self, chunk_idx: NDArray[np.integer]) -> NDArray[np.int64]:
        chunk_idx = np.asarray(chunk_idx, dtype=np.int64)
        return np.where(chunk_idx >= 0, self.chunks.doc_of_chunk[np.maximum(chunk_idx, 0)], -1)

    def chunk_tokens(self, chunk_idx: NDArray[np.integer]) -> NDArray[np.int64]:
        chunk_idx = np.asarray(chunk_idx, dtype=np.int64)
        return np.where(chunk_idx >= 0, self.chunks.tokens[np.maximum(chunk_idx, 0)], -1)


def fold_ranking(stage: ChunkStage, chunk_idx: NDArray[np.integer], chunk_scores: NDArray[np.floating],
                 doc_depth: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The document ranking of a chunk ranking (``chunker.fold``); for ``none`` its first ``doc_depth`` ranks."""
    if not stage.is_chunked:
        return np.asarray(chunk_idx)[:, :doc_depth], np.asarray(chunk_scores)[:, :doc_depth]
    return chunking.fold(chunk_idx, chunk_scores, stage.chunks.doc_of_chunk, doc_depth, stage.chunker.fold)


def chunk_ideal(stage: ChunkStage, qrels: Any, n_queries: int, depth: int) -> NDArray[np.int64]:
    """The ideal chunk grades of each query: every chunk of each judged document with the
    document's grade (1 for a judged document missing from the corpus), sorted descending."""
    counts = chunking.chunk_ideal_counts(qrels.doc_idx, stage.chunks.per_doc(stage.n_docs))
    expanded = Qrels(np.repeat(qrels.query_idx, counts), np.repeat(qrels.doc_idx, counts),
                     np.repeat(qrels.grade, counts))
    return ideal_matrix(expanded, n_queries, depth)


def context_scores(stage: ChunkStage, ev: Any, chunk_idx: NDArray[np.integer], qrels: Any, k_max: int,
                   relevance_level: int, strategy: Any, curve: Any, gain: str) -> None:
    """Add the context families on the chunk ranking's top K to ``ev``: ``context_precision``,
    ``context_recall`` and, for a chunked run, ``context_utility`` on the placed chunks."""
    docs = stage.chunk_docs(chunk_idx)
    grades = np.maximum(grade_matrix(docs, qrels), 0)
    if stage.is_chunked:
        ideal = chunk_ideal(stage, qrels, len(docs), k_max)
        ev.add("context_utility", context_utility(grades, ideal, k_max, strategy, curve, gain))
    ev.add("context_precision", chunking.context_precision(grades, k_max, relevance_level))
    ev.add("context_recall", chunking.context_recall(docs, grades, k_max, relevance_level, ev.n_relevant))


def budget_scores(stage: ChunkStage, ev: Any, chunk_idx: NDArray[np.integer], qrels: Any, relevance_level: int,
                  strategy: Any, curve: Any, gain: str) -> tuple[dict[str, float], dict[str, dict[str, float]],
                                                                 dict[int, dict[str, NDArray[np.float64]]]]:
    """Per budget B: the means over evaluated queries as ``<name>_budget_<B>``, the curves
    ``{name: {B: mean}}`` (the record names them ``budget/<name>``: ``pipeline.tracking.mapping``)
    and the per-query values."""
    docs = stage.chunk_docs(chunk_idx)
    grades = np.maximum(grade_matrix(docs, qrels), 0)
    tokens = stage.chunk_tokens(chunk_idx)
    ideal = chunk_ideal(stage, qrels, len(docs), max(docs.shape[1], 1))
    mask = ev.evaluated
    flat: dict[str, float] = {}
    stepped: dict[str, dict[str, float]] = {name: {} for name in BUDGET_METRICS}
    per_query: dict[int, dict[str, NDArray[np.float64]]] = {}
    for budget in stage.budgets:
        values = chunking.budget_metrics(docs, grades, tokens, ideal, ev.n_relevant, budget, relevance_level,
                                         strategy, curve, gain)
        per_query[budget] = values
        for name in BUDGET_METRICS:
            mean = float(values[name][mask].mean()) if mask.any() else 0.0
            flat[f"{name}_budget_{budget}"] = mean
            stepped[name][str(budget)] = mean
    return flat, stepped, per_query


def budget_context(stage: ChunkStage, chunk_idx: NDArray[np.integer], budget: int, strategy: Any,
                   curve: Any) -> list[NDArray[np.int64]]:
    """Per query, the chunk indices of its context under ``budget``, in the placed order."""
    chunk_idx = np.asarray(chunk_idx, dtype=np.int64)
    n = chunking.fit_budget(stage.chunk_tokens(chunk_idx), budget)
    out = []
    for q, size in enumerate(n.tolist()):
        order = np.asarray(strategy(size, np.asarray(curve(size), np.float64)), np.int64) if size else \
            np.zeros(0, np.int64)
        out.append(chunk_idx[q, :size][order])
    return out


def write_chunk_results(results: Path, stage: ChunkStage, collection: Any, chunk_idx: NDArray[np.integer],
                        chunk_scores: NDArray[np.floating], contexts: list[NDArray[np.int64]], title: str) -> None:
    """``chunk_run.trec`` (the chunk ranking, chunk ids), ``chunks.tsv`` (chunk id, document
    id, character start and end, tokens) and ``context.tsv`` (the placed chunks: query id,
    slot, document id, chunk id, tokens), each written atomically."""
    from pipeline.io.formats import write_run

    ids = np.asarray(stage.chunks.ids, dtype=object)
    doc_ids = np.asarray(collection.doc_ids, dtype=object)
    if stage.is_chunked:
        write_run(results / "chunk_run.trec", collection.query_ids, stage.chunks.ids, chunk_idx, chunk_scores,
                  tag=title)
    with res.atomic_open(results / "chunks.tsv") as fh:
        fh.write("chunk_id\tdoc_id\tstart\tend\ttokens\n")
        c = stage.chunks
        fh.writelines(f"{i}\t{doc_ids[d]}\t{s}\t{e}\t{t}\n" for i, d, s, e, t in
                      zip(ids.tolist(), c.doc_of_chunk.tolist(), c.start.tolist(), c.end.tolist(), c.tokens.tolist()))
    with res.atomic_open(results / "context.tsv") as fh:
        fh.write("query_id\tslot\tdoc_id\tchunk_id\ttokens\n")
        for q, row in zip(collection.query_ids, contexts):
            fh.writelines(f"{q}\t{slot}\t{doc_ids[stage.chunks.doc_of_chunk[c]]}\t{ids[c]}\t{stage.chunks.tokens[c]}\n"
                          for slot, c in enumerate(row.tolist(), start=1) if c >= 0)

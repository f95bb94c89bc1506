"""The user's own retriever, behind a plain function, LangChain, LlamaIndex or Chroma: the shared part.

An adapter (``retrievers.python_function``, ``langchain``, ``llamaindex``, ``chroma``) turns one
query into a list of hits ``(id, score, metadata)`` in the order its retriever returned them;
:class:`ExternalRetriever` runs the queries (a thread pool of ``concurrency`` workers, or the
adapter's own batches), checks every result and maps it onto the collection. The rules, also
in docs/retrievers.md:

- **Ids.** A hit's id is a document id of the collection. With ``doc_id_key`` set, a hit is a
  chunk of a production index: its document is ``metadata[doc_id_key]``, and the chunks are
  folded into documents by ``fold`` (``pipeline.context.chunking.fold``, Dai & Callan 2019):
  ``maxp`` (the best chunk's score), ``sump`` (the sum of the retrieved chunks' scores) or
  ``firstp`` (the score of chunk number 0, read from ``metadata[chunk_key]``).
- **Order.** Higher score = better. A query's hits are ordered by score descending, then by the
  order the retriever returned them (trec_eval also re-sorts by score); a query returned in
  another order is counted and warned about (distances instead of similarities?).
- **None scores.** A query whose scores are all None is ranked in the returned order, its score
  1 / rank; None next to numbers, NaN or infinity is a bad result.
- **Ids absent from the corpus** are dropped, counted and warned about (one line with examples).
  A Ranking cannot hold them, so the documents after one move up a rank: trec_eval would score
  the unknown id as a non-relevant document at its rank, so the affected queries' numbers can
  be slightly higher than trec_eval's on the same run; the warning says how many queries.
  ``on_unknown=fail`` stops instead.
- **Duplicates** (the same id twice for one query): the best rank is kept, counted, warned.
- **Fewer than k results** are fine (the rest of the row is empty).
- **Failures.** The user's code runs behind one boundary (``retrievers.calls``): anything a
  call raises (``sys.exit`` included) or a call past ``timeout_s`` is that query's failure.
  ``on_error=fail`` (default): the first query whose call fails or returns a bad result stops
  the run with one line naming it (InputError, exit 2). ``on_error=skip``: each failure is
  one warning line, the query is scored as empty (every metric 0), and a last warning counts
  and names the skipped queries.
- **Nothing from nothing.** Every query failed, or no query got one id of the corpus (an
  index of another corpus): InputError saying which, never a ranking that scores 0.
- **Caching.** User code and external indexes change without the pipeline knowing, so a
  ranking is cached only under a user-given ``version`` (change it when the retriever
  changes), and never with ``on_error=skip`` (a ranking with skipped queries must not come
  back later as if complete). Otherwise :meth:`cache_key` is None and the run says so.

The counts of the last search are in ``report`` (``external_*`` keys) and logged.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from pipeline.context.chunking import FOLDS, fold
from pipeline.errors import InputError
from pipeline.io.progress import is_terminal
from pipeline.ranking import Ranking
from retrievers.calls import BadResult, build_from_factory, describe, load_callable, run_calls

__all__ = ["BadResult", "ExternalRetriever", "Hit", "as_id", "as_score", "build_from_factory",
           "check_choice", "load_callable"]

log = logging.getLogger(__name__)

ON_ERROR = ("fail", "skip")
ON_UNKNOWN = ("warn", "fail")
#: Results asked per query when chunks are folded and ``fetch_k`` is not set: this many times the depth.
FOLD_FETCH_FACTOR = 4
#: Seconds one call of the user's code may take by default (``retriever.timeout_s``).
DEFAULT_TIMEOUT_S = 60.0
#: How many example ids a warning names.
EXAMPLES = 3


class Hit(NamedTuple):
    """One result of one query, as the adapter read it."""

    id: str
    score: float | None
    metadata: Mapping[str, Any] | None


class Checked(NamedTuple):
    """One query's results after :meth:`ExternalRetriever.check`: documents, units (chunk ids, or
    the document ids), scores in rank order, and what was changed on the way."""

    docs: list[str]
    units: list[str]
    scores: list[float]
    none_scores: bool
    reordered: bool
    duplicates: int


def check_choice(value: str, choices: Sequence[str], key: str) -> str:
    if value not in choices:
        raise ValueError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def as_id(value: Any, what: str) -> str:
    """A document or chunk id as a string (ints are accepted and written as digits)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    raise BadResult(f"{what} is {value!r} ({type(value).__name__}), not a string id")


def as_score(value: Any, what: str) -> float | None:
    if value is None:
        return None
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise BadResult(f"{what} is {value!r}, not a number") from None
    if not math.isfinite(score):
        raise BadResult(f"{what} is {score}, not a finite number")
    return score


class ExternalRetriever:
    """What every adapter shares: running the queries, checking and folding their results.

    Subclasses set ``name`` and implement :meth:`prepare` (import the user's code, once),
    :meth:`query` (one query -> hits) and, when ``batched``, :meth:`query_batch`, and
    :meth:`identity` (what names the retriever in the cache key besides ``version``).

    Args:
        concurrency: worker threads calling :meth:`query` (1 = one query at a time).
        on_error: ``fail`` or ``skip`` (module docstring).
        on_unknown: ``warn`` (drop ids absent from the corpus, count them) or ``fail``.
        doc_id_key: metadata key naming a hit's document: hits are chunks, folded by ``fold``.
        fold: ``maxp``, ``sump`` or ``firstp`` (with ``doc_id_key``).
        chunk_key: metadata key of a chunk's number in its document (0 = first), for ``firstp``.
        fetch_k: results asked per query (None: the depth; with ``doc_id_key`` 4 x the depth).
        version: the user's name for this retriever's state; rankings are cached only with one.
        show_progress_bar: a bar with queries/s on a terminal.
        timeout_s: seconds one call of the user's code may take (a query, or a batch) before it
            fails as that query's (batch's) failure; None or 0: no limit (``retrievers.calls``).
    """

    name = "external"
    batched = False
    batch_size = 64
    #: retrievers.cost warms user code up on the first real queries (their results dropped)
    warmup_real_queries = True

    def __init__(self, concurrency: int = 4, on_error: str = "fail", on_unknown: str = "warn",
                 doc_id_key: str | None = None, fold: str = "maxp", chunk_key: str = "chunk",
                 fetch_k: int | None = None, version: str | None = None, show_progress_bar: bool = True,
                 timeout_s: float | None = DEFAULT_TIMEOUT_S):
        if int(concurrency) < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if fetch_k is not None and int(fetch_k) < 1:
            raise ValueError(f"fetch_k must be >= 1 or null, got {fetch_k}")
        self.concurrency = int(concurrency)
        self.on_error = check_choice(on_error, ON_ERROR, "on_error")
        self.on_unknown = check_choice(on_unknown, ON_UNKNOWN, "on_unknown")
        self.doc_id_key = doc_id_key or None
        self.fold = check_choice(fold, FOLDS, "fold")
        self.chunk_key = chunk_key
        self.fetch_k = None if fetch_k is None else int(fetch_k)
        self.version = None if version is None or str(version) == "" else str(version)
        self.show_progress_bar = bool(show_progress_bar)
        if timeout_s is not None and (not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool)
                                      or not math.isfinite(timeout_s) or timeout_s < 0):
            raise ValueError(f"timeout_s must be a number of seconds >= 0 (0 or null: no limit), got {timeout_s!r}")
        self.timeout_s = float(timeout_s) if timeout_s else None
        self.report: dict[str, Any] = {}
        self.latencies_ms: np.ndarray | None = None  # per query, of the last search (retrievers.cost)
        self.latency_mode = "per_query"
        self._doc_index: pd.Index | None = None
        self._said_no_cache = False

    # ------------------------------------------------------------------ what adapters implement

    def identity(self) -> dict[str, Any]:
        raise NotImplementedError

    def prepare(self, depth: int) -> None:
        """Import and build the user's retriever (called by :meth:`search`, before any query)."""

    def query(self, text: str, k: int) -> list[Hit]:
        raise NotImplementedError

    def query_batch(self, texts: list[str], k: int) -> list[list[Hit]]:
        raise NotImplementedError

    # ------------------------------------------------------------------ the Retriever protocol

    def cache_key(self) -> dict[str, Any] | None:
        """None (never cached) without ``version`` or with ``on_error=skip``; else every
        setting that shapes the ranking."""
        if self.version is None or self.on_error == "skip":
            if not self._said_no_cache:
                why = ("no retriever.version is set" if self.version is None
                       else "retriever.on_error=skip (a ranking with skipped queries is not kept)")
                log.warning("retriever=%s: the ranking is not cached: %s; set retriever.version=<a name that "
                            "changes when your retriever does> to cache it", self.name, why)
                self._said_no_cache = True
            return None
        return {"retriever": self.name, **self.identity(), "version": self.version, "doc_id_key": self.doc_id_key,
                "fold": self.fold if self.doc_id_key else None,
                "chunk_key": self.chunk_key if self.doc_id_key and self.fold == "firstp" else None,
                "fetch_k": self.fetch_k, "on_unknown": self.on_unknown,
                "scores": "float64"}  # since issue 33: an entry cached with float32 scores is not reused

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None:
        """Remember the corpus's ids (the user's retriever holds its own index)."""
        index = pd.Index(np.asarray(doc_ids, dtype=object))
        if not index.is_unique:
            raise ValueError("document ids must be unique to map a retriever's results onto them")
        self._doc_index = index

    def k_for(self, depth: int) -> int:
        if self.fetch_k is not None:
            return max(self.fetch_k, depth)
        return depth * FOLD_FETCH_FACTOR if self.doc_id_key else depth

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        if self._doc_index is None:
            raise RuntimeError("call index() before search()")
        if len(query_ids) != len(query_texts):
            raise ValueError(f"{len(query_ids)} query ids for {len(query_texts)} texts")
        k = self.k_for(depth)
        self.prepare(k)
        hits, failed = self.run_queries(list(query_ids), list(query_texts), k)
        if query_ids and len(failed) == len(query_ids):
            raise InputError(f"retriever={self.name}: all {len(failed)} queries failed (retriever.on_error=skip): "
                             "nothing to score; the warnings above say why")
        ranking, counts = self.to_ranking(list(query_ids), hits, depth)
        if query_ids and not (ranking.doc_idx >= 0).any():
            raise InputError(self.nothing_known(hits, counts, len(query_ids)))
        self.report = {**self.report, "external_queries": len(query_ids), "external_failed_queries": len(failed),
                       **{f"external_{key}": value for key, value in counts.items()}}
        if failed:
            names = ", ".join(map(repr, failed[:10])) + (", ..." if len(failed) > 10 else "")
            log.warning("retriever=%s: %d of %d queries failed and are scored as empty (every metric 0), included "
                        "in the means: %s", self.name, len(failed), len(query_ids), names)
        return ranking

    # ------------------------------------------------------------------ running the queries

    def run_queries(self, query_ids: list[str], texts: list[str], k: int) -> tuple[list[Checked | None], list[str]]:
        """Every query's hits (None for a skipped one) and the ids of the failed queries."""
        n = len(texts)
        out: list[Checked | None] = [None] * n
        failed: list[str] = []
        units = ([list(range(s, min(s + self.batch_size, n))) for s in range(0, n, self.batch_size)] if self.batched
                 else [[i] for i in range(n)])
        # Each call timed around the user's code and the adapter's own work (checking the hits):
        # a query's latency, or a batch's per-query share; NaN for a call that failed.
        latencies = np.full(n, np.nan)

        def work(rows: list[int]) -> list[Checked]:
            start = time.perf_counter()
            if self.batched:
                found = self.query_batch([texts[i] for i in rows], k)
                if not isinstance(found, list) or len(found) != len(rows):
                    got = len(found) if isinstance(found, list) else type(found).__name__
                    raise BadResult(f"a batch of {len(rows)} queries gave {got} result lists")
                checked = [self.check(hits) for hits in found]
            else:
                checked = [self.check(self.query(texts[rows[0]], k))]
            latencies[rows] = 1000 * (time.perf_counter() - start) / len(rows)
            return checked

        bar = self.progress(n)
        workers = 1 if self.batched else self.concurrency
        try:
            calls = run_calls(lambda u: work(units[u]), len(units), workers, self.timeout_s, f"retriever-{self.name}")
            try:
                self.collect(units, calls, query_ids, out, failed, bar)
            finally:
                calls.close()  # stops the calls not started yet (on_error=fail, Ctrl-C)
        finally:
            if bar is not None:
                bar.close()
        self.latencies_ms = latencies  # retrievers.cost reads them (per_query, or batch_share when batched)
        self.latency_mode = "batch_share" if self.batched else "per_query"
        return out, failed

    def collect(self, units: list[list[int]], results: Any, query_ids: list[str], out: list[Checked | None],
                failed: list[str], bar: Any) -> None:
        for rows, (found, err) in zip(units, results):
            if err is not None:
                who = (f"query {query_ids[rows[0]]!r}" if len(rows) == 1 else
                       f"the batch of queries {query_ids[rows[0]]!r}..{query_ids[rows[-1]]!r} ({len(rows)} queries)")
                what = describe(err)
                if self.on_error == "fail":
                    raise InputError(f"retriever={self.name}: {who} failed: {what} "
                                     "(retriever.on_error=skip scores such queries as empty and goes on)") from err
                log.warning("retriever=%s: %s failed, scored as empty: %s", self.name, who, what)
                failed += [query_ids[i] for i in rows]
            else:
                for i, hits in zip(rows, found or []):
                    out[i] = hits
            if bar is not None:
                bar.update(len(rows))

    def progress(self, n: int) -> Any:
        if not self.show_progress_bar or not is_terminal() or n == 0:
            return None
        from tqdm import tqdm

        return tqdm(total=n, unit=" queries", desc=f"retriever={self.name}", file=sys.stderr, dynamic_ncols=True,
                    leave=False)

    # ------------------------------------------------------------------ results -> Ranking

    def to_ranking(self, query_ids: list[str], hits: list[Checked | None], depth: int) -> tuple[Ranking, dict]:
        """Every query's checked hits as a chunk ranking folded into the document Ranking
        (module docstring). Returns the Ranking and the counts of what was dropped or changed."""
        assert self._doc_index is not None
        counts = {"unknown_ids": 0, "queries_with_unknown_ids": 0, "duplicate_ids": 0, "queries_with_duplicates": 0,
                  "queries_reordered_by_score": 0, "queries_with_none_scores": 0, "queries_short": 0}
        unknown_examples: list[str] = []
        rows: list[tuple[list[int], list[float]]] = []  # per query: chunk numbers (global) and scores, rank order
        chunk_doc: list[int] = []
        chunk_of: dict[tuple[int, str], int] = {}
        empty = Checked([], [], [], False, False, 0)
        checked = [found or empty for found in hits]
        all_docs = [d for found in checked for d in found.docs]  # one lookup for every query
        all_known = self._doc_index.get_indexer(all_docs) if all_docs else np.zeros(0, np.int64)
        offsets = np.cumsum([0] + [len(found.docs) for found in checked])
        any_unknown = bool((all_known < 0).any())
        for found in checked:
            counts["queries_with_none_scores"] += found.none_scores
            counts["queries_reordered_by_score"] += found.reordered
            counts["duplicate_ids"] += found.duplicates
            counts["queries_with_duplicates"] += found.duplicates > 0
        if self.doc_id_key is None and not any_unknown:  # the common case, in one pass: a unit is its document
            ranking = self.direct(checked, all_known, depth)
            counts["queries_short"] = int(np.count_nonzero(ranking.doc_idx[:, depth - 1] < 0)) if depth else 0
            self.warn(counts, [], len(query_ids))
            return ranking, counts
        for q, (qid, found) in enumerate(zip(query_ids, checked)):
            known = all_known[offsets[q] : offsets[q + 1]]
            if any_unknown and (known < 0).any():
                missing = [d for d, i in zip(found.docs, known) if i < 0]
                counts["unknown_ids"] += len(missing)
                counts["queries_with_unknown_ids"] += 1
                unknown_examples += [m for m in missing if m not in unknown_examples][: EXAMPLES - len(unknown_examples)]
                if self.on_unknown == "fail":
                    raise InputError(f"retriever={self.name}: query {qid!r}: the retriever returned {len(missing)} "
                                     f"ids that are not in the corpus (e.g. {missing[0]!r}){self.id_hint()}")
            if self.doc_id_key is None:  # a unit is its document: the document index is the chunk number
                keep = known >= 0
                rows.append((known[keep].tolist(), [s for s, ok in zip(found.scores, keep) if ok]))
                continue
            chunks, kept_scores = [], []
            for doc, unit, score in zip(known.tolist(), found.units, found.scores):
                if doc < 0:
                    continue
                key = (doc, unit)
                if key not in chunk_of:
                    chunk_of[key] = len(chunk_doc)
                    chunk_doc.append(doc)
                chunks.append(chunk_of[key])
                kept_scores.append(score)
            rows.append((chunks, kept_scores))
        method = "sump" if self.doc_id_key and self.fold == "sump" else "maxp"  # firstp: chunk 0 kept by check()
        if self.doc_id_key is None:
            chunk_doc = list(range(len(self._doc_index)))
        ranking = self.folded(rows, np.asarray(chunk_doc, np.int64), depth, method)
        counts["queries_short"] = int(np.count_nonzero(ranking.doc_idx[:, depth - 1] < 0)) if depth else 0
        self.warn(counts, unknown_examples, len(query_ids))
        return ranking, counts

    def check(self, hits: Any) -> Checked:
        """A query's hits in score order, duplicates removed (BadResult for an unusable one).
        A unit is the chunk id with ``doc_id_key``, else the document id; firstp keeps the
        chunks numbered 0. Runs in the worker, so a bad result is that query's failure."""
        if not isinstance(hits, list):
            raise BadResult(f"expected a list of results, got {type(hits).__name__}")
        scores = [h.score for h in hits]
        none_scores = bool(hits) and all(s is None for s in scores)
        if none_scores:
            scores = [1.0 / rank for rank in range(1, len(hits) + 1)]
        elif any(s is None for s in scores):
            where = next(i for i, s in enumerate(scores) if s is None)
            raise BadResult(f"result {where + 1} ({hits[where].id!r}) has no score while others have one")
        docs, units, first_chunk = [], [], []
        if self.doc_id_key is None:
            docs = units = [h.id for h in hits]
        for i, h in enumerate(hits if self.doc_id_key is not None else ()):
            meta = h.metadata or {}
            if self.doc_id_key not in meta:
                raise BadResult(f"result {i + 1} ({h.id!r}) has no metadata {self.doc_id_key!r} (retriever.doc_id_key)")
            docs.append(as_id(meta[self.doc_id_key], f"result {i + 1}'s metadata {self.doc_id_key!r}"))
            units.append(h.id)
            if self.fold == "firstp":
                number = meta.get(self.chunk_key)
                if isinstance(number, bool) or not isinstance(number, (int, np.integer)):
                    raise BadResult(f"result {i + 1} ({h.id!r}) has no integer metadata {self.chunk_key!r} "
                                    "(retriever.chunk_key: fold=firstp needs each chunk's number)")
                first_chunk.append(int(number) == 0)
        in_order = all(a >= b for a, b in zip(scores, scores[1:]))
        # stable: ties keep the returned order
        order = range(len(hits)) if in_order else sorted(range(len(hits)), key=lambda i: -scores[i])
        if not first_chunk and len(set(units)) == len(units):  # the common case: nothing to drop
            return Checked([docs[i] for i in order], [units[i] for i in order], [float(scores[i]) for i in order],
                           none_scores, not in_order, 0)  # type: ignore[arg-type]
        seen: set[str] = set()
        out = Checked([], [], [], none_scores, not in_order, 0)
        for i in order:
            if units[i] in seen:
                out = out._replace(duplicates=out.duplicates + 1)
                continue
            seen.add(units[i])
            if first_chunk and not first_chunk[i]:
                continue
            out.docs.append(docs[i])
            out.units.append(units[i])
            out.scores.append(float(scores[i]))  # type: ignore[arg-type]
        return out

    def nothing_known(self, hits: list[Checked | None], counts: dict[str, int], n_queries: int) -> str:
        """Why a search left every query empty: no id the retriever returned is in the
        corpus (an index of another corpus?), or it returned nothing at all."""
        if counts["unknown_ids"]:
            examples = list(dict.fromkeys(d for found in hits if found for d in found.docs))[:EXAMPLES]
            return (f"retriever={self.name}: none of the {counts['unknown_ids']} ids it returned for "
                    f"{counts['queries_with_unknown_ids']} of the {n_queries} queries is in the corpus (e.g. "
                    f"{', '.join(map(repr, examples))}): nothing to score; an index of another corpus?{self.id_hint()}")
        return f"retriever={self.name}: it returned no result for any of the {n_queries} queries: nothing to score"

    def id_hint(self) -> str:
        if self.doc_id_key:
            return f"; check retriever.doc_id_key={self.doc_id_key}"
        return "; set retriever.id_key (or doc_id_key for chunks) to the metadata key holding the corpus's document id"

    def direct(self, checked: list[Checked], known: np.ndarray, depth: int) -> Ranking:
        """Rankings whose units are documents, all in the corpus, without a loop over queries:
        the same as :meth:`folded` with ``maxp`` over one chunk per document."""
        assert self._doc_index is not None
        lengths = np.asarray([len(found.docs) for found in checked], np.int64)
        scores = np.fromiter((x for found in checked for x in found.scores), np.float64, count=int(lengths.sum()))
        q = np.repeat(np.arange(len(checked)), lengths)
        pos = np.arange(len(q)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        width = max(int(lengths.max(initial=0)), 1)
        chunk_idx = np.full((len(checked), width), -1, np.int64)
        chunk_scores = np.full((len(checked), width), -np.inf, np.float64)
        chunk_idx[q, pos] = known
        chunk_scores[q, pos] = scores
        doc_idx, folded = fold(chunk_idx, chunk_scores, np.arange(max(len(self._doc_index), 1)), depth, "maxp")
        return Ranking(doc_idx, folded)  # float64: the scores as the retriever gave them

    @staticmethod
    def folded(rows: list[tuple[list[int], list[float]]], chunk_doc: np.ndarray, depth: int, method: str) -> Ranking:
        """Chunk rows (global chunk numbers, scores in rank order) folded into documents (``fold``)."""
        n_q = len(rows)
        width = max((len(c) for c, _ in rows), default=0)
        chunk_idx = np.full((n_q, max(width, 1)), -1, np.int64)
        chunk_scores = np.full((n_q, max(width, 1)), -np.inf, np.float64)
        for q, (chunks, scores) in enumerate(rows):
            chunk_idx[q, : len(chunks)] = chunks
            chunk_scores[q, : len(scores)] = scores
        doc_idx, scores = fold(chunk_idx, chunk_scores, chunk_doc if len(chunk_doc) else np.zeros(1, np.int64),
                               depth, method)
        return Ranking(doc_idx, scores)

    def warn(self, counts: dict[str, int], unknown_examples: list[str], n_queries: int) -> None:
        if counts["unknown_ids"]:
            log.warning("retriever=%s: %d results of %d queries name ids that are not in the corpus (e.g. %s): "
                        "dropped, so the documents after them move up a rank (trec_eval would count them as "
                        "non-relevant at their rank)%s", self.name, counts["unknown_ids"],
                        counts["queries_with_unknown_ids"], ", ".join(map(repr, unknown_examples)), self.id_hint())
        if counts["duplicate_ids"]:
            log.warning("retriever=%s: %d duplicate ids in %d queries: the best rank of each is kept",
                        self.name, counts["duplicate_ids"], counts["queries_with_duplicates"])
        if counts["queries_reordered_by_score"]:
            log.warning("retriever=%s: %d of %d queries returned results not in descending score order; they are "
                        "ranked by score, higher = better (return similarities, or negate distances)", self.name,
                        counts["queries_reordered_by_score"], n_queries)
        if counts["queries_with_none_scores"]:
            log.info("retriever=%s: %d queries have no scores: ranked in the returned order (score 1/rank)",
                     self.name, counts["queries_with_none_scores"])

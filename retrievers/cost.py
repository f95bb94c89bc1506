"""What retrieval cost (issue 36): per-query latency, throughput, index build time and size,
encoding time, and the machine that measured them.

:func:`measured_search` wraps a retriever's ``index`` and ``search`` in the ranking stage:

- ``index(...)`` is timed as ``index_build_s`` (a dense retriever's includes encoding the
  corpus, also reported on its own as ``encode_s`` and ``encode_passages_per_s`` when the
  retriever encoded anything; :meth:`index_size` where a retriever has one gives
  ``index_memory_mb`` / ``index_disk_mb``);
- a warm-up first: ``cost.warmup`` queries searched untimed (the first queries' texts with a
  trailing space and ids ``__warmup_<i>``, so no cache of the run's queries is filled by them);
  it loads a model, fills CPU caches, starts thread pools;
- then the timed pass (``cost.repeat`` passes; the ranking is the first pass's). With
  ``cost.per_query`` each query is searched alone, one ``search`` call per query, each call
  timed (``latency_mode`` ``per_query``: real per-query times, which a paired comparison of
  latencies needs; a batched retriever loses its batching, so throughput falls). A retriever
  that times its own calls (``latencies_ms`` after ``search``: the user-code adapters, around
  each call of the user's code, the adapter's checks included) gives per-query latencies
  (``latency_mode`` ``per_query``, or ``batch_share`` for batched user code); any other is
  timed around its ``search`` call, one vectorized batch of every query, and each query gets
  the batch's per-query share (``batch_share``);
- percentiles p50, p95, p99 (numpy's linear interpolation) with percentile-bootstrap 95% CIs
  (``pipeline.stats.percentile``; point intervals when every share is equal), the mean, and
  throughput = queries / the pass's wall time.

Each query's latency (the mean over the passes, in query order) is kept under
:data:`PER_QUERY_KEY` for ``latency.csv`` (``pipeline.stages``; ``pipeline.compare`` pairs
them by query): :func:`block` is the summary without them, as metrics.json and the record hold it.

A retriever with ``latency_measured = False`` (a run file: nothing is retrieved) reports no
latency, only ``latency_source: not measured`` and a ``note`` saying why. The summary is JSON-able: it is stored with
the cached ranking and reported on a cache hit with ``latency_source: cache``, never as 0.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.ranking import Ranking
from pipeline.stats.percentile import percentiles_with_ci

log = logging.getLogger(__name__)

#: The percentiles reported, and their metric keys (``latency_p50_ms``...).
PERCENTILES = (50.0, 95.0, 99.0)
#: Bootstrap resamples of the percentile CIs (the overhead stays under 2% of a job: benchmarks/cost.py).
CI_RESAMPLES = 1000
#: ``latency_source`` values.
MEASURED, CACHED, NOT_MEASURED = "measured", "cache", "not measured"
#: The key of the per-query latencies in a cost summary (not in metrics.json: :func:`block`).
PER_QUERY_KEY = "latencies_ms"


@dataclass(frozen=True)
class CostSettings:
    """The ``cost:`` block of the config: ``enabled`` (false: no timing at all, no cost keys),
    ``warmup`` (queries searched untimed first), ``repeat`` (timed passes), ``per_query``
    (each query searched and timed alone)."""

    enabled: bool = True
    warmup: int = 5
    repeat: int = 1
    per_query: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.warmup, bool) or int(self.warmup) < 0:
            raise ValueError(f"cost.warmup must be a number of queries >= 0, got {self.warmup!r}")
        if isinstance(self.repeat, bool) or int(self.repeat) < 1:
            raise ValueError(f"cost.repeat must be a number of timed passes >= 1, got {self.repeat!r}")


def machine() -> dict[str, Any]:
    """The machine the numbers were measured on: CPU model, logical cores, the cores this
    process may use, and the threads its numeric libraries use (torch's when it is loaded,
    else ``OMP_NUM_THREADS`` or the usable cores)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = usable
    if "torch" in sys.modules:
        threads = int(sys.modules["torch"].get_num_threads())
    elif os.environ.get("OMP_NUM_THREADS", "").isdigit():
        threads = int(os.environ["OMP_NUM_THREADS"])
    return {"cpu": cpu, "cores": os.cpu_count() or 1, "usable_cores": usable, "threads": threads}


def measured_index(retriever: Any, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> dict[str, float]:
    """``retriever.index(...)``, timed: ``index_build_s``, its size where it says
    (``index_size()``: bytes in memory and on disk) and a dense retriever's encoding time."""
    start = time.perf_counter()
    retriever.index(doc_ids, doc_texts)
    out = {"index_build_s": time.perf_counter() - start}
    size = retriever.index_size() if callable(getattr(retriever, "index_size", None)) else {}
    for key, name in (("memory_bytes", "index_memory_mb"), ("disk_bytes", "index_disk_mb")):
        if size.get(key) is not None:
            out[name] = float(size[key]) / 2**20
    encoded = getattr(retriever, "encode_report", None) or {}
    if encoded.get("passages") and encoded.get("seconds"):
        out["encode_s"] = float(encoded["seconds"])
        out["encode_passages_per_s"] = float(encoded["passages"]) / float(encoded["seconds"])
    return out


def measured_search(retriever: Any, query_ids: Sequence[str], query_texts: Sequence[str], depth: int,
                    settings: CostSettings) -> tuple[Any, dict[str, Any]]:
    """(the ranking of the first timed pass, its latency summary: :func:`summary`)."""
    if not getattr(retriever, "latency_measured", True):
        return retriever.search(query_ids, query_texts, depth), {
            "latency_source": NOT_MEASURED, "note": "a run file: ranked elsewhere"}
    n_warm = warm_up(retriever, query_ids, query_texts, depth, settings.warmup)
    ranking, samples, walls, mode = None, [], [], "batch_share"
    for _ in range(settings.repeat):
        if hasattr(retriever, "latencies_ms"):
            retriever.latencies_ms = None  # the pass's own, never a warm-up's
        start = time.perf_counter()
        if settings.per_query and not hasattr(retriever, "latencies_ms"):
            found, own = one_by_one(retriever, query_ids, query_texts, depth)
        else:
            found = retriever.search(query_ids, query_texts, depth)
            own = getattr(retriever, "latencies_ms", None)
        walls.append(time.perf_counter() - start)
        ranking = found if ranking is None else ranking
        if own is not None and len(own) == len(query_ids):
            samples.append(np.asarray(own, np.float64))
            mode = getattr(retriever, "latency_mode", "per_query")
        else:
            samples.append(np.full(len(query_ids), 1000 * walls[-1] / max(len(query_ids), 1)))
    info = summary(np.concatenate(samples), len(query_ids), walls, mode)
    info.update(warmup=n_warm, repeat=settings.repeat)
    info[PER_QUERY_KEY] = np.mean(samples, axis=0).tolist()  # NaN (a failed call) stays NaN
    return ranking, info


def one_by_one(retriever: Any, query_ids: Sequence[str], query_texts: Sequence[str], depth: int
               ) -> tuple[Any, list[float]]:
    """``cost.per_query``: each query searched alone, each call timed; the rankings stacked in
    query order (rows padded with -1 / -inf to the longest). The retriever's embedding caches
    are off meanwhile (as in the warm-up): a call encodes its query and searches, and no
    per-call cache entry is looked up or written (a dense query is encoded even when a cache
    holds it)."""
    rows, latencies = [], []
    cached = _with_cache(retriever)  # one query a call: nothing of it goes to (or is read from) a cache
    for part in cached:
        part.cache_dir, part.per_query_cache_dir = None, part.cache_dir
    try:
        for qid, text in zip(query_ids, query_texts):
            start = time.perf_counter()
            rows.append(retriever.search([qid], [text], depth))
            latencies.append(1000 * (time.perf_counter() - start))
    finally:
        for part in cached:
            part.cache_dir = part.__dict__.pop("per_query_cache_dir")
    width = max((r.doc_idx.shape[1] for r in rows), default=0)
    doc_idx = np.full((len(rows), width), -1, dtype=np.int64)
    scores = np.full((len(rows), width), -np.inf, dtype=rows[0].scores.dtype if rows else np.float64)
    for i, r in enumerate(rows):
        n = r.doc_idx.shape[1]
        doc_idx[i, :n], scores[i, :n] = r.doc_idx[0], r.scores[0]
    return Ranking(doc_idx, scores), latencies


def block(cost: dict[str, Any]) -> dict[str, Any]:
    """The cost summary as metrics.json and the record hold it: without the per-query latencies
    (they go to ``latency.csv``)."""
    return {k: v for k, v in cost.items() if k != PER_QUERY_KEY}


def warm_up(retriever: Any, query_ids: Sequence[str], query_texts: Sequence[str], depth: int, n: int) -> int:
    """Search the first ``n`` queries untimed, their results dropped; returns how many.

    User code (``warmup_real_queries``: the adapters) gets the queries as they are (its own
    caches are its business); the bundled retrievers get the texts with a trailing space and
    ids ``__warmup_<i>``, so that no cache of the run's queries (dense's text cache) is filled
    by them and the timed pass encodes exactly as an untimed one would. A warm-up that fails is
    an info line (the timed pass then meets the failure itself, and says it)."""
    n = min(n, len(query_ids))
    if not n:
        return 0
    real = getattr(retriever, "warmup_real_queries", False)
    ids = list(query_ids[:n]) if real else [f"__warmup_{i}" for i in range(n)]
    texts = list(query_texts[:n]) if real else [f"{t} " for t in query_texts[:n]]
    cached = [] if real else _with_cache(retriever)
    for part in cached:  # the warm-up's texts are not the run's: nothing of them goes to a cache
        part.cache_dir, part.warmup_cache_dir = None, part.cache_dir
    try:
        retriever.search(ids, texts, depth)
    except Exception as err:  # noqa: BLE001 - the timed pass reports any real failure
        log.info("cost: the warm-up of %d queries failed (%s: %s); timing without it", n, type(err).__name__, err)
        return 0
    finally:
        for part in cached:
            part.cache_dir = part.__dict__.pop("warmup_cache_dir")
    return n


def _with_cache(retriever: Any) -> list[Any]:
    """The retriever and the retrievers it holds (a hybrid's two) that cache under ``cache_dir``."""
    parts = [retriever, *(v for v in vars(retriever).values() if hasattr(v, "search"))] \
        if hasattr(retriever, "__dict__") else [retriever]
    return [p for p in parts if getattr(p, "cache_dir", None) is not None and hasattr(p, "__dict__")]


def summary(latencies_ms: np.ndarray, n_queries: int, walls_s: Sequence[float], mode: str) -> dict[str, Any]:
    """``{"metrics": {latency_p50_ms, ..._ci_low/_high, latency_mean_ms, throughput_qps},
    "latency_mode", "latency_source": "measured", "machine", "failed_calls"}``; NaN latencies
    (calls that failed or timed out) are left out and counted."""
    ok = latencies_ms[np.isfinite(latencies_ms)]
    info: dict[str, Any] = {"latency_mode": mode, "latency_source": MEASURED, "machine": machine(),
                            "timed_queries": int(ok.size), "failed_calls": int(latencies_ms.size - ok.size)}
    metrics: dict[str, float] = {}
    if ok.size:
        for q, (value, low, high) in percentiles_with_ci(ok, PERCENTILES, n_resamples=CI_RESAMPLES).items():
            name = f"latency_p{q:g}_ms"
            metrics.update({name: value, f"{name}_ci_low": low, f"{name}_ci_high": high})
        metrics["latency_mean_ms"] = float(ok.mean())
    if n_queries and sum(walls_s) > 0:
        metrics["throughput_qps"] = n_queries * len(walls_s) / float(sum(walls_s))
    info["metrics"] = metrics
    return info


def describe(cost: dict[str, Any]) -> str | None:
    """The job block's line: ``latency p50/p95 2.1/3.4 ms (per-query share of batches), 410
    queries/s``, with where the numbers come from; None without cost numbers."""
    source = cost.get("latency_source")
    if source == NOT_MEASURED:
        return f"latency not measured ({cost.get('note', 'no timing')})"
    m = cost.get("metrics") or {}
    if "latency_p50_ms" not in m:
        return None
    how = "per-query share of batches" if cost.get("latency_mode") == "batch_share" else "per query"
    line = (f"latency p50/p95 {_number(m['latency_p50_ms'])}/{_number(m['latency_p95_ms'])} ms ({how})"
            + (f", {_number(m['throughput_qps'])} queries/s" if "throughput_qps" in m else ""))
    if "index_build_s" in m:
        line += f", index built in {m['index_build_s']:.3g} s"
    return line + (" (measured when the cached ranking was computed)" if source == CACHED else "")


def _number(value: float) -> str:
    """``21,694`` for large numbers, ``3.42`` for small ones (no exponent on the console)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


# --------------------------------------------------------------------------- index sizes


def array_bytes(*arrays: Any) -> int:
    """Bytes held by numpy arrays, scipy sparse matrices (data, indices, indptr) and
    ``array.array`` buffers; None entries count 0."""
    total = 0
    for a in arrays:
        if a is None:
            continue
        if hasattr(a, "indptr"):  # scipy sparse (csr/csc)
            total += a.data.nbytes + a.indices.nbytes + a.indptr.nbytes
        elif hasattr(a, "nbytes"):
            total += int(a.nbytes)
        else:  # array.array, bytes
            total += len(a) * getattr(a, "itemsize", 1)
    return total


def faiss_bytes(index: Any) -> int:
    """Bytes of a faiss flat or HNSW-flat index in memory: its vectors (``codes``) and, for
    HNSW, its graph (neighbors, levels, offsets); within 0.1% of ``faiss.serialize_index``."""
    import faiss

    inner = faiss.downcast_index(index)
    total = 0
    hnsw = getattr(inner, "hnsw", None)
    if hnsw is not None:
        total += 4 * hnsw.neighbors.size() + 4 * hnsw.levels.size() + 8 * hnsw.offsets.size()
        inner = faiss.downcast_index(inner.storage)
    codes = getattr(inner, "codes", None)
    return total + (int(codes.size()) if codes is not None else 0)


def folder_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of the files under ``path`` (a persistent Chroma folder)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total

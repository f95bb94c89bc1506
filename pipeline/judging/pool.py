"""Depth-d pooling for relevance judging (the library of ``python -m pipeline.cli pool``).

The pool (TREC's depth-d pooling; Sparck Jones and van Rijsbergen 1975, Voorhees and Harman 2005), for
each query, of the ``doc_idx`` matrices of several runs (retrievers, or TREC run files: :func:`run_file_rankings`):

1. the union of the top ``depth`` documents of every run;
2. minus the documents already judged for the query (the dataset's qrels and every ``--qrels`` file,
   e.g. an earlier round of judging), so a pool grows as retrievers arrive;
3. capped at ``max_pool`` documents: they are ranked by their best rank in any run (then corpus
   order) and the first N kept, which is pooling at the largest depth that fits plus part of the next;
4. shuffled: each query's documents are sorted by a hash of the seed, the query id and the document
   id (``shuffle_keys``): an order that depends on nothing else, never on ranks or runs, and is the
   same on every machine.

Nothing written says which run found a document or at what rank. :func:`write_pool` writes ``pool.tsv``
(header ``query_id<TAB>doc_id``, one line per document to judge, in the shuffled order), ``tasks.json``
(Label Studio tasks: ``data`` holds ``query_id``, ``query``, ``doc_id``, ``document``),
``labeling_config.xml`` (the question, the document and a 0-3 grade with hotkeys 0-3) and ``pool.json``
(:func:`pool_summary`: the settings and counts; run names but no per-document provenance).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json  # C; escapes non-ASCII, even a lone surrogate
from pathlib import Path
from typing import Any, Sequence
from xml.sax.saxutils import quoteattr

import numpy as np
import xxhash
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.collection import Collection
from pipeline.io.formats import check_writable_id, read_qrels, read_run
from pipeline.io.results import atomic_open
from pipeline.ranking import rows_to_ranking

log = logging.getLogger(__name__)

# The grade scale shown to annotators (docs/judging.md); the alias is what Label Studio exports.
GRADES = ((3, "answers the question directly and completely"), (2, "gives useful background or part of the answer"),
          (1, "on the topic but not useful"), (0, "off-topic"))
CHOICES_NAME = "grade"  # the <Choices name> whose value pipeline.judgments reads


@dataclass(frozen=True)
class Pool:
    """The documents to judge: parallel arrays, grouped by query (collection order), each
    query's documents in the shuffled order."""

    query_idx: NDArray[np.int64]
    doc_idx: NDArray[np.int64]
    n_candidates: int  # distinct (query, document) pairs in the runs' top depth
    n_judged: int  # of those, already judged (left out)
    n_capped: int  # of the rest, left out by max_pool

    @property
    def n_queries(self) -> int:
        """The number of queries with at least one document to judge."""
        return int(len(np.unique(self.query_idx)))


def _id_hashes(ids: Sequence[str], seed: int) -> NDArray[np.uint64]:
    h, seed = xxhash.xxh3_64_intdigest, seed % (1 << 64)
    return np.fromiter((h(i.encode("utf-8", "surrogatepass"), seed) for i in ids), dtype=np.uint64, count=len(ids))


def _mix(hq: NDArray[np.uint64], hd: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """``splitmix64(hq * φ + hd)``: SplitMix64's finalizer (Steele, Lea and Flood 2014), wrapping uint64 arithmetic."""
    with np.errstate(over="ignore"):
        x = hq * np.uint64(0x9E3779B97F4A7C15) + hd
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def shuffle_keys(seed: int, query_ids: Sequence[str], doc_ids: Sequence[str]) -> NDArray[np.uint64]:
    """The sort key of each (query, document): ``splitmix64(xxh3_64(query, seed) * φ + xxh3_64(doc, seed))``
    with φ = 0x9E3779B97F4A7C15 and uint64 wrap-around; ids hashed as UTF-8. It depends on
    the seed and the two ids only (not on ranks, runs or the rest of the pool)."""
    q_unique, q_inverse = np.unique(np.asarray(query_ids, dtype=object), return_inverse=True)
    d_unique, d_inverse = np.unique(np.asarray(doc_ids, dtype=object), return_inverse=True)
    return _mix(_id_hashes(q_unique.tolist(), seed)[q_inverse], _id_hashes(d_unique.tolist(), seed)[d_inverse])


def pool(rankings: Sequence[NDArray[np.integer]], query_ids: Sequence[str], doc_ids: Sequence[str], depth: int = 10,
         judged: tuple[NDArray[np.integer], NDArray[np.integer]] | None = None, max_pool: int | None = None,
         seed: int = 0) -> Pool:
    """Pool the ``doc_idx`` matrices ``rankings`` ([n_queries, width], -1 = nothing, rows in
    the order of ``query_ids``) as the module docstring says. ``judged`` is a pair of arrays
    (query index, document index) of judged documents to leave out."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if max_pool is not None and max_pool < 1:
        raise ValueError(f"max_pool must be >= 1, got {max_pool}")
    n_q, n_d = len(query_ids), len(doc_ids)
    key, rank = _best_ranks(rankings, n_q, max(n_d, 1), depth)
    n_candidates = len(key)
    if judged is not None and len(judged[0]):
        jq, jd = (np.asarray(a, dtype=np.int64) for a in judged)
        ok = jd >= 0  # judged documents missing from the corpus cannot be pooled anyway
        unjudged = ~np.isin(key, jq[ok] * max(n_d, 1) + jd[ok])
        key, rank = key[unjudged], rank[unjudged]
    n_judged = n_candidates - len(key)
    q, d = key // max(n_d, 1), key % max(n_d, 1)
    n_capped = 0
    if max_pool is not None and len(key):
        q, d, n_capped = _cap(q, d, rank, max_pool)
    # shuffle_keys, computed once per distinct query and document
    q_unique, q_inverse = np.unique(q, return_inverse=True)
    d_unique, d_inverse = np.unique(d, return_inverse=True)
    keys = _mix(_id_hashes([query_ids[i] for i in q_unique.tolist()], seed)[q_inverse],
                _id_hashes([doc_ids[i] for i in d_unique.tolist()], seed)[d_inverse])
    order = np.lexsort((keys, q))
    return Pool(q[order], d[order], n_candidates, n_judged, n_capped)


def _best_ranks(rankings: Sequence[NDArray[np.integer]], n_q: int, width: int,
                depth: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The distinct (query, document) pairs in the top ``depth`` of the rankings, as keys
    ``query * width + document`` in ascending order, each with its best (0-based) rank."""
    qs, ds, rs = [], [], []
    for ranking in rankings:
        cols = np.asarray(ranking)[:, :depth]
        if cols.shape[0] != n_q:
            raise ValueError(f"a ranking has {cols.shape[0]} rows for {n_q} queries")
        q = np.repeat(np.arange(n_q, dtype=np.int64), cols.shape[1])
        r = np.tile(np.arange(cols.shape[1], dtype=np.int64), n_q)
        d = cols.astype(np.int64, copy=False).ravel()
        keep = d >= 0
        qs.append(q[keep]), ds.append(d[keep]), rs.append(r[keep])
    q, d, rank = (np.concatenate(parts) if parts else np.zeros(0, np.int64) for parts in (qs, ds, rs))
    key = q * width + d
    order = np.lexsort((rank, key))
    key, rank = key[order], rank[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    return key[first], rank[first]


def _cap(q: NDArray[np.int64], d: NDArray[np.int64], rank: NDArray[np.int64],
         max_pool: int) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """The first ``max_pool`` documents of each query by best rank, then corpus order:
    (queries, documents, how many were left out)."""
    order = np.lexsort((d, rank, q))
    q, d = q[order], d[order]
    starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    position = np.arange(len(q)) - np.repeat(starts, np.diff(np.r_[starts, len(q)]))
    keep = position < max_pool
    return q[keep], d[keep], int((~keep).sum())


def labeling_config(question_title: str = "Question", document_title: str = "Document") -> str:
    """The Label Studio labeling config: the question, the document, one 0-3 grade (hotkeys
    0-3; the exported value is the digit, the ``alias``)."""
    choices = "\n".join(f'    <Choice value={quoteattr(f"{g}: {text}")} alias="{g}" hotkey="{g}"/>'
                        for g, text in GRADES)
    question = quoteattr("How well does the document answer the question? (keys 0-3)")
    return f"""<View>
  <Header value={quoteattr(question_title)}/>
  <Text name="query" value="$query"/>
  <Header value={quoteattr(document_title)}/>
  <Text name="document" value="$document"/>
  <Header value={question}/>
  <Choices name="{CHOICES_NAME}" toName="document" choice="single-radio" required="true" showInLine="false">
{choices}
  </Choices>
</View>
"""


def tasks(result: Pool, collection: Collection) -> list[dict[str, Any]]:
    """Label Studio tasks, one per pooled document, in the pool's order."""
    return [{"data": {"query_id": collection.query_ids[qi], "query": collection.query_texts[qi],
                      "doc_id": collection.doc_ids[di], "document": collection.doc_texts[di]}}
            for qi, di in zip(result.query_idx.tolist(), result.doc_idx.tolist())]


def _check_ids(values: Sequence[str], what: str, path: Path) -> None:
    for value in values:
        if not (value.isprintable() and " " not in value and value):  # the common case, checked fast
            check_writable_id(value, what, path)


def write_pool(out: Path, result: Pool, collection: Collection, summary: dict[str, Any]) -> None:
    """Write pool.tsv, tasks.json (the JSON of ``tasks()``), labeling_config.xml and pool.json
    (each atomically)."""
    out = Path(out)
    # Every distinct query and document is formatted once; a line is two pieces joined.
    q_unique, q_inv = np.unique(result.query_idx, return_inverse=True)
    d_unique, d_inv = np.unique(result.doc_idx, return_inverse=True)
    qids = [collection.query_ids[i] for i in q_unique.tolist()]
    dids = [collection.doc_ids[i] for i in d_unique.tolist()]
    _check_ids(qids, "query", out / "pool.tsv")
    _check_ids(dids, "document", out / "pool.tsv")

    def lines(q_parts: list[str], d_parts: list[str]) -> list[str]:
        return (np.asarray(q_parts, dtype=object)[q_inv] + np.asarray(d_parts, dtype=object)[d_inv]).tolist()

    with atomic_open(out / "pool.tsv") as fh:
        fh.write("query_id\tdoc_id\n" + "".join(lines([f"{q}\t" for q in qids], [f"{d}\n" for d in dids])))
    q_json = [f'{{"data": {{"query_id": {_json(q)}, "query": {_json(collection.query_texts[i])}, '
              for q, i in zip(qids, q_unique.tolist())]
    d_json = [f'"doc_id": {_json(d)}, "document": {_json(collection.doc_texts[i])}}}}}'
              for d, i in zip(dids, d_unique.tolist())]
    with atomic_open(out / "tasks.json") as fh:  # one task a line
        fh.write("[\n" + ",\n".join(lines(q_json, d_json)) + "\n]\n")
    with atomic_open(out / "labeling_config.xml") as fh:
        fh.write(labeling_config())
    with atomic_open(out / "pool.json") as fh:
        json.dump(summary, fh, indent=2)


def pool_summary(result: Pool, collection: Collection, runs: Sequence[str], depth: int, max_pool: int | None,
                 seed: int, qrels_files: Sequence[str]) -> dict[str, Any]:
    """What ``pool.json`` records: the settings, the run names and the counts (no provenance)."""
    per_query = np.bincount(result.query_idx, minlength=collection.n_queries)
    return {"dataset": collection.name, "source": collection.source, "collection_digest": collection.digest,
            "runs": list(runs), "depth": depth, "max_pool": max_pool, "seed": seed, "qrels_files": list(qrels_files),
            "n_queries": collection.n_queries, "n_candidates": result.n_candidates,
            "n_already_judged": result.n_judged, "n_left_out_by_max_pool": result.n_capped,
            "n_pooled": int(len(result.doc_idx)),
            "pooled_per_query": {"min": int(per_query.min(initial=0)), "max": int(per_query.max(initial=0)),
                                 "mean": float(per_query.mean()) if len(per_query) else 0.0}}


def judged_pairs(collection: Collection, qrels_files: Sequence[str]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(query index, document index) of every judgment in the collection and the files."""
    import pandas as pd

    qs = [np.asarray(collection.qrels.query_idx, np.int64)]
    ds = [np.asarray(collection.qrels.doc_idx, np.int64)]
    q_index = pd.Index(np.asarray(collection.query_ids, dtype=object))
    d_index = pd.Index(np.asarray(collection.doc_ids, dtype=object))
    for path in qrels_files:
        judgments = read_qrels(path)
        q = q_index.get_indexer(judgments.query_ids).astype(np.int64)
        d = d_index.get_indexer(judgments.doc_ids).astype(np.int64)
        keep = (q >= 0) & (d >= 0)
        qs.append(q[keep]), ds.append(d[keep])
    return np.concatenate(qs), np.concatenate(ds)


def run_file_rankings(paths: Sequence[str | Path], collection: Collection, depth: int) -> list[NDArray[np.int64]]:
    """The doc_idx matrix of each TREC run file on the collection, as ``retriever=run_file`` orders it
    (score descending, then corpus order), at most ``depth`` deep (capped at the corpus size: a run
    cannot rank more distinct documents). Each run is checked against the collection
    (:func:`check_run_overlap`): no overlap is an InputError, a partial one a warning line. Ids are
    looked up once per distinct id, not once per line."""
    if not paths:
        return []
    import pandas as pd

    depth = max(1, min(int(depth), collection.n_docs))
    doc_index = pd.Index(np.asarray(collection.doc_ids, dtype=object))
    query_index = pd.Index(np.asarray(collection.query_ids, dtype=object))
    rankings = []
    for path in paths:
        run = read_run(path)
        q = query_index.get_indexer(run.query_dict.to_numpy(zero_copy_only=False)).astype(np.int64)[run.query_codes]
        d = doc_index.get_indexer(run.doc_dict.to_numpy(zero_copy_only=False)).astype(np.int64)[run.doc_codes]
        check_run_overlap(path, run, q, d, collection)
        keep = (q >= 0) & (d >= 0)
        rankings.append(rows_to_ranking(q[keep], d[keep], run.scores[keep], len(query_index), depth, d[keep]).doc_idx)
    return rankings


def _examples(values: Any) -> str:
    """The first three distinct ids, quoted."""
    import pandas as pd

    return ", ".join(repr(str(v)) for v in pd.unique(np.asarray(values, dtype=object))[:3])


def check_run_overlap(path: str | Path, run: Any, q: NDArray[np.int64], d: NDArray[np.int64],
                      collection: Collection) -> None:
    """How a run meets the collection: ``q`` and ``d`` are each result line's query and
    document index in the collection (-1: not in it). None of the run's queries in the
    collection, or none of the documents of those queries in the corpus, is an InputError
    naming the counts and example ids (a run made for another query set or corpus); queries
    or result lines outside it are one warning line with the counts."""
    asked = q >= 0
    n_run = len(run.query_dict)
    if not asked.any():
        raise InputError(f"none of the run's {n_run} queries is a query of the collection ({collection.n_queries} "
                         f"queries; run: e.g. {_examples(run.query_ids)}; collection: e.g. "
                         f"{_examples(collection.query_ids[:3])}): a run for another query set?", path)
    unknown = asked & (d < 0)
    n_lines, n_unknown = int(asked.sum()), int(unknown.sum())
    if n_unknown == n_lines:
        raise InputError(f"none of the documents of the run's {n_lines} result lines for the collection's queries is "
                         f"in the corpus (run: e.g. {_examples(run.doc_ids[asked])}; corpus: e.g. "
                         f"{_examples(collection.doc_ids[:3])}): a run for another corpus?", path)
    n_in = len(np.unique(q[asked]))
    if n_in < n_run or n_unknown:
        log.warning("run %s: %d of its %d queries are not in the collection (ignored); %d of the %d result lines of "
                    "the others name documents not in the corpus (skipped%s); its queries cover %d of the "
                    "collection's %d", path, n_run - n_in, n_run, n_unknown, n_lines,
                    f", e.g. {_examples(run.doc_ids[unknown])}" if n_unknown else "", n_in, collection.n_queries)

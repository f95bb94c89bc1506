"""A "retriever" that reads a TREC run produced elsewhere (another system, a reranker).

The run (``qid Q0 docid rank score tag``, read and validated by ``pipeline.io.formats.read_run``)
is mapped onto the collection: ``index`` records the corpus's document ids, ``search``
returns, for each requested query, its documents ordered by score descending, then by the
tie rule ``tie_break`` (the names are ``pipeline.io.formats``'s, shared with the scorer):

- ``doc_index`` (default): document index in the corpus ascending — the project's rule for
  its own retrievers;
- ``docid_desc``: document id descending (string order), which is what trec_eval does, so
  metrics then equal trec_eval's exactly;
- ``file_order``: the run file's line order.

The rank column is ignored (trec_eval ignores it too). Ordering uses the file's scores at
full (float64) precision, and the Ranking keeps them so (the job's run.trec writes them back
exactly). Nothing is dropped silently: documents that are not in the corpus are skipped
(they could only be unjudged); queries of the run that were not asked for are ignored;
queries absent from the run get empty rows (all ``-1``, scoring 0). A partial overlap is
one warning line with these counts; no overlap at all (none of the run's queries is asked
for, or none of its documents for them is in the corpus: a run made for another query set
or collection) is an ``InputError`` naming the run file. The counts of the last search are
in ``report``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.errors import InputError
from pipeline.io.formats import TIE_BREAKS, RunFile, read_run, tie_break_rule
from pipeline.ranking import Ranking, rows_to_ranking

log = logging.getLogger(__name__)

__all__ = ["TIE_BREAKS", "RunFileRetriever", "file_sha256"]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class RunFileRetriever:
    """Serve a TREC run file as a Ranking over the collection's queries and documents.

    Args:
        path: the run file (``.gz`` accepted).
        tie_break: ``doc_index`` (default), ``docid_desc`` (trec_eval's order) or
            ``file_order`` (see ``pipeline.io.formats``).
    """

    prefix_stable = True
    #: retrievers.cost: a run file's ranking was computed elsewhere: no latency to measure here
    latency_measured = False

    def __init__(self, path: str | Path, tie_break: str = "doc_index"):
        self.tie_break = tie_break_rule(tie_break)
        self.path = Path(path).expanduser()
        self._doc_index: pd.Index | None = None
        self._run: RunFile | None = None
        self.report: dict[str, int] = {}

    def cache_key(self) -> dict[str, Any]:
        path = self.path.resolve()
        sha = file_sha256(path) if path.is_file() else None  # a missing file fails in search()
        # scores: float64 since issue 33 (an entry cached with float32 scores is not reused)
        return {"retriever": "run_file", "path": str(path), "sha256": sha, "tie_break": self.tie_break,
                "scores": "float64"}

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None:
        index = pd.Index(np.asarray(doc_ids, dtype=object))
        if not index.is_unique:
            raise ValueError("document ids must be unique to map a run file onto them")
        self._doc_index = index

    def _read(self) -> RunFile:
        if self._run is None:
            self._run = read_run(self.path)
            log.info("read run %s: %d lines", self.path, len(self._run.doc_ids))
        return self._run

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        if self._doc_index is None:
            raise RuntimeError("call index() before search()")
        queries = pd.Index(np.asarray(query_ids, dtype=object))
        if not queries.is_unique:
            raise ValueError("query ids must be unique to map a run file onto them")
        run = self._read()
        n_q = len(queries)
        q = queries.get_indexer(run.query_ids).astype(np.int64)
        d = self._doc_index.get_indexer(run.doc_ids).astype(np.int64)

        asked = q >= 0
        unknown = asked & (d < 0)
        n_unknown = int(unknown.sum())
        n_other_queries = len(pd.unique(run.query_ids[~asked])) if (~asked).any() else 0
        keep = asked & (d >= 0)
        self._check_overlap(run, asked, keep, list(queries[:3]), list(self._doc_index[:3]))
        q, d = q[keep], d[keep]
        if self.tie_break == "docid_desc":
            codes, _ = pd.factorize(run.doc_ids[keep], sort=True)  # code order = id string order
            tie = -codes
        elif self.tie_break == "doc_index":
            tie = d
        else:
            tie = None  # file_order: the rows' own order
        ranking = rows_to_ranking(q, d, run.scores[keep], n_q, depth, tie)
        n_empty = n_q - len(np.unique(q))
        if n_unknown or n_empty:  # one line with every count
            examples = ", ".join(map(repr, pd.unique(run.doc_ids[unknown])[:3]))
            log.warning("run %s: results for %d of the %d evaluated queries (the other %d score 0); %d of its %d "
                        "result lines for them name documents not in the corpus (skipped: unjudged%s); %d other "
                        "queries in the run (ignored)", self.path, n_q - n_empty, n_q, n_empty, n_unknown,
                        int(asked.sum()), f", e.g. {examples}" if examples else "", n_other_queries)
        elif n_other_queries:
            log.info("run %s: %d queries are not among the collection's queries; ignored", self.path, n_other_queries)
        self.report = {"run_unknown_docs": n_unknown, "run_other_queries": n_other_queries,
                       "run_queries_without_results": n_empty}
        return ranking

    def _check_overlap(self, run: RunFile, asked: np.ndarray, keep: np.ndarray, queries: list[str],
                       docs: list[str]) -> None:
        """InputError when the run shares no query, or no document of those queries, with the
        collection: it was made for another query set or collection, and would score 0."""
        if not asked.any():
            theirs = ", ".join(map(repr, pd.unique(run.query_ids)[:3]))
            raise InputError(f"none of the run's {len(run.query_dict)} queries is among the collection's evaluated "
                             f"queries (run: e.g. {theirs}; collection: e.g. {', '.join(map(repr, queries))}): a run "
                             "for another query set?", self.path)
        if not keep.any():
            theirs = ", ".join(map(repr, pd.unique(run.doc_ids[asked])[:3]))
            raise InputError(f"none of the documents of the run's {int(asked.sum())} result lines for the "
                             f"collection's queries is in the corpus (run: e.g. {theirs}; corpus: e.g. "
                             f"{', '.join(map(repr, docs))}): a run for another collection?", self.path)

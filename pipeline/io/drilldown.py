"""Per-query drill-down: what each query asked, what it retrieved, and which queries failed.

Adds to the per-query table (``per_query.csv``, the MLflow table) and writes ``failures.md``.
All values are at the run's cut-off ``k`` and ``relevance_level``, on the ranking as
retrieved (also with ``judged_only``, whose condensed lists only the metrics use):

- ``query``: the query text, whitespace collapsed (empty when it is not known).
- ``n_relevant`` (already in the table) is R: judged documents with grade >= relevance_level,
  including judged documents missing from the corpus (as trec_eval's ``num_rel``).
- ``first_relevant_rank``: 1-based rank of the first document with grade >= relevance_level
  in the whole ranking (its depth, not only the top k), empty when none was retrieved;
  ``1 / first_relevant_rank`` is the query's ``mrr`` (trec_eval ``recip_rank``).
- ``judged_at_<k>``: (judged documents in the top k) / (documents retrieved in the top k),
  i.e. / k unless the ranking is shorter; 0 when nothing was retrieved. Judged = a grade >= 0
  for the query (0 included); a negative grade (in the pool, not judged) counts as unjudged.
  The definition of the metric family ``judged_at_K``: a table that has it keeps its column.
- ``top_<k>``: the top k in rank order, one ``|``-separated entry per document:
  ``DOCID (GRADE) "SNIPPET"``, GRADE the judged grade or ``-`` (unjudged, negative grades
  included), SNIPPET the first :data:`SNIPPET_CHARS` characters of the document's text (title
  + text, whitespace collapsed, cut with ``…``; ``"`` becomes ``'``); without texts
  (``pipeline.score`` without ``--corpus``) an entry is ``DOCID (GRADE)``.

A **failure** is an evaluated query (R > 0) with no document of grade >= relevance_level in
the top k. ``failures.md`` lists them worst first: R descending, then the first relevant
document furthest down the ranking (none retrieved counts as furthest of all), then query
id; each with its text, its top k and up to :data:`MAX_RELEVANT_SHOWN` of its relevant
documents (best grade first, then document id) with the rank each was retrieved at, if any.

Every cell is found with array operations (one sorted lookup of the judgments for the whole
ranking); only the strings of the top k are built one by one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from pipeline.io.formats import arrow_array
from pipeline.metrics import Qrels, n_relevant

if TYPE_CHECKING:
    from pipeline.io.collection import Collection

log = logging.getLogger(__name__)

#: Characters of a document's text shown in a snippet.
SNIPPET_CHARS = 60
#: Relevant documents shown per failing query in ``failures.md``.
MAX_RELEVANT_SHOWN = 5
#: Failing queries written out in full in ``failures.md`` (the rest are counted).
MAX_FAILURES_SHOWN = 500
FAILURES_FILE = "failures.md"


def _text(value: str) -> pa.Scalar:
    """An arrow string scalar; a Python str passed to a compute kernel imports pandas."""
    return arrow_array([value], pa.string())[0]


def column_names(k: int) -> list[str]:
    """The columns the drill-down adds to the per-query table, in order."""
    return ["query", "first_relevant_rank", f"judged_at_{k}", f"top_{k}"]


def with_columns(table: dict[str, Any], drill: "DrillDown") -> dict[str, Any]:
    """``table`` (columns, ``query_id`` first) with the drill-down's columns: ``query`` right
    after ``query_id``, the others at the end. A column the table has already (e.g. a
    ``judged_at_<k>`` metric family) is kept as it is."""
    new = drill.columns()
    out = {"query_id": table["query_id"], "query": new.pop("query")}
    out.update((name, values) for name, values in table.items() if name not in out)
    out.update((name, values) for name, values in new.items() if name not in out)
    return out


def snippet(text: str | None, chars: int = SNIPPET_CHARS) -> str | None:
    """The first ``chars`` characters (code points) of ``text``, whitespace collapsed and
    trimmed (``str.split``), ``"`` shown as ``'``, cut with ``…`` (the last of the ``chars``)
    when longer; None stays None. Only a head of the text is read unless it is mostly
    whitespace. (Plain Python: faster here than pyarrow's regex kernels.)"""
    if text is None:
        return None
    head = text[: chars + 24]
    flat = " ".join(head.split())
    if len(flat) <= chars and len(head) < len(text):
        flat = " ".join(text.split())
    flat = flat.replace('"', "'")
    return flat if len(flat) <= chars else flat[: chars - 1].rstrip() + "…"


def snippets(texts: Sequence[str | None], chars: int = SNIPPET_CHARS) -> list[str | None]:
    """:func:`snippet` of each text."""
    return [snippet(text, chars) for text in texts]


def judgment_lookup(doc_idx: NDArray[np.integer], qrels: Qrels) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """(grade, judged) of every cell of a ranking [n_queries, depth]: the grade the qrels give
    (0 where none or empty) and whether the document is judged (a grade >= 0) for that query."""
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    grades = np.zeros(doc_idx.shape, np.int64)
    judged = np.zeros(doc_idx.shape, np.bool_)
    known = qrels.doc_idx >= 0
    if doc_idx.size == 0 or not known.any():
        return grades, judged
    width = int(max(doc_idx.max(initial=-1), qrels.doc_idx.max())) + 1
    keys = qrels.query_idx[known].astype(np.int64) * width + qrels.doc_idx[known]
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_grades = keys[order], np.asarray(qrels.grade, np.int64)[known][order]
    cells = np.nonzero(doc_idx >= 0)
    wanted = cells[0] * width + doc_idx[cells]
    pos = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
    found = sorted_keys[pos] == wanted
    judged[cells] = found & (sorted_grades[pos] >= 0)
    grades[cells] = np.where(found, sorted_grades[pos], 0)
    return grades, judged


@dataclass(frozen=True)
class DrillDown:
    """The drill-down of one ranking (see the module docstring for every definition)."""

    k: int
    relevance_level: int
    query_ids: Sequence[str]
    query_texts: Sequence[str] | None
    doc_ids: Sequence[str]
    doc_texts: Sequence[str | None] | None  # aligned with doc_ids; None: no snippets
    doc_idx: NDArray[np.int64]  # [n_queries, depth], -1 = empty rank
    qrels: Qrels
    grades: NDArray[np.int64]  # raw judged grade per cell, 0 where unjudged
    judged: NDArray[np.bool_]
    n_relevant: NDArray[np.int64]  # R at relevance_level
    first_relevant: NDArray[np.int64]  # 1-based; 0 = no relevant document retrieved
    _snippet_cache: dict[int, str | None] = field(default_factory=dict, repr=False, compare=False)

    @property
    def judged_at_k(self) -> NDArray[np.float64]:
        retrieved = (self.doc_idx[:, : self.k] >= 0).sum(axis=1)
        judged = self.judged[:, : self.k].sum(axis=1)
        return np.divide(judged, retrieved, out=np.zeros(len(retrieved)), where=retrieved > 0)

    @property
    def failed(self) -> NDArray[np.bool_]:
        """Evaluated queries (R > 0) without a relevant document in the top k."""
        hit = (self.first_relevant > 0) & (self.first_relevant <= self.k)
        return (self.n_relevant > 0) & ~hit

    def failures(self) -> list[int]:
        """Row indices of the failures, worst first (R descending, then first relevant rank
        descending with none retrieved before any rank, then query id)."""
        rows = np.flatnonzero(self.failed).tolist()
        never = np.iinfo(np.int64).max
        first = [int(f) or never for f in self.first_relevant[rows].tolist()]
        keys = {q: (-int(self.n_relevant[q]), -f, str(self.query_ids[q])) for q, f in zip(rows, first)}
        return sorted(rows, key=keys.__getitem__)

    def _snippets(self, docs: NDArray[np.int64]) -> dict[int, str | None]:
        """Snippets of ``docs`` (doc indices; -1 ignored), each computed once per drill-down."""
        if self.doc_texts is None:
            return {}
        cache = self._snippet_cache
        missing = [d for d in np.unique(docs[docs >= 0]).tolist() if d not in cache]
        if missing:
            cache.update(zip(missing, snippets([self.doc_texts[d] for d in missing])))
        return cache

    def _entry(self, q: int, rank: int, snips: dict[int, str | None], markdown: bool = False) -> str:
        """One document of a query's top k: ``id (grade) "snippet"`` (markdown: the id in backticks)."""
        d = int(self.doc_idx[q, rank])
        grade = str(int(self.grades[q, rank])) if self.judged[q, rank] else "-"
        text = snips.get(d)
        doc = f"`{self.doc_ids[d]}`" if markdown else str(self.doc_ids[d])
        return f"{doc} ({grade})" + ("" if text is None else f' "{text}"')

    def top_k_cells(self) -> pa.Array:
        """``top_<k>``: one string per query (see the module docstring), built column-wise."""
        head = self.doc_idx[:, : self.k]
        filled = head >= 0
        unique, where = np.unique(head[filled], return_inverse=True)
        docs = unique.tolist()
        snips = self._snippets(unique)
        # formats.arrow_array, not pa.array: pyarrow imports pandas on its first pa.array call.
        ids = arrow_array([str(self.doc_ids[d]) for d in docs], pa.string())
        tails = arrow_array([")" if snips.get(d) is None else f') "{snips[d]}"' for d in docs], pa.string())
        grades = pc.if_else(arrow_array(np.asarray(self.judged[:, : self.k][filled], dtype=bool)),
                            pc.cast(arrow_array(np.asarray(self.grades[:, : self.k][filled], dtype=np.int64)),
                                    pa.string()), _text("-"))
        where = arrow_array(np.asarray(where.reshape(-1), dtype=np.int64))
        entries = pc.binary_join_element_wise(pc.take(ids, where), _text(" ("), grades, pc.take(tails, where),
                                              _text(""))
        offsets = np.concatenate([[0], np.cumsum(filled.sum(axis=1))]).astype(np.int32)
        return pc.binary_join(pa.ListArray.from_arrays(arrow_array(offsets), entries), _text(" | "))

    def columns(self) -> dict[str, Any]:
        """The new per-query columns (:func:`column_names`), as arrays for pyarrow/pandas."""
        first = arrow_array([f or None for f in self.first_relevant.tolist()], pa.int64())
        texts = [""] * len(self.query_ids) if self.query_texts is None else [" ".join(str(t).split())
                                                                             for t in self.query_texts]
        return dict(zip(column_names(self.k), (texts, first, self.judged_at_k, self.top_k_cells())))

    def failures_markdown(self) -> str:
        """``failures.md``: the failing queries, worst first (see the module docstring)."""
        k, level = self.k, self.relevance_level
        rows = self.failures()
        evaluated = int((self.n_relevant > 0).sum())
        share = f" ({len(rows) / evaluated:.1%})" if evaluated else ""
        lines = [f"# Failures: queries with no relevant document in the top {k}", "",
                 f"{len(rows)} of {evaluated} evaluated queries{share} have no document with grade >= {level} "
                 f"in the top {k}. Worst first: most relevant documents (R) first, then the first relevant "
                 "document furthest down the ranking (none retrieved: furthest of all), then query id.", "",
                 "Each document: `id` (grade; `-` = unjudged)"
                 + ("." if self.doc_texts is None else ' "the first characters of its text".')]
        if not rows:
            lines += ["", f"No failures: every evaluated query has a relevant document in the top {k}."]
            return "\n".join(lines) + "\n"
        shown = rows[:MAX_FAILURES_SHOWN]
        judged_at_k = self.judged_at_k
        snips = self._snippets(self.doc_idx[shown, :k])
        relevant = self._relevant_of(shown)
        for q in shown:
            text = "" if self.query_texts is None else " ".join(str(self.query_texts[q]).split())
            lines += ["", f"## {self.query_ids[q]}" + (f": {text}" if text else "")]
            first = int(self.first_relevant[q])
            retrieved = int((self.doc_idx[q] >= 0).sum())
            where = f"first relevant at rank {first}" if first else f"none relevant among the {retrieved} retrieved"
            lines += ["", f"R = {int(self.n_relevant[q])}, {where}, judged in the top {k}: "
                          f"{judged_at_k[q]:.0%}", "", f"Retrieved (top {k}):", ""]
            filled = int((self.doc_idx[q, :k] >= 0).sum())
            lines += [f"{r + 1}. {self._entry(q, r, snips, markdown=True)}" for r in range(filled)]
            lines += [] if filled else ["(nothing retrieved)"]
            docs = relevant.get(q, [])
            lines += ["", f"Should have been (relevant, best grade first; {min(len(docs), MAX_RELEVANT_SHOWN)} "
                          f"of {int(self.n_relevant[q])}):", ""]
            lines += [self._md_relevant(q, d, g) for d, g in docs[:MAX_RELEVANT_SHOWN]]
            missing = int(self.n_relevant[q]) - len(docs)
            if missing:
                lines.append(f"- {missing} judged relevant document(s) not in the corpus")
        if len(rows) > len(shown):
            lines += ["", f"... and {len(rows) - len(shown)} more failing queries (the per-query table has them all: "
                          f"first_relevant_rank empty or > {k} with n_relevant > 0)."]
        return "\n".join(lines) + "\n"

    def _relevant_of(self, rows: list[int]) -> dict[int, list[tuple[int, int]]]:
        """Relevant documents (in the corpus) of ``rows``: (doc index, grade), best first."""
        wanted = np.zeros(len(self.query_ids), np.bool_)
        wanted[rows] = True
        sel = wanted[self.qrels.query_idx] & (self.qrels.grade >= self.relevance_level) & (self.qrels.doc_idx >= 0)
        out: dict[int, list[tuple[int, int]]] = {}
        for q, d, g in zip(self.qrels.query_idx[sel].tolist(), self.qrels.doc_idx[sel].tolist(),
                           self.qrels.grade[sel].tolist()):
            out.setdefault(q, []).append((d, g))
        for docs in out.values():
            docs.sort(key=lambda dg: (-dg[1], str(self.doc_ids[dg[0]])))
        return out

    def _md_relevant(self, q: int, d: int, grade: int) -> str:
        at = np.flatnonzero(self.doc_idx[q] == d)
        where = f"retrieved at rank {int(at[0]) + 1}" if len(at) else "not retrieved"
        text = None if self.doc_texts is None else snippet(self.doc_texts[d])
        return f"- `{self.doc_ids[d]}` ({grade}) {where}" + ("" if text is None else f' "{text}"')

    def text_report(self) -> str:
        """The drill-down for a terminal: each query's top k, one document a line, then the
        failures (``failures.md``)."""
        k = self.k
        head = self.doc_idx[:, :k]
        snips = self._snippets(head)
        judged_at_k = self.judged_at_k
        legend = "rank. id (grade; - = unjudged)" + ("" if self.doc_texts is None else ' "snippet"')
        lines = [f"Top {k} per query: {legend}", ""]
        for q, qid in enumerate(self.query_ids):
            first = int(self.first_relevant[q])
            text = "" if self.query_texts is None else " ".join(str(self.query_texts[q]).split())
            lines.append(f"{qid}  R={int(self.n_relevant[q])}  first relevant: {first or '-'}  "
                         f"judged@{k}: {judged_at_k[q]:.2f}" + (f"  {text}" if text else ""))
            filled = int((head[q] >= 0).sum())
            lines += [f"  {r + 1:>3}. {self._entry(q, r, snips)}" for r in range(filled)]
        return "\n".join(lines) + "\n\n" + self.failures_markdown()

    def json_rows(self) -> dict[str, dict[str, Any]]:
        """Per query: the new columns, with the top k as a list of {doc_id, grade, snippet}
        (grade null = unjudged, snippet null = no corpus) and no rank as null."""
        k = self.k
        judged_at_k = self.judged_at_k.tolist()
        head = self.doc_idx[:, :k]
        snips = self._snippets(head)
        out: dict[str, dict[str, Any]] = {}
        for q, qid in enumerate(self.query_ids):
            top = [{"doc_id": str(self.doc_ids[d]), "grade": int(self.grades[q, r]) if self.judged[q, r] else None,
                    "snippet": snips.get(d)} for r, d in enumerate(head[q].tolist()) if d >= 0]
            first = int(self.first_relevant[q])
            out[str(qid)] = {"query": None if self.query_texts is None else str(self.query_texts[q]),
                             "first_relevant_rank": first or None, f"judged_at_{k}": judged_at_k[q],
                             f"top_{k}": top}
        return out


def drill_down(query_ids: Sequence[str], doc_ids: Sequence[str], doc_idx: NDArray[np.integer], qrels: Qrels, k: int,
               relevance_level: int = 1, query_texts: Sequence[str] | None = None,
               doc_texts: Sequence[str | None] | None = None) -> DrillDown:
    """The drill-down of a ranking: ``doc_idx`` [n_queries, depth] indexes ``doc_ids`` (and
    ``doc_texts``), row q is ``query_ids[q]`` and ``qrels.query_idx`` q; -1 = empty rank."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    if doc_idx.ndim != 2 or doc_idx.shape[0] != len(query_ids):
        raise ValueError(f"doc_idx must be [{len(query_ids)} queries, depth], got shape {doc_idx.shape}")
    if doc_idx.shape[1] < k:  # a ranking shallower than k: the missing ranks are empty
        doc_idx = np.pad(doc_idx, ((0, 0), (0, k - doc_idx.shape[1])), constant_values=-1)
    grades, judged = judgment_lookup(doc_idx, qrels)
    rel = judged & (grades >= relevance_level)
    first = np.where(rel.any(axis=1), rel.argmax(axis=1) + 1, 0).astype(np.int64)
    return DrillDown(k, relevance_level, query_ids, query_texts, doc_ids, doc_texts, doc_idx, qrels, grades, judged,
                     n_relevant(qrels, len(query_ids), relevance_level), first)


def of_collection(collection: "Collection", doc_idx: NDArray[np.integer], k: int,
                  relevance_level: int = 1) -> DrillDown:
    """The drill-down of a pipeline job: the collection's query texts and document texts."""
    return drill_down(collection.query_ids, collection.doc_ids, doc_idx, collection.qrels, k, relevance_level,
                      collection.query_texts, collection.doc_texts)


def of_scored(scored: Any, k: int, relevance_level: int = 1, corpus: str | Path | None = None,
              queries: str | Path | None = None) -> DrillDown:
    """The drill-down of ``pipeline.io.scored.score_files``'s result: snippets from ``corpus``
    (``pipeline.io.collection.read_corpus``: text = title + " " + text, as the pipeline indexes
    it; none without it), query texts from ``queries`` (default: ``queries.jsonl[.gz]`` beside
    the corpus, if any). Only the corpus's documents that the run or the qrels name are kept;
    a bad line is an InputError naming the file and line."""
    from pipeline.io.collection import read_corpus, read_queries

    doc_ids = scored.doc_vocab().to_pylist()
    doc_texts = None
    if corpus is not None:
        wanted = set(doc_ids)
        texts = {doc_id: text for _, doc_id, text in read_corpus(corpus) if doc_id in wanted}
        doc_texts = [texts.get(d) for d in doc_ids]
        if not texts:
            log.warning("warning: no document of the run or the qrels is in %s: no snippets", corpus)
        beside = [Path(corpus).parent / name for name in ("queries.jsonl", "queries.jsonl.gz")]
        queries = queries if queries is not None else next((p for p in beside if p.is_file()), None)
    query_texts = None
    if queries is not None:
        wanted = set(scored.query_ids)
        found = {qid: text for _, qid, text in read_queries(queries) if qid in wanted}
        query_texts = [found.get(q, "") for q in scored.query_ids]
    return drill_down(scored.query_ids, doc_ids, scored.doc_idx, scored.qrels, k, relevance_level, query_texts,
                      doc_texts)

"""A TREC run scored against qrels: read, map ids, order ties, evaluate.

``score_files`` is ``python -m pipeline.cli score`` without its printing; ``pipeline.compare``
scores run files with it, and the drill-down reads its :class:`Scored`.

Query set: the judged queries of the qrels (like ``trec_eval -c``): a judged query missing
from the run scores 0 (counted: the caller warns); run queries without judgments are
ignored and counted. Nothing is computed from nothing: a run none of whose queries is
judged, or none of whose documents the qrels name (a run for another query set or
collection), and qrels with no relevant document at ``relevance_level`` are InputErrors.

Ordering within a query (the tie rules of ``pipeline.io.formats``): ``file_order`` keeps
tied scores in the run file's order; ``docid_desc`` re-sorts them by document id
descending, as trec_eval does. (``doc_index`` needs a corpus.)

K beyond the run: metrics are computed up to the run's depth or the most relevant
documents any query has, whichever is larger; beyond that nothing changes but precision's
denominator, so :meth:`Scored.values` derives every larger K exactly (precision_at_K =
hits / K, every other family keeps its last value), whatever the K asked for.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.formats import (TIE_BREAKS_WITHOUT_CORPUS, QrelsFile, RunFile, grade_line, read_qrels, read_run,
                                 tie_break_rule, to_numpy)
from pipeline.metrics import EXP_GAIN_LIMIT, Evaluation, Qrels, check_gain_overflow, evaluate, unevaluable
from pipeline.ranking import rows_to_ranking


@dataclass(frozen=True)
class Scored:
    """The evaluation of a run file: per-query values of every metric at every K up to
    ``k_max`` (rows in ``query_ids`` order), the ranking scored and the qrels it used."""

    query_ids: list[str]
    evaluation: Evaluation  # computed up to evaluation.k_max <= k_max (see the module docstring)
    n_run_queries_unjudged: int  # queries in the run that have no judgments (ignored)
    k_max: int = 0  # the K asked for; values beyond evaluation.k_max are derived (``values``)
    doc_idx: NDArray[np.int64] | None = None  # the ranking scored (row = query_ids), for the drill-down
    qrels: Qrels | None = None
    doc_vocab: Callable[[], pa.Array] | None = None  # the ids doc_idx and qrels index (made on demand)
    n_judged_without_results: int = 0  # judged queries the run has no result for (scored 0)

    def overlap_warning(self) -> str | None:
        """One line with the counts when the run has results for only some judged queries."""
        missing, n = self.n_judged_without_results, len(self.query_ids)
        if not missing:
            return None
        return (f"warning: the run has results for {n - missing} of the {n} judged queries; the other {missing} "
                "score 0 (as trec_eval -c)")

    def qrels_digest(self) -> str | None:
        """:func:`qrels_digest` of the judgments this run was scored against."""
        if self.qrels is None or self.doc_vocab is None:
            return None
        docs = self.doc_vocab().to_pylist()
        return qrels_digest((self.query_ids[q] for q in self.qrels.query_idx.tolist()),
                            (docs[d] for d in self.qrels.doc_idx.tolist()), self.qrels.grade.tolist())

    def values(self, family: str, k: int) -> NDArray[np.float64]:
        """Per-query ``family`` at cut-off ``k``, 1 <= k <= k_max (beyond the computed depth: the module docstring)."""
        ev = self.evaluation
        if not 1 <= k <= max(self.k_max, ev.k_max):
            raise ValueError(f"K={k} is outside 1..k_max={max(self.k_max, ev.k_max)}")
        if k <= ev.k_max:
            return ev.values(family)[:, k - 1]
        last = ev.values(family)[:, ev.k_max - 1]
        if family == "precision":
            hits = np.rint(last * ev.k_max).astype(np.int64)  # the integer count, exactly
            return hits / np.float64(k)
        return last

    def means(self, ks: Sequence[int]) -> dict[str, float]:
        """As ``Evaluation.means(ks)``, for any K up to k_max."""
        ev = self.evaluation
        computed = ev.means([k for k in ks if k <= ev.k_max])
        beyond = [k for k in ks if k > ev.k_max]
        mask = ev.evaluated
        out: dict[str, float] = {}
        for family in ev.families():
            if beyond:
                # The same reduction as Evaluation.curve (a column mean over a 2-D array).
                block = np.stack([self.values(family, k) for k in beyond] + [np.zeros(len(mask))], axis=1)
                derived = block[mask].mean(axis=0) if mask.any() else np.zeros(block.shape[1])
                derived_at = dict(zip(beyond, derived.tolist()))
            for k in ks:
                key = f"{family}_at_{k}"
                out[key] = computed[key] if k <= ev.k_max else float(derived_at[k])
        for key in (*ev.full, "n_queries", "n_queries_no_relevant"):
            out[key] = computed[key]
        return out

    def per_query(self, ks: Sequence[int]) -> dict[str, object]:
        """The per-query table at ``ks`` as columns."""
        ev = self.evaluation
        table: dict[str, object] = {"query_id": list(self.query_ids)}
        for family in ev.families():
            table.update((f"{family}_at_{k}", self.values(family, k)) for k in ks)
        table.update(ev.full)
        table.update(n_relevant=ev.n_relevant, evaluated=ev.evaluated)
        return table


def rank_run(run: RunFile, qrels_file: QrelsFile,
             tie_break: str = "file_order") -> tuple[list[str], NDArray[np.int64], Qrels, int]:
    """Turn string-keyed run and qrels into the arrays ``metrics.evaluate`` takes.

    Returns (judged query ids sorted, doc_idx [n_queries, depth] in rank order with -1
    padding, Qrels, number of run queries without judgments). Ids are matched through
    pyarrow hash tables on the distinct values only; rows are handled as integer codes.
    """
    tie_break = tie_break_rule(tie_break, TIE_BREAKS_WITHOUT_CORPUS)
    judged = pc.unique(qrels_file.query)
    query_ids = pc.take(judged, pc.array_sort_indices(judged))
    vocab = doc_vocab(qrels_file.doc, run.doc_dict, tie_break)
    qrels = Qrels(query_idx=_index_in(qrels_file.query, query_ids), doc_idx=_index_in(qrels_file.doc, vocab),
                  grade=qrels_file.grades)
    run_q = _index_in(run.query_dict, query_ids)[run.query_codes]  # -1: query without judgments
    run_docs = _index_in(run.doc_dict, vocab)[run.doc_codes]
    n_unjudged = int((_index_in(run.query_dict, query_ids) < 0).sum())
    rows = np.flatnonzero(run_q >= 0)
    run_q, run_docs, scores = run_q[rows], run_docs[rows], run.scores[rows]
    tie = -run_docs if tie_break == "docid_desc" else None  # None: file order
    doc_idx = rows_to_ranking(run_q, run_docs, scores, len(query_ids), tie=tie).doc_idx
    return query_ids.to_pylist(), doc_idx, qrels, n_unjudged


def doc_vocab(qrels_docs: pa.Array, run_docs: pa.Array, tie_break: str = "file_order") -> pa.Array:
    """One document vocabulary for the qrels' and the run's document ids (``rank_run``'s
    document indices); sorted when ids break ties (byte order = strcmp)."""
    vocab = pc.unique(pa.concat_arrays([qrels_docs, run_docs]))
    if tie_break_rule(tie_break, TIE_BREAKS_WITHOUT_CORPUS) == "docid_desc":
        vocab = pc.take(vocab, pc.array_sort_indices(vocab))
    return vocab


def _index_in(values: pa.Array, value_set: pa.Array) -> NDArray[np.int64]:
    """Position of each value in ``value_set`` (-1 when absent)."""
    return to_numpy(pc.index_in(values, value_set=value_set), fill=-1).astype(np.int64)  # to_numpy: no pandas


def qrels_digest(query_ids: Iterable[str], doc_ids: Iterable[str], grades: Iterable[int]) -> str:
    """sha256 of judgments as a set of (query id, document id, grade) in sorted order: the same
    judgments give the same digest whatever file, format or line order they came from (a
    comparison checks with it that its systems were scored against the same qrels)."""
    h = hashlib.sha256()
    for q, d, g in sorted(set(zip(map(str, query_ids), map(str, doc_ids), map(int, grades)))):
        h.update(b"%d:%s%d:%s%d;" % (len(q), q.encode("utf-8", "surrogatepass"), len(d),
                                      d.encode("utf-8", "surrogatepass"), g))
    return h.hexdigest()


def check_overlap(run: RunFile, qrels_file: QrelsFile, n_unjudged: int, where: str) -> None:
    """InputError when the run cannot be about these qrels: none of its queries is judged, or
    none of its documents is named by the qrels (a run for another query set or collection)."""
    n_run = len(run.query_dict)
    if n_run and n_unjudged == n_run:
        raise InputError(f"none of the run's {n_run} queries has judgments in the qrels (run: "
                         f"{_examples(run.query_dict)}; qrels: {_examples(pc.unique(qrels_file.query))}): "
                         "a run for another query set?", where)
    if len(run.doc_dict) and not pc.any(pc.is_in(run.doc_dict, value_set=qrels_file.doc)).as_py():
        raise InputError(f"none of the run's {len(run.doc_dict)} documents is judged in the qrels (run: "
                         f"{_examples(run.doc_dict)}; qrels: {_examples(pc.unique(qrels_file.doc))}): "
                         "a run for another collection?", where)


def _examples(ids: pa.Array, n: int = 3) -> str:
    return "e.g. " + ", ".join(repr(str(v)) for v in ids.slice(0, n).to_pylist())


def score_files(qrels_path: str, run_path: str, k_max: int, gain: str = "exp", relevance_level: int = 1,
                tie_break: str = "file_order", judged_only: bool = False) -> Scored:
    """Read, rank and evaluate; InputError for bad files, for a run that does not overlap the
    qrels and for qrels with no relevant document (see the module docstring)."""
    return score_parsed(read_qrels(qrels_path), read_run(run_path), k_max, gain, relevance_level, tie_break,
                        judged_only, qrels_where=qrels_path, run_where=run_path)


def score_parsed(qrels_file: QrelsFile, run: RunFile, k_max: int, gain: str = "exp", relevance_level: int = 1,
                 tie_break: str = "file_order", judged_only: bool = False, *, qrels_where: str,
                 run_where: str) -> Scored:
    """:func:`score_files` on qrels and a run already read (files, or the Python API's dicts
    and DataFrames); ``qrels_where`` and ``run_where`` are what errors name (a path, or a
    description such as ``run dict``)."""
    query_ids, doc_idx, qrels, unjudged = rank_run(run, qrels_file, tie_break)
    check_overlap(run, qrels_file, unjudged, run_where)
    if problem := unevaluable(qrels, len(query_ids), relevance_level):
        raise InputError(problem, qrels_where)
    try:
        check_gain_overflow(qrels, len(query_ids), gain)  # type: ignore[arg-type]
    except ValueError as err:
        top = int(np.maximum(qrels.grade, 0).max())
        path = Path(qrels_where)
        line = grade_line(path, min(top, EXP_GAIN_LIMIT)) if path.is_file() else None
        raise InputError(str(err), qrels_where, line) from None
    k_eval = min(k_max, computed_depth(doc_idx, qrels))
    evaluation = evaluate(doc_idx, qrels, k_max=k_eval, gain=gain,  # type: ignore[arg-type]
                          relevance_level=relevance_level, judged_only=judged_only)
    qrels_docs, run_docs = qrels_file.doc, run.doc_dict  # not the whole files: the vocabulary is made on demand
    return Scored(query_ids, evaluation, unjudged, k_max, doc_idx, qrels,
                  lambda: doc_vocab(qrels_docs, run_docs, tie_break),
                  int((doc_idx[:, 0] < 0).sum()) if doc_idx.shape[1] else len(query_ids))


def computed_depth(doc_idx: NDArray[np.int64], qrels: Qrels) -> int:
    """The K beyond which only precision changes: the run's depth or the most judged
    documents with a positive grade of any query (the ideal DCG grows until then)."""
    positive = qrels.grade > 0
    most_judged = int(np.bincount(qrels.query_idx[positive]).max()) if positive.any() else 0
    return max(1, doc_idx.shape[1], most_judged)

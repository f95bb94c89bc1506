"""``pipeline.evaluate``: ``python -m pipeline.cli score QRELS RUN --json --per-query`` in this
process, on files, dicts or DataFrames (``pipeline.api.inputs``), returning an
:class:`EvaluationResult` (the means, the per-query table, BCa CIs, ``to_trec``).

The numbers are the command's: the same readers' rules, then the steps of
``pipeline.io.scored.score_files`` after its reading (:func:`score_parsed`), then the same
``Scored.means`` / ``per_query``. Tie rule: ``file_order`` (default) keeps tied scores in the
input's order (a file's lines, a dict's insertion order, a DataFrame's rows); ``docid_desc``
re-sorts them by document id descending (trec_eval's rule).
"""

from __future__ import annotations

import html
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pyarrow.compute as pc
from numpy.typing import NDArray

from pipeline import stats
from pipeline.api.inputs import Source, is_path, read_qrels_source, read_run_source, where
from pipeline.comparison.systems import DEFAULT_METRICS
from pipeline.errors import InputError
from pipeline.io.formats import TIE_BREAKS_WITHOUT_CORPUS, RunFile, tie_break_rule, write_run
from pipeline.io.scored import Scored, score_parsed
from pipeline.metrics import FULL_DEPTH, judged_warning, parse_key
from pipeline.ranking import rows_to_ranking

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: ``python -m pipeline.cli score``'s default cut-offs.
SCORE_KS = (1, 3, 5, 10, 20, 100)


@dataclass
class EvaluationResult:
    """A run scored against qrels: what ``python -m pipeline.cli score --json --per-query`` prints.

    ``means`` is the command's JSON (every family at ``ks``, ``mrr``, ``map``, ``bpref``,
    ``n_queries``, ``n_queries_no_relevant``, ``judged_only``); ``per_query`` its per-query
    table (index ``query_id``; every judged query, ``evaluated`` says which count in the
    means); ``metrics`` the keys :meth:`summary` and ``repr`` show with their BCa CIs;
    ``notes`` what the command prints on standard error; ``logged`` those of them that
    ``evaluate`` already showed as WARNING log records, which ``repr`` does not repeat.
    ``mrr``, ``map`` and ``bpref`` are at the run's full depth (:attr:`depth` results per
    query), which ``repr`` names: a run cut at 10 and the same run at 20 differ there."""

    name: str
    means: dict[str, float]
    per_query: "pd.DataFrame"
    metrics: list[str]
    ks: list[int]
    settings: dict[str, Any]
    notes: list[str]
    scored: Scored = field(repr=False)
    run: RunFile = field(repr=False)
    _summary: Any = field(default=None, repr=False)
    logged: list[str] = field(default_factory=list, repr=False)

    @property
    def depth(self) -> int:
        """The run's depth: the most results of any query, the cut-off of ``mrr``, ``map``, ``bpref``."""
        doc_idx = self.scored.doc_idx
        return int(doc_idx.shape[1]) if doc_idx is not None else int(self.scored.evaluation.k_max)

    def label(self, metric: str) -> str:
        """How ``repr`` names a metric: a full-depth one with its depth (``mrr (depth 20)``)."""
        return f"{metric} (depth {self.depth})" if metric in FULL_DEPTH else metric

    def values(self, metric: str) -> "pd.Series":
        """Per-query values of ``metric`` (any key up to ``k_max``) of the evaluated queries."""
        import pandas as pd

        family, k = _metric(metric)
        ev = self.scored.evaluation
        if k is not None and not 1 <= k <= self.scored.k_max:
            raise InputError(f"{metric} is beyond k_max={self.scored.k_max}: evaluate(..., k_max={k})")
        data = ev.full[family] if k is None else self.scored.values(family, k)
        mask = np.asarray(ev.evaluated, bool)
        ids = [q for q, keep in zip(self.scored.query_ids, mask) if keep]
        return pd.Series(np.asarray(data, np.float64)[mask], index=pd.Index(ids, name="query_id"), name=metric)

    def curve(self, family: str) -> NDArray[np.float64]:
        """Mean of ``family`` at K = 1..k_max (the job's ``curve/<family>``)."""
        return np.array([self.scored.means([k])[f"{family}_at_{k}"] for k in range(1, self.scored.k_max + 1)])

    def summary(self, metrics: Sequence[str] | None = None, *, confidence: float = 0.95, n_resamples: int = 10_000,
                seed: int = 0) -> "pd.DataFrame":
        """Mean and BCa bootstrap CI of each metric over the evaluated queries: the interval
        a job logs for its objective and ``pipeline.compare`` gives each system (same seed,
        same resamples, ``pipeline.stats.bootstrap_ci``)."""
        import pandas as pd

        default = metrics is None and (confidence, n_resamples, seed) == (0.95, 10_000, 0)
        if default and self._summary is not None:
            return self._summary
        keys = list(metrics or self.metrics)
        x = np.stack([self.values(m).to_numpy() for m in keys])
        lo, hi = (x.mean(axis=1), x.mean(axis=1)) if x.shape[1] < 2 else stats.bootstrap_ci(
            x, method="BCa", confidence=confidence, n_resamples=n_resamples, seed=seed)
        table = pd.DataFrame({"mean": x.mean(axis=1), "ci_low": lo, "ci_high": hi}, index=pd.Index(keys, name="metric"))
        if default:
            self._summary = table
        return table

    def to_trec(self, path: str | os.PathLike, tag: str | None = None) -> Path:
        """Write the run as a TREC run file, every query of it, each in the order scored
        (``settings["tie_break"]``); scores as ``write_run`` writes them (each float64 exactly,
        or 9 digits when all are float32 values), so any reader, under either tie rule, orders
        them as they were. Returns the path."""
        run = self.run
        tie = None
        if self.settings["tie_break"] == "docid_desc":
            rank = np.empty(len(run.doc_dict), np.int64)
            rank[pc.array_sort_indices(run.doc_dict).to_numpy()] = np.arange(len(run.doc_dict))
            tie = -rank[run.doc_codes]
        # The ranking of row numbers: the run's own ordering function, scores as given (float64).
        rows = rows_to_ranking(run.query_codes, np.arange(len(run.scores)), run.scores, len(run.query_dict),
                               tie=tie).doc_idx
        valid = rows >= 0
        docs = np.where(valid, run.doc_codes[np.maximum(rows, 0)], -1)
        scores = np.where(valid, run.scores[np.maximum(rows, 0)], -np.inf)
        write_run(path, run.query_dict.to_pylist(), run.doc_dict.to_pylist(), docs, scores,
                  tag or run.tag or self.name)
        return Path(path)

    def _lines(self) -> list[str]:
        s = self.settings
        head = (f"{self.name}: {int(self.means['n_queries'])} queries evaluated "
                f"({int(self.means['n_queries_no_relevant'])} without relevant documents left out); gain={s['gain']}, "
                f"relevance_level={s['relevance_level']}, tie_break={s['tie_break']}"
                + (", judged_only" if s["judged_only"] else ""))
        table = self.summary()
        rows = [f"  {self.label(str(m)):<22} {r['mean']:.4f}  [{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
                for m, r in table.iterrows()]
        return [head, f"  {'metric':<22} mean    [95% BCa CI]", *rows, *self._unlogged()]

    def _unlogged(self) -> list[str]:
        """The notes ``evaluate`` did not already show as a warning (each is said once)."""
        return [note for note in self.notes if note not in self.logged]

    def __repr__(self) -> str:
        return "\n".join(self._lines())

    def _repr_html_(self) -> str:
        lines = self._lines()
        table = self.summary().rename(index=self.label).to_html(float_format=lambda v: f"{v:.4f}")
        notes = "".join(f"<br><small>{html.escape(n)}</small>" for n in self._unlogged())
        return f"<p><b>{html.escape(lines[0])}</b></p>{table}{notes}"


def _metric(key: str) -> tuple[str, int | None]:
    try:
        return parse_key(key)
    except ValueError as err:
        raise InputError(str(err), "metrics") from None


def _cutoffs(metrics: Sequence[str] | None) -> tuple[list[str], list[int]]:
    """(headline keys, the cut-offs of the means): the command's default cut-offs without metrics."""
    if metrics is None:
        return list(DEFAULT_METRICS), list(SCORE_KS)
    if isinstance(metrics, str):
        metrics = [metrics]
    keys = list(dict.fromkeys(metrics))
    if not keys:
        raise InputError("no metric asked for", "metrics")
    ks = sorted({k for _, k in map(_metric, keys) if k is not None})
    return keys, ks or [10]


def evaluate(qrels: Source, run: Source, metrics: Sequence[str] | None = None, *, k_max: int | None = None,
             gain: str = "exp", relevance_level: int = 1, judged_only: bool = False,
             tie_break: str = "file_order", name: str | None = None) -> EvaluationResult:
    """Score ``run`` against ``qrels``: ``python -m pipeline.cli score QRELS RUN --json --per-query``.

    ``metrics``: keys (``ndcg_at_10``, ``recall_at_100``, ``map``...): the means hold every
    family at their cut-offs, as ``--k`` does; None: the command's default cut-offs (1, 3, 5,
    10, 20, 100) and ``ndcg_at_10``, ``recall_at_10``, ``mrr`` as the headline. ``k_max``:
    every K up to it is available (:meth:`EvaluationResult.values`, ``curve``); default: the
    largest cut-off. ``gain="linear"`` with ``tie_break="docid_desc"`` gives trec_eval's
    (pytrec_eval's) numbers. See the module docstring for the inputs and their tie order."""
    import pandas as pd

    headline, ks = _cutoffs(metrics)
    k_max = max(ks) if k_max is None else int(k_max)
    if k_max < max(ks):
        raise InputError(f"k_max {k_max} is smaller than the largest cut-off {max(ks)}", "k_max")
    if relevance_level < 1:
        raise InputError(f"relevance_level must be >= 1, got {relevance_level}", "relevance_level")
    if gain not in ("exp", "linear"):
        raise InputError(f"gain must be 'exp' or 'linear', got {gain!r}", "gain")
    try:
        tie_break = tie_break_rule(tie_break, TIE_BREAKS_WITHOUT_CORPUS)
    except ValueError as err:
        raise InputError(str(err), "tie_break") from None
    qrels_file, run_file = read_qrels_source(qrels), read_run_source(run)
    qrels_where, run_where = where(qrels, "qrels"), where(run, "run")
    try:
        scored = score_parsed(qrels_file, run_file, k_max, gain, relevance_level, tie_break, judged_only,
                              qrels_where=qrels_where, run_where=run_where)
    except ValueError as err:  # the computing code's word for a bad argument
        raise InputError(str(err)) from err
    means: dict[str, Any] = {**scored.means(ks), "judged_only": bool(judged_only)}
    ev = scored.evaluation
    columns = ["query_id", *[f"{f}_at_{k}" for f in ev.families() for k in ks], *ev.full, "n_relevant", "evaluated"]
    table = pd.DataFrame(scored.per_query(ks))[columns].set_index("query_id")
    if not all(math.isfinite(float(v)) for v in means.values()):
        raise InputError("a metric is not a finite number (grades too large for the gain? try gain='linear')")
    notes = _notes(scored, means, k_max, judged_only)
    logged = []
    for note in notes:  # the command's standard error: warnings shown (once: repr leaves them out), notes in the log
        level = logging.WARNING if note.startswith("warning") else logging.INFO
        if level == logging.WARNING and log.isEnabledFor(level):
            logged.append(note)
        log.log(level, "%s", note)
    name = name or (Path(str(run)).name if is_path(run) else "run")
    settings = {"gain": gain, "relevance_level": relevance_level, "tie_break": tie_break,
                "judged_only": bool(judged_only), "k_max": k_max, "qrels": qrels_where, "run": run_where}
    return EvaluationResult(name, means, table, headline, ks, settings, notes, scored, run_file, logged=logged)


def _notes(scored: Scored, means: dict[str, Any], k_max: int, judged_only: bool) -> list[str]:
    """What ``pipeline.score`` prints on standard error, in its words."""
    notes = []
    if scored.evaluation.k_max < k_max:
        notes.append(f"note: computed K = 1..{scored.evaluation.k_max} (the run's depth, or the most relevant "
                     f"documents of a query); beyond it only precision changes (hits / K), so K up to {k_max} is exact")
    if judged_only:
        notes.append("note: judged_only: condensed lists (unjudged documents removed before scoring, trec_eval -J); "
                     "not comparable with scores of the full rankings")
    if warning := judged_warning(means):
        notes.append(warning)
    overlap = getattr(scored, "overlap_warning", None)
    if overlap is not None and (warning := overlap()):
        notes.append(warning)
    if scored.n_run_queries_unjudged:
        notes.append(f"note: {scored.n_run_queries_unjudged} queries of the run have no judgments and were ignored")
    return notes


"""What ``python -m pipeline.cli score`` prints: the means table, the per-query tables and
the drill-down, or all of it as JSON; and the notes on what the numbers alone do not say.

The numbers are ``pipeline.io.scored``'s (the run scored against the qrels with the
pipeline's metric definitions); this module only lays them out. Every number printed is
finite: NaN or Infinity is an InputError (``--json`` is always valid JSON).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import InputError
from pipeline.io import drilldown
from pipeline.io.scored import Scored, score_files
from pipeline.metrics import FULL_DEPTH, Evaluation, judged_warning


@dataclass(frozen=True)
class ScoreOptions:
    """How to score and what to show (the command's options)."""

    ks: Sequence[int]
    k_max: int
    gain: str = "exp"
    relevance_level: int = 1
    tie_break: str = "file_order"
    judged_only: bool = False
    per_query: bool = False
    all_columns: bool = False
    json: bool = False
    top_k: int = 10
    corpus: str | Path | None = None
    queries: str | Path | None = None


def score_report(qrels: str | Path, run: str | Path,
                 options: ScoreOptions) -> tuple[Scored, dict[str, float], str]:
    """Score the run file against the qrels file; returns the scored run, its means at
    ``options.ks`` and the text to print. A bad file or setting is an InputError."""
    ks, k_max = options.ks, options.k_max
    narrow = options.per_query and not (options.json or options.all_columns)
    try:  # the narrow table is at --top-k, which may lie past the largest --k (same numbers at every K)
        scored = score_files(qrels, run, max(k_max, options.top_k) if narrow else k_max, options.gain,
                             options.relevance_level, options.tie_break, judged_only=options.judged_only)
    except ValueError as err:  # the computing code's word for a bad argument
        raise InputError(str(err)) from err
    ev = scored.evaluation
    means = scored.means(ks)
    means["judged_only"] = bool(options.judged_only)  # a condensed-list score says so in its output
    table = drill = None
    if options.per_query:
        import pandas as pd

        table = pd.DataFrame(scored.per_query(ks))[["query_id", *[f"{f}_at_{k}" for f in ev.families() for k in ks],
                                                    *ev.full, "n_relevant", "evaluated"]]
        drill = drilldown.of_scored(scored, options.top_k, options.relevance_level, options.corpus, options.queries)
        if narrow:  # the narrow table's numbers, at the drill-down's cut-off
            k = options.top_k
            table = pd.DataFrame({"query_id": scored.query_ids, f"ndcg_at_{k}": scored.values("ndcg", k),
                                  f"recall_at_{k}": scored.values("recall", k), "mrr": ev.full["mrr"],
                                  "evaluated": ev.evaluated})
    return scored, means, _render(options, means, ks, ev, table, drill)


def format_table(means: dict[str, float], ks: Sequence[int], families: Sequence[str]) -> str:
    head = f"{'metric':<10}" + "".join(f"{'@' + str(k):>10}" for k in ks)
    lines = [head, "-" * len(head)]
    lines += [f"{family:<10}" + "".join(f"{means[f'{family}_at_{k}']:>10.4f}" for k in ks) for family in families]
    lines += ["", *(f"{key:<22}{means[key]:.4f}" for key in FULL_DEPTH if key in means)]
    lines += [f"{key:<22}{means[key]}" for key in ("n_queries", "n_queries_no_relevant")]
    if means.get("judged_only"):
        lines.append("judged_only: condensed lists, unjudged documents removed before scoring (trec_eval -J)")
    return "\n".join(lines)


#: The narrow per-query table fits a terminal this wide (the query text is cut to fit).
NARROW_WIDTH = 120
#: Query ids longer than this are cut in the narrow table (--all-columns and --json keep them whole).
NARROW_ID_CHARS = 24


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def narrow_table(table, drill) -> str:
    """The default ``--per-query`` table: a few lines saying what it shows and what a failure
    is, then one row per query at the drill-down's K (ndcg, recall, mrr, first relevant rank,
    R, judged share, query text), failures first (worst first, as ``failures.md``), then the
    other evaluated queries by ndcg_at_K (lowest first, then query id), then the queries that
    are not evaluated (R = 0: no document graded >= the relevance level; left out of the means)."""
    k, level = drill.k, drill.relevance_level
    ndcg, recall, mrr = (table[c].to_numpy() for c in (f"ndcg_at_{k}", f"recall_at_{k}", "mrr"))
    evaluated = table["evaluated"].to_numpy(dtype=bool)
    failures = drill.failures()
    failing = set(failures)
    rest = sorted((q for q in range(len(table)) if evaluated[q] and q not in failing), key=lambda q: (ndcg[q], q))
    order = failures + rest + [q for q in range(len(table)) if not evaluated[q] and q not in failing]
    first, n_rel, judged = drill.first_relevant, drill.n_relevant, drill.judged_at_k

    def number(values, q: int) -> str:
        return f"{values[q]:.4f}" if evaluated[q] else "-"

    columns = [("query_id", [_cut(str(drill.query_ids[q]), NARROW_ID_CHARS) for q in order], "<"),
               *((name, [number(v, q) for q in order], ">")
                 for name, v in ((f"ndcg_at_{k}", ndcg), (f"recall_at_{k}", recall), ("mrr", mrr))),
               ("first_rel", [str(int(first[q])) if first[q] else "-" for q in order], ">"),
               ("R", [str(int(n_rel[q])) for q in order], ">"),
               (f"judged_at_{k}", [f"{judged[q]:.4f}" for q in order], ">")]
    widths = [max([len(name), *map(len, cells)]) for name, cells, _ in columns]
    rows = [[f"{name:{align}{w}}" for (name, _, align), w in zip(columns, widths)]]
    rows += [[f"{cells[i]:{align}{w}}" for (_, cells, align), w in zip(columns, widths)] for i in range(len(order))]
    if drill.query_texts is not None:  # the rest of the width goes to the query text
        room = max(NARROW_WIDTH - sum(widths) - 2 * len(widths), 12)
        texts = [" ".join(str(drill.query_texts[q]).split()) for q in order]
        rows = [row + [_cut(text, room)] for row, text in zip(rows, ["query", *texts])]
    lines = ["  ".join(row).rstrip() for row in rows]
    n_evaluated = int(evaluated.sum())
    share = f" ({len(failures) / n_evaluated:.1%})" if n_evaluated else ""
    head = [f"Per query at K = {k} (--top-k): failures first, worst first; then the other queries by ndcg_at_{k}, "
            "lowest first",
            f"failure: no document graded >= {level} in the top {k}: {len(failures)} of {n_evaluated} evaluated "
            f"queries{share}",
            "first_rel: rank of the first relevant document (- = none retrieved); R: judged relevant documents "
            "(0: not evaluated)",
            "every metric at every --k: --all-columns; every field: --json"
            + ("" if drill.query_texts is not None else "; query texts: --queries FILE (JSONL or TSV id, text)"),
            ""]
    return "\n".join([*head, lines[0], "-" * len(lines[0]), *lines[1:]])


def _render(options: ScoreOptions, means: dict[str, float], ks: Sequence[int], ev: Evaluation, table,
            drill=None) -> str:
    """What main prints; InputError instead of NaN or Infinity (never invalid JSON)."""
    values = [float(v) for v in means.values()]
    if table is not None:
        values += table.select_dtypes("number").to_numpy(dtype=np.float64).ravel().tolist()
    if not np.all(np.isfinite(np.asarray(values, dtype=np.float64))):
        raise InputError("a metric is not a finite number (grades too large for the gain? try --gain linear)")
    if options.json:
        payload = means if table is None else {"all": means,
                                               "per_query": table.set_index("query_id").to_dict(orient="index")}
        if drill is not None:  # the drill-down's fields in each query's object, and the failing queries
            for qid, fields in drill.json_rows().items():
                payload["per_query"][qid].update(fields)
            payload["failures"] = [drill.query_ids[q] for q in drill.failures()]
        return json.dumps(payload, allow_nan=False)
    text = ""
    if table is not None and drill is not None and not options.all_columns:
        text = narrow_table(table, drill) + "\n\n"
    elif table is not None:
        import pandas as pd

        if drill is not None:  # the drill-down's numbers (no rank: empty) and a short query text
            new = drill.columns()
            ranks = new["first_relevant_rank"].to_pylist()
            extra = {"first_relevant_rank": ["" if r is None else str(r) for r in ranks],
                     f"judged_at_{drill.k}": new[f"judged_at_{drill.k}"],
                     "query": [t if len(t) <= 40 else t[:39] + "…" for t in new["query"]]}
            table = table.assign(**{name: values for name, values in extra.items() if name not in table})
        with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 200):
            text = table.to_string(index=False, float_format=lambda v: f"{v:.4f}", na_rep="") + "\n\n"
    text += format_table(means, ks, ev.families())
    return text if drill is None else text + "\n\n" + drill.text_report()


def notes(scored: Scored, means: dict[str, float], options: ScoreOptions) -> list[str]:
    """What the numbers alone do not say (for standard error): where computing stopped, a
    condensed-list score, judged coverage, queries the run and the qrels do not share."""
    found = []
    if scored.evaluation.k_max < options.k_max:
        found.append(f"note: computed K = 1..{scored.evaluation.k_max} (the run's depth, or the most relevant "
                     f"documents of a query); beyond it only precision changes (hits / K), so K up to {options.k_max} "
                     "is exact")
    if options.judged_only:
        found.append("note: --judged-only: condensed lists (unjudged documents removed before scoring, trec_eval -J); "
                     "not comparable with scores of the full rankings")
    found += [w for w in (judged_warning(means), scored.overlap_warning()) if w]
    if scored.n_run_queries_unjudged:
        found.append(f"note: {scored.n_run_queries_unjudged} queries of the run have no judgments and were ignored")
    return found

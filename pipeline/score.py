"""Score any TREC run file against qrels: ``python -m pipeline.score QRELS RUN``.

The trec_eval of this project: same metric definitions as the pipeline (README.md,
"Metric definitions"; every run writes them as definition_card.md), every cut-off in one
vectorized pass. More: README.md, "Scoring any run file".

Query set: the judged queries of QRELS (like ``trec_eval -c``): a judged query missing from
the run scores 0; run queries without judgments are ignored and counted on stderr.

Ordering within a query (``--tie-break``, the tie rules of ``pipeline.io.formats``):
  file_order  score descending, ties kept in the run file's order (default; old name: score)
  docid_desc  score descending, then document id descending: trec_eval's own re-sort, so
              runs with tied scores give exactly trec_eval's numbers
(``doc_index`` needs a corpus: score the run with ``retriever=run_file`` for it.)

K beyond the run: metrics are computed up to the run's depth (the most documents any query
retrieved) or the most relevant documents any query has, whichever is larger; beyond that
nothing changes but precision's denominator, so precision_at_K = (# relevant retrieved) / K
and every other family keeps its last value. The numbers are those a computation at every
K would give, bit for bit, in memory and time independent of --k-max (a note on stderr says
where computing stopped).

Nothing from nothing: a run none of whose queries is judged in QRELS, or none of whose
documents QRELS names, and QRELS without a document graded >= --relevance-level are errors
(exit status 2); a run with results for only some judged queries gets one warning line.

Incomplete judgments: judged_at_K (the share of the top K that the qrels grade, >= 0) and
bpref (Buckley & Voorhees 2004, trec_eval's) are always reported; a note on stderr warns when
the mean judged_at_10 is below 0.9 (the other numbers are then biased low: pool the run).
--judged-only scores condensed lists (unjudged documents removed first, trec_eval -J); the
output then says "judged_only": true.

Per query (--per-query): a narrow table at K = --top-k (default 10): ndcg_at_K, recall_at_K, mrr,
the first relevant rank, R, judged_at_K and the query text (--queries FILE, or queries.jsonl
beside --corpus), failures first (a failure: an evaluated query with no document graded >=
--relevance-level in the top K), then the other queries by ndcg_at_K, lowest first; then each
query's top K and the failures in full. --all-columns prints every metric at every --k instead.

QRELS or RUN may be - (standard input) or a pipe (<(zcat run.gz)): it is read once.
With gain=exp a grade >= 1024 (2^g - 1 overflows a 64-bit float) is an error naming the
qrels line; use --gain linear for such scales. --json output is always valid JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import numpy as np

from pipeline.errors import InputError, bounded_int
from pipeline.io.formats import TIE_BREAKS_WITHOUT_CORPUS, tie_break_rule
from pipeline.io.scored import Scored, score_files
from pipeline.metrics import FULL_DEPTH, Evaluation, judged_warning


#: The most documents --per-query shows per query: the drill-down holds a (queries x N) table,
#: and trec_eval's runs are 1000 deep.
MAX_TOP_K = 10_000


def _parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k expects integers separated by commas, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError(f"--k values must be >= 1, got {text!r}")
    return ks


def _parse_tie_break(text: str) -> str:
    try:
        return tie_break_rule(text, TIE_BREAKS_WITHOUT_CORPUS)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.score", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Score a TREC run file against qrels with the pipeline's metric definitions.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    parser.add_argument("qrels", help="TREC qrels (qid iter docid grade) or BEIR qrels/*.tsv; .gz accepted")
    parser.add_argument("run", help="TREC run (qid Q0 docid rank score tag); .gz accepted")
    parser.add_argument("--k", type=_parse_ks, default=[1, 3, 5, 10, 20, 100],
                        help="cut-offs to report (default 1,3,5,10,20,100)")
    parser.add_argument("--k-max", type=int, default=None, help="compute every K up to this (default: the largest --k)")
    parser.add_argument("--gain", choices=("exp", "linear"), default="exp",
                        help="nDCG gain: 2^rel-1 (exp) or rel (linear = trec_eval)")
    parser.add_argument("--relevance-level", type=int, default=1,
                        help="grade at which a document counts as relevant (default 1)")
    parser.add_argument("--tie-break", type=_parse_tie_break, default="file_order",
                        metavar="{" + ",".join(TIE_BREAKS_WITHOUT_CORPUS) + "}",
                        help="order of tied scores: file_order (default) or docid_desc (trec_eval's); see below")
    parser.add_argument("--per-query", action="store_true",
                        help="also report every query: a narrow table (nDCG, recall and MRR at --top-k, first "
                             "relevant rank, R, judged share, query text) with the failing queries (none relevant "
                             "in the top --top-k) first, then the drill-down: top documents (id, grade) per query "
                             "and the failures")
    parser.add_argument("--all-columns", action="store_true",
                        help="with --per-query: the wide table instead (every metric at every --k, one column "
                             "each, in query id order); implies --per-query; --json has every column anyway")
    parser.add_argument("--top-k", type=bounded_int(1, MAX_TOP_K), default=10, metavar="N",
                        help="documents shown per query by --per-query, and the cut-off of its judged share and "
                             f"failures (default 10; at most {MAX_TOP_K:,})")
    parser.add_argument("--corpus", metavar="CORPUS", help="corpus (BEIR corpus.jsonl[.gz] or TSV id[, title], "
                        "text): adds a snippet of each document's text to the drill-down; implies --per-query")
    parser.add_argument("--queries", metavar="QUERIES", help="queries (JSONL _id/text or TSV id, text): adds the "
                        "query texts; default with --corpus: queries.jsonl beside it, if any; implies --per-query")
    parser.add_argument("--judged-only", action="store_true", help="condensed lists: remove unjudged documents from "
                        "each ranking before scoring (trec_eval -J; judged_at_K still describes the full ranking)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    return parser


def _format_table(means: dict[str, float], ks: Sequence[int], families: Sequence[str]) -> str:
    head = f"{'metric':<10}" + "".join(f"{'@' + str(k):>10}" for k in ks)
    lines = [head, "-" * len(head)]
    lines += [f"{family:<10}" + "".join(f"{means[f'{family}_at_{k}']:>10.4f}" for k in ks) for family in families]
    lines += ["", *(f"{key:<22}{means[key]:.4f}" for key in FULL_DEPTH if key in means)]
    lines += [f"{key:<22}{means[key]}" for key in ("n_queries", "n_queries_no_relevant")]
    if means.get("judged_only"):
        lines.append("judged_only: condensed lists, unjudged documents removed before scoring (trec_eval -J)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.per_query = args.per_query or args.all_columns or args.corpus is not None or args.queries is not None
    ks: list[int] = args.k
    k_max = args.k_max if args.k_max is not None else max(ks)
    if problem := _bad_arguments(args, ks, k_max):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        scored, means, output = _score(args, ks, k_max)
    except InputError as err:
        if args.debug:
            raise
        print(str(err), file=sys.stderr)
        return err.exit_code
    # what the numbers alone do not say, on standard error
    if scored.evaluation.k_max < k_max:
        print(f"note: computed K = 1..{scored.evaluation.k_max} (the run's depth, or the most relevant documents of "
              f"a query); beyond it only precision changes (hits / K), so K up to {k_max} is exact", file=sys.stderr)
    if args.judged_only:
        print("note: --judged-only: condensed lists (unjudged documents removed before scoring, trec_eval -J); "
              "not comparable with scores of the full rankings", file=sys.stderr)
    if warning := judged_warning(means):
        print(warning, file=sys.stderr)
    if warning := scored.overlap_warning():
        print(warning, file=sys.stderr)
    if scored.n_run_queries_unjudged:
        print(f"note: {scored.n_run_queries_unjudged} queries of the run have no judgments and were ignored",
              file=sys.stderr)
    print(output)
    return 0


def _bad_arguments(args: argparse.Namespace, ks: Sequence[int], k_max: int) -> str | None:
    """What is wrong with arguments argparse cannot check alone, if anything."""
    if k_max < max(ks):
        return f"--k-max {k_max} is smaller than the largest --k {max(ks)}"
    if args.relevance_level < 1:
        return f"--relevance-level must be >= 1, got {args.relevance_level}"
    if args.qrels == "-" and args.run == "-":
        return "only one of QRELS and RUN can be - (standard input)"
    return None


def _score(args: argparse.Namespace, ks: Sequence[int], k_max: int) -> tuple[Scored, dict[str, float], str]:
    """Score the run; returns it, its means at ``ks`` and the text to print."""
    narrow = args.per_query and not (args.json or args.all_columns)
    try:  # the narrow table is at --top-k, which may lie past the largest --k (same numbers at every K)
        scored = score_files(args.qrels, args.run, max(k_max, args.top_k) if narrow else k_max, args.gain,
                             args.relevance_level, args.tie_break, judged_only=args.judged_only)
    except ValueError as err:  # the computing code's word for a bad argument
        raise InputError(str(err)) from err
    ev = scored.evaluation
    means = scored.means(ks)
    means["judged_only"] = bool(args.judged_only)  # a condensed-list score says so in its output
    table = drill = None
    if args.per_query:
        import pandas as pd

        from pipeline.io import drilldown

        table = pd.DataFrame(scored.per_query(ks))[["query_id", *[f"{f}_at_{k}" for f in ev.families() for k in ks],
                                                    *ev.full, "n_relevant", "evaluated"]]
        drill = drilldown.of_scored(scored, args.top_k, args.relevance_level, args.corpus, args.queries)
        if narrow:  # the narrow table's numbers, at the drill-down's cut-off
            k = args.top_k
            table = pd.DataFrame({"query_id": scored.query_ids, f"ndcg_at_{k}": scored.values("ndcg", k),
                                  f"recall_at_{k}": scored.values("recall", k), "mrr": ev.full["mrr"],
                                  "evaluated": ev.evaluated})
    return scored, means, _render(args, means, ks, ev, table, drill)


#: The narrow per-query table fits a terminal this wide (the query text is cut to fit).
NARROW_WIDTH = 120
#: Query ids longer than this are cut in the narrow table (--all-columns and --json keep them whole).
NARROW_ID_CHARS = 24


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _narrow_table(table, drill) -> str:
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


def _render(args: argparse.Namespace, means: dict[str, float], ks: Sequence[int], ev: Evaluation, table,
            drill=None) -> str:
    """What main prints; InputError instead of NaN or Infinity (never invalid JSON)."""
    values = [float(v) for v in means.values()]
    if table is not None:
        values += table.select_dtypes("number").to_numpy(dtype=np.float64).ravel().tolist()
    if not np.all(np.isfinite(np.asarray(values, dtype=np.float64))):
        raise InputError("a metric is not a finite number (grades too large for the gain? try --gain linear)")
    if args.json:
        payload = means if table is None else {"all": means,
                                               "per_query": table.set_index("query_id").to_dict(orient="index")}
        if drill is not None:  # the drill-down's fields in each query's object, and the failing queries
            for qid, fields in drill.json_rows().items():
                payload["per_query"][qid].update(fields)
            payload["failures"] = [drill.query_ids[q] for q in drill.failures()]
        return json.dumps(payload, allow_nan=False)
    text = ""
    if table is not None and drill is not None and not args.all_columns:
        text = _narrow_table(table, drill) + "\n\n"
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
    text += _format_table(means, ks, ev.families())
    return text if drill is None else text + "\n\n" + drill.text_report()


def cli() -> int:
    """``main()`` for the command line: output cut short by a closed pipe (``| head``) ends
    quietly with status 141 (128 + SIGPIPE, as a process killed by it), no traceback."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout again at exit
        return 141
    return code


if __name__ == "__main__":
    sys.exit(cli())

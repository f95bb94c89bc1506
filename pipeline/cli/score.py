"""Score any TREC run file against qrels: ``python -m pipeline.cli score QRELS RUN``.

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
import sys
from collections.abc import Sequence

from pipeline.cli.runner import PROG, Parser, run
from pipeline.errors import InputError, bounded_int
from pipeline.io.formats import TIE_BREAKS_WITHOUT_CORPUS, tie_break_rule
from pipeline.io.score_report import ScoreOptions, notes, score_report


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


def build_parser() -> Parser:
    parser = Parser(
        prog=f"{PROG} score", formatter_class=argparse.RawDescriptionHelpFormatter,
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


def score(args: argparse.Namespace) -> None:
    """Score the run, print the numbers (standard output) and the notes (standard error)."""
    args.per_query = args.per_query or args.all_columns or args.corpus is not None or args.queries is not None
    k_max = args.k_max if args.k_max is not None else max(args.k)
    if problem := _bad_arguments(args, args.k, k_max):
        raise InputError(problem)
    options = ScoreOptions(ks=args.k, k_max=k_max, gain=args.gain, relevance_level=args.relevance_level,
                           tie_break=args.tie_break, judged_only=args.judged_only, per_query=args.per_query,
                           all_columns=args.all_columns, json=args.json, top_k=args.top_k, corpus=args.corpus,
                           queries=args.queries)
    scored, means, output = score_report(args.qrels, args.run, options)
    for note in notes(scored, means, options):
        print(note, file=sys.stderr)
    print(output)


def _bad_arguments(args: argparse.Namespace, ks: Sequence[int], k_max: int) -> str | None:
    """What is wrong with arguments argparse cannot check alone, if anything."""
    if k_max < max(ks):
        return f"--k-max {k_max} is smaller than the largest --k {max(ks)}"
    if args.relevance_level < 1:
        return f"--relevance-level must be >= 1, got {args.relevance_level}"
    if args.qrels == "-" and args.run == "-":
        return "only one of QRELS and RUN can be - (standard input)"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), score, argv)

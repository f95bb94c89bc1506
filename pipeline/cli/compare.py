"""Compare retrieval systems on the same queries: ``python -m pipeline.cli compare SYSTEM SYSTEM ...``.

The systems (``--help`` lists what a SYSTEM can be), the statistics and the report are
``pipeline.comparison``'s (``compare_sources``); see docs/comparing.md and docs/statistics.md. Writes the report to
``--out``, prints a table (or, with ``--json``, the report and nothing else) on standard
output. Bad input: one line ``error: FILE[:LINE]: problem`` on standard error, exit status
2 (systems scored under different definitions too, unless ``--allow-mixed``); a failing
MLflow store: exit status 3.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Sequence

from pipeline.cli.runner import PROG, Parser, run
from pipeline.comparison import CORRECTIONS, DEFAULT_METRICS, DEFAULT_TRACKING_URI, TESTS, format_table
from pipeline.comparison.output import compare_sources
from pipeline.comparison.verdict import DEFAULT_MARGIN, check_margin
from pipeline.errors import InputError, bounded_int, positive_int
from pipeline.tracking import redact

#: The most bootstrap resamples and permutations: the bootstrap holds 8 bytes per resample for
#: each system and metric (1e6: 8 MB each), and a million draws already fix a p-value or a CI
#: bound to about three digits.
MAX_DRAWS = 1_000_000


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def build_parser() -> Parser:
    parser = Parser(prog=f"{PROG} compare", intermixed=True,
                     description="Compare retrieval systems on the same queries: who is better, by how much and "
                                 "how sure (randomized Tukey HSD over every pair, simultaneous intervals, four words "
                                 "against a practical margin), the systems that could be the best, an answer per "
                                 "factor of a sweep. See docs/comparing.md.")
    parser.add_argument("systems", nargs="+", metavar="SYSTEM", help="a job folder (or its results/), a sweep folder, "
                        "a TREC run file (with --qrels), mlflow:RUN_ID (a job, or a sweep's parent: all its jobs), "
                        "mlflow-experiment:NAME[:FILTER]")
    parser.add_argument("--qrels", help="qrels for TREC run files (TREC or BEIR .tsv; .gz fine)")
    parser.add_argument("--baseline", help="the system the others are compared with and marked against "
                        "(default: the best on each metric)")
    parser.add_argument("--margin", type=_positive_float, default=DEFAULT_MARGIN,
                        help=f"the practical margin, in the metric's units ({DEFAULT_MARGIN:g}): a difference "
                             "whose interval lies inside +-margin is 'equivalent'")
    parser.add_argument("--all-tests", action="store_true", help="add the full table of tests (bootstrap BCa CIs, "
                        "paired t, Wilcoxon, sign and randomization tests adjusted by --correction, effect sizes, "
                        "sensitivity) against --baseline, else the best on the first metric")
    parser.add_argument("--metric", action="append", dest="metrics", metavar="M",
                        help=f"a metric key, repeatable (default: {' '.join(DEFAULT_METRICS)}, and "
                             "context_utility_at_k when the jobs differ only in placement): any per-query metric "
                             "of a job: ndcg_at_10, mrr, ndcg_at_k (each job at its own k), "
                             "context_recall_budget_512 (chunked or budgeted jobs)")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON (nothing else on stdout)")
    parser.add_argument("--out", help="folder for report.md, report.json and figures "
                                      "(default: outputs/compare/<timestamp>)")
    parser.add_argument("--n-resamples", type=bounded_int(1, MAX_DRAWS), default=10_000,
                        help=f"bootstrap resamples (10000; at most {MAX_DRAWS:,})")
    parser.add_argument("--n-permutations", type=bounded_int(1, MAX_DRAWS), default=10_000,
                        help=f"randomization-test sign flips and Tukey HSD permutations (10000; at most {MAX_DRAWS:,})")
    parser.add_argument("--seed", type=bounded_int(0, 2**63 - 1, "a seed"), default=0, help="random seed (0)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    parser.add_argument("--correction", choices=CORRECTIONS, default="holm",
                        help="multiple-comparison correction over all comparisons of all metrics (holm)")
    parser.add_argument("--test", choices=TESTS, default="fisher", help="the test behind the full table's "
                        "significance marks (--all-tests): fisher (randomization, default), t, wilcoxon, sign")
    parser.add_argument("--missing", choices=("error", "zero"), default="error",
                        help="a query one system lacks: an error (default) or a score of 0 (trec_eval -c)")
    parser.add_argument("--delta", type=_positive_float, default=None,
                        help="a difference you care about: its power and the queries it needs")
    parser.add_argument("--allow-mixed", action="store_true", help="compare systems scored under different "
                        "definitions (gain, relevance_level, judged_only, qrels, collection, depth) instead of "
                        "refusing; the report and the table's first line say so")
    parser.add_argument("--gain", choices=("exp", "linear"), default="exp", help="nDCG gain for TREC run files (exp)")
    parser.add_argument("--relevance-level", type=positive_int, default=1, help="relevant grade for TREC run files (1)")
    parser.add_argument("--tracking-uri", default=None, help="the MLflow store for mlflow: systems and --log "
                        f"(default {DEFAULT_TRACKING_URI}; --log on one sweep folder: the sweep's store)")
    parser.add_argument("--filter", default="", help="MLflow filter string for mlflow-experiment: systems, "
                                                     "e.g. \"params.k = '10'\"")
    parser.add_argument("--log", action="store_true", help="put the report on an MLflow run: the sweep's parent run "
                        "when comparing one sweep, else a new run in experiment 'compare'")
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    return parser


def compare(args: argparse.Namespace) -> None:
    """Compare, write (and with --log, log) the report; print the table or the JSON."""
    if not 0 < args.alpha < 1:
        raise InputError(f"--alpha must be between 0 and 1, got {args.alpha}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s", stream=sys.stderr)
    done = compare_sources(args.systems, args.metrics, out=args.out, log=args.log, tracking_uri=args.tracking_uri,
                           qrels=args.qrels, experiment_filter=args.filter, gain=args.gain,
                           relevance_level=args.relevance_level, baseline=args.baseline, test=args.test,
                           correction=args.correction, alpha=args.alpha, n_resamples=args.n_resamples,
                           n_permutations=args.n_permutations, seed=args.seed, missing=args.missing,
                           delta=args.delta, allow_mixed=args.allow_mixed,
                           margin=check_margin(args.margin, "--margin"), all_tests=args.all_tests)
    info = sys.stderr if args.json else sys.stdout
    if done.note:
        print(done.note, file=info)
    print(json.dumps(done.report.data) if args.json else format_table(done.report))
    print(f"report: {done.out.resolve()}", file=info)
    if done.logged:
        where = "the sweep's parent run" if done.logged[2] else "a new run in experiment 'compare'"
        print(f"MLflow: report logged to {where} {done.logged[0]} at {redact(done.logged[1])}", file=info)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), compare, argv)

"""Score any TREC run file against qrels: ``python -m pipeline.score QRELS RUN``.

The trec_eval of this project: same metric definitions as the pipeline (design.md's
definition card), every cut-off in one vectorized pass.

Query set: the judged queries of QRELS (like ``trec_eval -c``): a judged query missing from
the run scores 0; run queries without judgments are ignored and counted on stderr.

Ordering within a query (``--tie-break``, the tie rules of ``pipeline.formats``):
  file_order  score descending, ties kept in the run file's order (default; old name: score)
  docid_desc  score descending, then document id descending: trec_eval's own re-sort, so
              runs with tied scores give exactly trec_eval's numbers
(``doc_index`` needs a corpus: score the run with ``retriever=run_file`` for it.)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.formats import TIE_BREAKS_WITHOUT_CORPUS, QrelsFile, RunFile, read_qrels, read_run, tie_break_rule
from pipeline.metrics import Evaluation, Qrels, evaluate
from retrievers.base import rows_to_ranking

log = logging.getLogger(__name__)

DEFAULT_KS = (1, 3, 5, 10, 20, 100)


@dataclass(frozen=True)
class Scored:
    query_ids: list[str]
    evaluation: Evaluation
    n_run_queries_unjudged: int  # queries in the run that have no judgments (ignored)


def rank_run(
    run: RunFile, qrels_file: QrelsFile, tie_break: str = "file_order"
) -> tuple[list[str], NDArray[np.int64], Qrels, int]:
    """Turn string-keyed run and qrels into the arrays ``metrics.evaluate`` takes.

    Returns (judged query ids sorted, doc_idx [n_queries, depth] in rank order with -1
    padding, Qrels, number of run queries without judgments). Ids are matched through
    pyarrow hash tables on the distinct values only; rows are handled as integer codes.
    """
    tie_break = tie_break_rule(tie_break, TIE_BREAKS_WITHOUT_CORPUS)
    query_ids = pc.array_sort_indices(pc.unique(qrels_file.query))
    query_ids = pc.take(pc.unique(qrels_file.query), query_ids)
    n_q = len(query_ids)
    # One document vocabulary for both files; sorted when ids break ties (byte order = strcmp).
    vocab = pc.unique(pa.concat_arrays([qrels_file.doc, run.doc_dict]))
    if tie_break == "docid_desc":
        vocab = pc.take(vocab, pc.array_sort_indices(vocab))
    qrels = Qrels(
        query_idx=_index_in(qrels_file.query, query_ids),
        doc_idx=_index_in(qrels_file.doc, vocab),
        grade=qrels_file.grades,
    )
    run_q = _index_in(run.query_dict, query_ids)[run.query_codes]  # -1: query without judgments
    run_docs = _index_in(run.doc_dict, vocab)[run.doc_codes]
    n_unjudged = int((_index_in(run.query_dict, query_ids) < 0).sum())
    rows = np.flatnonzero(run_q >= 0)
    run_q, run_docs, scores = run_q[rows], run_docs[rows], run.scores[rows]

    tie = -run_docs if tie_break == "docid_desc" else None  # None: file order
    doc_idx = rows_to_ranking(run_q, run_docs, scores, n_q, tie=tie).doc_idx
    return query_ids.to_pylist(), doc_idx, qrels, n_unjudged


def _index_in(values: pa.Array, value_set: pa.Array) -> NDArray[np.int64]:
    """Position of each value in ``value_set`` (-1 when absent)."""
    found = pc.index_in(values, value_set=value_set)
    return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def score_files(
    qrels_path: str,
    run_path: str,
    k_max: int,
    gain: str = "exp",
    relevance_level: int = 1,
    tie_break: str = "file_order",
) -> Scored:
    qrels_file = read_qrels(qrels_path)
    run = read_run(run_path)
    query_ids, doc_idx, qrels, unjudged = rank_run(run, qrels_file, tie_break)
    evaluation = evaluate(doc_idx, qrels, k_max=k_max, gain=gain, relevance_level=relevance_level)  # type: ignore[arg-type]
    return Scored(query_ids, evaluation, unjudged)


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
        prog="python -m pipeline.score",
        description="Score a TREC run file against qrels with the pipeline's metric definitions.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("qrels", help="TREC qrels (qid iter docid grade) or BEIR qrels/*.tsv; .gz accepted")
    parser.add_argument("run", help="TREC run (qid Q0 docid rank score tag); .gz accepted")
    parser.add_argument("--k", type=_parse_ks, default=list(DEFAULT_KS), help="cut-offs to report (default 1,3,5,10,20,100)")
    parser.add_argument("--k-max", type=int, default=None, help="compute every K up to this (default: the largest --k)")
    parser.add_argument("--gain", choices=("exp", "linear"), default="exp", help="nDCG gain: 2^rel-1 (exp) or rel (linear = trec_eval)")
    parser.add_argument("--relevance-level", type=int, default=1, help="grade at which a document counts as relevant (default 1)")
    parser.add_argument(
        "--tie-break",
        type=_parse_tie_break,
        default="file_order",
        metavar="{" + ",".join(TIE_BREAKS_WITHOUT_CORPUS) + "}",
        help="order of tied scores: file_order (default) or docid_desc (trec_eval's); see below",
    )
    parser.add_argument("--per-query", action="store_true", help="also report every query")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    return parser


def _format_table(means: dict[str, float], ks: Sequence[int], families: Sequence[str]) -> str:
    head = f"{'metric':<10}" + "".join(f"{'@' + str(k):>10}" for k in ks)
    lines = [head, "-" * len(head)]
    for family in families:
        lines.append(f"{family:<10}" + "".join(f"{means[f'{family}_at_{k}']:>10.4f}" for k in ks))
    lines.append("")
    lines.append(f"{'mrr':<22}{means['mrr']:.4f}")
    lines.append(f"{'map':<22}{means['map']:.4f}")
    lines.append(f"{'n_queries':<22}{means['n_queries']}")
    lines.append(f"{'n_queries_no_relevant':<22}{means['n_queries_no_relevant']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ks: list[int] = args.k
    k_max = args.k_max if args.k_max is not None else max(ks)
    if k_max < max(ks):
        print(f"error: --k-max {k_max} is smaller than the largest --k {max(ks)}", file=sys.stderr)
        return 2
    if args.relevance_level < 1:
        print(f"error: --relevance-level must be >= 1, got {args.relevance_level}", file=sys.stderr)
        return 2
    try:
        try:
            scored = score_files(args.qrels, args.run, k_max, args.gain, args.relevance_level, args.tie_break)
        except ValueError as err:  # the computing code's word for a bad argument
            raise InputError(str(err)) from err
    except InputError as err:
        if args.debug:
            raise
        print(str(err), file=sys.stderr)
        return err.exit_code
    ev = scored.evaluation
    means = ev.means(ks)
    if scored.n_run_queries_unjudged:
        print(
            f"note: {scored.n_run_queries_unjudged} queries of the run have no judgments and were ignored",
            file=sys.stderr,
        )
    if args.per_query:
        import pandas as pd

        table = pd.DataFrame(ev.per_query(scored.query_ids))
        cols = ["query_id", *[f"{f}_at_{k}" for f in ev.families() for k in ks], "mrr", "map", "n_relevant", "evaluated"]
        table = table[cols]
    if args.json:
        if args.per_query:
            rows = table.set_index("query_id").to_dict(orient="index")
            print(json.dumps({"all": means, "per_query": rows}))
        else:
            print(json.dumps(means))
        return 0
    if args.per_query:
        with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 200):
            print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        print()
    print(_format_table(means, ks, ev.families()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

Incomplete judgments: judged_at_K (the share of the top K that the qrels grade, >= 0) and
bpref (Buckley & Voorhees 2004, trec_eval's) are always reported; a note on stderr warns when
the mean judged_at_10 is below 0.9 (the other numbers are then biased low: pool the run).
--judged-only scores condensed lists (unjudged documents removed first, trec_eval -J); the
output then says "judged_only": true.

QRELS or RUN may be - (standard input) or a pipe (<(zcat run.gz)): it is read once.
With gain=exp a grade >= 1024 (2^g - 1 overflows a 64-bit float) is an error naming the
qrels line; use --gain linear for such scales. --json output is always valid JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from pipeline.errors import InputError, positive_int
from pipeline.io.formats import (TIE_BREAKS_WITHOUT_CORPUS, QrelsFile, RunFile, grade_line, read_qrels, read_run,
                               tie_break_rule, to_numpy)
from pipeline.io.readers import require_file
from pipeline.metrics import (EXP_GAIN_LIMIT, FULL_DEPTH, Evaluation, Qrels, check_gain_overflow, evaluate,
                              judged_warning)
from retrievers.base import rows_to_ranking

log = logging.getLogger(__name__)

DEFAULT_KS = (1, 3, 5, 10, 20, 100)


@dataclass(frozen=True)
class Scored:
    query_ids: list[str]
    evaluation: Evaluation  # computed up to evaluation.k_max <= k_max (see the module docstring)
    n_run_queries_unjudged: int  # queries in the run that have no judgments (ignored)
    k_max: int = 0  # the K asked for; values beyond evaluation.k_max are derived (``values``)
    doc_idx: NDArray[np.int64] | None = None  # the ranking scored (row = query_ids), for the drill-down
    qrels: Qrels | None = None
    doc_vocab: Callable[[], pa.Array] | None = None  # the ids doc_idx and qrels index (made on demand)

    def values(self, family: str, k: int) -> NDArray[np.float64]:
        """Per-query ``family`` at cut-off ``k`` (1 <= k <= k_max), exact beyond the computed
        depth: precision = hits / K, every other family unchanged."""
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
        inside = [k for k in ks if k <= ev.k_max]
        computed = ev.means(inside)
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
        table["n_relevant"] = ev.n_relevant
        table["evaluated"] = ev.evaluated
        return table


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
    vocab = doc_vocab(qrels_file.doc, run.doc_dict, tie_break)
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


def doc_vocab(qrels_docs: pa.Array, run_docs: pa.Array, tie_break: str = "file_order") -> pa.Array:
    """One document vocabulary for the qrels' and the run's document ids (``rank_run``'s
    document indices); sorted when ids break ties (byte order = strcmp)."""
    vocab = pc.unique(pa.concat_arrays([qrels_docs, run_docs]))
    if tie_break_rule(tie_break, TIE_BREAKS_WITHOUT_CORPUS) == "docid_desc":
        vocab = pc.take(vocab, pc.array_sort_indices(vocab))
    return vocab


def _index_in(values: pa.Array, value_set: pa.Array) -> NDArray[np.int64]:
    """Position of each value in ``value_set`` (-1 when absent)."""
    found = pc.index_in(values, value_set=value_set)
    return to_numpy(found, fill=-1).astype(np.int64)  # formats.to_numpy: no pandas import


def score_files(
    qrels_path: str,
    run_path: str,
    k_max: int,
    gain: str = "exp",
    relevance_level: int = 1,
    tie_break: str = "file_order",
    judged_only: bool = False,
) -> Scored:
    """Read, rank and evaluate; InputError for bad files (see the module docstring for K)."""
    qrels_file = read_qrels(qrels_path)
    run = read_run(run_path)
    query_ids, doc_idx, qrels, unjudged = rank_run(run, qrels_file, tie_break)
    try:
        check_gain_overflow(qrels, len(query_ids), gain)  # type: ignore[arg-type]
    except ValueError as err:
        top = int(np.maximum(qrels.grade, 0).max())
        path = require_file(qrels_path, "qrels")
        raise InputError(str(err), path, grade_line(path, min(top, EXP_GAIN_LIMIT))) from None
    k_eval = min(k_max, computed_depth(doc_idx, qrels))
    evaluation = evaluate(doc_idx, qrels, k_max=k_eval, gain=gain, relevance_level=relevance_level,  # type: ignore[arg-type]
                          judged_only=judged_only)
    qrels_docs, run_docs = qrels_file.doc, run.doc_dict  # not the whole files: the vocabulary is made on demand
    return Scored(query_ids, evaluation, unjudged, k_max, doc_idx, qrels,
                  lambda: doc_vocab(qrels_docs, run_docs, tie_break))


def computed_depth(doc_idx: NDArray[np.int64], qrels: Qrels) -> int:
    """The K beyond which only precision changes: the run's depth or the most judged
    documents with a positive grade of any query (the ideal DCG grows until then)."""
    positive = qrels.grade > 0
    most_judged = int(np.bincount(qrels.query_idx[positive]).max()) if positive.any() else 0
    return max(1, doc_idx.shape[1], most_judged)


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
    parser.add_argument("--per-query", action="store_true",
                        help="also report every query, with the drill-down: first relevant rank, judged share and "
                             "top documents (id, grade) per query, then the failing queries (none relevant in the "
                             "top --top-k)")
    parser.add_argument("--top-k", type=positive_int, default=10, metavar="N",
                        help="documents shown per query by --per-query, and the cut-off of its judged share and "
                             "failures (default 10)")
    parser.add_argument("--corpus", metavar="CORPUS",
                        help="corpus (BEIR corpus.jsonl[.gz] or TSV id[, title], text): adds a snippet of each "
                             "document's text to the drill-down; implies --per-query")
    parser.add_argument("--queries", metavar="QUERIES",
                        help="queries (JSONL _id/text or TSV id, text): adds the query texts; default with --corpus: "
                             "queries.jsonl beside it, if any; implies --per-query")
    parser.add_argument("--judged-only", action="store_true",
                        help="condensed lists: remove unjudged documents from each ranking before scoring "
                             "(trec_eval -J; judged_at_K still describes the full ranking)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    return parser


def _format_table(means: dict[str, float], ks: Sequence[int], families: Sequence[str]) -> str:
    head = f"{'metric':<10}" + "".join(f"{'@' + str(k):>10}" for k in ks)
    lines = [head, "-" * len(head)]
    for family in families:
        lines.append(f"{family:<10}" + "".join(f"{means[f'{family}_at_{k}']:>10.4f}" for k in ks))
    lines.append("")
    lines += [f"{key:<22}{means[key]:.4f}" for key in FULL_DEPTH if key in means]
    lines.append(f"{'n_queries':<22}{means['n_queries']}")
    lines.append(f"{'n_queries_no_relevant':<22}{means['n_queries_no_relevant']}")
    if means.get("judged_only"):
        lines.append("judged_only: condensed lists, unjudged documents removed before scoring (trec_eval -J)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.per_query = args.per_query or args.corpus is not None or args.queries is not None
    ks: list[int] = args.k
    k_max = args.k_max if args.k_max is not None else max(ks)
    if k_max < max(ks):
        print(f"error: --k-max {k_max} is smaller than the largest --k {max(ks)}", file=sys.stderr)
        return 2
    if args.relevance_level < 1:
        print(f"error: --relevance-level must be >= 1, got {args.relevance_level}", file=sys.stderr)
        return 2
    if args.qrels == "-" and args.run == "-":
        print("error: only one of QRELS and RUN can be - (standard input)", file=sys.stderr)
        return 2
    try:
        try:
            scored = score_files(args.qrels, args.run, k_max, args.gain, args.relevance_level, args.tie_break,
                                 judged_only=args.judged_only)
        except ValueError as err:  # the computing code's word for a bad argument
            raise InputError(str(err)) from err
        ev = scored.evaluation
        means = scored.means(ks)
        means["judged_only"] = bool(args.judged_only)  # a condensed-list score says so in its output
        if args.per_query:
            import pandas as pd

            table = pd.DataFrame(scored.per_query(ks))
            cols = ["query_id", *[f"{f}_at_{k}" for f in ev.families() for k in ks], *ev.full, "n_relevant",
                    "evaluated"]
            table = table[cols]
            from pipeline.report import drilldown

            drill = drilldown.of_scored(scored, args.top_k, args.relevance_level, args.corpus, args.queries)
        output = _render(args, means, ks, ev, table if args.per_query else None, drill if args.per_query else None)
    except InputError as err:
        if args.debug:
            raise
        print(str(err), file=sys.stderr)
        return err.exit_code
    if ev.k_max < k_max:
        print(
            f"note: computed K = 1..{ev.k_max} (the run's depth, or the most relevant documents of a query); "
            f"beyond it only precision changes (hits / K), so K up to {k_max} is exact",
            file=sys.stderr,
        )
    if args.judged_only:
        print("note: --judged-only: condensed lists (unjudged documents removed before scoring, trec_eval -J); "
              "not comparable with scores of the full rankings", file=sys.stderr)
    if warning := judged_warning(means):
        print(warning, file=sys.stderr)
    if scored.n_run_queries_unjudged:
        print(
            f"note: {scored.n_run_queries_unjudged} queries of the run have no judgments and were ignored",
            file=sys.stderr,
        )
    print(output)
    return 0


def _render(args: argparse.Namespace, means: dict[str, float], ks: Sequence[int], ev: Evaluation, table,
            drill=None) -> str:
    """What main prints; InputError instead of NaN or Infinity (never invalid JSON)."""
    values = [float(v) for v in means.values()]
    if table is not None:
        values += table.select_dtypes("number").to_numpy(dtype=np.float64).ravel().tolist()
    if not np.all(np.isfinite(np.asarray(values, dtype=np.float64))):
        raise InputError("a metric is not a finite number (grades too large for the gain? try --gain linear)")
    if args.json:
        payload = means if table is None else {"all": means, "per_query": table.set_index("query_id").to_dict(orient="index")}
        if drill is not None:  # the drill-down's fields in each query's object, and the failing queries
            for qid, fields in drill.json_rows().items():
                payload["per_query"][qid].update(fields)
            payload["failures"] = [drill.query_ids[q] for q in drill.failures()]
        return json.dumps(payload, allow_nan=False)
    text = ""
    if table is not None:
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

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python flushes stdout again at exit
        return 141
    return code


if __name__ == "__main__":
    sys.exit(cli())

"""``python -m pipeline.cli judgments EXPORT``: Label Studio export -> TREC qrels and agreement.

The export, the outputs and their rules are ``pipeline.judging.judgments``'s (its docstring);
a malformed export stops with one line (exit status 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.cli.runner import PROG, Parser, run
from pipeline.errors import InputError, bounded_int
from pipeline.judging.judgments import RULES, Judgments, agreement_reading, read_export, write_outputs


def parser() -> Parser:
    p = Parser(prog=f"{PROG} judgments",
               description="Label Studio JSON export -> TREC qrels and agreement (docs/judging.md).")
    p.add_argument("export", help="Label Studio JSON export (exportType=JSON)")
    p.add_argument("--out", default=None, help="output folder (default: EXPORT's folder/<name>.judgments)")
    p.add_argument("--rule", default="median", help="consensus rule: median (default), majority or max")
    p.add_argument("--relevance-level", type=bounded_int(1, 100, "a grade"), default=1,
                   help="grade >= this is relevant (default 1; grades are 0..100)")
    p.add_argument("--choices", default="grade", help="the <Choices name> holding the grade (default grade)")
    p.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    return p


def _fmt(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.4f}"


def print_stats(judgments: Judgments, stats: dict[str, Any], rule: str, relevance_level: int, out: Path) -> None:
    """What was read and written, the agreement coefficients, where the disagreements are."""
    r = judgments.report
    print(f"{r['tasks']} tasks, {r['annotations']} annotations ({r['cancelled']} cancelled, "
          f"{r['without_grade']} without a grade, {r['regraded']} regraded: latest kept); "
          f"{stats['n_items']} judged documents, {stats['n_items_multiply_graded']} graded by two or more")
    for who, n in stats["annotators"].items():
        print(f"  {who}: {n} grades -> {stats['qrels'][who]}")
    print(f"consensus ({rule}): {stats['consensus']}")
    print(f"Krippendorff's alpha (ordinal): graded {_fmt(stats['alpha_ordinal'])}, "
          f"binary at grade >= {relevance_level} {_fmt(stats['alpha_ordinal_binary'])}")
    for pair in stats["pairs"]:
        print(f"  Cohen's kappa (quadratic) {pair['annotators'][0]} vs {pair['annotators'][1]} on {pair['n_items']} "
              f"items: graded {_fmt(pair['kappa_quadratic'])}, binary {_fmt(pair['kappa_quadratic_binary'])}")
    print(agreement_reading(stats))
    print(f"{stats['n_disagreements']} disagreements, worst first: {out / 'disagreements.tsv'}; "
          f"agreement: {out / 'agreement.json'}")


def judgments(args: argparse.Namespace) -> None:
    """Read the export, write the qrels and the agreement, print what was done."""
    if args.rule not in RULES:
        raise InputError(f"--rule must be one of {', '.join(RULES)}, got {args.rule!r}")
    found = read_export(args.export, args.choices)
    if not found.grades:
        raise InputError("the export has no graded annotations", args.export)
    export = Path(args.export)
    out = Path(args.out) if args.out else export.parent / f"{export.stem}.judgments"
    stats = write_outputs(out, found, args.rule, args.relevance_level)
    print_stats(found, stats, args.rule, args.relevance_level, out)


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser(), judgments, argv)

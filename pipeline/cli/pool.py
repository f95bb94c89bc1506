"""``python -m pipeline.cli pool``: depth-d pooling of several runs into Label Studio tasks.

OVERRIDE are Hydra overrides choosing the collection (default ``dataset=sample``), e.g.
``dataset=beir dataset.path=/data/x`` or, for a corpus without any judgments yet,
``dataset=trec dataset.qrels=null dataset.queries=q.tsv dataset.corpus=docs.jsonl`` (every
query of the queries file is then pooled: ``pipeline.io.collection.load_unjudged``). The runs
are retriever configs (``--retriever "hybrid retriever.rrf_k=30"``: a config-group option and
overrides for it, retrieved through ``pipeline.stages.retrieve``, so rankings are cached) and/or
TREC run files (``--run``, mapped onto the corpus like ``retriever=run_file``). The pool and its
outputs are ``pipeline.judging.pool``'s (its docstring has the rules).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numpy.typing import NDArray
from omegaconf import OmegaConf

from pipeline import config, stages
from pipeline.cli.runner import PROG, Parser, run
from pipeline.config import Settings
from pipeline.errors import InputError, check_output_folder
from pipeline.io.collection import Collection, load_unjudged
from pipeline.io.progress import Progress
from pipeline.judging import labelstudio
from pipeline.judging.pool import (judged_pairs, labeling_config, pool, pool_summary, run_file_rankings, tasks,
                                   write_pool)


def retriever_configs(args: argparse.Namespace) -> list[tuple[list[str], Any]]:
    """The composed config of every --retriever, checked (numbers, groups) before any data is read."""
    found = []
    for spec in args.retriever:
        words = spec.split()
        if not words:
            raise InputError("--retriever needs a config name, e.g. --retriever bm25")
        cfg = config.compose([*args.overrides, words[0] if "=" in words[0] else f"retriever={words[0]}", *words[1:]])
        config.check_numbers(cfg.retriever, "retriever")
        found.append((words, cfg))
    return found


def load_and_rank(args: argparse.Namespace, cfg: Any,
                  configs: list[tuple[list[str], Any]]) -> tuple[Collection, list[NDArray], list[str]]:
    """The collection of ``cfg`` (with ``dataset=trec dataset.qrels=null``: every query of the
    queries file and no judgments, a corpus nobody has judged yet), and the doc_idx matrix and
    the name of every --retriever and --run."""
    spec = OmegaConf.to_container(cfg.dataset, resolve=True)
    if spec.get("_target_") == "pipeline.io.collection.load_trec" and spec.get("qrels") is None:
        collection = load_unjudged(**{k: v for k, v in spec.items() if k not in ("_target_", "qrels", "strict")})
    else:
        collection = stages.load(Settings.of(cfg))
    rankings, names = [], []
    progress = Progress("pooling: retrieving", len(configs), "runs", logger=logging.getLogger(__name__))
    for words, retriever_cfg in configs:
        OmegaConf.set_struct(retriever_cfg, False)
        ranking, _ = stages.retrieve(Settings.of(retriever_cfg), collection, min(args.depth, collection.n_docs))
        rankings.append(ranking.doc_idx)
        names.append(" ".join(words))
        progress.update()
    progress.close()
    rankings += run_file_rankings(args.run, collection, args.depth)
    names += [str(path) for path in args.run]
    return collection, rankings, names


def parser() -> Parser:
    p = Parser(prog=f"{PROG} pool", description="Depth-d pooling of several runs into Label Studio tasks "
               "(docs/judging.md).")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the dataset (default dataset=sample)")
    p.add_argument("--retriever", action="append", default=[], metavar="SPEC",
                   help="a retriever config and its overrides, e.g. 'bm25' or 'hybrid retriever.rrf_k=30' (repeatable)")
    p.add_argument("--run", action="append", default=[], metavar="RUN", help="a TREC run file (repeatable)")
    p.add_argument("--depth", type=int, default=10, help="the top depth of every run is pooled (default 10)")
    p.add_argument("--max-pool", type=int, default=None, metavar="N",
                   help="at most N documents per query (those with the best rank in any run)")
    p.add_argument("--qrels", action="append", default=[], metavar="FILE",
                   help="judgments to leave out besides the dataset's (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seeds each query's shuffle (default 0)")
    p.add_argument("--out", default="outputs/pool", help="output folder (default outputs/pool)")
    p.add_argument("--label-studio", metavar="URL", default=None,
                   help="create a project there and import the tasks (token: LABEL_STUDIO_API_KEY)")
    p.add_argument("--title", default=None, help="the Label Studio project's title")
    p.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    return p


def pool_runs(args: argparse.Namespace) -> None:
    """Pool, write the outputs and (with --label-studio) import the tasks; print what was done."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.retriever and not args.run:
        raise InputError("nothing to pool: give at least one --retriever or --run")
    if args.depth < 1:
        raise InputError(f"--depth must be >= 1, got {args.depth}")
    if args.max_pool is not None and args.max_pool < 1:
        raise InputError(f"--max-pool must be >= 1, got {args.max_pool}")
    check_output_folder(args.out, "--out")  # before any work
    token = None
    if args.label_studio:  # the token is checked before any work
        token = labelstudio.token_from_env()
    cfg = config.compose(args.overrides)
    config.check_numbers(cfg.dataset, "dataset")
    configs = retriever_configs(args)  # bad retriever settings fail before the collection is read
    collection, rankings, names = load_and_rank(args, cfg, configs)
    result = pool(rankings, collection.query_ids, collection.doc_ids, args.depth,
                  judged_pairs(collection, args.qrels), args.max_pool, args.seed)
    summary = pool_summary(result, collection, names, args.depth, args.max_pool, args.seed, args.qrels)
    out = Path(args.out)
    write_pool(out, result, collection, summary)
    print(f"pool: {summary['n_pooled']} documents to judge for {result.n_queries} of "
          f"{collection.n_queries} queries ({result.n_candidates} in the top {args.depth} of {len(names)} runs, "
          f"{result.n_judged} already judged, {result.n_capped} over --max-pool)")
    print(f"written: {out / 'pool.tsv'}, {out / 'tasks.json'}, {out / 'labeling_config.xml'}, {out / 'pool.json'}")
    if args.label_studio:
        client = labelstudio.Client(args.label_studio, token)
        title = args.title or f"{collection.name} pool depth {args.depth}"
        project = client.create_project(title, labeling_config())
        n = client.import_tasks(project, tasks(result, collection))
        print(f"Label Studio: project {project} ({title!r}) with {n} tasks: "
              f"{args.label_studio.rstrip('/')}/projects/{project}/data")


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser(), pool_runs, argv)

"""Depth-d pooling for relevance judging: ``python -m pipeline.pool``.

    python -m pipeline.pool [OVERRIDE ...] [--retriever SPEC ...] [--run RUN.trec ...]
        [--depth 10] [--max-pool N] [--qrels FILE ...] [--seed 0] [--out DIR]
        [--label-studio URL] [--title TITLE]

OVERRIDE are Hydra overrides choosing the collection (default ``dataset=sample``), e.g.
``dataset=beir dataset.path=/data/x`` or, for a corpus without any judgments yet,
``dataset=trec dataset.qrels=null dataset.queries=q.tsv dataset.corpus=docs.jsonl`` (every
query of the queries file is then pooled). The runs are retriever configs (``--retriever
bm25``, or ``--retriever "hybrid retriever.rrf_k=30"``: a config-group option and overrides
for it; retrieved through ``pipeline.job.retrieve``, so rankings are cached) and/or TREC run
files (``--run``, mapped onto the corpus like ``retriever=run_file``: score descending, then
corpus order; documents not in the corpus are skipped and counted).

The pool (TREC's depth-d pooling; Sparck Jones and van Rijsbergen 1975, Voorhees and Harman
2005), for each query:

1. the union of the top ``depth`` documents of every run;
2. minus the documents already judged for the query (the dataset's qrels and every
   ``--qrels`` file, e.g. an earlier round of judging), so a pool grows as retrievers arrive;
3. capped at ``--max-pool`` documents: they are ranked by their best rank in any run
   (then corpus order) and the first N kept, which is pooling at the largest depth that fits
   plus part of the next one;
4. shuffled: each query's documents are sorted by a hash of the seed, the query id and the
   document id (``shuffle_keys``): an order that depends on nothing else, never on ranks or
   runs, and is the same on every machine.

Nothing written says which run found a document or at what rank. Outputs in ``--out``
(default ``outputs/pool``): ``pool.tsv`` (header ``query_id<TAB>doc_id``, one line per
document to judge, in the shuffled order), ``tasks.json`` (Label Studio tasks: ``data``
holds ``query_id``, ``query``, ``doc_id``, ``document``), ``labeling_config.xml`` (the
question, the document and a 0-3 grade with hotkeys 0-3) and ``pool.json`` (the settings
and counts; run names but no per-document provenance). ``--label-studio URL`` also creates
the project and imports the tasks through the API (token: ``LABEL_STUDIO_API_KEY``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json  # C; escapes non-ASCII, even a lone surrogate
from pathlib import Path
from typing import Any, Sequence
from xml.sax.saxutils import quoteattr

import numpy as np
import xxhash
from numpy.typing import NDArray

from pipeline.io.collection import Collection
from pipeline.errors import InputError

log = logging.getLogger(__name__)

CONF = Path(__file__).resolve().parents[2] / "conf"

# The grade scale shown to annotators (docs/judging.md); the alias is what Label Studio exports.
GRADES = (
    (3, "answers the question directly and completely"),
    (2, "gives useful background or part of the answer"),
    (1, "on the topic but not useful"),
    (0, "off-topic"),
)
CHOICES_NAME = "grade"  # the <Choices name> whose value pipeline.judgments reads


@dataclass(frozen=True)
class Pool:
    """The documents to judge: parallel arrays, grouped by query (collection order), each
    query's documents in the shuffled order."""

    query_idx: NDArray[np.int64]
    doc_idx: NDArray[np.int64]
    n_candidates: int  # distinct (query, document) pairs in the runs' top depth
    n_judged: int  # of those, already judged (left out)
    n_capped: int  # of the rest, left out by max_pool


def _splitmix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64's finalizer (Steele, Lea and Flood 2014), wrapping uint64 arithmetic."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _id_hashes(ids: Sequence[str], seed: int) -> NDArray[np.uint64]:
    h, seed = xxhash.xxh3_64_intdigest, seed % (1 << 64)
    return np.fromiter((h(i.encode("utf-8", "surrogatepass"), seed) for i in ids), dtype=np.uint64, count=len(ids))


def _mix(hq: NDArray[np.uint64], hd: NDArray[np.uint64]) -> NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        return _splitmix64(hq * np.uint64(0x9E3779B97F4A7C15) + hd)


def shuffle_keys(seed: int, query_ids: Sequence[str], doc_ids: Sequence[str]) -> NDArray[np.uint64]:
    """The sort key of each (query, document): ``splitmix64(xxh3_64(query, seed) * φ + xxh3_64(doc, seed))``
    with φ = 0x9E3779B97F4A7C15 and uint64 wrap-around; ids hashed as UTF-8. It depends on
    the seed and the two ids only (not on ranks, runs or the rest of the pool)."""
    q_unique, q_inverse = np.unique(np.asarray(query_ids, dtype=object), return_inverse=True)
    d_unique, d_inverse = np.unique(np.asarray(doc_ids, dtype=object), return_inverse=True)
    return _mix(_id_hashes(q_unique.tolist(), seed)[q_inverse], _id_hashes(d_unique.tolist(), seed)[d_inverse])


def pool(
    rankings: Sequence[NDArray[np.integer]],
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    depth: int = 10,
    judged: tuple[NDArray[np.integer], NDArray[np.integer]] | None = None,
    max_pool: int | None = None,
    seed: int = 0,
) -> Pool:
    """Pool the ``doc_idx`` matrices ``rankings`` ([n_queries, width], -1 = nothing, rows in
    the order of ``query_ids``) as the module docstring says. ``judged`` is a pair of arrays
    (query index, document index) of judged documents to leave out."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if max_pool is not None and max_pool < 1:
        raise ValueError(f"max_pool must be >= 1, got {max_pool}")
    n_q, n_d = len(query_ids), len(doc_ids)
    qs, ds, rs = [], [], []
    for ranking in rankings:
        cols = np.asarray(ranking)[:, :depth]
        if cols.shape[0] != n_q:
            raise ValueError(f"a ranking has {cols.shape[0]} rows for {n_q} queries")
        q = np.repeat(np.arange(n_q, dtype=np.int64), cols.shape[1])
        r = np.tile(np.arange(cols.shape[1], dtype=np.int64), n_q)
        d = cols.astype(np.int64, copy=False).ravel()
        keep = d >= 0
        qs.append(q[keep]), ds.append(d[keep]), rs.append(r[keep])
    q = np.concatenate(qs) if qs else np.zeros(0, np.int64)
    d = np.concatenate(ds) if ds else np.zeros(0, np.int64)
    rank = np.concatenate(rs) if rs else np.zeros(0, np.int64)
    key = q * max(n_d, 1) + d
    # Distinct pairs, each with its best rank over the runs.
    order = np.lexsort((rank, key))
    key, rank = key[order], rank[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    key, rank = key[first], rank[first]
    n_candidates = len(key)
    if judged is not None and len(judged[0]):
        jq, jd = (np.asarray(a, dtype=np.int64) for a in judged)
        ok = jd >= 0  # judged documents missing from the corpus cannot be pooled anyway
        unjudged = ~np.isin(key, jq[ok] * max(n_d, 1) + jd[ok])
        key, rank = key[unjudged], rank[unjudged]
    n_judged = n_candidates - len(key)
    q, d = key // max(n_d, 1), key % max(n_d, 1)
    n_capped = 0
    if max_pool is not None and len(key):
        order = np.lexsort((d, rank, q))  # per query: best rank, then corpus order
        q, d = q[order], d[order]
        starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
        position = np.arange(len(q)) - np.repeat(starts, np.diff(np.r_[starts, len(q)]))
        keep = position < max_pool
        n_capped = int((~keep).sum())
        q, d = q[keep], d[keep]
    # shuffle_keys, computed once per distinct query and document
    q_unique, q_inverse = np.unique(q, return_inverse=True)
    d_unique, d_inverse = np.unique(d, return_inverse=True)
    keys = _mix(_id_hashes([query_ids[i] for i in q_unique.tolist()], seed)[q_inverse],
                _id_hashes([doc_ids[i] for i in d_unique.tolist()], seed)[d_inverse])
    order = np.lexsort((keys, q))
    return Pool(q[order], d[order], n_candidates, n_judged, n_capped)


# --------------------------------------------------------------------------- outputs


def labeling_config(question_title: str = "Question", document_title: str = "Document") -> str:
    """The Label Studio labeling config: the question, the document, one 0-3 grade (hotkeys
    0-3; the exported value is the digit, the ``alias``)."""
    choices = "\n".join(
        f'    <Choice value={quoteattr(f"{g}: {text}")} alias="{g}" hotkey="{g}"/>' for g, text in GRADES
    )
    return (
        "<View>\n"
        f"  <Header value={quoteattr(question_title)}/>\n"
        '  <Text name="query" value="$query"/>\n'
        f"  <Header value={quoteattr(document_title)}/>\n"
        '  <Text name="document" value="$document"/>\n'
        f"  <Header value={quoteattr('How well does the document answer the question? (keys 0-3)')}/>\n"
        f'  <Choices name="{CHOICES_NAME}" toName="document" choice="single-radio" required="true" '
        'showInLine="false">\n'
        f"{choices}\n"
        "  </Choices>\n"
        "</View>\n"
    )


def tasks(result: Pool, collection: Collection) -> list[dict[str, Any]]:
    """Label Studio tasks, one per pooled document, in the pool's order."""
    return [
        {"data": {"query_id": collection.query_ids[qi], "query": collection.query_texts[qi],
                  "doc_id": collection.doc_ids[di], "document": collection.doc_texts[di]}}
        for qi, di in zip(result.query_idx.tolist(), result.doc_idx.tolist())
    ]


def _check_ids(values: Sequence[str], what: str, path: Path) -> None:
    from pipeline.io.formats import _check_writable_id

    for value in values:
        if not (value.isprintable() and " " not in value and value):  # the common case, checked fast
            _check_writable_id(value, what, path)


def write_pool(out: Path, result: Pool, collection: Collection, summary: dict[str, Any]) -> None:
    """Write pool.tsv, tasks.json (the JSON of ``tasks()``), labeling_config.xml and pool.json
    (each atomically)."""
    from pipeline.io.results import atomic_open

    out = Path(out)
    # Every distinct query and document is formatted once; a line is two pieces joined.
    q_unique, q_inv = np.unique(result.query_idx, return_inverse=True)
    d_unique, d_inv = np.unique(result.doc_idx, return_inverse=True)
    qids = [collection.query_ids[i] for i in q_unique.tolist()]
    dids = [collection.doc_ids[i] for i in d_unique.tolist()]
    _check_ids(qids, "query", out / "pool.tsv")
    _check_ids(dids, "document", out / "pool.tsv")

    def lines(q_parts: list[str], d_parts: list[str]) -> list[str]:
        return (np.asarray(q_parts, dtype=object)[q_inv] + np.asarray(d_parts, dtype=object)[d_inv]).tolist()

    with atomic_open(out / "pool.tsv") as fh:
        fh.write("query_id\tdoc_id\n" + "".join(lines([f"{q}\t" for q in qids], [f"{d}\n" for d in dids])))
    q_json = [f'{{"data": {{"query_id": {_json(q)}, "query": {_json(collection.query_texts[i])}, '
              for q, i in zip(qids, q_unique.tolist())]
    d_json = [f'"doc_id": {_json(d)}, "document": {_json(collection.doc_texts[i])}}}}}'
              for d, i in zip(dids, d_unique.tolist())]
    with atomic_open(out / "tasks.json") as fh:  # one task a line
        fh.write("[\n" + ",\n".join(lines(q_json, d_json)) + "\n]\n")
    with atomic_open(out / "labeling_config.xml") as fh:
        fh.write(labeling_config())
    with atomic_open(out / "pool.json") as fh:
        json.dump(summary, fh, indent=2)


# --------------------------------------------------------------------------- loading


def compose(overrides: Sequence[str]) -> Any:
    from hydra import compose as hydra_compose, initialize_config_dir

    import pipeline.config  # noqa: F401  (registers the base_config schema)

    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    pipeline.config.check_overrides(list(overrides))
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose("config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as err:  # an unknown option or key: Hydra's first line
        raise InputError(f"{' '.join(overrides)}: {str(err).strip().splitlines()[0]}") from None


def load_collection(cfg: Any) -> Collection:
    """The dataset of ``cfg``; with ``dataset=trec dataset.qrels=null`` a collection of every
    query of the queries file and no judgments (a corpus nobody has judged yet)."""
    from omegaconf import OmegaConf

    from pipeline import job as run

    spec = OmegaConf.to_container(cfg.dataset, resolve=True)
    if spec.get("_target_") == "pipeline.io.collection.load_trec" and spec.get("qrels") is None:
        return load_unjudged(**{k: v for k, v in spec.items() if k not in ("_target_", "qrels", "strict")})
    return run.load(cfg)


def load_unjudged(queries: str, corpus: str, name: str | None = None, corpus_format: str = "auto",
                  queries_format: str = "auto", title_field: str | None = "title", text_field: str = "text",
                  join: str = " ") -> Collection:
    """Queries and corpus read by ``pipeline.io.collection``'s readers (the rules of ``load_trec``),
    every query kept, no judgments."""
    import hashlib

    from pipeline.io import collection as data
    from pipeline.metrics import Qrels
    from pipeline.io.readers import require_file

    corpus_path, queries_path = require_file(corpus, "corpus"), require_file(queries, "queries")
    if data._is_jsonl(corpus_path, corpus_format, "corpus"):
        docs = lambda: data._jsonl_docs(corpus_path, title_field, text_field, join)  # noqa: E731
    else:
        docs = lambda: data._tsv_records(corpus_path, "corpus", (2, 3), join)  # noqa: E731
    if data._is_jsonl(queries_path, queries_format, "queries"):
        records = data._jsonl_queries(queries_path)
    else:
        records = data._tsv_records(queries_path, "queries", (2,), join)
    found = data._collect_queries(records, queries_path)
    if not found:
        raise InputError("queries file has no queries", queries_path)
    hasher = hashlib.sha256()
    doc_ids, doc_texts, _ = data._collect_docs(docs(), docs, corpus_path, hasher)
    if not doc_ids:
        raise InputError("corpus has no documents", corpus_path)
    for qid, (text, _) in found.items():
        data._hash_str(hasher.update, qid, text)
    empty = np.zeros(0, np.int64)
    return Collection(name or corpus_path.resolve().parent.name, doc_ids, doc_texts, list(found),
                      [t for t, _ in found.values()], Qrels(query_idx=empty, doc_idx=empty, grade=empty),
                      hasher.hexdigest(), str(corpus_path))


def judged_pairs(collection: Collection, qrels_files: Sequence[str]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(query index, document index) of every judgment in the collection and the files."""
    import pandas as pd

    from pipeline.io.formats import read_qrels

    qs = [np.asarray(collection.qrels.query_idx, np.int64)]
    ds = [np.asarray(collection.qrels.doc_idx, np.int64)]
    q_index = pd.Index(np.asarray(collection.query_ids, dtype=object))
    d_index = pd.Index(np.asarray(collection.doc_ids, dtype=object))
    for path in qrels_files:
        judgments = read_qrels(path)
        q = q_index.get_indexer(judgments.query_ids).astype(np.int64)
        d = d_index.get_indexer(judgments.doc_ids).astype(np.int64)
        keep = (q >= 0) & (d >= 0)
        qs.append(q[keep]), ds.append(d[keep])
    return np.concatenate(qs), np.concatenate(ds)


def retriever_configs(args: argparse.Namespace) -> list[tuple[list[str], Any]]:
    """The composed config of every --retriever, checked (numbers, groups) before any data is read."""
    from pipeline import config

    found = []
    for spec in args.retriever:
        words = spec.split()
        if not words:
            raise InputError("--retriever needs a config name, e.g. --retriever bm25")
        group = [words[0] if "=" in words[0] else f"retriever={words[0]}"]
        cfg = compose([*args.overrides, *group, *words[1:]])
        config.check_numbers(cfg.retriever, "retriever")
        found.append((words, cfg))
    return found


def run_file_ranking(path: str | Path, query_index: Any, doc_index: Any, depth: int) -> NDArray[np.int64]:
    """The doc_idx matrix of a TREC run on the collection, as ``retriever=run_file`` orders it
    (score descending, then corpus order); documents missing from the corpus are skipped and
    counted, queries missing from the collection ignored. Ids are looked up once per distinct
    id, which is what makes 5 runs of 100,000 lines take a fraction of a second."""
    from pipeline.io.formats import read_run
    from retrievers.base import rows_to_ranking

    run = read_run(path)
    q = query_index.get_indexer(run.query_dict.to_numpy(zero_copy_only=False)).astype(np.int64)[run.query_codes]
    d = doc_index.get_indexer(run.doc_dict.to_numpy(zero_copy_only=False)).astype(np.int64)[run.doc_codes]
    asked = q >= 0
    unknown = int((asked & (d < 0)).sum())
    if unknown:
        log.warning("run %s: %d result lines name documents that are not in the corpus; skipped", path, unknown)
    other = int((~asked).sum())
    if other:
        log.info("run %s: %d result lines are for queries outside the collection; ignored", path, other)
    keep = asked & (d >= 0)
    return rows_to_ranking(q[keep], d[keep], run.scores[keep], len(query_index), depth, d[keep]).doc_idx


def run_rankings(args: argparse.Namespace, collection: Collection,
                 configs: list[tuple[list[str], Any]]) -> tuple[list[NDArray[np.int64]], list[str]]:
    """The doc_idx matrix of every --retriever and --run, and their names."""
    from omegaconf import OmegaConf

    from pipeline import job as run

    rankings, names = [], []
    for words, cfg in configs:
        OmegaConf.set_struct(cfg, False)
        ranking, _ = run.retrieve(cfg, collection, min(args.depth, collection.n_docs))
        rankings.append(ranking.doc_idx)
        names.append(" ".join(words))
    if args.run:
        import pandas as pd

        doc_index = pd.Index(np.asarray(collection.doc_ids, dtype=object))
        query_index = pd.Index(np.asarray(collection.query_ids, dtype=object))
    for path in args.run:
        rankings.append(run_file_ranking(path, query_index, doc_index, args.depth))
        names.append(str(path))
    return rankings, names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.pool",
        description="Depth-d pooling of several runs into Label Studio tasks (docs/judging.md).",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the dataset (default dataset=sample)")
    parser.add_argument("--retriever", action="append", default=[], metavar="SPEC",
                        help="a retriever config and its overrides, e.g. 'bm25' or 'hybrid retriever.rrf_k=30' (repeatable)")
    parser.add_argument("--run", action="append", default=[], metavar="RUN", help="a TREC run file (repeatable)")
    parser.add_argument("--depth", type=int, default=10, help="the top depth of every run is pooled (default 10)")
    parser.add_argument("--max-pool", type=int, default=None, metavar="N",
                        help="at most N documents per query (those with the best rank in any run)")
    parser.add_argument("--qrels", action="append", default=[], metavar="FILE",
                        help="judgments to leave out besides the dataset's (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="seeds each query's shuffle (default 0)")
    parser.add_argument("--out", default="outputs/pool", help="output folder (default outputs/pool)")
    parser.add_argument("--label-studio", metavar="URL", default=None,
                        help="create a project there and import the tasks (token: LABEL_STUDIO_API_KEY)")
    parser.add_argument("--title", default=None, help="the Label Studio project's title")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if not args.retriever and not args.run:
            raise InputError("nothing to pool: give at least one --retriever or --run")
        if args.depth < 1:
            raise InputError(f"--depth must be >= 1, got {args.depth}")
        if args.max_pool is not None and args.max_pool < 1:
            raise InputError(f"--max-pool must be >= 1, got {args.max_pool}")
        token = None
        if args.label_studio:
            from pipeline.judging import labelstudio

            token = labelstudio.token_from_env()
        cfg = compose(args.overrides)
        from pipeline import config

        config.check_numbers(cfg.dataset, "dataset")
        configs = retriever_configs(args)  # bad retriever settings fail before the collection is read
        collection = load_collection(cfg)
        rankings, names = run_rankings(args, collection, configs)
        result = pool(rankings, collection.query_ids, collection.doc_ids, args.depth,
                      judged_pairs(collection, args.qrels), args.max_pool, args.seed)
        per_query = np.bincount(result.query_idx, minlength=collection.n_queries)
        summary = {
            "dataset": collection.name, "source": collection.source, "collection_digest": collection.digest,
            "runs": names, "depth": args.depth, "max_pool": args.max_pool, "seed": args.seed,
            "qrels_files": list(args.qrels), "n_queries": collection.n_queries,
            "n_candidates": result.n_candidates, "n_already_judged": result.n_judged,
            "n_left_out_by_max_pool": result.n_capped, "n_pooled": int(len(result.doc_idx)),
            "pooled_per_query": {"min": int(per_query.min(initial=0)), "max": int(per_query.max(initial=0)),
                                 "mean": float(per_query.mean()) if len(per_query) else 0.0},
        }
        out = Path(args.out)
        write_pool(out, result, collection, summary)
        print(f"pool: {summary['n_pooled']} documents to judge for {int((per_query > 0).sum())} of "
              f"{collection.n_queries} queries ({result.n_candidates} in the top {args.depth} of {len(names)} runs, "
              f"{result.n_judged} already judged, {result.n_capped} over --max-pool)")
        print(f"written: {out / 'pool.tsv'}, {out / 'tasks.json'}, {out / 'labeling_config.xml'}, {out / 'pool.json'}")
        if args.label_studio:
            from pipeline.judging import labelstudio

            client = labelstudio.Client(args.label_studio, token)
            title = args.title or f"{collection.name} pool depth {args.depth}"
            project = client.create_project(title, labeling_config())
            n = client.import_tasks(project, tasks(result, collection))
            print(f"Label Studio: project {project} ({title!r}) with {n} tasks: "
                  f"{args.label_studio.rstrip('/')}/projects/{project}/data")
    except InputError as err:
        if args.debug:
            raise
        print(str(err), file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m pipeline.cli index chroma ...``: load a collection's corpus into a Chroma collection.

    python -m pipeline.cli index chroma --path chroma_db --collection sample
    python -m pipeline.cli index chroma --host 127.0.0.1 --port 8000 --collection scifact-tokens \\
        dataset=beir dataset.path=data/scifact chunker=tokens retriever.model=...

The trailing ``key=value`` words are the pipeline's own overrides: ``dataset`` and ``chunker``
choose what is loaded (as ``python -m pipeline`` would chunk it), ``retriever.*`` sets the
dense encoder (``conf/retriever/dense.yaml``: its model, prefixes, cached embeddings). Every
chunk (or document, with ``chunker=none``) becomes one entry: its id (``<doc id>#<n>`` for a
chunk), its embedding, its text and the metadata ``doc_id`` and ``chunk`` (its number), so
``retriever=chroma retriever.doc_id_key=doc_id`` folds chunks into documents. Then
``python -m pipeline retriever=chroma ...`` searches the same embeddings with Chroma's HNSW,
and a sweep ``retriever=dense,chroma`` compares it with exact search.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.utils import instantiate

from pipeline import config, stages
from pipeline.cli.runner import PROG, Parser, run
from pipeline.config import Settings
from pipeline.context.chunking import chunk_numbers as numbers
from pipeline.errors import InputError, bounded_int, check_output_folder
from retrievers.dense import DenseRetriever

#: Chroma's rule for a collection's name (chromadb 1.5's validation, checked here before the
#: corpus is encoded): 3-512 of [a-zA-Z0-9._-], starting and ending with a letter or digit, no
#: "..", not an IPv4 address.
_COLLECTION_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]")
_IPV4 = re.compile(r"([0-9]{1,3}\.){3}[0-9]{1,3}")


def collection_name(text: str) -> str:
    """An argparse ``type=`` for ``--collection``: a name Chroma accepts (:data:`_COLLECTION_NAME`)."""
    if not _COLLECTION_NAME.fullmatch(text) or ".." in text or _IPV4.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Chroma collection name: 3-512 of [a-zA-Z0-9._-], "
                                         "starting and ending with a letter or digit, no '..', not an IP address")
    return text


def dense_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` with ``retriever=dense`` first unless they choose a retriever."""
    overrides = list(overrides)
    return overrides if any(o.startswith("retriever=") for o in overrides) else ["retriever=dense", *overrides]


def build_parser() -> Parser:
    parser = Parser(prog=f"{PROG} index", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="store", required=True)
    chroma = sub.add_parser("chroma", help="load the corpus into a Chroma collection")
    where = chroma.add_mutually_exclusive_group(required=True)
    where.add_argument("--path", help="a local persistent Chroma folder (created if absent)")
    where.add_argument("--host", help="a Chroma server (chroma run --path DIR --port P)")
    chroma.add_argument("--port", type=bounded_int(1, 65535, "a port"), default=8000)
    chroma.add_argument("--collection", required=True, type=collection_name,
                        help="the collection's name (3-512 of [a-zA-Z0-9._-])")
    chroma.add_argument("--space", default="cosine", choices=("cosine", "ip", "l2"), help="HNSW distance")
    chroma.add_argument("--replace", action="store_true", help="delete the collection first if it exists")
    chroma.add_argument("overrides", nargs="*", help="dataset=..., chunker=..., retriever.model=... (key=value)")
    return parser


def load_chroma(args: argparse.Namespace) -> str:
    """Chunk and encode the configured corpus and write it into the Chroma collection; the line to print."""
    from retrievers.chroma import connect, encoder_settings, write_collection  # loads pandas: not for --help

    if args.path is not None:
        check_output_folder(args.path, "--path")  # before the corpus is encoded
    settings = Settings.of(config.compose(dense_overrides(args.overrides)))
    if args.path is None:  # a server that is down fails before the corpus is encoded
        connect(host=args.host, port=args.port)
    dense = stages.computing(lambda: instantiate(settings.retriever))
    if not isinstance(dense, DenseRetriever):
        raise InputError(f"{PROG} index encodes with the dense retriever, not {type(dense).__name__}: "
                         "leave retriever= out, set retriever.model=... instead")
    collection = stages.load(settings)
    stage = stages.chunk(settings, collection)
    if stage is not None and stage.is_chunked:
        chunks = stage.chunks
        ids, texts = list(chunks.ids), list(chunks.texts)
        numbers = chunk_numbers(chunks.doc_of_chunk)
        metadatas = [{"doc_id": collection.doc_ids[d], "chunk": n} for d, n in zip(chunks.doc_of_chunk.tolist(),
                                                                                  numbers)]
    else:
        ids, texts = list(collection.doc_ids), list(collection.doc_texts)
        metadatas = [{"doc_id": d, "chunk": 0} for d in ids]
    if args.path is not None:
        Path(args.path).mkdir(parents=True, exist_ok=True)
    client = connect(path=args.path, host=args.host, port=args.port)
    if not args.replace and args.collection in {c.name for c in client.list_collections()}:
        raise InputError(f"Chroma collection {args.collection!r} exists; pass --replace to load it again")
    embeddings = dense.cached_embeddings("docs", ids, texts, dense.doc_prefix)
    write_collection(client, args.collection, ids, embeddings, metadatas, documents=texts, space=args.space,
                     encoder=encoder_settings(dense), replace=args.replace)
    place = args.path if args.path is not None else f"{args.host}:{args.port}"
    kind = "chunks" if stage is not None and stage.is_chunked else "documents"
    search = (f"retriever.path={args.path}" if args.path is not None
              else f"retriever.host={args.host} retriever.port={args.port}")
    fold = " retriever.doc_id_key=doc_id" if kind == "chunks" else ""
    return (f"chroma collection {args.collection!r} at {place}: {len(ids)} {kind} of {collection.n_docs} documents "
            f"of {collection.name}, dim {embeddings.shape[1] if embeddings.size else 0}, space {args.space}\n"
            f"search it: python -m pipeline retriever=chroma {search} retriever.collection={args.collection}{fold}")


def chunk_numbers(doc_of_chunk: Any) -> list[int]:
    return numbers(doc_of_chunk).tolist()


def index(args: argparse.Namespace) -> None:
    print(load_chroma(args))


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), index, argv)

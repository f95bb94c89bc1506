"""Loaders of collections from files: a BEIR folder, TREC-style files, the bundled sample,
and a corpus with queries but no judgments yet (for pooling)."""

from __future__ import annotations

import dataclasses
import hashlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from pipeline.errors import InputError
from pipeline.io.collection.assemble import Parts, collect_docs, collect_queries, hash_str, load_parts
from pipeline.io.collection.base import Collection, DocRecord
from pipeline.io.collection.filetexts import FileTexts, file_stamp
from pipeline.io.collection.records import detect_format, jsonl_docs, jsonl_queries, read_corpus, read_queries
from pipeline.io.formats import judgment_line, read_qrels
from pipeline.io.readers import require_file
from pipeline.metrics import Qrels

#: ``load_beir(lazy_texts=None)`` reads the texts of a plain corpus.jsonl at least this big
#: from the file when they are needed, instead of holding them (see FileTexts).
LAZY_TEXTS_MIN_BYTES = 16 * 2**20

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample"


def _first_existing(folder: Path, names: tuple[str, ...], what: str) -> Path:
    for candidate in names:
        path = folder / candidate
        if path.is_file():
            return path
    raise InputError(f"no {what} file ({' or '.join(names)}) in the dataset folder", folder)


def _beir_files(folder: Path, split: str) -> tuple[Path, Path, Path]:
    """(corpus, queries, qrels) of a BEIR folder; InputError naming what is missing."""
    if not folder.exists():
        raise InputError("dataset folder not found", folder)
    if not folder.is_dir():
        raise InputError("dataset path is a file, expected a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)", folder)
    corpus = _first_existing(folder, ("corpus.jsonl", "corpus.jsonl.gz"), "corpus")
    queries = _first_existing(folder, ("queries.jsonl", "queries.jsonl.gz"), "queries")
    qrels = folder / "qrels" / f"{split}.tsv"
    if not qrels.is_file() and qrels.with_suffix(".tsv.gz").is_file():
        qrels = qrels.with_suffix(".tsv.gz")
    if not qrels.is_file():
        available = sorted(p.name.split(".")[0] for p in (folder / "qrels").glob("*.tsv*"))
        hint = f"available splits: {', '.join(available)}" if available else "the qrels folder has no .tsv file"
        raise InputError(f"no qrels for split {split!r} ({hint})", qrels)
    return corpus, queries, qrels


def load_beir(
    path: str | Path,
    split: str = "test",
    name: str | None = None,
    title_field: str | None = "title",
    text_field: str = "text",
    join: str = " ",
    strict: bool = False,
    lazy_texts: bool | None = None,
) -> Collection:
    """Load a BEIR folder: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv[.gz]``.

    Document text is ``title + join + text`` (just one of them when the other is empty;
    ``title_field=None`` ignores titles). Only the queries judged in ``qrels/<split>.tsv``
    are evaluated, in the order of ``queries.jsonl``. Judgments naming an unknown document
    are kept with ``doc_idx=-1`` (they count in R, as in trec_eval) and judgments of a query
    missing from ``queries.jsonl`` are dropped; both are counted in ``report`` and logged,
    and ``strict=True`` turns them into errors. ``name`` defaults to the folder name.

    ``lazy_texts``: the document texts of a plain (not gzipped) ``corpus.jsonl`` are read
    from the file when needed (:class:`FileTexts`) instead of held in memory: ``None`` (the
    default) does so for a file of ``LAZY_TEXTS_MIN_BYTES`` (16 MiB) or more, ``True``
    always, ``False`` never. The collection, its digest and every text are the same.
    """
    folder = Path(path).expanduser()
    corpus, queries_path, qrels_path = _beir_files(folder, split)
    parts = _file_parts(
        name=name or folder.resolve().name,
        source=str(folder),
        corpus=corpus,
        docs=lambda: jsonl_docs(corpus, title_field, text_field, join),
        queries=queries_path,
        query_records=lambda: jsonl_queries(queries_path),
        qrels=qrels_path,
        strict=strict,
    )
    if corpus.suffix != ".gz" and lazy_texts is not False:
        stamp = file_stamp(corpus)
        if lazy_texts or stamp[2] >= LAZY_TEXTS_MIN_BYTES:
            parts = _with_lazy_texts(parts, corpus, stamp, title_field, text_field, join)
    return load_parts(parts)


def _with_lazy_texts(parts: Parts, corpus: Path, stamp: tuple[int, int, int, int], title_field: str | None,
                     text_field: str, join: str) -> Parts:
    """``parts`` reading the corpus with byte offsets, its texts left in the file (FileTexts)."""
    offsets = array("q")

    def docs() -> Iterator[DocRecord]:
        del offsets[:]  # a second read (to name a duplicate id's lines) records them again
        return jsonl_docs(corpus, title_field, text_field, join, offsets)

    def texts_from(doc_ids: list[str]) -> FileTexts:
        if file_stamp(corpus) != stamp:
            raise InputError("corpus file changed while it was being read; run again", corpus)
        return FileTexts(corpus, np.frombuffer(offsets, np.int64).copy(), stamp[2], stamp, doc_ids,
                         title_field, text_field, join)

    return dataclasses.replace(parts, docs=docs, texts_from=texts_from)


def load_trec(
    qrels: str | Path,
    queries: str | Path,
    corpus: str | Path,
    name: str | None = None,
    strict: bool = False,
    corpus_format: str = "auto",
    queries_format: str = "auto",
    title_field: str | None = "title",
    text_field: str = "text",
    join: str = " ",
) -> Collection:
    """Load TREC-style files: qrels (``qid iter docid grade`` or BEIR TSV), queries, corpus.

    Queries: TSV ``id<TAB>text`` or JSONL (``_id``, ``text``). Corpus: JSONL (``_id``,
    ``title_field``, ``text_field``) or TSV ``id<TAB>text`` / ``id<TAB>title<TAB>text``.
    ``*_format`` is ``auto`` (extension ``.jsonl``/``.tsv``, else the first character), ``jsonl``
    or ``tsv``; ``.gz`` works for every file; a TSV header line such as ``id<TAB>text`` is
    recognised and skipped. Same rules as :func:`load_beir`; ``name`` defaults to the name
    of the folder holding the corpus.
    """
    corpus_path = require_file(corpus, "corpus")
    queries_path = require_file(queries, "queries")
    qrels_path = require_file(qrels, "qrels")
    corpus_fmt = detect_format(corpus_path, corpus_format, "corpus")
    queries_fmt = detect_format(queries_path, queries_format, "queries")
    return load_parts(
        _file_parts(
            name=name or corpus_path.resolve().parent.name,
            source=str(corpus_path),
            corpus=corpus_path,
            docs=lambda: read_corpus(corpus_path, corpus_fmt, title_field, text_field, join),
            queries=queries_path,
            query_records=lambda: read_queries(queries_path, queries_fmt),
            qrels=qrels_path,
            strict=strict,
        )
    )


def _file_parts(
    *,
    name: str,
    source: str,
    corpus: Path,
    docs: Callable[[], Iterable[DocRecord]],
    queries: Path,
    query_records: Callable[[], Iterable[DocRecord]],
    qrels: Path,
    strict: bool,
) -> Parts:
    return Parts(
        name=name,
        source=source,
        corpus_where=corpus,
        docs=docs,
        queries_where=queries,
        queries=query_records,
        qrels_where=qrels,
        judgments=lambda: read_qrels(qrels),
        judgment_line=lambda q, d: judgment_line(qrels, q, d),
        strict=strict,
    )


def load_sample(name: str = "sample") -> Collection:
    """The bundled sample collection (``pipeline/sample``, a BEIR folder; see its README)."""
    return load_beir(SAMPLE_DIR, split="test", name=name)


def load_unjudged(
    queries: str | Path,
    corpus: str | Path,
    name: str | None = None,
    corpus_format: str = "auto",
    queries_format: str = "auto",
    title_field: str | None = "title",
    text_field: str = "text",
    join: str = " ",
) -> Collection:
    """A corpus and queries nobody has judged yet (what pooling starts from): every query of
    the queries file is kept, in file order, and the qrels are empty.

    Files and formats as :func:`load_trec` (the same readers and rules: duplicate ids are
    errors, ``.gz`` works); ``name`` defaults to the name of the folder holding the corpus.
    The digest covers the documents and the queries; ``report`` is empty.
    """
    corpus_path, queries_path = require_file(corpus, "corpus"), require_file(queries, "queries")
    corpus_fmt = detect_format(corpus_path, corpus_format, "corpus")
    queries_fmt = detect_format(queries_path, queries_format, "queries")
    found = collect_queries(read_queries(queries_path, queries_fmt), queries_path)
    if not found:
        raise InputError("queries file has no queries", queries_path)
    hasher = hashlib.sha256()

    def docs() -> Iterator[DocRecord]:
        return read_corpus(corpus_path, corpus_fmt, title_field, text_field, join)

    doc_ids, doc_texts, _ = collect_docs(docs(), docs, corpus_path, hasher)
    if not doc_ids:
        raise InputError("corpus has no documents", corpus_path)
    for qid, (text, _) in found.items():
        hash_str(hasher.update, qid, text)
    empty = np.zeros(0, np.int64)
    return Collection(name or corpus_path.resolve().parent.name, doc_ids, doc_texts, list(found),
                      [t for t, _ in found.values()], Qrels(query_idx=empty, doc_idx=empty, grade=empty),
                      hasher.hexdigest(), str(corpus_path))

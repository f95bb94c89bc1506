"""The loaders (the ``_target_`` of ``conf/dataset/*.yaml``): a BEIR folder, TREC-style files,
the bundled sample, an ``ir_datasets`` id, and a corpus with queries but no judgments (pooling)."""

from __future__ import annotations

import dataclasses
import hashlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.errors import InputError
from pipeline.io.collection.assemble import Parts, collect_docs, collect_queries, hash_str, load_parts
from pipeline.io.collection.records import (Collection, DocRecord, FileStamp, FileTexts, as_id, as_text,
                                            detect_format, file_stamp, join_title, jsonl_docs, jsonl_records,
                                            read_corpus, read_queries)
from pipeline.io.formats import QrelsFile, dedupe_judgments, judgment_line, read_qrels
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


def load_beir(path: str | Path, split: str = "test", name: str | None = None, title_field: str | None = "title",
              text_field: str = "text", join: str = " ", strict: bool = False,
              lazy_texts: bool | None = None) -> Collection:
    """Load a BEIR folder: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv[.gz]``.

    Document text is ``title + join + text`` (``title_field=None`` ignores titles). Only the
    queries judged in ``qrels/<split>.tsv`` are evaluated; judgments of unknown documents and
    queries are counted in ``report`` (the rules of ``assemble``), and ``strict=True`` turns
    them into errors. ``name`` defaults to the folder name.

    ``lazy_texts``: the document texts of a plain (not gzipped) ``corpus.jsonl`` are read
    from the file when needed (:class:`FileTexts`) instead of held in memory: ``None`` (the
    default) does so for a file of ``LAZY_TEXTS_MIN_BYTES`` (16 MiB) or more, ``True``
    always, ``False`` never. The collection, its digest and every text are the same.
    """
    folder = Path(path).expanduser()
    corpus, queries_path, qrels_path = _beir_files(folder, split)
    parts = _file_parts(name=name or folder.resolve().name, source=str(folder), corpus=corpus,
                        docs=lambda: jsonl_docs(corpus, title_field, text_field, join), queries=queries_path,
                        query_records=lambda: jsonl_records(queries_path, "queries", "query", "text"),
                        qrels=qrels_path, strict=strict)
    if corpus.suffix != ".gz" and lazy_texts is not False:
        stamp = file_stamp(corpus)
        if lazy_texts or stamp[2] >= LAZY_TEXTS_MIN_BYTES:
            parts = _with_lazy_texts(parts, corpus, stamp, title_field, text_field, join)
    return load_parts(parts)


def _with_lazy_texts(parts: Parts, corpus: Path, stamp: FileStamp, title_field: str | None, text_field: str,
                     join: str) -> Parts:
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


def load_trec(qrels: str | Path, queries: str | Path, corpus: str | Path, name: str | None = None,
              strict: bool = False, corpus_format: str = "auto", queries_format: str = "auto",
              title_field: str | None = "title", text_field: str = "text", join: str = " ") -> Collection:
    """Load TREC-style files: qrels (``qid iter docid grade`` or BEIR TSV), queries, corpus.

    Queries and corpus are JSONL or TSV (``records``); ``*_format`` is ``auto`` (extension
    ``.jsonl``/``.tsv``, else the first character), ``jsonl`` or ``tsv``; ``.gz`` works for every
    file. Same rules as :func:`load_beir`; ``name`` defaults to the name of the folder holding
    the corpus.
    """
    corpus_path = require_file(corpus, "corpus")
    queries_path = require_file(queries, "queries")
    qrels_path = require_file(qrels, "qrels")
    corpus_fmt = detect_format(corpus_path, corpus_format, "corpus")
    queries_fmt = detect_format(queries_path, queries_format, "queries")
    return load_parts(_file_parts(
        name=name or corpus_path.resolve().parent.name, source=str(corpus_path), corpus=corpus_path,
        docs=lambda: read_corpus(corpus_path, corpus_fmt, title_field, text_field, join), queries=queries_path,
        query_records=lambda: read_queries(queries_path, queries_fmt), qrels=qrels_path, strict=strict))


def _file_parts(*, name: str, source: str, corpus: Path, docs: Callable[[], Iterable[DocRecord]], queries: Path,
                query_records: Callable[[], Iterable[DocRecord]], qrels: Path, strict: bool) -> Parts:
    """The parts of a collection in files, its judgments in a TREC or BEIR qrels file."""
    return Parts(name=name, source=source, corpus_where=corpus, docs=docs, queries_where=queries,
                 queries=query_records, qrels_where=qrels, judgments=lambda: read_qrels(qrels),
                 judgment_line=lambda q, d: judgment_line(qrels, q, d), strict=strict)


def load_sample(name: str = "sample") -> Collection:
    """The bundled sample collection (``pipeline/sample``, a BEIR folder; see its README)."""
    return load_beir(SAMPLE_DIR, split="test", name=name)


def load_unjudged(queries: str | Path, corpus: str | Path, name: str | None = None, corpus_format: str = "auto",
                  queries_format: str = "auto", title_field: str | None = "title", text_field: str = "text",
                  join: str = " ") -> Collection:
    """A corpus and queries nobody has judged yet (what pooling starts from): every query of
    the queries file is kept, in file order, and the qrels are empty. Files, formats and
    ``name`` as :func:`load_trec`; the digest covers the documents and the queries, ``report``
    is empty."""
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


def load_ir_datasets(id: str, name: str | None = None, strict: bool = False, title_field: str | None = "title",
                     text_field: str = "text", join: str = " ") -> Collection:
    """Load any ``ir_datasets`` id (e.g. ``beir/scifact/test``) with the same rules as the files.

    Needs the optional extra ``ir_datasets`` (imported here, not at module import). The
    dataset must provide docs, queries and qrels and already be downloaded or be
    downloadable. Document text is ``title + join + text`` when the document type has those
    fields, else its ``default_text()``. Errors name ``ir_datasets:<id>/<part>`` and the
    1-based record number. ``name`` defaults to the id.
    """
    dataset = _dataset(id)
    where = f"ir_datasets:{id}"
    positions: dict[tuple[str, str], int] = {}
    parts = Parts(name=name or id, source=where, corpus_where=f"{where}/docs",
                  docs=lambda: _doc_records(dataset, f"{where}/docs", title_field, text_field, join),
                  queries_where=f"{where}/queries", queries=lambda: _query_records(dataset, f"{where}/queries"),
                  qrels_where=f"{where}/qrels", judgments=_judgments_reader(dataset, f"{where}/qrels", positions),
                  judgment_line=lambda q, d: positions.get((q, d)), strict=strict)
    try:
        return load_parts(parts)
    except (OSError, EOFError) as exc:  # missing download, no network, unreadable cache
        raise InputError(f"ir_datasets could not provide {id!r}: {exc}") from None


def _dataset(id: str) -> Any:
    """The ``ir_datasets`` dataset ``id``; InputError when the package, the id or a part is missing."""
    try:
        import ir_datasets
    except ImportError:
        raise InputError(
            "the ir_datasets package is not installed (pip install 'rag-retrieval-eval[ir_datasets]')"
        ) from None
    try:
        dataset = ir_datasets.load(id)
    except KeyError:
        raise InputError(f"unknown ir_datasets id {id!r}") from None
    for part in ("docs", "queries", "qrels"):
        if not getattr(dataset, f"has_{part}")():
            raise InputError(f"ir_datasets id {id!r} has no {part}")
    return dataset


def _doc_records(dataset: Any, where: str, title_field: str | None, text_field: str, join: str) -> Iterator[DocRecord]:
    for no, doc in enumerate(dataset.docs_iter(), start=1):
        fields = doc._fields
        if text_field in fields:
            text = as_text(getattr(doc, text_field), text_field, where, no)
            has_title = title_field and title_field in fields
            title = as_text(getattr(doc, title_field), title_field, where, no) if has_title else ""
            text = join_title(title, text, join)
        elif hasattr(doc, "default_text"):
            text = doc.default_text()
        else:
            raise InputError(f"document type {type(doc).__name__} has no {text_field!r} field", where, no)
        yield no, as_id(doc.doc_id, "doc_id", where, no), text


def _query_records(dataset: Any, where: str) -> Iterator[DocRecord]:
    for no, query in enumerate(dataset.queries_iter(), start=1):
        text = as_text(query.text, "text", where, no) if "text" in query._fields else query.default_text()
        yield no, as_id(query.query_id, "query_id", where, no), text


def _judgments_reader(dataset: Any, where: str, positions: dict[tuple[str, str], int]) -> Callable[[], QrelsFile]:
    """A function reading the dataset's judgments (deduplicated by the qrels files' rule);
    it records each (query, document)'s first record number in ``positions``."""

    def judgments() -> QrelsFile:
        qids: list[str] = []
        dids: list[str] = []
        grades: list[int] = []
        for no, qrel in enumerate(dataset.qrels_iter(), start=1):
            qids.append(str(qrel.query_id))
            dids.append(str(qrel.doc_id))
            grades.append(int(qrel.relevance))
            positions.setdefault((qids[-1], dids[-1]), no)
        return dedupe_judgments(pa.array(qids, pa.string()), pa.array(dids, pa.string()), np.array(grades, np.int64),
                                where, np.arange(1, len(qids) + 1, dtype=np.int64), position_name="at judgment")

    return judgments

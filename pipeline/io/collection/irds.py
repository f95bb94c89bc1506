"""Loading an ``ir_datasets`` id with the same rules as files (the optional extra ``ir_datasets``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.errors import InputError
from pipeline.io.collection.assemble import Parts, load_parts
from pipeline.io.collection.base import Collection, DocRecord
from pipeline.io.collection.records import as_id, as_text, join_title
from pipeline.io.formats import QrelsFile, dedupe_judgments


def load_ir_datasets(
    id: str,
    name: str | None = None,
    strict: bool = False,
    title_field: str | None = "title",
    text_field: str = "text",
    join: str = " ",
) -> Collection:
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
    parts = Parts(
        name=name or id,
        source=where,
        corpus_where=f"{where}/docs",
        docs=lambda: _doc_records(dataset, f"{where}/docs", title_field, text_field, join),
        queries_where=f"{where}/queries",
        queries=lambda: _query_records(dataset, f"{where}/queries"),
        qrels_where=f"{where}/qrels",
        judgments=_judgments_reader(dataset, f"{where}/qrels", positions),
        judgment_line=lambda q, d: positions.get((q, d)),
        strict=strict,
    )
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
            title = ""
            if title_field and title_field in fields:
                title = as_text(getattr(doc, title_field), title_field, where, no)
            text = join_title(title, text, join)
        elif hasattr(doc, "default_text"):
            text = doc.default_text()
        else:
            raise InputError(f"document type {type(doc).__name__} has no {text_field!r} field", where, no)
        yield no, as_id(doc.doc_id, "doc_id", where, no), text


def _query_records(dataset: Any, where: str) -> Iterator[DocRecord]:
    for no, query in enumerate(dataset.queries_iter(), start=1):
        if "text" in query._fields:
            text = as_text(query.text, "text", where, no)
        else:
            text = query.default_text()
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
        return dedupe_judgments(
            pa.array(qids, pa.string()),
            pa.array(dids, pa.string()),
            np.array(grades, np.int64),
            where,
            np.arange(1, len(qids) + 1, dtype=np.int64),
            position_name="at judgment",
        )

    return judgments

"""The :class:`Collection` every loader returns, and the conventions all loaders share."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Sequence

from pipeline.metrics import Qrels


@dataclass(frozen=True)
class Collection:
    """Documents, evaluated queries and their judgments, with a digest of all of them.

    ``qrels`` holds integer indices: ``query_idx`` into ``query_ids``, ``doc_idx`` into
    ``doc_ids`` (-1 for a judged document missing from the corpus). ``digest`` changes when
    any document, query or judgment changes (cache keys, MLflow).
    """

    name: str
    doc_ids: list[str]
    doc_texts: Sequence[str]  # title + " " + text (configurable per loader); a list, or FileTexts
    query_ids: list[str]  # only the queries that are evaluated (those with judgments)
    query_texts: list[str]
    qrels: Qrels  # query_idx into query_ids, doc_idx into doc_ids (-1: judged doc not in corpus)
    digest: str  # sha256 hex of the content
    source: str  # where it came from (a path or an ir_datasets id)
    report: dict[str, int] = field(default_factory=dict)  # counted soft problems, e.g. {"qrels_unknown_docs": 3}

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)


#: The keys of ``Collection.report``, each always present (0 when nothing happened).
REPORT_KEYS = (
    "empty_docs",  # documents whose text is empty or blank (kept)
    "empty_queries",  # evaluated queries whose text is empty or blank (kept)
    "duplicate_judgments",  # identical repeated (query, doc, grade) lines (one kept)
    "qrels_unknown_docs",  # judgments naming a document not in the corpus (kept, doc_idx=-1)
    "qrels_unknown_queries",  # distinct judged query ids missing from the queries file
    "qrels_dropped_judgments",  # judgments dropped because their query is missing
    "queries_without_judgments",  # queries in the file with no judgment in this split
)

#: One document or query as a reader yields it: (1-based line or record number, id, text).
DocRecord = tuple[int, str, str]

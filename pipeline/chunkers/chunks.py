"""A collection's chunks, cached like rankings: ``chunk_documents``.

Chunks are cached under ``cache_dir/arrays`` as one int64 array [n_chunks, 4] (document
index, character start, character end, tokens), keyed by a digest of the document ids and
texts and every chunker setting (with the tokenizer file's hash); the entry is verified on
read (``pipeline.io.cache``: content hash and shape) and its spans checked against the texts.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from pipeline.chunkers.splitters import Chunker, NoChunker
from pipeline.context import chunking
from pipeline.errors import InputError
from pipeline.io import cache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chunks:
    """A collection's chunks: ``doc_of_chunk`` [n_chunks], character ``start``/``end``,
    ``tokens`` per chunk, the chunk ``ids`` (``<doc id>#<n>``; ``chunker=none``: the document
    ids) and ``texts``."""

    doc_of_chunk: NDArray[np.int64]
    start: NDArray[np.int64]
    end: NDArray[np.int64]
    tokens: NDArray[np.int64]
    ids: list[str]
    texts: list[str]
    digest: str  # of the chunks (the chunk collection's digest part)

    @property
    def n_chunks(self) -> int:
        return len(self.ids)

    def per_doc(self, n_docs: int) -> NDArray[np.int64]:
        return np.bincount(self.doc_of_chunk, minlength=n_docs).astype(np.int64)


def check_spans(spans: NDArray[np.int64], texts: list[str]) -> str | None:
    """What is wrong with cached spans for these texts, or None."""
    if spans.ndim != 2 or spans.shape[1] != 4:
        return f"shape {spans.shape}"
    doc = spans[:, 0]
    if len(doc) and (doc.min() < 0 or doc.max() >= len(texts) or np.any(np.diff(doc) < 0)):
        return "document indices out of range or out of order"
    if len(texts) and not np.array_equal(np.unique(doc), np.arange(len(texts))):
        return "a document has no chunk"
    lengths = np.fromiter((len(t) for t in texts), np.int64, len(texts))
    if np.any(spans[:, 1] < 0) or np.any(spans[:, 1] > spans[:, 2]) or np.any(spans[:, 2] > lengths[doc]) \
            or np.any(spans[:, 3] < 0):
        return "a span outside its document"
    return None


def chunk_documents(chunker: Chunker, doc_ids: list[str], doc_texts: Sequence[str],
                    cache_dir: str | Path | None) -> tuple[Chunks, bool]:
    """The chunks of the documents, from the cache when it has them. Returns (chunks, hit)."""
    if not isinstance(doc_texts, list):  # pipeline.io.collection.FileTexts: read once, not once per use
        doc_texts = list(doc_texts)
    key = {"kind": "chunks", "texts": cache.texts_digest(doc_ids, doc_texts), "chunker": chunker.settings()}
    spans, hit = cache.load_or_compute_array(cache_dir, key, lambda: chunker.spans(doc_texts), shape=(None, 4))
    problem = check_spans(spans, doc_texts)
    if problem is not None:
        if not hit:
            raise RuntimeError(f"chunker {chunker.name} produced bad spans: {problem}")
        log.warning("cached chunks do not fit the documents (%s); chunking again", problem)
        spans, hit = chunker.spans(doc_texts), False
    doc, start, end = spans[:, 0], spans[:, 1], spans[:, 2]
    if isinstance(chunker, NoChunker):  # each document is its own chunk, under its own id
        ids = list(doc_ids)
    else:
        try:
            ids = chunking.chunk_ids(doc_ids, doc)
        except ValueError as err:
            raise InputError(str(err)) from None
    texts = [doc_texts[d][s:e] for d, s, e in zip(doc.tolist(), start.tolist(), end.tolist())]
    digest = hashlib.sha256(f"{key['texts']}|{cache.digest(key)}".encode()).hexdigest()
    return Chunks(doc.copy(), start.copy(), end.copy(), spans[:, 3].copy(), ids, texts, digest), hit

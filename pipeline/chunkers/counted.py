"""Chunking a large corpus with progress: the chunker's ``spans`` over slices of the documents.

Every chunker cuts each document on its own (its spans of document ``d`` depend on that
document's text only), so the spans of a slice, their document column shifted by the slice's
start, are the rows of those documents in the spans of the whole: slicing changes nothing
but lets :class:`pipeline.io.progress.Progress` report (a bar on a terminal, log lines
elsewhere) how many documents are done.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.io.progress import Progress

log = logging.getLogger(__name__)

#: Documents per slice at least (fewer calls would not matter), and slices at most.
MIN_SLICE, MAX_SLICES = 512, 100


def spans_with_progress(chunker: Any, texts: Sequence[str]) -> NDArray[np.int64]:
    """``chunker.spans(texts)``, computed slice by slice with progress (documents/s, time left)."""
    texts = texts if isinstance(texts, list) else list(texts)
    size = max(MIN_SLICE, -(-len(texts) // MAX_SLICES))
    if len(texts) <= size:
        return chunker.spans(texts)
    parts = []
    with Progress(f"chunking ({chunker.name})", len(texts), "documents", logger=log) as progress:
        for start in range(0, len(texts), size):
            part = np.array(chunker.spans(texts[start : start + size]), dtype=np.int64, copy=True)
            part[:, 0] += start
            parts.append(part)
            progress.update(min(size, len(texts) - start))
    return np.concatenate(parts)

"""A corpus -> compact integer postings, batch by batch, kept in a temporary file.

Memory stays near the size of the index, not of the token stream: documents are tokenized
a batch at a time, and each batch's tokens become compact integer postings at once (a
provisional term id, 4 bytes, and a term count, 2 bytes, per posting; a posting count per
document), written to a temporary file (:class:`Spill`), so no more than one batch's
tokens exist as Python strings. At the end the term ids are renumbered in the order of the
sorted token list (a term's id is the rank of its smallest token), which is what they have
always been: the index does not depend on the batch size or on string hashing.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retrievers.bm25.analysis import STOP_TERM, Analyzer, Vocabulary

log = logging.getLogger(__name__)


class Spill:
    """The postings of each indexing batch, kept in an unnamed temporary file (removed by the
    system when closed or when the process ends, however it ends) rather than in memory, and
    read back batch by batch, as often as asked, in the order written.

    The postings (6 bytes each) then need no room beside the memory of the tokenizing or the
    weighting phase. The file goes to the system's temporary folder (``TMPDIR``); where it
    cannot be written (a full disk) the batches stay in memory.
    """

    def __init__(self) -> None:
        self._file: Any = None
        self._batches: list[Any] = []  # (offset, (dtype, count) x 3) in the file, or the arrays themselves
        self._warned = False

    def open(self) -> bool:
        """Create the file now (as ``append`` would); False if it cannot be written."""
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="bm25-postings-")
            return True
        except OSError as exc:
            self._warn(exc)
            return False

    def _warn(self, exc: OSError) -> None:
        if not self._warned:
            log.warning("BM25: cannot spill postings to a temporary file (%s); keeping them in memory", exc)
            self._warned = True

    def append(self, *arrays: NDArray) -> None:
        """Keep one batch's arrays (in the file if it can be written, else in memory)."""
        if self._file is not None or self.open():
            try:
                offset = self._file.seek(0, os.SEEK_END)
                for a in arrays:
                    self._file.write(memoryview(np.ascontiguousarray(a)).cast("B"))
                self._batches.append((offset, [(a.dtype, len(a)) for a in arrays]))
                return
            except OSError as exc:
                self._warn(exc)
        self._batches.append(list(arrays))

    def __iter__(self) -> Iterator[tuple[NDArray, ...]]:
        for batch in self._batches:
            if isinstance(batch, list):
                yield tuple(batch)
                continue
            offset, shapes = batch
            self._file.seek(offset)
            out = []
            for dtype, count in shapes:
                data = self._file.read(dtype.itemsize * count)
                if len(data) != dtype.itemsize * count:
                    raise OSError(f"the postings' temporary file is short ({len(data)} bytes where "
                                  f"{dtype.itemsize * count} were written)")
                out.append(np.frombuffer(data, dtype))
            yield tuple(out)

    def close(self) -> None:
        """Remove the file and forget the batches."""
        if self._file is not None:
            self._file.close()
        self._batches.clear()


class PostingsWriter:
    """Batches of documents -> their postings in a :class:`Spill`, under provisional term ids
    (the order of first appearance); :meth:`finish` gives the final ids.

    Each batch appended to the spill is (provisional term of each posting, postings of each
    document, tf of each posting), sorted by document, then provisional term.
    """

    def __init__(self, analyzer: Analyzer, spill: Spill):
        self.analyzer = analyzer
        self.spill = spill
        self._token_ids: dict[str, int] = {}  # raw token -> provisional token id (first appearance)
        self._token_term = np.zeros(0, np.int64)  # provisional token id -> provisional term id, or STOP_TERM
        self._term_ids: dict[str, int] = {}  # term (stem) -> provisional term id (first appearance)

    def add(self, texts: Sequence[str]) -> NDArray[np.int64]:
        """Append the postings of ``texts``; returns each text's length in terms."""
        split = self.analyzer.split(texts)
        self._learn(set(chain.from_iterable(split)).difference(self._token_ids))
        lengths = np.fromiter(map(len, split), np.int64, count=len(split))
        flat = np.fromiter(map(self._token_ids.__getitem__, chain.from_iterable(split)), np.int32,
                           count=int(lengths.sum()))
        del split
        term = self._token_term[flat]
        docs = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        keep = term != STOP_TERM
        term, docs = term[keep], docs[keep]
        doc_len = np.bincount(docs, minlength=len(lengths))
        # one posting per (document, term): sorted by document, then term
        width = max(len(self._term_ids), 1)
        keys, counts = np.unique(docs * width + term, return_counts=True)
        tf_type = np.uint16 if counts.max(initial=0) <= np.iinfo(np.uint16).max else np.int32
        self.spill.append((keys % width).astype(np.int32),
                          np.bincount(keys // width, minlength=len(lengths)).astype(np.int32),
                          counts.astype(tf_type))
        return doc_len

    def _learn(self, new: set[str]) -> None:
        """Give tokens not seen before their provisional token and term ids."""
        if not new:
            return
        new_tokens = list(new)
        n_known = len(self._token_ids)
        self._token_ids.update(zip(new_tokens, range(n_known, n_known + len(new_tokens))))
        terms = self.analyzer.terms_of(new_tokens)
        added = [STOP_TERM if (term := terms[t]) is None else self._term_ids.setdefault(term, len(self._term_ids))
                 for t in new_tokens]
        self._token_term = np.concatenate([self._token_term, np.asarray(added, np.int64)])

    def finish(self) -> tuple[Vocabulary, NDArray[np.int32]]:
        """(the vocabulary: term -> final id, the final id of each provisional term id); the
        token dictionaries are dropped. Final ids: walk the tokens in sorted order, numbering
        terms as they first occur."""
        tokens = list(self._token_ids)
        self._token_ids = {}
        term_names = list(self._term_ids)
        self._term_ids = {}
        prov_of = self._token_term.tolist()
        self._token_term = np.zeros(0, np.int64)
        n_terms = 0
        final_ids = [-1] * len(term_names)  # provisional term id -> final term id
        for i in sorted(range(len(tokens)), key=tokens.__getitem__):
            prov = prov_of[i]
            if prov != STOP_TERM and final_ids[prov] < 0:
                final_ids[prov] = n_terms
                n_terms += 1
        del tokens, prov_of
        return Vocabulary(term_names, final_ids), np.asarray(final_ids, np.int32)


def tokenize_corpus(
    analyzer: Analyzer, doc_texts: Sequence[str], batch: int, spill: Spill
) -> tuple[Vocabulary, NDArray[np.int32], NDArray[np.float64]]:
    """Every document's postings into ``spill``, ``batch`` documents at a time (``doc_texts``
    is read in slices: it may be a ``pipeline.io.collection.FileTexts``). Returns the
    vocabulary, the final id of each provisional term and each document's length in terms."""
    n_docs = len(doc_texts)
    writer = PostingsWriter(analyzer, spill)
    doc_len = np.zeros(n_docs, np.float64)
    for start in range(0, n_docs, batch):
        lengths = writer.add(doc_texts[start : start + batch])
        doc_len[start : start + len(lengths)] = lengths
    vocab, final = writer.finish()
    return vocab, final, doc_len

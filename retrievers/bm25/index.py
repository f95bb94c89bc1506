"""The BM25 index: the variants' formulas, and a corpus -> postings -> the weight matrix ``W``.

Scoring follows the formulas of bm25s (Lù 2024), which follow Kamphuis et al. 2020,
"Which BM25 Do You Mean? A Large-Scale Reproducibility Study of Scoring Variants" (ECIR):

=========  =======================================  ==================================================
method     idf(t)                                   tf component (tf, L = k1 * (1 - b + b * dl/avgdl))
=========  =======================================  ==================================================
robertson  log(max(1, (N - df + .5) / (df + .5)))   tf / (L + tf)                 Robertson & Zaragoza 2009
lucene     log(1 + (N - df + .5) / (df + .5))       tf / (L + tf)                 Lucene >= 8
atire      log(N / df)                              (k1 + 1) tf / (L + tf)        Trotman et al. 2012
bm25l      log((N + 1) / (df + .5))                 (k1 + 1)(c + d) / (k1 + c + d), c = tf k1 / L (*)
                                                                                  Lv & Zhai 2011 (BM25L)
bm25+      log((N + 1) / df)                        (k1 + 1) tf / (L + tf) + d    Lv & Zhai 2011 (BM25+)
=========  =======================================  ==================================================

``d`` is ``delta``; (*) that is, c = tf / (1 - b + b dl/avgdl). BM25L and BM25+ give a
document a positive weight for a query term it does not contain (the tf component at
tf = 0); that part is the same for every document, so ``W`` [n_terms, n_docs] (float32)
stores ``weight(tf) - weight(0)`` and the constant is added back per query (``WITH_DELTA``).

Memory stays near the size of the index, not of the token stream: documents are tokenized
a batch at a time, and each batch's tokens become integer postings at once (a provisional
term id, 4 bytes, and a term count, 2 bytes, per posting; a posting count per document),
written to a temporary file (:class:`Spill`). At the end the term ids are renumbered in the
order of the sorted token list (a term's id is the rank of its smallest token), so the index
depends neither on the batch size nor on string hashing. The weights are then written batch
by batch straight into their places in the CSR arrays (rows sized from the document
frequencies): no COO copy and no second CSR exist, so the build peaks at about the index
(8 bytes a posting) plus one batch of postings.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from pipeline.io.progress import Progress
from retrievers.bm25.analysis import STOP_TERM, Analyzer, Vocabulary

log = logging.getLogger(__name__)


def idf_robertson(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """Robertson & Zaragoza 2009, floored at 0 (terms in over half the documents weigh nothing)."""
    return np.log(np.maximum((n_docs - df + 0.5) / (df + 0.5), 1.0))


def idf_lucene(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """Lucene's idf, always positive (Kamphuis et al. 2020)."""
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


def idf_atire(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """ATIRE (Trotman, Jia & Crane 2012): plain log(N / df)."""
    return np.log(n_docs / df)


def idf_bm25l(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """BM25L (Lv & Zhai 2011, "When documents are very long, BM25 fails!", SIGIR)."""
    return np.log((n_docs + 1.0) / (df + 0.5))


def idf_bm25plus(df: NDArray[np.float64], n_docs: int) -> NDArray[np.float64]:
    """BM25+ (Lv & Zhai 2011, "Lower-bounding term frequency normalization", CIKM)."""
    return np.log((n_docs + 1.0) / df)


def tfc_robertson(tf, len_norm, k1: float, delta: float):
    """tf / (tf + k1 (1 - b + b dl/avgdl)): Robertson & Zaragoza 2009 without the (k1+1) factor."""
    return tf / (k1 * len_norm + tf)


def tfc_atire(tf, len_norm, k1: float, delta: float):
    """(k1 + 1) tf / (tf + k1 (1 - b + b dl/avgdl)): the classic Okapi form (ATIRE, rank_bm25)."""
    return tf * (k1 + 1.0) / (k1 * len_norm + tf)


def tfc_bm25l(tf, len_norm, k1: float, delta: float):
    """BM25L: c = tf / (1 - b + b dl/avgdl); (k1 + 1)(c + delta) / (k1 + c + delta) (Lv & Zhai 2011)."""
    c = tf / len_norm
    return (k1 + 1.0) * (c + delta) / (k1 + c + delta)


def tfc_bm25plus(tf, len_norm, k1: float, delta: float):
    """BM25+: the Okapi tf component plus delta, so any occurrence beats none (Lv & Zhai 2011)."""
    return tf * (k1 + 1.0) / (k1 * len_norm + tf) + delta


#: method name -> (idf function, tf component function)
VARIANTS: dict[str, tuple[Callable, Callable]] = {
    "robertson": (idf_robertson, tfc_robertson),
    "lucene": (idf_lucene, tfc_robertson),
    "atire": (idf_atire, tfc_atire),
    "bm25l": (idf_bm25l, tfc_bm25l),
    "bm25+": (idf_bm25plus, tfc_bm25plus),
}
WITH_DELTA = ("bm25l", "bm25+")  # variants that score absent terms (and use delta)


class Spill:
    """Batches of arrays in an unnamed temporary file in ``TMPDIR`` (removed by the system when
    closed or when the process ends, however it ends), read back as often as asked, in the
    order written. Where the file cannot be written (a full disk) they stay in memory.
    """

    def __init__(self) -> None:
        self._file: Any = None
        self._batches: list[Any] = []  # (offset, (dtype, count) x 3) in the file, or the arrays themselves
        self._warned = False

    def append(self, *arrays: NDArray) -> None:
        """Keep one batch's arrays (in the file if it can be written, else in memory)."""
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="bm25-postings-")
            offset = self._file.seek(0, os.SEEK_END)
            for a in arrays:
                self._file.write(memoryview(np.ascontiguousarray(a)).cast("B"))
            self._batches.append((offset, [(a.dtype, len(a)) for a in arrays]))
            return
        except OSError as exc:
            if not self._warned:
                log.warning("BM25: cannot spill postings to a temporary file (%s); keeping them in memory", exc)
                self._warned = True
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


def tokenize_corpus(
    analyzer: Analyzer, doc_texts: Sequence[str], batch: int, spill: Spill, progress: Progress | None = None
) -> tuple[Vocabulary, NDArray[np.int32], NDArray[np.float64]]:
    """Every document's postings into ``spill``, ``batch`` documents at a time (``doc_texts``
    is read in slices: it may be a ``pipeline.io.collection.FileTexts``; ``progress`` counts
    the documents, the bulk of indexing a large corpus). Returns the
    vocabulary, the final id of each provisional term and each document's length in terms.

    Each batch in ``spill`` is (provisional term id of each posting, postings of each document,
    tf of each posting), sorted by document, then term; provisional ids follow first appearance.
    """
    token_ids: dict[str, int] = {}  # raw token -> provisional token id (first appearance)
    token_term = np.zeros(0, np.int64)  # provisional token id -> provisional term id, or STOP_TERM
    term_ids: dict[str, int] = {}  # term (stem) -> provisional term id (first appearance)
    doc_len = np.zeros(len(doc_texts), np.float64)
    for start in range(0, len(doc_texts), batch):
        split = analyzer.split(doc_texts[start : start + batch])
        new = list(set(chain.from_iterable(split)).difference(token_ids))
        token_ids.update(zip(new, range(len(token_ids), len(token_ids) + len(new))))
        stems = analyzer.terms_of(new)
        added = [STOP_TERM if (term := stems[t]) is None else term_ids.setdefault(term, len(term_ids)) for t in new]
        token_term = np.concatenate([token_term, np.asarray(added, np.int64)])
        lengths = np.fromiter(map(len, split), np.int64, count=len(split))
        flat = np.fromiter(map(token_ids.__getitem__, chain.from_iterable(split)), np.int32,
                           count=int(lengths.sum()))
        del split
        term = token_term[flat]
        docs = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        keep = term != STOP_TERM
        term, docs = term[keep], docs[keep]
        doc_len[start : start + len(lengths)] = np.bincount(docs, minlength=len(lengths))
        # one posting per (document, term): sorted by document, then term
        width = max(len(term_ids), 1)
        keys, counts = np.unique(docs * width + term, return_counts=True)
        tf_type = np.uint16 if counts.max(initial=0) <= np.iinfo(np.uint16).max else np.int32
        spill.append((keys % width).astype(np.int32),
                     np.bincount(keys // width, minlength=len(lengths)).astype(np.int32), counts.astype(tf_type))
        if progress is not None:
            progress.update(len(lengths))
    # Final ids: walk the tokens in sorted order, numbering terms as they first occur.
    tokens = list(token_ids)
    del token_ids  # the largest object left
    term_names = list(term_ids)
    prov_of = token_term.tolist()
    del term_ids, token_term
    n_terms = 0
    final_ids = [-1] * len(term_names)  # provisional term id -> final term id
    for i in sorted(range(len(tokens)), key=tokens.__getitem__):
        prov = prov_of[i]
        if prov != STOP_TERM and final_ids[prov] < 0:
            final_ids[prov] = n_terms
            n_terms += 1
    del tokens, prov_of
    return Vocabulary(term_names, final_ids), np.asarray(final_ids, np.int32), doc_len


@dataclass(frozen=True)
class BM25Weights:
    """An index: the vocabulary and the weights of its terms in its documents."""

    vocabulary: Vocabulary  # term (stem) -> term id
    matrix: sp.csr_matrix  # [n_terms, n_docs] float32, rows ascending by document
    absent: NDArray[np.float32] | None  # per-term weight at tf = 0 (BM25L/+), else None
    # [n_terms, n_docs] 1 where the term occurs; only when some stored weight is 0 (a sparse
    # product drops exact zeros, and such a document still counts as a hit)
    presence: sp.csr_matrix | None

    @property
    def n_docs(self) -> int:
        return int(self.matrix.shape[1])


def weigh(vocab: Vocabulary, final: NDArray[np.int32], doc_len: NDArray[np.float64], parts: Spill,
          method: str, k1: float, b: float, delta: float) -> BM25Weights:
    """The weights of the postings in ``parts`` (provisional term ids, mapped by ``final``)
    under ``method`` with ``k1``, ``b``, ``delta``; ``doc_len`` is each document's length."""
    n_terms, n_docs = len(vocab), len(doc_len)
    df = np.zeros(n_terms, np.int64)
    for terms_i, _, _ in parts:
        df += np.bincount(final[terms_i], minlength=n_terms)
    nnz = int(df.sum())
    index_type = np.int32 if nnz <= np.iinfo(np.int32).max else np.int64  # scipy's own choice
    indptr = np.zeros(n_terms + 1, index_type)
    np.cumsum(df, out=indptr[1:])
    avg_len = float(doc_len.mean()) if n_docs and doc_len.sum() > 0 else 1.0
    idf_fn, tfc_fn = VARIANTS[method]
    with np.errstate(divide="ignore"):
        idf = idf_fn(df.astype(np.float64), n_docs) if n_terms else np.zeros(0)
    del df
    len_norm = 1.0 - b + b * doc_len / avg_len
    absent = idf * tfc_fn(0.0, 1.0, k1, delta) if method in WITH_DELTA else None

    # The CSR arrays, filled batch by batch: within a row, each batch's documents go after
    # the earlier batches'.
    fill = indptr[:-1].astype(np.int64)  # next free slot of each row
    indices = np.empty(nnz, index_type)
    weights = np.empty(nnz, np.float32)
    doc_start = 0
    for terms_i, per_doc, tf_i in parts:
        term = final[terms_i]
        docs = np.repeat(np.arange(doc_start, doc_start + len(per_doc), dtype=index_type), per_doc)
        doc_start += len(per_doc)
        w = idf[term] * tfc_fn(tf_i.astype(np.float64), len_norm[docs], k1, delta)  # float64
        if absent is not None:
            w -= absent[term]
        # In document order within each row (sorting by (term, position) keeps it), so every
        # row ends up ascending. One sort of int64 keys is cheaper than a stable argsort.
        order = np.sort((term.astype(np.int64) << 32) | np.arange(len(term), dtype=np.int64)) & 0xFFFFFFFF
        term = term[order]
        run = np.flatnonzero(np.diff(term, prepend=-1))  # where each term's run starts
        run_len = np.diff(run, append=len(term))
        pos = fill[term] + (np.arange(len(term)) - np.repeat(run, run_len))
        indices[pos] = docs[order]
        weights[pos] = w[order]
        fill[term[run]] += run_len
        del term, docs, w, order, run, run_len, pos

    matrix = sp.csr_matrix((weights, indices, indptr), shape=(n_terms, n_docs))
    presence = None
    if (weights == 0).any():
        presence = sp.csr_matrix((np.ones(nnz, np.float32), indices, indptr), shape=(n_terms, n_docs))
    return BM25Weights(vocab, matrix, None if absent is None else absent.astype(np.float32), presence)

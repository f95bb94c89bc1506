"""The BM25 weight of every (term, document) pair, as a sparse matrix built from postings.

All BM25 work is paid at index time: the weight of every (term, document) pair is computed
once into a sparse matrix ``W`` [n_terms, n_docs] (float32; for BM25L/BM25+ the weight
minus the weight at tf = 0, see ``variants``). The weights are written batch by batch
straight into their places in the CSR arrays (rows sized from the document frequencies):
no COO copy and no second CSR exist, so the build peaks at about the index (8 bytes a
posting) plus one batch of postings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from retrievers.bm25.analysis import Vocabulary
from retrievers.bm25.postings import Spill
from retrievers.bm25.variants import VARIANTS, WITH_DELTA


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

    def weights_of(term: NDArray[np.int32], docs: NDArray, tf: NDArray) -> NDArray[np.float64]:
        w = idf[term] * tfc_fn(tf.astype(np.float64), len_norm[docs], k1, delta)  # float64
        return w if absent is None else w - absent[term]

    indices, weights = _fill_rows(final, indptr, parts, weights_of)
    matrix = sp.csr_matrix((weights, indices, indptr), shape=(n_terms, n_docs))
    presence = None
    if (weights == 0).any():
        presence = sp.csr_matrix((np.ones(nnz, np.float32), indices, indptr), shape=(n_terms, n_docs))
    return BM25Weights(vocab, matrix, None if absent is None else absent.astype(np.float32), presence)


def _fill_rows(final: NDArray[np.int32], indptr: NDArray, parts: Spill, weights_of) -> tuple[NDArray, NDArray]:
    """The CSR ``indices`` and float32 ``data`` of the rows ``indptr`` describes, written
    batch by batch: within a row, each batch's documents go after the earlier batches'."""
    nnz = int(indptr[-1])
    index_type = indptr.dtype
    fill = indptr[:-1].astype(np.int64)  # next free slot of each row
    indices = np.empty(nnz, index_type)
    weights = np.empty(nnz, np.float32)
    doc_start = 0
    for terms_i, per_doc, tf_i in parts:
        term = final[terms_i]
        docs = np.repeat(np.arange(doc_start, doc_start + len(per_doc), dtype=index_type), per_doc)
        doc_start += len(per_doc)
        w = weights_of(term, docs, tf_i)
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
    return indices, weights

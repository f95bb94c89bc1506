"""The BM25 retriever: index a corpus into a weight matrix, then rank by sparse products.

A batch of queries is one sparse product ``Q @ W`` (``Q`` holds query term counts, so a
term repeated in a query counts twice, as in bm25s and rank_bm25; ``W`` is
``BM25Weights.matrix``), and the top of each row is kept: score desc, then document index asc. From a few
thousand documents on (``BM25Retriever.sparse_top_min_docs``) each row's hits are ranked
alone (``argpartition`` over the documents that match, then a sort of ``depth`` items); on
a smaller corpus the rows go through ``base.top_k`` as one dense block. Both give the same
ranking; the first never builds a [queries, documents] matrix.

What counts as a hit: a document is returned for a query only if it contains at least one
of the query's (known) terms. Documents sharing no term are never returned, even where
BM25L/BM25+ give them a positive score; a query with no known term gets an empty row
(all ``-1``). Documents with score 0 are returned if they match (e.g. a term in more than
half the corpus has Robertson idf 0).

Defaults: ``k1=1.2, b=0.75, method=lucene``, Lucene's English stop words (bm25s ``en``),
the Snowball English stemmer, on title + text. On BEIR SciFact this gives nDCG@10 = 0.679
(Anserini's BM25-flat: 0.6789); Anserini's own defaults ``k1=0.9, b=0.4`` give 0.676 there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from pipeline.io.progress import Progress
from pipeline.ranking import Ranking, top_k, top_of_row
from retrievers.cost import array_bytes
from retrievers.bm25.analysis import STOP_TERM, TOKEN_PATTERN, UNKNOWN_TERM, Analyzer
from retrievers.bm25.index import VARIANTS, WITH_DELTA, BM25Weights, Spill, tokenize_corpus, weigh

log = logging.getLogger(__name__)


class BM25Retriever:
    """BM25 family retriever (the module docstring states the hit rule, ``index`` the formulas).

    Args:
        k1: term-frequency saturation.
        b: document-length normalization (0 = none, 1 = full).
        method: ``lucene`` | ``robertson`` | ``atire`` | ``bm25l`` | ``bm25+``.
        delta: BM25L/BM25+ lower bound (ignored by the other methods).
        stopwords: a bm25s list name (``en``...), a list of words, or None.
        stemmer: a Snowball algorithm name for PyStemmer (``english``...), or None.
    """

    prefix_stable = True  # search(depth=d) is the first d columns of search(depth=D > d)
    #: documents tokenized at once by index(): bounds the tokens held as Python strings
    index_batch = 20_000
    #: queries x documents scored at once on the dense path (64 MiB of float32)
    max_dense_cells = 1 << 24
    #: from this corpus size on, each query's hits are ranked alone (the dense path's few
    #: big numpy calls win on smaller corpora; see ``benchmarks/scale.py``)
    sparse_top_min_docs = 4_000

    def __init__(self, k1: float = 1.2, b: float = 0.75, method: str = "lucene", delta: float = 0.5,
                 stopwords: str | Sequence[str] | None = "en", stemmer: str | None = "english"):
        if method not in VARIANTS:
            raise ValueError(f"unknown BM25 method {method!r}; choose one of {', '.join(VARIANTS)}")
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1 = float(k1)
        self.b = float(b)
        self.method = method
        self.delta = float(delta)
        if stopwords is not None and not isinstance(stopwords, str):
            stopwords = [str(w) for w in stopwords]  # e.g. an OmegaConf ListConfig
        self.analyzer = Analyzer(stopwords, stemmer)
        #: the index (vocabulary and weight matrix) once index() ran
        self.weights: BM25Weights | None = None

    @property
    def n_docs(self) -> int:
        """Documents in the index (0 before index())."""
        return 0 if self.weights is None else self.weights.n_docs

    def index_size(self) -> dict[str, int]:
        """Bytes of the index in memory (``retrievers.cost``): the weight matrix, the
        vocabulary's buffers and the BM25L/+ extras; nothing on disk."""
        w = self.weights
        if w is None:
            return {}
        vocab = w.vocabulary
        return {"memory_bytes": array_bytes(w.matrix, w.absent, w.presence, getattr(vocab, "_blob", None),
                                            getattr(vocab, "_offsets", None), getattr(vocab, "_ids", None))}

    def cache_key(self) -> dict[str, Any]:
        stop = self.analyzer.stopwords_name
        return {"retriever": "bm25", "k1": self.k1, "b": self.b, "method": self.method,
                "delta": self.delta if self.method in WITH_DELTA else None,
                "stopwords": stop if stop is not None else sorted(self.analyzer.stopwords),
                "stemmer": self.analyzer.stemmer_name, "token_pattern": TOKEN_PATTERN}

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None:
        """Tokenize the corpus, ``index_batch`` documents at a time, and compute every (term,
        document) weight; memory peaks near the size of the index (the ``index`` module)."""
        if len(doc_ids) != len(doc_texts):
            raise ValueError(f"{len(doc_ids)} document ids for {len(doc_texts)} texts")
        parts = Spill()
        try:
            with Progress("BM25 indexing", len(doc_texts), "documents", logger=log) as progress:
                vocab, final, doc_len = tokenize_corpus(self.analyzer, doc_texts, self.index_batch, parts, progress)
            self.weights = weigh(vocab, final, doc_len, parts, self.method, self.k1, self.b, self.delta)
        finally:
            parts.close()
        log.info("BM25 (%s, k1=%g, b=%g) indexed %d documents, %d terms, %d postings",
                 self.method, self.k1, self.b, self.n_docs, len(vocab), self.weights.matrix.nnz)

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        """Top ``depth`` matching documents of every query, best first; ``-1`` pads."""
        self._check_indexed()
        if len(query_ids) != len(query_texts):
            raise ValueError(f"{len(query_ids)} query ids for {len(query_texts)} texts")
        q = self.query_matrix(query_texts)
        n_q = q.shape[0]
        if n_q == 0 or self.n_docs == 0:
            return top_k(np.zeros((n_q, 0), np.float32), depth)
        chunk = max(1, self.max_dense_cells // self.n_docs)
        if self.n_docs >= self.sparse_top_min_docs:
            return self._search_sparse(q, depth, chunk)
        parts = [self._search_dense(q[s : s + chunk], depth) for s in range(0, n_q, chunk)]
        return Ranking(np.concatenate([p.doc_idx for p in parts]), np.concatenate([p.scores for p in parts]))

    def query_matrix(self, query_texts: Sequence[str]) -> sp.csr_matrix:
        """[n_queries, n_terms] term counts of the queries (unknown terms dropped)."""
        w = self._check_indexed()
        split = self.analyzer.split(query_texts)
        unique = sorted(set(chain.from_iterable(split)))
        ids = {token: STOP_TERM if term is None else w.vocabulary.get(term, UNKNOWN_TERM)
               for token, term in self.analyzer.terms_of(unique).items()}
        lengths = np.fromiter(map(len, split), np.int64, count=len(split))
        flat = np.fromiter(map(ids.__getitem__, chain.from_iterable(split)), np.int64, count=int(lengths.sum()))
        rows = np.repeat(np.arange(len(split), dtype=np.int64), lengths)
        keep = flat >= 0
        q = sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (rows[keep], flat[keep])),
                          shape=(len(split), len(w.vocabulary)))
        q.sum_duplicates()
        return q

    def score_matrix(self, query_texts: Sequence[str]) -> NDArray[np.float32]:
        """Full BM25 scores [n_queries, n_docs], matching or not (for tests and analysis)."""
        w = self._check_indexed()
        q = self.query_matrix(query_texts)
        scores = np.asarray((q @ w.matrix).todense(), dtype=np.float32)
        if w.absent is not None:
            scores += (q @ w.absent)[:, None].astype(np.float32)
        return scores

    def _hits(self, q: sp.csr_matrix) -> tuple[sp.csr_matrix, NDArray[np.float32], sp.csr_matrix | None]:
        """(``q @ W`` as CSR, its values with the per-query constant of absent terms added
        (BM25L/BM25+), the queries' matching documents where some of them score 0 and so
        are missing from the product (Robertson/ATIRE only), else None)."""
        w = self.weights
        product = (q @ w.matrix).tocsr()
        values = product.data
        if w.absent is not None:
            rows = np.repeat(np.arange(q.shape[0]), np.diff(product.indptr))
            values = values + np.asarray(q @ w.absent, dtype=np.float32)[rows]
        match = None
        if w.presence is not None:
            match = ((q > 0).astype(np.float32) @ w.presence).tocsr()
        return product, values, match

    def _search_dense(self, q: sp.csr_matrix, depth: int) -> Ranking:
        """The ranking of a chunk of queries through a dense [queries, documents] block."""
        n_q = q.shape[0]
        product, values, match = self._hits(q)
        # Every BM25 score of a matching document is >= 0. Documents that do not match get
        # the distinct negative placeholders -1, -2, ... (by index): they sort after every
        # hit, and never tie with each other at the cut-off (which would send top_k to its
        # slow per-row path for every query with fewer hits than the depth).
        placeholder = -np.arange(1, self.n_docs + 1, dtype=np.float32)
        dense = np.repeat(placeholder[None, :], n_q, axis=0)
        if match is not None:  # matching documents that score 0 were dropped from ``product``
            m_rows = np.repeat(np.arange(n_q), np.diff(match.indptr))
            dense[m_rows, match.indices] = 0.0
        p_rows = np.repeat(np.arange(n_q), np.diff(product.indptr))
        dense[p_rows, product.indices] = values
        ranking = top_k(dense, depth)
        empty = ranking.scores < 0
        ranking.doc_idx[empty] = -1
        ranking.scores[empty] = -np.inf
        return ranking

    def _search_sparse(self, q: sp.csr_matrix, depth: int, chunk: int) -> Ranking:
        """The ranking of ``_search_dense`` (same scores, same order), built from each query's
        hits alone: an ``argpartition`` over the documents that match, not a dense row over
        the whole corpus (see the module docstring)."""
        n_q = q.shape[0]
        out = Ranking.empty(n_q, depth)
        if depth == 0:
            return out
        for s in range(0, n_q, chunk):
            product, values, match = self._hits(q[s : s + chunk])
            for r in range(product.shape[0]):
                lo, hi = product.indptr[r], product.indptr[r + 1]
                idx, val = product.indices[lo:hi], values[lo:hi]
                if match is not None and match.indptr[r + 1] - match.indptr[r] > hi - lo:
                    every = np.sort(match.indices[match.indptr[r] : match.indptr[r + 1]])
                    full = np.zeros(len(every), np.float32)
                    full[np.searchsorted(every, idx)] = val
                    idx, val = every, full
                doc, score = top_of_row(idx, val, depth)
                out.doc_idx[s + r, : len(doc)] = doc
                out.scores[s + r, : len(doc)] = score
        return out

    def _check_indexed(self) -> BM25Weights:
        if self.weights is None:
            raise RuntimeError("call index() before search()")
        return self.weights

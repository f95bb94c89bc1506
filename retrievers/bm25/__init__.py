"""BM25 and its variants over a sparse term-document weight matrix.

All BM25 work is paid at index time; a batch of queries is then one sparse product and a
top-k per row. The implementation, one concern per module:

- ``variants``: the idf and tf component of each variant, with the table of formulas and
  their sources (Robertson, Lucene, ATIRE, BM25L, BM25+; Kamphuis et al. 2020);
- ``analysis``: bm25s's tokenization (regex, stop words, Snowball stemmer) and the compact
  ``Vocabulary``;
- ``postings``: documents -> integer postings, batch by batch, spilled to a temporary file;
- ``weights``: postings -> the CSR weight matrix (``BM25Weights``);
- ``retriever``: ``BM25Retriever`` (the Hydra target ``retrievers.bm25.BM25Retriever``),
  the hit rule and the two ranking paths.
"""

from __future__ import annotations

from retrievers.bm25.analysis import (STOPWORDS_FILE, TOKEN_PATTERN, Analyzer, Vocabulary, resolve_stopwords,
                                      stopword_lists)
from retrievers.bm25.postings import Spill, tokenize_corpus
from retrievers.bm25.retriever import BM25Retriever
from retrievers.bm25.variants import VARIANTS, WITH_DELTA
from retrievers.bm25.weights import BM25Weights, weigh

__all__ = ["STOPWORDS_FILE", "TOKEN_PATTERN", "VARIANTS", "WITH_DELTA", "Analyzer", "BM25Retriever", "BM25Weights",
           "Spill", "Vocabulary", "resolve_stopwords", "stopword_lists", "tokenize_corpus", "weigh"]

"""BM25 and its variants over a sparse term-document weight matrix, paid for at index time.

``analysis``: bm25s's tokenization and the compact ``Vocabulary``; ``index``: the variants'
formulas and sources, postings and the weight matrix; ``retriever``: ``BM25Retriever`` (the
Hydra target ``retrievers.bm25.BM25Retriever``), the hit rule and the two ranking paths.
"""

from __future__ import annotations

from retrievers.bm25.analysis import (STOPWORDS_FILE, TOKEN_PATTERN, Analyzer, Vocabulary, resolve_stopwords,
                                      stopword_lists)
from retrievers.bm25.index import VARIANTS, WITH_DELTA, BM25Weights, Spill, tokenize_corpus, weigh
from retrievers.bm25.retriever import BM25Retriever

__all__ = ["STOPWORDS_FILE", "TOKEN_PATTERN", "VARIANTS", "WITH_DELTA", "Analyzer", "BM25Retriever", "BM25Weights",
           "Spill", "Vocabulary", "resolve_stopwords", "stopword_lists", "tokenize_corpus", "weigh"]

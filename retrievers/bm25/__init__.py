"""BM25 and its variants over a sparse term-document weight matrix.

All BM25 work is paid at index time: the weight of every (term, document) pair is computed
once into a sparse matrix ``W`` [n_terms, n_docs]; a batch of queries is then one sparse
product ``Q @ W`` (``Q`` holds query term counts, so a term repeated in a query counts
twice, as in bm25s and rank_bm25), and the top of each row is kept: score desc, then
document index asc. From a few thousand documents on (``_SPARSE_TOP_MIN_DOCS``) each row's
hits are ranked alone (``argpartition`` over the documents that match, then a sort of
``depth`` items); on a smaller corpus the rows go through ``base.top_k`` as one dense block.
Both give the same ranking; the first never builds a [queries, documents] matrix.

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
tf = 0); that part is the same for every document, so ``W`` stores
``weight(tf) - weight(0)`` and the constant is added back per query.

Tokenization is bm25s's: lower-case, the regex ``(?u)\\b\\w\\w+\\b`` (words of 2+ characters),
stop words removed, then the Snowball stemmer (PyStemmer). Documents and queries go
through the same analyzer; query terms absent from the corpus are dropped.

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

import functools
import logging
import json
import os
import re
import tempfile
from array import array
from pathlib import Path
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from retrievers.base import Ranking, top_k, top_of_row

log = logging.getLogger(__name__)

TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s / scikit-learn CountVectorizer
# The same tokens, twice as fast: a greedy \w\w+ can only start where a run of word
# characters starts and always runs to its end, so the \b's never reject a match.
_FAST_PATTERN = r"\w\w+"
_STOP = -1  # token id of a stop word
_UNKNOWN = -2  # token id of a query term that is not in the corpus
_MAX_DENSE_CELLS = 1 << 24  # queries x documents scored at once (64 MiB of float32)
_SPARSE_TOP_MIN_DOCS = 4_000  # from this corpus size on, each query's hits are ranked alone (faster from ~3k)
_INDEX_BATCH = 20_000  # documents tokenized at once by index()


# --------------------------------------------------------------------------- variants


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


VARIANTS: dict[str, tuple[Callable, Callable]] = {
    "robertson": (idf_robertson, tfc_robertson),
    "lucene": (idf_lucene, tfc_robertson),
    "atire": (idf_atire, tfc_atire),
    "bm25l": (idf_bm25l, tfc_bm25l),
    "bm25+": (idf_bm25plus, tfc_bm25plus),
}
WITH_DELTA = ("bm25l", "bm25+")  # variants that score absent terms (and use delta)


# --------------------------------------------------------------------------- analysis


#: Stop word lists by name (``en``, ``de``...; ``english``, ``german``... too): bm25s's lists,
#: vendored as data (retrievers/stopwords.json names their source), so that tokenizing does
#: not import bm25s, whose package init imports numba wherever numba is installed.
STOPWORDS_FILE = Path(__file__).with_name("stopwords.json")


@functools.cache
def _stopword_lists() -> tuple[dict[str, str], dict[str, list[str]]]:
    data = json.loads(STOPWORDS_FILE.read_text(encoding="utf-8"))
    return data["aliases"], data["lists"]


def resolve_stopwords(stopwords: str | Sequence[str] | None) -> tuple[str | None, frozenset[str]]:
    """(name for the cache key, the words). A name (``en``, ``de``...) is one of bm25s's lists."""
    if stopwords is None or stopwords is False:
        return None, frozenset()
    if isinstance(stopwords, str):
        aliases, lists = _stopword_lists()
        words = lists.get(aliases.get(stopwords, stopwords))
        if words is None:
            raise ValueError(f"unknown stop word list {stopwords!r}: the lists are {', '.join(sorted(lists))} "
                             f"(or {', '.join(sorted(aliases))}), else give a list of words")
        return stopwords, frozenset(words)
    words = frozenset(str(w).lower() for w in stopwords)
    return None, words


class Analyzer:
    """Text -> term strings, as bm25s tokenizes: lower-case, regex split, stop words, stemmer."""

    def __init__(self, stopwords: str | Sequence[str] | None = "en", stemmer: str | None = "english"):
        self.stopwords_name, self.stopwords = resolve_stopwords(stopwords)
        self.stemmer_name = stemmer
        self._split = re.compile(_FAST_PATTERN).findall
        if stemmer is None:
            self._stem_words: Callable[[list[str]], list[str]] | None = None
        else:
            import Stemmer

            try:
                # each distinct token is stemmed once anyway: PyStemmer's cache only slows it down
                self._stem_words = Stemmer.Stemmer(stemmer, maxCacheSize=0).stemWords
            except KeyError:
                raise ValueError(
                    f"unknown stemmer {stemmer!r}; PyStemmer knows {', '.join(Stemmer.algorithms())}"
                ) from None

    def split(self, texts: Sequence[str]) -> list[list[str]]:
        """Lower-cased regex tokens of each text (stop words still in)."""
        return [self._split(text.lower()) for text in texts]

    def terms_of(self, tokens: Sequence[str]) -> dict[str, str | None]:
        """token -> its term (the stem), or None for a stop word."""
        kept = [t for t in tokens if t not in self.stopwords]
        stems = self._stem_words(kept) if self._stem_words is not None else kept
        out: dict[str, str | None] = dict.fromkeys(tokens)
        out.update(zip(kept, stems))
        return out

    def analyze(self, texts: Sequence[str]) -> list[list[str]]:
        """The terms of each text, in order (what bm25s.tokenize(return_ids=False) gives)."""
        split = self.split(texts)
        terms = self.terms_of(list(dict.fromkeys(chain.from_iterable(split))))
        return [[terms[t] for t in toks if terms[t] is not None] for toks in split]


class _Spill:
    """The postings of each indexing batch, kept in an unnamed temporary file (removed by the
    system when closed or when the process ends, however it ends) rather than in memory, and
    read back batch by batch, as often as asked, in the order written.

    At 1M documents that is 276 MiB (6 bytes a posting) that neither the tokenizing nor the
    weighting phase holds beside its own memory. The file goes to the system's temporary
    folder (``TMPDIR``); where it cannot be written (a full disk) the batches stay in memory.
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
        if self._file is not None:
            self._file.close()
        self._batches.clear()


class Vocabulary:
    """Term (stem) -> term id, compact: the terms in sorted order as one UTF-8 blob with
    their offsets, and each one's id.

    At 1M terms a dict takes ~135 MiB of Python objects, allocated among the corpus's tokens
    while indexing, so that freeing the tokens gives little back to the system. This takes
    the terms' UTF-8 bytes plus 12 bytes a term (~20 MiB at 1M). A lookup is a binary search
    over the sorted terms (UTF-8 byte order is code point order): ~20 comparisons, a few
    microseconds, paid per distinct query token.
    """

    def __init__(self, terms: Sequence[str], ids: Sequence[int]):
        order = sorted(range(len(terms)), key=terms.__getitem__)
        encoded = [terms[i].encode("utf-8", "surrogatepass") for i in order]
        self._offsets = array("q", [0])
        self._offsets.extend(accumulate(map(len, encoded)))
        self._blob = b"".join(encoded)
        self._ids = array("q", [ids[i] for i in order])

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, term: str, default: int) -> int:
        key = term.encode("utf-8", "surrogatepass")
        blob, offsets = self._blob, self._offsets
        lo, hi = 0, len(self._ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if blob[offsets[mid] : offsets[mid + 1]] < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(self._ids) and blob[offsets[lo] : offsets[lo + 1]] == key:
            return self._ids[lo]
        return default

    def __getitem__(self, term: str) -> int:
        found = self.get(term, -1)
        if found < 0:
            raise KeyError(term)
        return found

    def items(self) -> Iterator[tuple[str, int]]:
        """(term, id) in the terms' sorted order."""
        blob, offsets = self._blob, self._offsets
        for i, term_id in enumerate(self._ids):
            yield blob[offsets[i] : offsets[i + 1]].decode("utf-8", "surrogatepass"), term_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (self._blob, self._offsets, self._ids) == (other._blob, other._offsets, other._ids)


# --------------------------------------------------------------------------- retriever


class BM25Retriever:
    """BM25 family retriever (see the module docstring for the formulas and the hit rule).

    Args:
        k1: term-frequency saturation.
        b: document-length normalization (0 = none, 1 = full).
        method: ``lucene`` | ``robertson`` | ``atire`` | ``bm25l`` | ``bm25+``.
        delta: BM25L/BM25+ lower bound (ignored by the other methods).
        stopwords: a bm25s list name (``en``...), a list of words, or None.
        stemmer: a Snowball algorithm name for PyStemmer (``english``...), or None.
    """

    prefix_stable = True  # search(depth=d) is the first d columns of search(depth=D > d)

    def __init__(
        self,
        k1: float = 1.2,
        b: float = 0.75,
        method: str = "lucene",
        delta: float = 0.5,
        stopwords: str | Sequence[str] | None = "en",
        stemmer: str | None = "english",
    ):
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
        self._vocab = Vocabulary([], [])  # term (stem) -> term id
        self._weights: sp.csr_matrix | None = None  # [n_terms, n_docs] float32
        self._absent: NDArray[np.float32] | None = None  # per-term weight at tf = 0 (BM25L/+)
        self._presence: sp.csr_matrix | None = None  # [n_terms, n_docs], only if some weight is 0
        self.n_docs = 0

    # ------------------------------------------------------------------ protocol

    def cache_key(self) -> dict[str, Any]:
        stop = self.analyzer.stopwords_name
        return {
            "retriever": "bm25",
            "k1": self.k1,
            "b": self.b,
            "method": self.method,
            "delta": self.delta if self.method in WITH_DELTA else None,
            "stopwords": stop if stop is not None else sorted(self.analyzer.stopwords),
            "stemmer": self.analyzer.stemmer_name,
            "token_pattern": TOKEN_PATTERN,
        }

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None:
        """Tokenize the corpus and compute every (term, document) weight.

        Memory stays near the size of the index, not of the token stream: documents are
        tokenized ``_INDEX_BATCH`` at a time, and each batch's tokens become compact integer
        postings at once (a provisional term id, 4 bytes, and a term count, 2 bytes, per
        posting; a posting count per document), written to a temporary file (``_Spill``),
        so no more than one batch's tokens exist as Python strings. At the end the term ids
        are renumbered in the order of the sorted token list (a term's id is the rank of its
        smallest token), which is what they have always been: the index does not depend on
        the batch size or on string hashing. The token dictionaries are then dropped (the
        terms stay as a compact ``Vocabulary``), and the weights are written batch by batch
        straight into their places in the CSR arrays (rows sized from the document
        frequencies): no COO copy and no second CSR exist, so the build peaks at about the
        index (8 bytes a posting) plus one batch. ``doc_texts`` is read in slices of
        ``_INDEX_BATCH`` (it may be a ``pipeline.io.collection.FileTexts``)."""
        if len(doc_ids) != len(doc_texts):
            raise ValueError(f"{len(doc_ids)} document ids for {len(doc_texts)} texts")
        # per batch: (provisional term of each posting, postings of each document, tf of each
        # posting), sorted by document, then provisional term; on disk until the weights are made
        parts = _Spill()
        try:
            vocab, final, doc_len = self._tokenize(doc_texts, parts)
            self._weigh(vocab, final, doc_len, parts)
        finally:
            parts.close()

    def _tokenize(
        self, doc_texts: Sequence[str], parts: _Spill
    ) -> tuple[Vocabulary, NDArray[np.int32], NDArray[np.float64]]:
        """Each batch's postings into ``parts``; returns the vocabulary (term -> final id), the
        final id of each provisional term, and each document's length in terms."""
        n_docs = len(doc_texts)
        token_ids: dict[str, int] = {}  # raw token -> provisional token id (first appearance)
        token_term = np.zeros(0, np.int64)  # provisional token id -> provisional term id, or _STOP
        term_ids: dict[str, int] = {}  # term (stem) -> provisional term id (first appearance)
        doc_len = np.zeros(n_docs, np.float64)
        for start in range(0, n_docs, _INDEX_BATCH):
            split = self.analyzer.split(doc_texts[start : start + _INDEX_BATCH])
            new = set(chain.from_iterable(split)).difference(token_ids)
            if new:
                new_tokens = list(new)
                token_ids.update(zip(new_tokens, range(len(token_ids), len(token_ids) + len(new_tokens))))
                terms = self.analyzer.terms_of(new_tokens)
                added = [_STOP if (term := terms[t]) is None else term_ids.setdefault(term, len(term_ids))
                         for t in new_tokens]
                token_term = np.concatenate([token_term, np.asarray(added, np.int64)])
            lengths = np.fromiter(map(len, split), np.int64, count=len(split))
            flat = np.fromiter(map(token_ids.__getitem__, chain.from_iterable(split)), np.int32,
                               count=int(lengths.sum()))
            del split
            term = token_term[flat]
            docs = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
            keep = term != _STOP
            term, docs = term[keep], docs[keep]
            doc_len[start : start + len(lengths)] = np.bincount(docs, minlength=len(lengths))
            # one posting per (document, term): sorted by document, then term
            width = max(len(term_ids), 1)
            keys, counts = np.unique(docs * width + term, return_counts=True)
            tf_type = np.uint16 if counts.max(initial=0) <= np.iinfo(np.uint16).max else np.int32
            parts.append((keys % width).astype(np.int32),
                         np.bincount(keys // width, minlength=len(lengths)).astype(np.int32),
                         counts.astype(tf_type))
            del term, docs, keep, keys, counts, flat
        # Final term ids: walk the tokens in sorted order, numbering terms as they first occur.
        tokens = list(token_ids)
        del token_ids
        n_terms = 0
        final_ids = [-1] * len(term_ids)  # provisional term id -> final term id
        term_names = list(term_ids)
        del term_ids
        prov_of = token_term.tolist()
        for i in sorted(range(len(tokens)), key=tokens.__getitem__):
            prov = prov_of[i]
            if prov != _STOP and final_ids[prov] < 0:
                final_ids[prov] = n_terms
                n_terms += 1
        del tokens, prov_of, token_term
        return Vocabulary(term_names, final_ids), np.asarray(final_ids, np.int32), doc_len

    def _weigh(self, vocab: Vocabulary, final: NDArray[np.int32], doc_len: NDArray[np.float64],
               parts: _Spill) -> None:
        """The weights of the postings in ``parts``, written into the CSR arrays."""
        n_terms, n_docs = len(vocab), len(doc_len)
        df = np.zeros(n_terms, np.int64)
        for terms_i, _, _ in parts:
            df += np.bincount(final[terms_i], minlength=n_terms)
        nnz = int(df.sum())
        index_type = np.int32 if nnz <= np.iinfo(np.int32).max else np.int64  # scipy's own choice
        indptr = np.zeros(n_terms + 1, index_type)
        np.cumsum(df, out=indptr[1:])
        fill = indptr[:-1].astype(np.int64)  # next free slot of each row
        indices = np.empty(nnz, index_type)
        weights = np.empty(nnz, np.float32)
        avg_len = float(doc_len.mean()) if n_docs and doc_len.sum() > 0 else 1.0
        idf_fn, tfc_fn = VARIANTS[self.method]
        with np.errstate(divide="ignore"):
            idf = idf_fn(df.astype(np.float64), n_docs) if n_terms else np.zeros(0)
        del df
        len_norm = 1.0 - self.b + self.b * doc_len / avg_len
        absent = idf * tfc_fn(0.0, 1.0, self.k1, self.delta) if self.method in WITH_DELTA else None
        doc_start = 0
        for terms_i, per_doc, tf_i in parts:
            term = final[terms_i]
            docs = np.repeat(np.arange(doc_start, doc_start + len(per_doc), dtype=index_type), per_doc)
            doc_start += len(per_doc)
            w = idf[term] * tfc_fn(tf_i.astype(np.float64), len_norm[docs], self.k1, self.delta)  # float64
            if absent is not None:
                w = w - absent[term]
            # Within a row, this batch's documents go after the earlier batches' (fill), in
            # document order (sorting by (term, position) keeps it): every row ends up
            # ascending. One sort of int64 keys is twice as fast as a stable argsort.
            order = np.sort((term.astype(np.int64) << 32) | np.arange(len(term), dtype=np.int64)) & 0xFFFFFFFF
            term = term[order]
            run = np.flatnonzero(np.diff(term, prepend=-1))  # where each term's run starts
            run_len = np.diff(run, append=len(term))
            pos = fill[term] + (np.arange(len(term)) - np.repeat(run, run_len))
            indices[pos] = docs[order]
            weights[pos] = w[order]
            fill[term[run]] += run_len
            del term, docs, w, order, run, run_len, pos
        del final, fill
        self._absent = None if absent is None else absent.astype(np.float32)
        self._weights = sp.csr_matrix((weights, indices, indptr), shape=(n_terms, n_docs))
        # Sparse products drop exact zeros; keep an explicit term-presence matrix only when a
        # matching document can have weight 0, so that it still counts as a hit.
        if (weights == 0).any():
            self._presence = sp.csr_matrix(
                (np.ones(nnz, np.float32), indices, indptr), shape=(n_terms, n_docs)
            )
        else:
            self._presence = None
        self._vocab, self.n_docs = vocab, n_docs
        log.info(
            "BM25 (%s, k1=%g, b=%g) indexed %d documents, %d terms, %d postings",
            self.method, self.k1, self.b, n_docs, n_terms, nnz,
        )

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        """Top ``depth`` matching documents of every query, best first; ``-1`` pads."""
        self._check_indexed()
        if len(query_ids) != len(query_texts):
            raise ValueError(f"{len(query_ids)} query ids for {len(query_texts)} texts")
        q = self.query_matrix(query_texts)
        n_q = q.shape[0]
        if n_q == 0 or self.n_docs == 0:
            return top_k(np.zeros((n_q, 0), np.float32), depth)
        chunk = max(1, _MAX_DENSE_CELLS // self.n_docs)
        if self.n_docs >= _SPARSE_TOP_MIN_DOCS:
            return self._search_sparse(q, depth, chunk)
        parts = [self._search_chunk(q[s : s + chunk], depth) for s in range(0, n_q, chunk)]
        return Ranking(
            np.concatenate([p.doc_idx for p in parts]), np.concatenate([p.scores for p in parts])
        )

    # ------------------------------------------------------------------ helpers

    def query_matrix(self, query_texts: Sequence[str]) -> sp.csr_matrix:
        """[n_queries, n_terms] term counts of the queries (unknown terms dropped)."""
        self._check_indexed()
        split = self.analyzer.split(query_texts)
        unique = sorted(set(chain.from_iterable(split)))
        ids = {token: _STOP if term is None else self._vocab.get(term, _UNKNOWN)
               for token, term in self.analyzer.terms_of(unique).items()}
        lengths = np.fromiter(map(len, split), np.int64, count=len(split))
        flat = np.fromiter(map(ids.__getitem__, chain.from_iterable(split)), np.int64, count=int(lengths.sum()))
        rows = np.repeat(np.arange(len(split), dtype=np.int64), lengths)
        keep = flat >= 0
        q = sp.csr_matrix(
            (np.ones(int(keep.sum()), np.float32), (rows[keep], flat[keep])),
            shape=(len(split), len(self._vocab)),
        )
        q.sum_duplicates()
        return q

    def score_matrix(self, query_texts: Sequence[str]) -> NDArray[np.float32]:
        """Full BM25 scores [n_queries, n_docs], matching or not (for tests and analysis)."""
        q = self.query_matrix(query_texts)
        scores = np.asarray((q @ self._weights).todense(), dtype=np.float32)
        if self._absent is not None:
            scores += (q @ self._absent)[:, None].astype(np.float32)
        return scores

    def _search_chunk(self, q: sp.csr_matrix, depth: int) -> Ranking:
        n_q = q.shape[0]
        product = (q @ self._weights).tocsr()
        # Every BM25 score of a matching document is >= 0. Documents that do not match get
        # the distinct negative placeholders -1, -2, ... (by index): they sort after every
        # hit, and never tie with each other at the cut-off (which would send top_k to its
        # slow per-row path for every query with fewer hits than the depth).
        placeholder = -np.arange(1, self.n_docs + 1, dtype=np.float32)
        dense = np.repeat(placeholder[None, :], n_q, axis=0)
        if self._presence is not None:
            # Robertson/ATIRE only (idf can be 0; BM25L/BM25+ weights are always > 0): matching
            # documents that score 0 were dropped from ``product``: restore them
            match = ((q > 0).astype(np.float32) @ self._presence).tocsr()
            m_rows = np.repeat(np.arange(n_q), np.diff(match.indptr))
            dense[m_rows, match.indices] = 0.0
        p_rows = np.repeat(np.arange(n_q), np.diff(product.indptr))
        values = product.data
        if self._absent is not None:  # BM25L/BM25+: the per-query constant of absent terms
            values = values + np.asarray(q @ self._absent, dtype=np.float32)[p_rows]
        dense[p_rows, product.indices] = values
        ranking = top_k(dense, depth)
        empty = ranking.scores < 0
        ranking.doc_idx[empty] = -1
        ranking.scores[empty] = -np.inf
        return ranking

    def _search_sparse(self, q: sp.csr_matrix, depth: int, chunk: int) -> Ranking:
        """The ranking of ``_search_chunk`` (same scores, same order), built from each query's
        hits alone: an ``argpartition`` over the documents that match, not a dense row over
        the whole corpus. On a large corpus, where most queries match a small part of it,
        this is several times faster and needs no [queries, documents] matrix (measured in
        ``benchmarks/scale.py``); on a small one the dense path's few big numpy calls win."""
        n_q = q.shape[0]
        out = Ranking.empty(n_q, depth)
        if depth == 0:
            return out
        for s in range(0, n_q, chunk):
            qc = q[s : s + chunk]
            product = (qc @ self._weights).tocsr()
            values = product.data
            if self._absent is not None:  # BM25L/BM25+: the per-query constant of absent terms
                rows = np.repeat(np.arange(qc.shape[0]), np.diff(product.indptr))
                values = values + np.asarray(qc @ self._absent, dtype=np.float32)[rows]
            match = None
            if self._presence is not None:  # matching documents whose score is 0 (see _search_chunk)
                match = ((qc > 0).astype(np.float32) @ self._presence).tocsr()
            for r in range(qc.shape[0]):
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

    def _check_indexed(self) -> None:
        if self._weights is None:
            raise RuntimeError("call index() before search()")

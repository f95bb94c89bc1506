"""Text -> terms, as bm25s tokenizes, and the compact term -> id map of an index.

Tokenization is bm25s's: lower-case, the regex ``(?u)\\b\\w\\w+\\b`` (words of 2+ characters),
stop words removed, then the Snowball stemmer (PyStemmer). Documents and queries go
through the same analyzer; query terms absent from the corpus are dropped.
"""

from __future__ import annotations

import functools
import json
import re
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain
from pathlib import Path

import Stemmer

TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s / scikit-learn CountVectorizer
# The same tokens with less work: a greedy \w\w+ can only start where a run of word
# characters starts and always runs to its end, so the \b's never reject a match.
_FAST_PATTERN = r"\w\w+"
STOP_TERM = -1  # term id given to a stop word
UNKNOWN_TERM = -2  # term id given to a query term that is not in the corpus

#: Stop word lists by name (``en``, ``de``...; ``english``, ``german``... too): bm25s's lists,
#: vendored as data (retrievers/bm25/stopwords.json names their source), so that tokenizing
#: does not import bm25s, whose package init imports numba wherever numba is installed.
STOPWORDS_FILE = Path(__file__).with_name("stopwords.json")


@functools.cache
def stopword_lists() -> tuple[dict[str, str], dict[str, list[str]]]:
    """(alias -> list name, list name -> words) of the vendored lists, read once."""
    data = json.loads(STOPWORDS_FILE.read_text(encoding="utf-8"))
    return data["aliases"], data["lists"]


def resolve_stopwords(stopwords: str | Sequence[str] | None) -> tuple[str | None, frozenset[str]]:
    """(name for the cache key, the words). A name (``en``, ``de``...) is one of bm25s's lists."""
    if stopwords is None or stopwords is False:
        return None, frozenset()
    if isinstance(stopwords, str):
        aliases, lists = stopword_lists()
        words = lists.get(aliases.get(stopwords, stopwords))
        if words is None:
            raise ValueError(f"unknown stop word list {stopwords!r}: the lists are {', '.join(sorted(lists))} "
                             f"(or {', '.join(sorted(aliases))}), else give a list of words")
        return stopwords, frozenset(words)
    return None, frozenset(str(w).lower() for w in stopwords)


class Analyzer:
    """Text -> term strings, as bm25s tokenizes: lower-case, regex split, stop words, stemmer."""

    def __init__(self, stopwords: str | Sequence[str] | None = "en", stemmer: str | None = "english"):
        self.stopwords_name, self.stopwords = resolve_stopwords(stopwords)
        self.stemmer_name = stemmer
        self._split = re.compile(_FAST_PATTERN).findall
        if stemmer is None:
            self._stem_words: Callable[[list[str]], list[str]] | None = None
        else:
            try:
                # each distinct token is stemmed once anyway: PyStemmer's cache only slows it down
                self._stem_words = Stemmer.Stemmer(stemmer, maxCacheSize=0).stemWords
            except KeyError:
                raise ValueError(f"unknown stemmer {stemmer!r}; PyStemmer knows "
                                 f"{', '.join(Stemmer.algorithms())}") from None

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


class Vocabulary:
    """Term (stem) -> term id, compact: the sorted terms as one UTF-8 blob with their offsets.

    A dict of a large vocabulary is many small Python objects, allocated among the corpus's
    tokens while indexing, so that freeing the tokens gives little back to the system. This
    takes the terms' bytes plus 12 bytes a term; a lookup is a binary search (UTF-8 byte order
    is code point order), paid once per distinct query token.
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
        """The id of ``term``, or ``default`` if it is not in the vocabulary."""
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

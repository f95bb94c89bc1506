"""The Retriever protocol; the Ranking it returns lives in the computing tier.

``Ranking`` and the functions that make one (``padded``, ``rows_to_ranking``, ``top_k``,
``top_of_row``) are ``pipeline.ranking``; the cached Ranking is
``pipeline.io.cache.load_or_compute_ranking``. They are re-exported here, so that user code
written against ``retrievers.base`` keeps working.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from pipeline.io.cache import load_or_compute_ranking
from pipeline.ranking import Ranking, padded, rows_to_ranking, top_k, top_of_row

__all__ = ["Ranking", "Retriever", "load_or_compute_ranking", "padded", "rows_to_ranking", "top_k", "top_of_row"]


@runtime_checkable
class Retriever(Protocol):
    """Index a corpus once, then search queries to a depth.

    Implementations are configured by Hydra (``conf/retriever/*.yaml``) but know nothing of
    it: texts and ids in, arrays out.
    """

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None: ...

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking: ...

    def cache_key(self) -> dict:
        """Every setting that shapes the ranking (for the on-disk cache key)."""
        ...

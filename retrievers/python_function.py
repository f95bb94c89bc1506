"""``retriever=python``: any Python function as the retriever (``retriever.target=module:function``).

Two shapes, chosen by ``batched`` (an explicit setting: the function is never called twice to
guess):

- ``batched: false`` (default): ``fn(query_text, k) -> [(doc_id, score), ...]``, called once per
  query from a pool of ``concurrency`` threads (an I/O-bound retriever, a remote API);
- ``batched: true``: ``fn(query_texts, k) -> [[(doc_id, score), ...], ...]``, one list per query
  in the order given, called with ``batch_size`` queries at a time, one call after another.

A result may be ``(id, score)`` or ``(id, score, metadata)`` (a dict: ``doc_id_key`` and
``chunk_key`` are read from it), best first; score None means "no score" (the rank order is
used). ``options`` are passed to the function as keyword arguments. The rest (ids, folding,
failures, caching) is ``retrievers.external``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable

from retrievers.external import BadResult, ExternalRetriever, Hit, as_id, as_score, load_callable


def hits_of(results: Any) -> list[Hit]:
    """A function's results for one query as hits; BadResult for anything else."""
    if isinstance(results, (str, bytes, Mapping)) or not hasattr(results, "__iter__"):
        raise BadResult(f"expected a list of (doc_id, score) pairs, got {type(results).__name__}")
    if type(results) is list and all(type(item) is tuple and len(item) == 2 and type(item[0]) is str
                                     and type(item[1]) is float for item in results):
        if math.isfinite(sum(item[1] for item in results)):  # the common case, cheaply: (str, finite float)
            return [Hit(doc, score, None) for doc, score in results]
    hits = []
    for i, item in enumerate(results, start=1):
        if isinstance(item, (str, bytes)) or not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise BadResult(f"result {i} is {item!r}, expected (doc_id, score) or (doc_id, score, metadata)")
        meta = item[2] if len(item) == 3 else None
        if meta is not None and not isinstance(meta, Mapping):
            raise BadResult(f"result {i}'s metadata is a {type(meta).__name__}, not a dict")
        hits.append(Hit(as_id(item[0], f"result {i}'s id"), as_score(item[1], f"result {i}'s score"), meta))
    return hits


class PythonRetriever(ExternalRetriever):
    """A user's function as a Retriever (module docstring).

    Args:
        target: ``module:function`` (the module must be importable: installed, or on PYTHONPATH).
        batched: whether ``target`` takes a list of queries (see the module docstring).
        batch_size: queries per call when batched.
        options: keyword arguments passed to ``target`` on every call.
        **shared: ``retrievers.external.ExternalRetriever``'s settings.
    """

    name = "python"

    def __init__(self, target: str, batched: bool = False, batch_size: int = 64,
                 options: Mapping[str, Any] | None = None, **shared: Any):
        super().__init__(**shared)
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.target = target
        self.batched = bool(batched)
        self.batch_size = int(batch_size)
        self.options = dict(options or {})
        self._fn: Callable[..., Any] | None = None

    def identity(self) -> dict[str, Any]:
        return {"target": self.target, "batched": self.batched, "options": self.options}

    def prepare(self, k: int) -> None:
        if self._fn is None:
            self._fn = load_callable(self.target, "retriever.target")

    def query(self, text: str, k: int) -> list[Hit]:
        assert self._fn is not None
        return hits_of(self._fn(text, k, **self.options))

    def query_batch(self, texts: list[str], k: int) -> list[list[Hit]]:
        assert self._fn is not None
        found = self._fn(texts, k, **self.options)
        if isinstance(found, (str, bytes, Mapping)) or not hasattr(found, "__len__"):
            raise BadResult(f"a batched function must return one list per query, got {type(found).__name__}")
        return [hits_of(results) for results in found]

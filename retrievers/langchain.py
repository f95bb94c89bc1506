"""``retriever=langchain``: a LangChain retriever (``langchain-core``'s ``BaseRetriever``).

``retriever.factory=module:function`` names a function that returns the retriever (it is given
``k``, the results wanted per query, when it has a parameter of that name, and ``options`` as
keyword arguments). Each query is one ``invoke(query)``, from a pool of ``concurrency`` threads.

A ``Document``'s id is ``Document.id``, or ``metadata[id_key]`` when ``id_key`` is set; its score
is ``metadata[score_key]`` when present (LangChain retrievers usually give none: then the
rank order is the score, as ``retrievers.external`` says). The rest (ids, folding,
failures, caching) is ``retrievers.external``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.errors import InputError
from retrievers.external import BadResult, ExternalRetriever, Hit, as_id, as_score, build_from_factory


class LangChainRetriever(ExternalRetriever):
    """A LangChain ``BaseRetriever`` as a Retriever (module docstring).

    Args:
        factory: ``module:function`` returning a ``langchain_core.retrievers.BaseRetriever``.
        id_key: metadata key of the document id (None: ``Document.id``).
        score_key: metadata key of the score, used when present.
        options: keyword arguments for the factory.
        **shared: ``retrievers.external.ExternalRetriever``'s settings.
    """

    name = "langchain"

    def __init__(self, factory: str, id_key: str | None = None, score_key: str = "score",
                 options: Mapping[str, Any] | None = None, **shared: Any):
        super().__init__(**shared)
        self.factory = factory
        self.id_key = id_key or None
        self.score_key = score_key
        self.options = dict(options or {})
        self._retriever: Any = None
        self._built_for: int | None = None

    def identity(self) -> dict[str, Any]:
        return {"factory": self.factory, "id_key": self.id_key, "score_key": self.score_key, "options": self.options}

    def prepare(self, k: int) -> None:
        if self._retriever is None or self._built_for != k:
            try:
                from langchain_core.retrievers import BaseRetriever
            except ImportError as err:
                raise InputError(f"retriever=langchain needs langchain-core ({err}): pip install -e '.[langchain]'")
            self._retriever = build_from_factory(self.factory, k, self.options, BaseRetriever,
                                                 "langchain_core BaseRetriever")
            self._built_for = k

    def query(self, text: str, k: int) -> list[Hit]:
        docs = self._retriever.invoke(text)
        hits = []
        for i, doc in enumerate(docs, start=1):
            meta = getattr(doc, "metadata", None) or {}
            if self.id_key is not None:
                if self.id_key not in meta:
                    raise BadResult(f"document {i} has no metadata {self.id_key!r} (retriever.id_key)")
                raw_id = meta[self.id_key]
            else:
                raw_id = getattr(doc, "id", None)
                if raw_id is None:
                    raise BadResult(f"document {i} has no id (Document.id is None): set retriever.id_key to the "
                                    "metadata key holding the document id")
            hits.append(Hit(as_id(raw_id, f"document {i}'s id"), as_score(meta.get(self.score_key),
                                                                         f"document {i}'s {self.score_key!r}"), meta))
        return hits

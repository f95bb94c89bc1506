"""``retriever=llamaindex``: a LlamaIndex retriever (``llama-index-core``'s ``BaseRetriever``).

``retriever.factory=module:function`` names a function that returns the retriever (it is given
``k`` when it has a parameter of that name, e.g. for ``index.as_retriever(similarity_top_k=k)``,
and ``options`` as keyword arguments). Each query is one ``retrieve(query)``, from a pool of
``concurrency`` threads.

A node's id is ``metadata[id_key]`` when ``id_key`` is set, else ``node.ref_doc_id`` (the
document the node was cut from), else ``node.node_id`` (always ``node_id`` with ``doc_id_key``:
the node is then a chunk); its score is ``NodeWithScore.score``
(None for every node: the rank order). To fold the nodes of chunked documents, set
``doc_id_key=ref_doc_id`` (or a metadata key): ``ref_doc_id`` and ``node_id`` are offered as
metadata keys when the node's metadata does not have them. The rest (ids, folding, failures,
caching) is ``retrievers.external``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.errors import InputError
from retrievers.external import BadResult, ExternalRetriever, Hit, as_id, as_score, build_from_factory


class LlamaIndexRetriever(ExternalRetriever):
    """A LlamaIndex ``BaseRetriever`` as a Retriever (module docstring).

    Args:
        factory: ``module:function`` returning a ``llama_index.core.retrievers.BaseRetriever``.
        id_key: metadata key of the document id (None: ``ref_doc_id``, else ``node_id``).
        options: keyword arguments for the factory.
        **shared: ``retrievers.external.ExternalRetriever``'s settings.
    """

    name = "llamaindex"

    def __init__(self, factory: str, id_key: str | None = None, options: Mapping[str, Any] | None = None,
                 **shared: Any):
        super().__init__(**shared)
        self.factory = factory
        self.id_key = id_key or None
        self.options = dict(options or {})
        self._retriever: Any = None
        self._built_for: int | None = None

    def identity(self) -> dict[str, Any]:
        return {"factory": self.factory, "id_key": self.id_key, "options": self.options}

    def prepare(self, k: int) -> None:
        if self._retriever is None or self._built_for != k:
            try:
                from llama_index.core.base.base_retriever import BaseRetriever
            except ImportError as err:
                raise InputError(f"retriever=llamaindex needs llama-index-core ({err}): "
                                 "pip install -e '.[llamaindex]'")
            self._retriever = build_from_factory(self.factory, k, self.options, BaseRetriever,
                                                 "llama_index BaseRetriever")
            self._built_for = k

    def query(self, text: str, k: int) -> list[Hit]:
        hits = []
        for i, found in enumerate(self._retriever.retrieve(text), start=1):
            node = getattr(found, "node", None)
            if node is None:
                raise BadResult(f"result {i} is a {type(found).__name__}, not a NodeWithScore")
            meta = {"ref_doc_id": node.ref_doc_id, "node_id": node.node_id, **(node.metadata or {})}
            if self.id_key is not None:
                if self.id_key not in meta or meta[self.id_key] is None:
                    raise BadResult(f"node {i} ({node.node_id!r}) has no metadata {self.id_key!r} (retriever.id_key)")
                raw_id = meta[self.id_key]
            elif self.doc_id_key is not None:  # the node is a chunk of the document metadata[doc_id_key]
                raw_id = node.node_id
            else:
                raw_id = node.ref_doc_id if node.ref_doc_id is not None else node.node_id
            hits.append(Hit(as_id(raw_id, f"node {i}'s id"), as_score(found.score, f"node {i}'s score"), meta))
        return hits

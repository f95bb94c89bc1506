"""``retriever=chroma``: a Chroma collection as the retriever, and loading a corpus into one.

The collection lives in a local persistent folder (``path``) or on a Chroma server (``host``,
``port``: ``chroma run --path DIR --port P``). Queries are embedded either

- by the project's encoder (``embed: pipeline``, the default): the dense retriever's model and
  settings (``retrievers.dense``, its cached query embeddings too), for a collection loaded by
  ``python -m pipeline.cli index chroma`` (:func:`write_collection`) with the same model, which the
  collection's metadata records and the retriever checks; or
- by the collection's own embedding function (``embed: collection``), the one Chroma stored
  with it. Chroma's default function (ONNX all-MiniLM-L6-v2) downloads its model on first use,
  so it is refused: load the collection with ``pipeline.index`` and use ``embed: pipeline``.

Scores: Chroma returns distances; ``cosine`` and ``ip`` become ``1 - distance`` (the cosine or
inner product), ``l2`` becomes ``-distance``. With ``embed: pipeline`` the run measures Chroma's
HNSW against exact search on the same embeddings: on up to ``recall_queries`` of the queries
(evenly spaced), recall@k of Chroma's ids against the exact top k over every embedding in the
collection, logged and kept in ``report`` (``chroma_recall_at_k``), as the dense retriever's
HNSW calibration is. The rest (ids, folding, failures, caching) is ``retrievers.external``'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.progress import Progress
from pipeline.ranking import Ranking
from retrievers.cost import folder_bytes
from retrievers.dense import DenseRetriever, exact_search, recall_against
from retrievers.external import BadResult, ExternalRetriever, Hit, as_id, as_score, check_choice

log = logging.getLogger(__name__)

EMBED = ("pipeline", "collection")
SPACES = ("cosine", "ip", "l2")
#: The collection metadata key where ``write_collection`` records the encoder's settings.
ENCODER_KEY = "rag_eval_encoder"


def connect(path: str | Path | None = None, host: str | None = None, port: int = 8000) -> Any:
    """A Chroma client: the persistent folder ``path``, or the server at ``host:port``.
    InputError (one line) when the folder does not exist or the server does not answer."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)  # no telemetry calls: nothing leaves the machine
    if (path is None) == (host is None):
        raise InputError("retriever=chroma: set exactly one of retriever.path (a local folder) and "
                         "retriever.host (a Chroma server)")
    if path is not None:
        if not Path(path).is_dir():
            raise InputError(f"no Chroma database folder at {path} (load one: python -m pipeline.cli index chroma ...)")
        return chromadb.PersistentClient(path=str(path), settings=settings)
    try:
        client = chromadb.HttpClient(host=host, port=int(port), settings=settings)
        client.heartbeat()
    except Exception as err:  # chromadb raises ValueError, httpx errors...
        raise InputError(f"the Chroma server at {host}:{port} does not answer ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''}); start it: chroma run --path DIR "
                         f"--port {port}") from None
    return client


def where(path: str | Path | None, host: str | None, port: int) -> str:
    return str(path) if path is not None else f"{host}:{port}"


def open_collection(client: Any, name: str, place: str, embedding_function: Any = None, own: bool = False) -> Any:
    """The collection ``name``; InputError naming the collections there when it does not exist."""
    from chromadb.errors import NotFoundError

    try:
        return client.get_collection(name) if own else client.get_collection(name,
                                                                              embedding_function=embedding_function)
    except (NotFoundError, ValueError) as err:
        if isinstance(err, ValueError) and "does not exist" not in str(err):
            raise
        names = sorted(c.name for c in client.list_collections())
        raise InputError(f"Chroma at {place} has no collection {name!r} (it has: {', '.join(names) or 'none'})") \
            from None


def space_of(collection: Any) -> str:
    config = getattr(collection, "configuration", None) or {}
    for index in ("hnsw", "spann"):
        space = (config.get(index) or {}).get("space") if isinstance(config, Mapping) else None
        if space:
            return str(space)
    return str((collection.metadata or {}).get("hnsw:space", "l2"))


def scores_of(distances: Sequence[float], space: str) -> list[float]:
    """Chroma's distances as scores, higher = better (module docstring)."""
    return [(-d if space == "l2" else 1.0 - d) for d in map(float, distances)]


def set_ef_search(collection: Any, ef: int) -> bool:
    """The collection's HNSW search breadth set to ``ef`` (stored with it), when it differs;
    whether it changed. Chroma (1.5) applies it when the index is next loaded: a process that
    has searched the collection must reopen it (:func:`reopened`); a server that has it loaded
    keeps the old value until it restarts."""
    config = getattr(collection, "configuration", None) or {}
    current = (config.get("hnsw") or {}).get("ef_search") if isinstance(config, Mapping) else None
    if current == ef:
        return False
    collection.modify(configuration={"hnsw": {"ef_search": int(ef)}})
    log.info("chroma: collection %r: HNSW ef_search %s -> %d (kept with the collection)", collection.name, current, ef)
    return True


def reopened(path: str | Path, name: str, own: bool = False) -> Any:
    """The persistent collection ``name`` of ``path`` from a new client: Chroma's clients of one
    folder share one system (and its loaded indexes) until its cache is cleared."""
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
    return open_collection(connect(path=path), name, str(path), own=own)


def write_collection(client: Any, name: str, ids: Sequence[str], embeddings: NDArray[np.float32],
                     metadatas: Sequence[Mapping[str, Any]], documents: Sequence[str] | None = None,
                     space: str = "cosine", encoder: Mapping[str, Any] | None = None, replace: bool = False) -> Any:
    """Create the collection ``name`` and add ``ids`` with their ``embeddings`` (and metadata,
    texts), in batches of the client's maximum. ``encoder`` (the settings that made the
    embeddings) is recorded in the collection's metadata. An existing collection is an
    InputError unless ``replace`` (then it is deleted first)."""
    check_choice(space, SPACES, "space")
    existing = {c.name for c in client.list_collections()}
    if name in existing:
        if not replace:
            raise InputError(f"Chroma collection {name!r} exists; pass --replace to load it again")
        client.delete_collection(name)
    metadata = {ENCODER_KEY: json.dumps(dict(encoder or {}), sort_keys=True)}
    collection = client.create_collection(name, embedding_function=None, metadata=metadata,
                                          configuration={"hnsw": {"space": space}})
    step = int(client.get_max_batch_size())
    with Progress(f"Chroma indexing ({name})", len(ids), "embeddings", logger=log) as progress:
        for s in range(0, len(ids), step):
            collection.add(ids=list(ids[s : s + step]), embeddings=np.asarray(embeddings[s : s + step], np.float32),
                           metadatas=[dict(m) for m in metadatas[s : s + step]],
                           documents=None if documents is None else list(documents[s : s + step]))
            progress.update(min(step, len(ids) - s))
    return collection


def encoder_settings(dense: Any) -> dict[str, Any]:
    """What made a dense retriever's document embeddings: recorded in a collection's metadata by
    ``pipeline.index`` (``write_collection``), compared by ``ChromaRetriever`` (``embed: pipeline``)."""
    return json.loads(json.dumps({"model": dense.model_identity(), "max_seq_length": dense.max_seq_length,
                                  "normalize": dense.normalize, "doc_prefix": dense.doc_prefix,
                                  **({"backend": dense.backend} if dense.backend != "torch" else {})}))


def same_encoder(recorded: Mapping[str, Any], ours: Mapping[str, Any]) -> bool:
    """Whether the recorded encoder is ours. ``doc_prefix`` is the loader's alone, and a model
    with a content hash (``files``) is compared by it, not by where it is installed."""
    def key(settings: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in settings.items() if k != "doc_prefix"}
        model = out.get("model")
        if isinstance(model, Mapping) and "files" in model:
            out["model"] = {"files": model["files"]}
        return out

    return key(recorded) == key(ours)


def all_embeddings(collection: Any, page: int = 5000) -> tuple[list[str], NDArray[np.float32]]:
    """Every id and embedding of ``collection``, read in pages."""
    ids: list[str] = []
    parts = []
    for offset in range(0, collection.count(), page):
        got = collection.get(include=["embeddings"], limit=page, offset=offset)
        ids += list(got["ids"])
        parts.append(np.asarray(got["embeddings"], np.float32))
    return ids, (np.concatenate(parts) if parts else np.zeros((0, 0), np.float32))


class ChromaRetriever(ExternalRetriever):
    """A Chroma collection as a Retriever (module docstring).

    Args:
        collection: the collection's name.
        path: a persistent Chroma folder; or ``host`` and ``port`` of a Chroma server.
        embed: ``pipeline`` (the dense retriever's encoder, settings below) or ``collection``.
        model, batch_size, max_seq_length, query_prefix, normalize, device, backend: the encoder
            (``retrievers.dense.DenseRetriever``'s settings; with ``pipeline.index``'s values).
        id_key: metadata key of the document id (None: the Chroma id).
        recall_queries: queries on which recall@k against exact search is measured (0 = off).
        ef_search: HNSW search breadth (None: the collection's own, 100 by default). Chroma keeps it
            with the collection: a value that differs is written there (``collection.modify``,
            Chroma >= 1.0 configuration ``{"hnsw": {"ef_search": N}}``) and stays for later readers.
        cache_dir: query embeddings cached there (``retrievers.dense``).
        **shared: ``retrievers.external.ExternalRetriever``'s settings.
    """

    name = "chroma"
    batched = True

    def __init__(self, collection: str, path: str | None = None, host: str | None = None, port: int = 8000,
                 embed: str = "pipeline", model: str | None = None, batch_size: int = 64,
                 max_seq_length: int | None = None, query_prefix: str = "", normalize: bool = True,
                 device: str = "cpu", backend: str = "torch", id_key: str | None = None, recall_queries: int = 100,
                 cache_dir: str | Path | None = None, encoder: Any = None, ef_search: int | None = None,
                 **shared: Any):
        super().__init__(**shared)
        if ef_search is not None and int(ef_search) < 1:
            raise ValueError(f"ef_search must be >= 1 or null, got {ef_search}")
        self.ef_search = None if ef_search is None else int(ef_search)
        self.collection_name = collection
        self.path = None if path is None else str(Path(path).expanduser())
        self.host = host or None
        self.port = int(port)
        self.embed = check_choice(embed, EMBED, "embed")
        self.id_key = id_key or None
        self.recall_queries = int(recall_queries)
        self.batch_size = int(batch_size)
        self._dense: Any = None
        if self.embed == "pipeline":
            self._dense = DenseRetriever(model=model, batch_size=batch_size, max_seq_length=max_seq_length,
                                         query_prefix=query_prefix, normalize=normalize, device=device,
                                         show_progress_bar=False, backend=backend, cache_dir=cache_dir,
                                         encoder=encoder)
        self._collection: Any = None
        self._space = "l2"
        self._query_rows: dict[str, int] = {}
        self._query_emb: NDArray[np.float32] | None = None
        self._found: dict[str, list[str]] = {}  # query text -> Chroma's ids, as returned (for the recall)

    #: retrievers.cost: the warm-up must not fill the query text cache (``DenseRetriever``'s rule)
    warmup_real_queries = False

    def place(self) -> str:
        return where(self.path, self.host, self.port)

    def index_size(self) -> dict[str, int]:
        """Bytes of the persistent Chroma folder on disk (``retrievers.cost``); a server's
        collection: unknown here (nothing)."""
        return {} if self.path is None or not Path(self.path).is_dir() else {"disk_bytes": folder_bytes(self.path)}

    def identity(self) -> dict[str, Any]:
        encoder = self.encoder_settings() if self._dense is not None else None
        return {"collection": self.collection_name, "where": self.place(), "embed": self.embed, "encoder": encoder,
                "query_prefix": None if self._dense is None else self._dense.query_prefix, "id_key": self.id_key,
                **({"ef_search": self.ef_search} if self.ef_search is not None else {})}

    def encoder_settings(self) -> dict[str, Any]:
        return encoder_settings(self._dense)

    def prepare(self, k: int) -> None:
        if self._collection is not None:
            return
        client = connect(self.path, self.host, self.port)
        own = self.embed == "collection"
        collection = open_collection(client, self.collection_name, self.place(), own=own)
        if own:
            function = getattr(collection, "_embedding_function", None)
            if function is None or type(function).__name__ == "DefaultEmbeddingFunction":
                raise InputError(f"Chroma collection {self.collection_name!r} has Chroma's default embedding "
                                 "function (its ONNX model downloads on first use); set retriever.embed=pipeline "
                                 "(the bundled all-MiniLM-L6-v2 is the same model)")
        else:
            recorded = (collection.metadata or {}).get(ENCODER_KEY)
            if recorded is not None and not same_encoder(json.loads(recorded), self.encoder_settings()):
                raise InputError(f"Chroma collection {self.collection_name!r} was embedded with {recorded}, not "
                                 f"with this retriever's encoder {json.dumps(self.encoder_settings(), sort_keys=True)}"
                                 "; set retriever.model (and max_seq_length, normalize) as pipeline.index had them")
        self._collection = collection
        self._space = space_of(collection)
        if self.ef_search is not None and set_ef_search(collection, self.ef_search) and self.path is not None:
            self._collection = reopened(self.path, self.collection_name, own)

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        self._found = {}
        if self._dense is not None:
            self.prepare(self.k_for(depth))  # before encoding: a missing collection fails first
            self._query_emb = self._dense.cached_embeddings("queries", list(query_ids), list(query_texts),
                                                            self._dense.query_prefix)
            self._query_rows = {t: i for i, t in enumerate(query_texts)}
        ranking = super().search(query_ids, query_texts, depth)
        if self._dense is not None and self.recall_queries > 0:
            self.measure_recall(list(query_texts), self.k_for(depth))
        return ranking

    def query_batch(self, texts: list[str], k: int) -> list[list[Hit]]:
        if self._query_emb is not None:
            emb = self._query_emb[[self._query_rows[t] for t in texts]]
            got = self._collection.query(query_embeddings=emb, n_results=k, include=["distances", "metadatas"])
        else:
            got = self._collection.query(query_texts=texts, n_results=k, include=["distances", "metadatas"])
        out = []
        for text, ids, distances, metas in zip(texts, got["ids"], got["distances"], got["metadatas"]):
            self._found[text] = list(ids)
            hits = []
            for i, (cid, score, meta) in enumerate(zip(ids, scores_of(distances, self._space), metas), start=1):
                meta = meta or {}
                hit_id = cid  # with doc_id_key the Chroma id is the chunk's; metadata names its document
                if self.id_key is not None and self.doc_id_key is None:
                    if self.id_key not in meta:
                        raise BadResult(f"result {i} ({cid!r}) has no metadata {self.id_key!r} (retriever.id_key)")
                    hit_id = as_id(meta[self.id_key], f"result {i}'s metadata {self.id_key!r}")
                hits.append(Hit(hit_id, as_score(score, f"result {i}'s distance"), meta))
            out.append(hits)
        return out

    def measure_recall(self, texts: list[str], k: int) -> None:
        """recall@k of Chroma's ids against exact search over the collection's embeddings, on up to
        ``recall_queries`` of the queries (evenly spaced): logged and kept in ``report``."""
        rows = np.unique(np.linspace(0, len(texts) - 1, min(len(texts), self.recall_queries)).round().astype(int))
        rows = np.asarray([r for r in rows if texts[r] in self._found], np.int64)
        if len(rows) == 0 or self._query_emb is None:
            return
        ids, docs = all_embeddings(self._collection)
        queries = self._query_emb[[self._query_rows[texts[r]] for r in rows]]
        if self._space == "cosine":
            docs = docs / np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
            queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        elif self._space == "l2":  # -|q - d|^2 ranks as q.d - |d|^2 / 2: one more coordinate
            docs = np.hstack([docs, -0.5 * (docs**2).sum(axis=1, keepdims=True)]).astype(np.float32)
            queries = np.hstack([queries, np.ones((len(queries), 1), np.float32)]).astype(np.float32)
        depth = min(k, len(ids))
        truth = exact_search(np.ascontiguousarray(queries, dtype=np.float32),
                             np.ascontiguousarray(docs, dtype=np.float32), depth).doc_idx
        position = {cid: i for i, cid in enumerate(ids)}
        found = np.full((len(rows), depth), -1, np.int64)
        for j, r in enumerate(rows):
            got = [position.get(cid, -1) for cid in self._found[texts[r]][:depth]]
            found[j, : len(got)] = got
        recall = recall_against(found, truth)
        self.report = {**self.report, "chroma_recall_at_k": recall, "chroma_recall_k": depth,
                       "chroma_recall_queries": len(rows)}
        log.info("chroma: recall@%d %.4f of collection %r against exact search on the same embeddings, on %d of "
                 "the queries", depth, recall, self.collection_name, len(rows))

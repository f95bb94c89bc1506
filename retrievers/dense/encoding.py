"""Loading a model as an encoder (torch or ONNX Runtime) and encoding texts with a bar.

``torch``, ``sentence_transformers`` and ``onnxruntime`` are imported here, inside the
functions that need them, so importing the dense retriever stays cheap.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from retrievers.dense.model import resolve_model
from retrievers.dense.onnx import OnnxEncoder, onnx_model_file

log = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "onnx-int8")


class Encoder(Protocol):
    """What the retriever needs of a model: texts in, one row of floats per text out."""

    def encode(self, sentences: list[str], batch_size: int = ..., **kwargs: Any) -> Any: ...


def stderr_is_terminal() -> bool:
    """Whether standard error (where tqdm draws) is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


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
        _check_onnx_installed(backend)
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


def _check_onnx_installed(backend: str) -> None:
    try:
        import onnx  # noqa: F401  (the export and the quantizer need it)
        import onnxruntime  # noqa: F401
    except ImportError as err:
        from pipeline.errors import InputError

        raise InputError(f"retriever.backend={backend} needs onnxruntime and onnx ({err}); "
                         'install them with: pip install -e ".[onnx]"') from None


def encode_texts(encoder: Encoder, texts: list[str], batch_size: int, bar: str | None = None) -> NDArray[np.float32]:
    """``encoder``'s embeddings of ``texts`` as float32, unnormalized. With ``bar`` (its
    label) and standard error a terminal, a bar counts passages and passages/s; never in
    logs and pipes. The model's own bar is always off."""
    settings = {"batch_size": batch_size, "show_progress_bar": False, "convert_to_numpy": True,
                "normalize_embeddings": False}
    if bar is None or not stderr_is_terminal():
        return np.asarray(encoder.encode(texts, **settings), dtype=np.float32)
    return _encode_with_bar(encoder, texts, settings, bar)


def _encode_with_bar(encoder: Encoder, texts: list[str], settings: dict[str, Any], label: str) -> NDArray[np.float32]:
    """Encode longest first, one batch per call (the batches sentence-transformers forms
    itself), with a bar counting passages and passages/s."""
    from tqdm import tqdm

    batch_size = settings["batch_size"]
    order = np.argsort([-len(t) for t in texts], kind="stable")
    out: NDArray[np.float32] | None = None
    with tqdm(total=len(texts), unit=" passages", desc=label, file=sys.stderr,
              dynamic_ncols=True, leave=False, disable=False) as progress:
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            emb = np.asarray(encoder.encode([texts[i] for i in rows], **settings), dtype=np.float32)
            if emb.ndim != 2 or emb.shape[0] != len(rows):
                raise ValueError(f"encoder returned shape {emb.shape} for {len(rows)} texts")
            if out is None:
                out = np.zeros((len(texts), emb.shape[1]), np.float32)
            out[rows] = emb
            progress.update(len(rows))
    assert out is not None
    return out

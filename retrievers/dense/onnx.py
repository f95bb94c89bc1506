"""The ONNX Runtime backends: a model's transformer exported to ONNX, optionally int8.

``onnx``: the model's transformer exported with ``torch.onnx.export`` and run by ONNX
Runtime on the CPU; pooling and normalization stay the model's own sentence-transformers
modules. ``onnx-int8``: that export with its MatMul weights quantized to int8 per channel
by ONNX Runtime's ``quantize_dynamic``. Exports are built locally from the model's own
files (nothing downloads), checked against PyTorch on a probe batch, and kept under
``cache_dir/files`` (``pipeline.io.cache.load_or_build_file``: atomic, verified by content
hash on every load).

sentence-transformers' own ONNX backend goes through optimum-onnx, whose releases (0.1.0)
require transformers < 4.58 while sentence-transformers 6 requires transformers >= 5; so
the export and the quantization are done here, with torch.onnx and onnxruntime directly.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.io.cache import load_or_build_file

log = logging.getLogger(__name__)

ONNX_OPSET = 17
#: onnx-int8: dynamic (weights int8, activations quantized per batch at run time), MatMul
#: only, per output channel. Quantizing every op per tensor (ONNX Runtime's default) moves
#: the embeddings much further from fp32 (tests/retrievers/test_onnx.py bounds both the
#: embeddings' cosine to fp32 and the change in SciFact's nDCG@10).
INT8_SETTINGS = {"weight_type": "QInt8", "per_channel": True, "op_types": ["MatMul"], "reduce_range": False}


def export_onnx(model: Any, path: Path) -> None:
    """Export the transformer of sentence-transformers ``model`` (input ids, attention mask
    [, token type ids] -> token embeddings, batch and length dynamic) to ``path``, and check
    it against PyTorch on a probe batch of another shape."""
    import onnxruntime as ort
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
    probe = model.preprocess(["probe"] + ["a longer probe passage to check the export with " * 3] * 2)
    with torch.no_grad():
        want = hf(**{n: probe[n] for n in names}).last_hidden_state.numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: probe[n].numpy().astype(np.int64) for n in names})[0]
    real = probe["attention_mask"].numpy().astype(bool)  # padding positions are pooled away: not compared
    if got.shape != want.shape or not np.allclose(got[real], want[real], atol=1e-3):
        raise RuntimeError(f"the ONNX export of {hf.name_or_path} does not reproduce PyTorch")


def quantize_int8(source: Path, path: Path) -> None:
    """The ONNX model at ``source`` with ``INT8_SETTINGS``'s dynamic quantization, to ``path``."""
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
    """The ONNX file of ``backend`` for sentence-transformers ``model`` (identified by ``identity``)."""
    import onnxruntime
    import torch

    key = {"kind": "onnx_export", "model": identity, "opset": ONNX_OPSET, "torch": torch.__version__}
    fp32, hit = load_or_build_file(cache_dir, key, "model.onnx", lambda p: export_onnx(model, p))
    log.info("dense: ONNX export %s %s", "read from" if hit else "written to", fp32)
    if backend == "onnx":
        return fp32
    qkey = {**key, "kind": "onnx_int8", "quantization": INT8_SETTINGS, "onnxruntime": onnxruntime.__version__}
    int8, hit = load_or_build_file(cache_dir, qkey, "model_int8.onnx", lambda p: quantize_int8(fp32, p))
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
        """One embedding row per sentence (the keyword arguments of sentence-transformers'
        ``encode`` are accepted and ignored: the model's own modules decide)."""
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

"""Dense retrieval with a sentence-transformers bi-encoder (Reimers & Gurevych 2019).

Documents and queries are embedded by the same model (each with its own prefix, as e5 or
bge expect: ``query_prefix="query: "``, ``doc_prefix="passage: "``), optionally
L2-normalized (then the inner product is the cosine), and scored by inner product.
``model``: finding and loading the model; ``onnx``: the ONNX Runtime backends; ``retriever``:
``DenseRetriever`` (the Hydra target), its embedding caches and search; ``ray_encode``: encoding the
corpus on Ray (``retriever.encode.engine=ray``; Ray's runtime itself is ``pipeline.io.ray_runtime``). ``torch``,
``sentence_transformers``, ``onnxruntime``, ``faiss`` and ``ray`` are imported only when needed.
"""

from __future__ import annotations

from pipeline.io.ray_runtime import RayFailed, ray_runtime
from retrievers.dense.model import (BACKENDS, Encoder, default_model_path, encode_texts, hf_hub_cache, hub_reachable,
                                    hub_snapshot, load_encoder, model_identity, resolve_model, stderr_is_terminal)
from retrievers.dense.onnx import INT8_SETTINGS, ONNX_OPSET, OnnxEncoder, onnx_model_file
from retrievers.dense.ray_encode import ENGINES, EncodeSettings, encode_on_ray
from retrievers.dense.retriever import (INDEXES, DenseRetriever, build_faiss_index, calibrate_ef_search, exact_search,
                                        recall_against, rescored)

__all__ = ["BACKENDS", "ENGINES", "INDEXES", "INT8_SETTINGS", "ONNX_OPSET", "DenseRetriever", "EncodeSettings",
           "Encoder", "OnnxEncoder", "RayFailed", "build_faiss_index", "calibrate_ef_search", "default_model_path",
           "encode_on_ray", "encode_texts", "exact_search", "hf_hub_cache", "hub_reachable", "hub_snapshot",
           "load_encoder", "model_identity", "onnx_model_file", "ray_runtime", "recall_against", "rescored",
           "resolve_model", "stderr_is_terminal"]

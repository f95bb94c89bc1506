"""Dense retrieval with a sentence-transformers bi-encoder (Reimers & Gurevych 2019).

Documents and queries are embedded by the same model (each with its own prefix, as e5 or
bge expect: ``query_prefix="query: "``, ``doc_prefix="passage: "``), optionally
L2-normalized (then the inner product is the cosine), and scored by inner product.
The implementation, one concern per module:

- ``model``: finding the model (bundled, local folder, Hugging Face cache, hub) without
  the network where it is not needed, and its identity for cache keys;
- ``onnx``: the ``onnx`` and ``onnx-int8`` backends (export, quantization, ``OnnxEncoder``);
- ``encoding``: loading the encoder of a backend, encoding with a progress bar;
- ``search``: exact search, faiss flat and HNSW (efSearch calibrated to a target recall),
  every result rescored to the project's tie rule;
- ``retriever``: ``DenseRetriever`` (the Hydra target ``retrievers.dense.DenseRetriever``)
  and its embedding caches (per corpus and per text).

``torch``, ``sentence_transformers``, ``onnxruntime`` and ``faiss`` are imported only when
needed, so importing this package is cheap; the model itself is loaded on first encode.
"""

from __future__ import annotations

from retrievers.dense.encoding import BACKENDS, Encoder, encode_texts, load_encoder, stderr_is_terminal
from retrievers.dense.model import (default_model_path, hf_hub_cache, hub_reachable, hub_snapshot, model_identity,
                                    resolve_model)
from retrievers.dense.onnx import INT8_SETTINGS, ONNX_OPSET, OnnxEncoder, onnx_model_file
from retrievers.dense.retriever import DenseRetriever
from retrievers.dense.search import (INDEXES, build_faiss_index, calibrate_ef_search, exact_search, recall_against,
                                     rescored)

__all__ = ["BACKENDS", "INDEXES", "INT8_SETTINGS", "ONNX_OPSET", "DenseRetriever", "Encoder", "OnnxEncoder",
           "build_faiss_index", "calibrate_ef_search", "default_model_path", "encode_texts", "exact_search",
           "hf_hub_cache", "hub_reachable", "hub_snapshot", "load_encoder", "model_identity", "onnx_model_file",
           "recall_against", "rescored", "resolve_model", "stderr_is_terminal"]

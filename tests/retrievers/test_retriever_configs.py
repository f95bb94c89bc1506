"""Every conf/retriever/*.yaml composes with Hydra and instantiates the retriever it names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from retrievers.base import Retriever
from retrievers.bm25 import BM25Retriever
from retrievers.chroma import ChromaRetriever
from retrievers.dense import DenseRetriever
from retrievers.hybrid import HybridRetriever
from retrievers.langchain import LangChainRetriever
from retrievers.llamaindex import LlamaIndexRetriever
from retrievers.python_function import PythonRetriever
from retrievers.run_file import RunFileRetriever

CONF = Path(__file__).resolve().parents[2] / "conf"
OPTIONS = sorted(p.stem for p in (CONF / "retriever").glob("*.yaml"))
EXPECTED = {
    "bm25": BM25Retriever,
    "dense": DenseRetriever,
    "hybrid": HybridRetriever,
    "hybrid_convex": HybridRetriever,
    "run_file": RunFileRetriever,
    "python": PythonRetriever,
    "langchain": LangChainRetriever,
    "llamaindex": LlamaIndexRetriever,
    "chroma": ChromaRetriever,
}
#: The keys an option requires (``???``): constructing the adapters imports nothing of the user's.
REQUIRED = {
    "python": ["retriever.target=module:function"],
    "langchain": ["retriever.factory=module:function"],
    "llamaindex": ["retriever.factory=module:function"],
    "chroma": ["retriever.collection=sample"],
}


def compose_retriever(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(overrides=list(overrides))


def test_every_option_is_known():
    assert OPTIONS == sorted(EXPECTED)


@pytest.mark.parametrize("option", OPTIONS)
def test_option_instantiates(option, tmp_path):
    overrides = [f"+retriever={option}"]
    if option == "run_file":
        overrides.append(f"retriever.path={tmp_path / 'run.txt'}")
    if option == "chroma":
        overrides.append(f"retriever.path={tmp_path / 'chroma'}")
    overrides += REQUIRED.get(option, [])
    retriever = instantiate(compose_retriever(*overrides).retriever)
    assert isinstance(retriever, EXPECTED[option]) and isinstance(retriever, Retriever)


def test_bm25_defaults_match_the_class():
    r = instantiate(compose_retriever("+retriever=bm25").retriever)
    assert r.cache_key() == BM25Retriever().cache_key()


def test_hybrid_composes_bm25_and_dense_defaults():
    cfg = compose_retriever("+retriever=hybrid", "retriever.first.k1=0.9")
    h = instantiate(cfg.retriever)
    assert isinstance(h.first, BM25Retriever) and isinstance(h.second, DenseRetriever)
    assert h.first.k1 == 0.9 and h.fusion == "rrf" and h.rrf_k == 60.0 and h.candidate_depth == 100
    convex = instantiate(compose_retriever("+retriever=hybrid_convex", "retriever@retriever.second=bm25").retriever)
    assert convex.fusion == "convex" and isinstance(convex.second, BM25Retriever)


def test_dense_cache_dir_follows_the_top_level_knob():
    assert compose_retriever("+retriever=dense").retriever.cache_dir == "outputs/cache"
    cfg = compose_retriever("+retriever=hybrid", "+cache_dir=/tmp/elsewhere")
    assert cfg.retriever.second.cache_dir == "/tmp/elsewhere"
    assert instantiate(cfg.retriever).second.cache_dir == Path("/tmp/elsewhere")

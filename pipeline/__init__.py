"""RAG retrieval evaluation: load -> retrieve -> place -> score -> track.

The Python API (docs/python-api.md) is exported here lazily, so that ``import pipeline``
(and every ``python -m pipeline.cli COMMAND``) stays light: ``pipeline.evaluate``,
``compare``, ``load_collection``, ``run_job`` and their result types load ``pipeline.api``
on first use. They are plain functions and classes; the commands live in ``pipeline.cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: The names ``pipeline`` exports from ``pipeline.api``.
API = ("evaluate", "compare", "load_collection", "run_job", "EvaluationResult", "Comparison", "JobResult",
       "InputError")

if TYPE_CHECKING:  # for type checkers and editors; at run time ``__getattr__`` imports them
    from pipeline.api import (Comparison, EvaluationResult, InputError, JobResult, compare, evaluate,
                              load_collection, run_job)

__all__ = ["Comparison", "EvaluationResult", "InputError", "JobResult", "__version__", "compare", "evaluate",
           "load_collection", "run_job"]


def __getattr__(name: str) -> Any:
    """``pipeline.evaluate`` and the other API names, imported on first use."""
    if name in API:
        from pipeline import api

        return getattr(api, name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})

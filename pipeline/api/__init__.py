"""The Python API (docs/python-api.md): the project's commands as functions for notebooks
and scripts, exported lazily by ``pipeline`` (``pipeline.evaluate(...)``).

- :func:`evaluate`: ``python -m pipeline.cli score`` on files, dicts or DataFrames;
- :func:`compare`: ``python -m pipeline.cli compare``'s report;
- :func:`load_collection`: a dataset of ``conf/dataset``, as a job loads it;
- :func:`run_job`: ``python -m pipeline OVERRIDES`` in this process.

User mistakes raise ``pipeline.errors.InputError`` (``str(err)`` is the commands' one line).
"""

from __future__ import annotations

from pipeline.api.evaluation import EvaluationResult, evaluate
from pipeline.api.inputs import read_qrels_source, read_run_source
from pipeline.api.jobs import Comparison, JobResult, compare, load_collection, run_job
from pipeline.errors import InputError

__all__ = ["Comparison", "EvaluationResult", "InputError", "JobResult", "compare", "evaluate", "load_collection",
           "read_qrels_source", "read_run_source", "run_job"]

"""The old spelling ``python -m pipeline.fetch``: it runs ``python -m pipeline.cli fetch``. Not importable
(``pipeline.cli.fetch`` is the command; see ``pipeline.cli.runner.moved``)."""

from __future__ import annotations

from pipeline.cli.runner import moved

moved(__name__, "fetch")

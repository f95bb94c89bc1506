"""The old spelling ``python -m pipeline.judgments``: it runs ``python -m pipeline.cli judgments``. Not importable
(``pipeline.cli.judgments`` is the command; see ``pipeline.cli.runner.moved``)."""

from __future__ import annotations

from pipeline.cli.runner import moved

moved(__name__, "judgments")

"""The old spelling ``python -m pipeline.pool``: it runs ``python -m pipeline.cli pool``. Not importable
(``pipeline.cli.pool`` is the command; see ``pipeline.cli.runner.moved``)."""

from __future__ import annotations

from pipeline.cli.runner import moved

moved(__name__, "pool")

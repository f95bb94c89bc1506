"""The old spelling ``python -m pipeline.sync``: it runs ``python -m pipeline.cli sync``. Not importable
(``pipeline.cli.sync`` is the command; see ``pipeline.cli.runner.moved``)."""

from __future__ import annotations

from pipeline.cli.runner import moved

moved(__name__, "sync")

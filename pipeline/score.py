"""The old spelling ``python -m pipeline.score``: it runs ``python -m pipeline.cli score``. Not importable
(``pipeline.cli.score`` is the command; see ``pipeline.cli.runner.moved``)."""

from __future__ import annotations

from pipeline.cli.runner import moved

moved(__name__, "score")

"""The old spelling ``python -m pipeline.index``: it runs ``python -m pipeline.cli index``. Not importable
(``pipeline.cli.index`` is the command; see ``pipeline.cli.runner.moved``)."""

from __future__ import annotations

from pipeline.cli.runner import moved

moved(__name__, "index")

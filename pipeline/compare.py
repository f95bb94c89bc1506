"""The old spelling ``python -m pipeline.compare``: it runs ``python -m pipeline.cli compare``. Not importable
(``pipeline.cli.compare`` is the command; see ``pipeline.cli.runner.moved``)."""

from __future__ import annotations

from pipeline.cli.runner import moved

moved(__name__, "compare")

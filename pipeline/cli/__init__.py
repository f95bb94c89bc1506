"""The commands: ``python -m pipeline.cli COMMAND [args]`` (console script: ``rag-eval COMMAND``).

Each command is a module here, its parser and a call into the library, run by the one
runner (``pipeline.cli.runner``: one-line errors, the error model's exit statuses). They live
in their own package so that their names never collide with the Python API's
(``pipeline.compare`` is a function). ``python -m pipeline OVERRIDES`` runs a job or a sweep;
it is Hydra's command line, not one of these.
"""

from __future__ import annotations

#: Every command and what it does, in the order ``--help`` lists them.
COMMANDS = {
    "fetch": "download a BEIR collection into data/",
    "score": "score a TREC run file against qrels, as a job scores",
    "compare": "compare systems (jobs, sweeps, run files, MLflow runs) with paired statistics",
    "sync": "log to MLflow what a crash or a lost store left on disk",
    "pool": "pool the top documents of several runs for judging (Label Studio tasks)",
    "judgments": "turn Label Studio annotations into qrels, with annotator agreement",
    "index": "load a collection into a Chroma collection (retriever=chroma)",
}

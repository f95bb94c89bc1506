"""Nothing from nothing, for the user's own retriever (issue 33, item 8).

Reproduced first on the code before: every id a retriever returned unknown to the corpus,
every query failing under ``on_error=skip``, or a Chroma collection built from another corpus
(tests/retrievers/test_chroma.py) each gave a job whose every metric was 0.0000, exit status
0, while ``pipeline.score`` and ``retriever=run_file`` refuse the same input. Now the search
stops with one line that says why (InputError: exit status 2).
"""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest
from commands import run_job_command

from pipeline.errors import InputError
from retrievers.python_function import PythonRetriever

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["d1", "d2", "d3"]

USER_MODULE = textwrap.dedent(
    """
    def other_corpus(text, k):
        return [("x-" + text, 1.0), ("y-" + text, 0.5)]

    def nothing(text, k):
        return []

    def broken(text, k):
        raise ConnectionError("the index is down")

    def one_known(text, k):
        return [("d2", 1.0)] if text == "b" else [("ghost", 1.0)]
    """
)


@pytest.fixture
def module(tmp_path, monkeypatch):
    name = f"nr_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def search(target: str, **settings):
    retriever = PythonRetriever(target, show_progress_bar=False, **settings)
    retriever.index(DOCS, DOCS)
    return retriever.search(["q1", "q2", "q3"], ["a", "b", "c"], 3)


def test_no_returned_id_in_the_corpus_is_refused(module):
    with pytest.raises(InputError) as err:
        search(f"{module}:other_corpus")
    assert str(err.value).startswith("error: retriever=python: none of the 6 ids it returned for 3 of the 3 queries "
                                     "is in the corpus (e.g. 'x-a', 'y-a', 'x-b'): nothing to score")


def test_no_result_for_any_query_is_refused(module):
    with pytest.raises(InputError, match="it returned no result for any of the 3 queries: nothing to score"):
        search(f"{module}:nothing")


def test_every_query_failing_under_skip_is_refused(module):
    with pytest.raises(InputError, match=r"all 3 queries failed \(retriever.on_error=skip\): nothing to score"):
        search(f"{module}:broken", on_error="skip")


def test_one_usable_query_is_enough(module):
    ranking = search(f"{module}:one_known")
    assert ranking.doc_idx.tolist() == [[-1, -1, -1], [1, -1, -1], [-1, -1, -1]]


def test_the_job_exits_2_with_one_line(tmp_path, module):
    """The job in this process (tests/commands.py): its status and output as a process's."""
    done = run_job_command("tracking=none", f"paths.root={tmp_path}", f"hydra.run.dir={tmp_path / 'job'}",
                           "retriever=python", f"retriever.target={module}:other_corpus")
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: retriever=python: none of the 104 ids it returned for 52 of the 52 queries is in the corpus")
    assert "0.0000" not in done.stdout and not (tmp_path / "job" / "results").exists()

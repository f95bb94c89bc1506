"""Scores keep the ranking they had (issue 33, item 5 and the 1e308 warning).

Reproduced first on the code before: a user retriever's scores went through float32, so
scores 1 + 1e-9 * i all became 1 in run.trec (the job's own file, re-scored under trec_eval's
tie rule, gave nDCG@10 0.108 instead of the job's 0.381), scores near 1e300 became inf (and
``pipeline.score`` refused the job's own file), and scoring a run with 1e308 printed numpy's
overflow warning. Now the Ranking keeps float64 scores as given, run.trec writes each exactly,
and a score that is not finite is refused in one line.
"""

from __future__ import annotations

import json
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from commands import job_in_process, run_command

from pipeline.errors import InputError
from pipeline.io.formats import read_run, write_run
from pipeline.io.formats.trec import score_texts
from pipeline.io.cache import load_or_compute_ranking
from pipeline.ranking import rows_to_ranking
from retrievers.python_function import PythonRetriever

ROOT = Path(__file__).resolve().parents[2]
QRELS = ROOT / "pipeline" / "sample" / "qrels" / "test.tsv"

#: BM25's ranking of the sample, its scores replaced: ``close`` 1 + 1e-9 * (depth - rank)
#: (one float32 value), ``huge`` 1e300 * (depth - rank) (past float32).
USER_MODULE = textwrap.dedent(
    """
    import threading
    _lock, _bm25 = threading.Lock(), []

    def _ranked(text, k):
        with _lock:
            if not _bm25:
                from pipeline.io.collection import load_sample
                from retrievers.bm25 import BM25Retriever
                collection = load_sample()
                bm25 = BM25Retriever()
                bm25.index(collection.doc_ids, collection.doc_texts)
                _bm25.append((bm25, collection.doc_ids))
        bm25, ids = _bm25[0]
        ranking = bm25.search(["q"], [text], k)
        return [ids[d] for d in ranking.doc_idx[0] if d >= 0]

    def close(text, k):
        docs = _ranked(text, k)
        return [(d, 1.0 + 1e-9 * (len(docs) - r)) for r, d in enumerate(docs)]

    def huge(text, k):
        docs = _ranked(text, k)
        return [(d, 1e300 * (len(docs) - r)) for r, d in enumerate(docs)]
    """
)


def test_close_and_huge_scores_are_written_exactly(tmp_path):
    scores = np.array([[1e300, 1.0 + 2e-9, 1.0 + 1e-9, 1.0]])
    write_run(tmp_path / "run.trec", ["q"], ["a", "b", "c", "d"], np.array([[0, 1, 2, 3]]), scores)
    run = read_run(tmp_path / "run.trec")
    np.testing.assert_array_equal(np.asarray(run.scores), scores[0])  # every float64 back, bit for bit
    # float32 values (the built-in retrievers'): 9 significant digits, as before
    assert score_texts(np.float32([4.1, 4.0, 1e-3]).astype(np.float64)) == ["4.0999999", "4", "0.00100000005"]


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_score_that_is_not_finite_is_refused_in_one_line(tmp_path, bad):
    with pytest.raises(InputError) as err:
        write_run(tmp_path / "run.trec", ["q"], ["a", "b"], np.array([[0, 1]]), np.array([2.0, bad])[None])
    assert f"cannot write the run: query 'q', document 'b' has the score {bad}, not a finite number" in str(err.value)
    assert "\n" not in str(err.value) and not (tmp_path / "run.trec").exists()


def test_a_user_retrievers_scores_stay_float64_through_the_cache(tmp_path, monkeypatch):
    (tmp_path / "rs_close.py").write_text("def search(text, k):\n    return [('a', 1.0 + 2e-9), ('b', 1.0 + 1e-9), "
                                          "('c', 1e300)][::-1]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    retriever = PythonRetriever("rs_close:search", version="v1", show_progress_bar=False)
    retriever.index(["a", "b", "c"], ["", "", ""])
    expected = [[1e300, 1.0 + 2e-9, 1.0 + 1e-9]]
    key = {"collection": "x", "retriever": retriever.cache_key(), "depth": 3}
    for hit in (False, True):
        ranking, was_hit = load_or_compute_ranking(tmp_path / "cache", key,
                                                   lambda: retriever.search(["q"], ["t"], 3))
        assert was_hit == hit and ranking.scores.dtype == np.float64 and ranking.scores.tolist() == expected


def test_rows_to_ranking_of_huge_scores_warns_nothing():
    with np.errstate(all="raise"):  # a cast to float32 would overflow here
        ranking = rows_to_ranking(np.array([0, 0]), np.array([0, 1]), np.array([1e308, -1e308]), 1)
    assert ranking.scores.tolist() == [[1e308, -1e308]]


# --------------------------------------------------------------------------- through the command line
# The job and the scorer run in this process (tests/commands.py).


def _score(run: Path, *args: str):
    return run_command("score", QRELS, run, "--json", *args)


@pytest.mark.parametrize("function", ["close", "huge"])
def test_the_jobs_own_run_rescored_under_either_tie_rule_gives_its_numbers(tmp_path, monkeypatch, function):
    (tmp_path / "rs.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rs", raising=False)  # this test's module, not another test's
    job = tmp_path / "job"
    try:
        result = job_in_process("tracking=none", f"paths.root={tmp_path}", f"hydra.run.dir={job}",
                                "retriever=python", f"retriever.target=rs:{function}")
    finally:
        sys.modules.pop("rs", None)
    metrics = json.loads((job / "results" / "metrics.json").read_text())
    metrics = metrics.get("metrics", metrics)
    assert metrics["ndcg_at_10"] == pytest.approx(0.5772, abs=5e-5)  # BM25's ranking, kept (README's number)
    assert result.metrics["ndcg_at_10"] == metrics["ndcg_at_10"]
    for tie in ("file_order", "docid_desc"):
        scored = _score(job / "results" / "run.trec", "--tie-break", tie)
        assert scored.returncode == 0, scored.stderr[-2000:]
        assert json.loads(scored.stdout)["ndcg_at_10"] == pytest.approx(metrics["ndcg_at_10"], rel=1e-12), tie


#: What Python's default filters leave unprinted (as the command line would).
QUIET = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def test_scoring_a_run_of_1e308_prints_no_numpy_warning(tmp_path):
    run = tmp_path / "big.trec"
    run.write_text("q01 Q0 d034 1 1e308 x\nq01 Q0 d092 2 -1e308 x\nq02 Q0 d001 1 1.7e308 x\n")
    with warnings.catch_warnings(record=True) as caught:  # in a process, numpy's warning is printed on stderr
        warnings.simplefilter("always")
        scored = _score(run)
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert "Warning" not in scored.stderr and "overflow" not in scored.stderr, scored.stderr
    shown = [f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, QUIET)]
    assert not shown, shown

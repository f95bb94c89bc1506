"""Run files served as Rankings: mapping, tie rules (trec_eval's), skipped documents, errors."""

from __future__ import annotations

import gzip
import logging

import numpy as np
import pytest

from pipeline.errors import InputError
from retrievers.run_file import RunFileRetriever

DOCS = ["d1", "d2", "d3", "d4", "d5"]


def write(path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


@pytest.fixture
def run_path(tmp_path) -> str:
    return write(
        tmp_path / "run.txt",
        [
            "q1 Q0 d3 1 2.0 sys",
            "q1 Q0 d9 2 5.0 sys",  # not in the corpus
            "q1 Q0 d1 3 2.0 sys",  # ties with d3
            "q1 Q0 d2 4 1.5 sys",
            "q3 Q0 d4 1 9.0 sys",  # a query that is not asked for
            "q4 Q0 d5 1 0.25 sys",
            "q4 Q0 d4 2 0.5 sys",  # rank column disagrees with the score: the score wins
        ],
    )


def test_maps_ids_orders_and_pads(run_path, caplog):
    r = RunFileRetriever(run_path)
    r.index(DOCS, [""] * 5)
    with caplog.at_level(logging.INFO, logger="retrievers.run_file"):
        ranking = r.search(["q1", "q2", "q4"], ["", "", ""], 4)
    assert ranking.doc_idx.tolist() == [[0, 2, 1, -1], [-1, -1, -1, -1], [3, 4, -1, -1]]
    np.testing.assert_array_equal(ranking.scores[0, :3], np.float32([2.0, 2.0, 1.5]))
    assert np.isneginf(ranking.scores[1]).all() and ranking.scores.dtype == np.float64
    assert r.report == {"run_unknown_docs": 1, "run_other_queries": 1, "run_queries_without_results": 1}
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    # one line with every count (issue 28): queries with results, unknown documents, other queries
    message = warnings[0].getMessage() if len(warnings) == 1 else ""
    assert "results for 2 of the 3 evaluated queries (the other 1 score 0); 1 of its " in message
    assert "'d9'" in message and "1 other queries in the run (ignored)" in message


def test_docid_desc_and_depth(run_path):
    r = RunFileRetriever(run_path, tie_break="docid_desc")
    r.index(DOCS, [""] * 5)
    assert r.search(["q1"], [""], 2).doc_idx.tolist() == [[2, 0]]  # d3 > d1 as strings


def test_docid_desc_reproduces_trec_eval_on_tied_runs(tmp_path):
    import pytrec_eval  # the oracle: a test dependency, missing it fails
    rng = np.random.default_rng(0)
    docs = [f"doc{i}" for i in rng.permutation(200)]  # corpus order unrelated to id order
    lines, run, qrels = [], {}, {}
    for q in range(30):
        chosen = rng.choice(docs, size=40, replace=False)
        scores = rng.integers(0, 4, size=40).astype(float)  # heavy ties
        run[f"q{q}"] = {d: s for d, s in zip(chosen, scores)}
        lines += [f"q{q} Q0 {d} {i + 1} {s} t" for i, (d, s) in enumerate(zip(chosen, scores))]
        judged = rng.choice(chosen, size=8, replace=False)
        qrels[f"q{q}"] = {d: int(g) for d, g in zip(judged, rng.integers(0, 3, size=8))}
    path = write(tmp_path / "tied.run", lines)
    want = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)

    def ndcg10(tie_break: str) -> dict[str, float]:
        r = RunFileRetriever(path, tie_break=tie_break)
        r.index(docs, [""] * len(docs))
        qids = [f"q{q}" for q in range(30)]
        ranking = r.search(qids, [""] * 30, 10)
        out = {}
        for qid, row in zip(qids, ranking.doc_idx):
            gains = np.array([qrels[qid].get(docs[d], 0) for d in row if d >= 0], float)
            ideal = np.sort(np.array(list(qrels[qid].values()), float))[::-1][:10]
            disc = 1 / np.log2(np.arange(2, 12))
            idcg = (ideal * disc[: len(ideal)]).sum()
            out[qid] = (gains * disc[: len(gains)]).sum() / idcg if idcg else 0.0
        return out

    got = ndcg10("docid_desc")
    assert all(got[q] == pytest.approx(want[q]["ndcg_cut_10"], abs=1e-9) for q in want)
    by_index = ndcg10("doc_index")
    assert any(abs(by_index[q] - want[q]["ndcg_cut_10"]) > 1e-6 for q in want)  # ties do matter here


def test_gzip_and_cache_key(tmp_path):
    path = tmp_path / "run.txt.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("q1 Q0 d2 1 3 x\nq1 Q0 d5 2 4 x\n")
    r = RunFileRetriever(str(path))
    r.index(DOCS, [""] * 5)
    assert r.search(["q1"], [""], 3).doc_idx.tolist() == [[4, 1, -1]]
    key = r.cache_key()
    assert key["retriever"] == "run_file" and key["path"] == str(path.resolve()) and len(key["sha256"]) == 64
    with gzip.open(path, "wt") as fh:
        fh.write("q1 Q0 d2 1 3 x\n")
    assert RunFileRetriever(str(path)).cache_key()["sha256"] != key["sha256"]
    assert RunFileRetriever(str(path), tie_break="docid_desc").cache_key()["tie_break"] == "docid_desc"


def test_bad_run_files_raise_input_errors(tmp_path):
    r = RunFileRetriever(write(tmp_path / "bad.run", ["q1 Q0 d1 1 2.0 t", "q1 Q0 d2 2 t"]))
    r.index(DOCS, [""] * 5)
    with pytest.raises(InputError, match=r"bad\.run:2"):
        r.search(["q1"], [""], 3)
    r = RunFileRetriever(write(tmp_path / "dup.run", ["q1 Q0 d1 1 2.0 t", "q1 Q0 d1 2 1.0 t"]))
    r.index(DOCS, [""] * 5)
    with pytest.raises(InputError, match=r"dup\.run:2.*twice"):
        r.search(["q1"], [""], 3)
    r = RunFileRetriever(str(tmp_path / "missing.run"))
    r.index(DOCS, [""] * 5)
    with pytest.raises(InputError, match="not found"):
        r.search(["q1"], [""], 3)
    with pytest.raises(ValueError, match="tie_break"):
        RunFileRetriever("x", tie_break="random")


def test_file_order_and_the_shared_tie_rule_names(run_path):
    r = RunFileRetriever(run_path, tie_break="file_order")
    r.index(DOCS, [""] * 5)
    assert r.search(["q1"], [""], 3).doc_idx.tolist() == [[2, 0, 1]]  # d3 before d1: the file's order
    alias = RunFileRetriever(run_path, tie_break="score")  # the scorer's earlier name for file_order
    assert alias.tie_break == "file_order" and alias.cache_key()["tie_break"] == "file_order"
    assert RunFileRetriever(run_path).cache_key()["tie_break"] == "doc_index"  # the default is unchanged

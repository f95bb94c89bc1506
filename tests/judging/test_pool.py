"""pipeline.pool: exact depth-d pools on hand-made runs, judged documents left out, the cap,
the seeded shuffle without provenance, the outputs and the one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.cli import pool as command
from pipeline.io.collection import SAMPLE_DIR
from pipeline.io.formats import read_qrels
from pipeline.judging import pool as pl

QUERIES = ["q1", "q2", "q3"]
DOCS = [f"d{i}" for i in range(8)]
# doc indices, -1 = nothing retrieved
RUN_A = np.array([[0, 1, 2, 3], [4, 5, -1, -1], [-1, -1, -1, -1]])
RUN_B = np.array([[2, 6, 0, 7], [5, 4, 3, 2], [1, -1, -1, -1]])


def _pairs(result: pl.Pool) -> dict[str, set[str]]:
    got: dict[str, set[str]] = {}
    for q, d in zip(result.query_idx.tolist(), result.doc_idx.tolist()):
        got.setdefault(QUERIES[q], set()).add(DOCS[d])
    return got


def test_depth_pool_is_the_union_of_the_tops():
    assert _pairs(pl.pool([RUN_A, RUN_B], QUERIES, DOCS, depth=2)) == {
        "q1": {"d0", "d1", "d2", "d6"}, "q2": {"d4", "d5"}, "q3": {"d1"}}
    assert _pairs(pl.pool([RUN_A, RUN_B], QUERIES, DOCS, depth=3)) == {
        "q1": {"d0", "d1", "d2", "d6"}, "q2": {"d3", "d4", "d5"}, "q3": {"d1"}}
    assert _pairs(pl.pool([RUN_A], QUERIES, DOCS, depth=10)) == {"q1": {"d0", "d1", "d2", "d3"}, "q2": {"d4", "d5"}}


def test_judged_documents_are_left_out():
    judged = (np.array([0, 0, 1, 2]), np.array([2, 7, 4, -1]))  # q1: d2, d7; q2: d4; a doc not in the corpus
    result = pl.pool([RUN_A, RUN_B], QUERIES, DOCS, depth=2, judged=judged)
    assert _pairs(result) == {"q1": {"d0", "d1", "d6"}, "q2": {"d5"}, "q3": {"d1"}}
    assert (result.n_candidates, result.n_judged) == (7, 2)


def test_max_pool_keeps_the_best_ranked():
    # depth 4, best ranks (0-based). q1: d0 0, d2 0, d1 1, d6 1, d3 3, d7 3 -> keep d0, d2 and
    # d1 (rank 1 tie with d6: corpus order). q2: d4 0, d5 0, d3 2, d2 3 -> keep d4, d5, d3.
    result = pl.pool([RUN_A, RUN_B], QUERIES, DOCS, depth=4, max_pool=3)
    assert _pairs(result) == {"q1": {"d0", "d1", "d2"}, "q2": {"d3", "d4", "d5"}, "q3": {"d1"}}
    assert result.n_capped == (6 - 3) + (4 - 3)


def _brute_force(runs, depth, judged, max_pool):
    expected = {}
    for q in range(len(QUERIES)):
        best: dict[int, int] = {}
        for run in runs:
            for r, d in enumerate(run[q, :depth].tolist()):
                if d >= 0 and (q, d) not in judged:
                    best[d] = min(best.get(d, r), r)
        ordered = sorted(best, key=lambda d: (best[d], d))[: max_pool or None]
        if ordered:
            expected[QUERIES[q]] = {DOCS[d] for d in ordered}
    return expected


@pytest.mark.parametrize("seed", range(4))
def test_pool_equals_a_brute_force_pool(seed):
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(3):
        run = np.stack([rng.permutation(len(DOCS))[:6] for _ in QUERIES])
        run[rng.random(run.shape) < 0.1] = -1
        runs.append(run)
    judged = {(int(rng.integers(3)), int(rng.integers(8))) for _ in range(5)}
    jq, jd = (np.array(x) for x in zip(*judged))
    for depth, cap in ((1, None), (3, None), (3, 4), (6, 2)):
        result = pl.pool(runs, QUERIES, DOCS, depth=depth, judged=(jq, jd), max_pool=cap)
        assert _pairs(result) == _brute_force(runs, depth, judged, cap)


def test_shuffle_is_seeded_and_independent_of_the_runs():
    a = pl.pool([RUN_A, RUN_B], QUERIES, DOCS, depth=4, seed=7)
    b = pl.pool([RUN_B, RUN_A], QUERIES, DOCS, depth=4, seed=7)
    assert a.query_idx.tolist() == b.query_idx.tolist() and a.doc_idx.tolist() == b.doc_idx.tolist()
    assert np.all(np.diff(a.query_idx) >= 0)  # grouped by query
    # Each query's order is by the documented hash, not by rank.
    for q in set(a.query_idx.tolist()):
        docs = [DOCS[d] for d in a.doc_idx[a.query_idx == q].tolist()]
        keys = pl.shuffle_keys(7, [QUERIES[q]] * len(docs), docs)
        assert np.all(np.diff(keys.astype(np.float64)) > 0)
    orders = {tuple(pl.pool([RUN_A, RUN_B], QUERIES, DOCS, depth=4, seed=s).doc_idx.tolist()) for s in range(6)}
    assert len(orders) > 1


def test_bad_values_raise():
    with pytest.raises(ValueError, match="depth"):
        pl.pool([RUN_A], QUERIES, DOCS, depth=0)
    with pytest.raises(ValueError, match="rows"):
        pl.pool([RUN_A[:2]], QUERIES, DOCS)


def _write_run(path, rows):
    path.write_text("".join(f"{q} Q0 {d} {r + 1} {10 - r} tag\n" for q, docs in rows.items() for r, d in enumerate(docs)))
    return path


def test_cli_pools_run_files_on_the_sample(tmp_path, capsys):
    """Two runs over the sample; the sample's judgments and a --qrels file are left out; the
    outputs hold no trace of the runs."""
    run1 = _write_run(tmp_path / "a.trec", {"q01": ["d092", "d001", "d002", "d003"], "q02": ["d010", "d011"]})
    run2 = _write_run(tmp_path / "b.trec", {"q01": ["d004", "d001", "d050"], "q02": ["d012"], "zz": ["d001"]})
    extra = tmp_path / "round1.txt"
    extra.write_text("q02 0 d011 2\n")
    out = tmp_path / "pool"
    assert command.main(["--run", str(run1), "--run", str(run2), "--depth", "2", "--qrels", str(extra),
                         "--out", str(out), "--seed", "3"]) == 0
    judged = read_qrels(SAMPLE_DIR / "qrels/test.tsv")
    judged_pairs = set(zip(judged.query_ids.tolist(), judged.doc_ids.tolist()))
    candidates = {("q01", d) for d in ("d092", "d001", "d004")} | {("q02", d) for d in ("d010", "d011", "d012")}
    expected = candidates - judged_pairs - {("q02", "d011")}
    lines = (out / "pool.tsv").read_text().splitlines()
    assert lines[0] == "query_id\tdoc_id"
    assert sorted(tuple(line.split("\t")) for line in lines[1:]) == sorted(expected)
    tasks = json.loads((out / "tasks.json").read_text())
    assert [(t["data"]["query_id"], t["data"]["doc_id"]) for t in tasks] == [tuple(x.split("\t")) for x in lines[1:]]
    assert all(set(t) == {"data"} and set(t["data"]) == {"query_id", "query", "doc_id", "document"} for t in tasks)
    summary = json.loads((out / "pool.json").read_text())
    assert summary["n_pooled"] == len(expected) and summary["depth"] == 2
    config = (out / "labeling_config.xml").read_text()
    for grade, text in pl.GRADES:
        assert f'value="{grade}: {text}" alias="{grade}" hotkey="{grade}"' in config
    assert "a.trec" not in (out / "tasks.json").read_text() + (out / "pool.tsv").read_text()
    assert "documents to judge" in capsys.readouterr().out


def test_cli_pools_an_unjudged_corpus_with_a_retriever(tmp_path):
    queries = tmp_path / "topics.tsv"
    queries.write_text("n1\thow do I fix a flat tire\nn2\twhen should brake pads be replaced\n")
    corpus = SAMPLE_DIR / "corpus.jsonl"
    out = tmp_path / "pool"
    code = command.main(["dataset=trec", "dataset.qrels=null", f"dataset.queries={queries}", f"dataset.corpus={corpus}",
                         f"cache_dir={tmp_path / 'cache'}", "--retriever", "bm25", "--depth", "3", "--out", str(out)])
    assert code == 0
    rows = [line.split("\t") for line in (out / "pool.tsv").read_text().splitlines()[1:]]
    assert sorted({q for q, _ in rows}) == ["n1", "n2"] and len(rows) == 6


@pytest.mark.parametrize("args, problem", [
    ([], "nothing to pool"),
    (["--run", "missing.trec"], "missing.trec"),
    (["--run", "RUN", "--depth", "0"], "--depth must be >= 1"),
    (["--run", "RUN", "--max-pool", "0"], "--max-pool must be >= 1"),
    (["--run", "BAD"], "expected 6 columns"),
    (["--run", "RUN", "--label-studio", "http://127.0.0.1:9"], "LABEL_STUDIO_API_KEY"),
])
def test_cli_errors_are_one_line_and_exit_2(args, problem, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LABEL_STUDIO_API_KEY", raising=False)
    run = _write_run(tmp_path / "r.trec", {"q01": ["d001"]})
    bad = tmp_path / "bad.trec"
    bad.write_text("q01 Q0 d001 1\n")
    args = [str(run) if a == "RUN" else str(bad) if a == "BAD" else a for a in args]
    assert command.main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and problem in err and "Traceback" not in err

"""The run-file scorer: formats, tie rules against pytrec_eval, output, and bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import InputError
from pipeline.io.formats import read_qrels, read_run, write_run
from pipeline.io.scored import score_files
from pipeline.score import main

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


QRELS = "q1 0 d1 2\nq1 0 d2 0\nq1 0 d3 1\nq2 0 d9 1\nq3 0 d5 0\n"
RUN = (
    "q1 Q0 d2 1 9.5 t\n"
    "q1 Q0 d1 2 9.0 t\n"
    "q1 Q0 d7 3 8.0 t\n"
    "q1 Q0 d3 4 7.0 t\n"
    "q3 Q0 d5 1 1.0 t\n"
    "q4 Q0 d5 1 1.0 t\n"
)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.score", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_json_output_values(tmp_path, capsys):
    qrels = write(tmp_path / "qrels.txt", QRELS)
    run = write(tmp_path / "run.txt", RUN)
    assert main([str(qrels), str(run), "--k", "1,2,4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # q1: d2(0) d1(2) d7(-) d3(1), R = 2; q2 judged, no results -> zeros; q3 has no relevant doc -> left out
    assert out["n_queries"] == 2 and out["n_queries_no_relevant"] == 1
    assert out["precision_at_2"] == pytest.approx((1 / 2 + 0) / 2)
    assert out["recall_at_4"] == pytest.approx((2 / 2 + 0) / 2)
    assert out["mrr"] == pytest.approx((1 / 2 + 0) / 2)
    assert out["map"] == pytest.approx(((1 / 2 + 2 / 4) / 2 + 0) / 2)
    assert set(out) >= {"ndcg_at_1", "dcg_at_4", "cg_at_2", "hit_rate_at_1", "map_at_4", "mrr_at_4"}


def test_table_and_per_query_output(tmp_path):
    qrels = write(tmp_path / "qrels.txt", QRELS)
    run = write(tmp_path / "run.txt", RUN)
    proc = run_cli(str(qrels), str(run), "--k", "1,4", "--per-query")
    assert proc.returncode == 0, proc.stderr
    assert "precision" in proc.stdout and "@4" in proc.stdout
    assert "q1" in proc.stdout and "q2" in proc.stdout
    assert "1 queries of the run have no judgments" in proc.stderr
    proc = run_cli(str(qrels), str(run), "--k", "1", "--per-query", "--json")
    data = json.loads(proc.stdout)
    assert data["per_query"]["q1"]["precision_at_1"] == 0.0
    assert data["per_query"]["q3"]["evaluated"] is False


def test_beir_tsv_and_gzip_inputs(tmp_path):
    qrels = tmp_path / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t1\n")
    run = tmp_path / "run.txt.gz"
    with gzip.open(run, "wt") as fh:
        fh.write(RUN)
    scored = score_files(str(qrels), str(run), k_max=4, gain="linear")
    means = scored.evaluation.means([4])
    assert means["recall_at_4"] == 1.0
    assert means["n_queries"] == 1


def test_tie_break_score_keeps_file_order_and_docid_desc_matches_trec_eval(tmp_path):
    qrels = write(tmp_path / "qrels.txt", "q1 0 a 1\n")
    run = write(tmp_path / "run.txt", "q1 Q0 a 1 1.0 t\nq1 Q0 b 2 1.0 t\n")
    by_file = score_files(str(qrels), str(run), k_max=1)
    by_docid = score_files(str(qrels), str(run), k_max=1, tie_break="docid_desc")
    assert by_file.evaluation.means([1])["precision_at_1"] == 1.0  # 'a' listed first
    assert by_docid.evaluation.means([1])["precision_at_1"] == 0.0  # 'b' > 'a' comes first


def test_tied_runs_equal_pytrec_eval_with_docid_desc(tmp_path):
    import pytrec_eval  # the oracle: a test dependency, missing it fails
    rng = np.random.default_rng(3)
    n_q, n_docs, depth = 1000, 300, 100
    qrel_lines, run_lines = [], []
    qd: dict[str, dict[str, int]] = {}
    rd: dict[str, dict[str, float]] = {}
    for q in range(n_q):
        for d in rng.choice(n_docs, 20, replace=False):
            g = int(rng.integers(0, 5))
            qd.setdefault(f"q{q}", {})[f"doc{d}"] = g
            qrel_lines.append(f"q{q} 0 doc{d} {g}")
        docs = rng.choice(n_docs, depth, replace=False)
        scores = rng.integers(0, 8, depth) / 4  # many ties
        order = rng.permutation(depth)  # file order unrelated to the tie rule
        for r, i in enumerate(order):
            rd.setdefault(f"q{q}", {})[f"doc{docs[i]}"] = float(scores[i])
            run_lines.append(f"q{q} Q0 doc{docs[i]} {r + 1} {scores[i]} t")
    qrels = write(tmp_path / "qrels.txt", "\n".join(qrel_lines) + "\n")
    run = write(tmp_path / "run.txt", "\n".join(run_lines) + "\n")
    scored = score_files(str(qrels), str(run), k_max=100, gain="linear", tie_break="docid_desc")
    ev = scored.evaluation
    cuts = "1,3,5,10,20,50,100"
    res = pytrec_eval.RelevanceEvaluator(
        qd, {f"P.{cuts}", f"recall.{cuts}", f"ndcg_cut.{cuts}", f"map_cut.{cuts}", "recip_rank", "map"}
    ).evaluate(rd)
    idx = {q: i for i, q in enumerate(scored.query_ids)}
    rows = [idx[q] for q in res]
    mask = ev.evaluated[rows]
    for family, name in [("precision", "P"), ("recall", "recall"), ("ndcg", "ndcg_cut"), ("map", "map_cut")]:
        for k in map(int, cuts.split(",")):
            theirs = np.array([res[q][f"{name}_{k}"] for q in res])
            assert np.abs(ev.at_k[family][rows, k - 1] - theirs)[mask].max() <= 1e-9, (family, k)
    for ours, name in [("mrr", "recip_rank"), ("map", "map")]:
        theirs = np.array([res[q][name] for q in res])
        assert np.abs(ev.full[ours][rows] - theirs)[mask].max() <= 1e-9


def test_write_run_round_trips(tmp_path):
    doc_idx = np.array([[2, 0, -1], [1, -1, -1]])
    scores = np.array([[0.123456789, -1.5, -np.inf], [3.25, -np.inf, -np.inf]], np.float32)
    path = tmp_path / "run.trec"
    write_run(path, ["qa", "qb"], ["d0", "d1", "d2"], doc_idx, scores, tag="x")
    run = read_run(path)
    assert run.query_ids.tolist() == ["qa", "qa", "qb"]
    assert run.doc_ids.tolist() == ["d2", "d0", "d1"]
    assert np.array_equal(run.scores.astype(np.float32), np.array([0.123456789, -1.5, 3.25], np.float32))
    assert path.read_text().splitlines()[0].split() == ["qa", "Q0", "d2", "1", "0.123456791", "x"]


def test_identical_duplicate_judgments_dropped_and_counted(tmp_path):
    qrels = read_qrels(write(tmp_path / "q.txt", "q1 0 d1 1\nq1 0 d1 1\nq1 0 d2 0\n"))
    assert qrels.n_duplicates == 1
    assert qrels.doc_ids.tolist() == ["d1", "d2"]


BAD_INPUTS = [
    # (qrels text, run text, file that is wrong, line, words in the message)
    ("q1 0 d1 1\nq1 0 d2\n", RUN, "qrels", 2, "expected 4 columns, found 3"),
    ("q1 0 d1 1\nq1 0 d2 x\n", RUN, "qrels", 2, "grade 'x' is not an integer"),
    ("q1 0 d1 1\n\nq1 0 d2 1.5\n", RUN, "qrels", 3, "grade '1.5' is not an integer"),
    ("q1 0 d1 1\nq1 0 d1 2\n", RUN, "qrels", 2, "different grades"),
    ("query-id\tdoc\tscore\nq1\td1\t1\n", RUN, "qrels", 1, "BEIR TSV with the header"),
    ("q1 d1 1 0 extra\n", RUN, "qrels", 1, "expected 4"),
    ("", RUN, "qrels", None, "qrels file is empty"),
    (QRELS, "q1 Q0 d1 1 9.0 t\nq1 Q0 d2 2 nan? t\n", "run", 2, "score 'nan?' is not a finite number"),
    (QRELS, "q1 Q0 d1 1 9.0 t\nq1 Q0 d2 2 inf t\n", "run", 2, "score 'inf' is not a finite number"),
    (QRELS, "q1 Q0 d1 1 9.0 t\nq2 Q0 d1 1 9.0 t\nq1 Q0 d1 3 8.0 t\n", "run", 3, "listed twice for query 'q1' (first on line 1)"),
    (QRELS, "q1 Q0 d1 1 9.0\n", "run", 1, "expected 6 columns"),
    (QRELS, "q1 Q0 d1 1 9.0 t\nq1 Q0 d2 2 8.0 t 7\n", "run", 2, "expected 6 columns"),
    (QRELS, "\n\n", "run", None, "run file is empty"),
]


@pytest.mark.parametrize("qrels_text,run_text,bad,line,words", BAD_INPUTS)
def test_bad_input_names_file_line_and_problem(tmp_path, qrels_text, run_text, bad, line, words):
    qrels = write(tmp_path / "qrels.txt", qrels_text)
    run = write(tmp_path / "run.txt", run_text)
    with pytest.raises(InputError) as info:
        score_files(str(qrels), str(run), k_max=5)
    where = str(qrels if bad == "qrels" else run)
    expected = f"{where}:{line}: " if line else f"{where}: "
    assert str(info.value).startswith("error: " + expected), str(info.value)
    assert words in str(info.value)


def test_bad_input_through_the_command_line(tmp_path):
    qrels = write(tmp_path / "qrels.txt", "q1 0 d1 1\nq1 0 d2 x\n")
    run = write(tmp_path / "run.txt", RUN)
    proc = run_cli(str(qrels), str(run))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {qrels}:2: grade 'x' is not an integer"
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    proc = run_cli(str(tmp_path / "missing.txt"), str(run))
    assert proc.returncode == 2 and "missing.txt: qrels file not found" in proc.stderr
    proc = run_cli(str(qrels), str(run), "--k", "0,5")
    assert proc.returncode == 2 and "--k values must be >= 1" in proc.stderr


def test_irregular_whitespace_is_read_by_the_line_parser(tmp_path):
    # runs of spaces, tabs and trailing blanks defeat the fast reader but are valid TREC
    qrels = write(tmp_path / "qrels.txt", "q1  0\td1 1 \nq1 0 d2   2\n")
    run = write(tmp_path / "run.txt", "q1 Q0  d2 1 2.0 t \nq1\tQ0 d1 2 1.0\tt\n")
    means = score_files(str(qrels), str(run), k_max=2, gain="linear").evaluation.means([1, 2])
    assert means["precision_at_1"] == 1.0 and means["ndcg_at_2"] == 1.0


def test_unsorted_run_is_ranked_by_score(tmp_path):
    qrels = write(tmp_path / "qrels.txt", "q1 0 d3 1\nq2 0 d1 1\n")
    run = write(tmp_path / "run.txt", "q2 Q0 d1 1 0.5 t\nq1 Q0 d1 1 0.1 t\nq1 Q0 d3 2 0.9 t\nq2 Q0 d2 2 0.7 t\n")
    ev = score_files(str(qrels), str(run), k_max=2).evaluation
    assert ev.at_k["precision"][:, 0].tolist() == [1.0, 0.0]  # q1: d3 first; q2: d2 first
    assert ev.full["mrr"].tolist() == [1.0, 0.5]


def test_tie_break_names_and_the_old_alias(tmp_path, capsys):
    qrels = write(tmp_path / "qrels.txt", "q1 0 d1 1\n")
    run = write(tmp_path / "run.txt", "q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 1.0 t\n")  # tied: d1 first in the file
    means = {}
    for rule in ("file_order", "score", "docid_desc"):
        assert main([str(qrels), str(run), "--k", "1", "--json", "--tie-break", rule]) == 0
        means[rule] = json.loads(capsys.readouterr().out)["precision_at_1"]
    assert means == {"file_order": 1.0, "score": 1.0, "docid_desc": 0.0}  # docid_desc: d2 before d1
    assert score_files(str(qrels), str(run), k_max=1).evaluation.means([1])["precision_at_1"] == 1.0
    with pytest.raises(SystemExit) as info:
        main([str(qrels), str(run), "--tie-break", "doc_index"])
    assert info.value.code == 2 and "needs a corpus" in capsys.readouterr().err


def test_value_error_from_computing_code_is_one_line_with_status_2(tmp_path, capsys, monkeypatch):
    import pipeline.io.scored as scored_mod

    def bad_evaluate(*args, **kwargs):
        raise ValueError("k_max must be >= 1, got 0")

    monkeypatch.setattr(scored_mod, "evaluate", bad_evaluate)
    qrels = write(tmp_path / "qrels.txt", QRELS)
    run = write(tmp_path / "run.txt", RUN)
    assert main([str(qrels), str(run)]) == 2
    assert capsys.readouterr().err.strip() == "error: k_max must be >= 1, got 0"


def test_k_beyond_the_run_is_derived_bit_for_bit(tmp_path):
    """Clamping K to the run's depth gives exactly what evaluating every K gives."""
    from pipeline.io.formats import read_qrels, read_run
    from pipeline.metrics import evaluate
    from pipeline.io.scored import rank_run, score_files

    rng = np.random.default_rng(7)
    qrels = tmp_path / "q.txt"
    qrels.write_text("".join(f"q{q} 0 d{d} {rng.integers(0, 4)}\n" for q in range(20) for d in range(0, 60, 3)))
    run = tmp_path / "r.txt"
    run.write_text("".join(f"q{q} Q0 d{d} {d} {rng.random():.6f} t\n" for q in range(20) for d in range(rng.integers(1, 15))))
    ks = [1, 5, 14, 20, 33, 200]
    scored = score_files(str(qrels), str(run), 200)
    assert scored.evaluation.k_max < 200
    _, doc_idx, q, _ = rank_run(read_run(run), read_qrels(qrels))
    full = evaluate(doc_idx, q, k_max=200)
    assert scored.means(ks) == full.means(ks)
    for family in full.families():
        for k in ks:
            np.testing.assert_array_equal(scored.values(family, k), full.values(family)[:, k - 1])

"""The run-file scorer: formats, tie rules against pytrec_eval, output, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from commands import run_command

from pipeline.errors import InputError
from pipeline.io.formats import read_qrels, read_run, write_run
from pipeline.io.scored import score_files
from pipeline.cli.score import main

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


def run_cli(*args: str):
    """``python -m pipeline.score ARGS`` in this process (tests/commands.py)."""
    return run_command("score", *args)


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


# --------------------------------------------------------------------------- --per-query: the narrow table

SAMPLE = ROOT / "pipeline" / "sample"


def _sample_run(path: Path, seed: int = 5) -> dict[str, dict[str, float]]:
    """A run on the sample's queries: 15 random documents a query, plus (for most queries)
    one relevant document at a random rank, so some queries find nothing in the top 10."""
    qrels = _sample_qrels()
    docs = [json.loads(line)["_id"] for line in (SAMPLE / "corpus.jsonl").read_text().splitlines()]
    rng = np.random.default_rng(seed)
    run: dict[str, dict[str, float]] = {}
    lines = []
    for q in sorted(qrels):
        ranked = [docs[i] for i in rng.choice(len(docs), 15, replace=False)]
        relevant = [d for d, g in qrels[q].items() if g >= 1 and d not in ranked]
        if relevant and rng.random() < 0.8:
            ranked.insert(int(rng.integers(0, 15)), relevant[int(rng.integers(0, len(relevant)))])
        for rank, doc in enumerate(ranked, start=1):
            run.setdefault(q, {})[doc] = float(100 - rank)
            lines.append(f"{q} Q0 {doc} {rank} {100 - rank} t")
    write(path, "\n".join(lines) + "\n")
    return run


def _sample_qrels() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in (SAMPLE / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        out.setdefault(q, {})[d] = int(g)
    return out


def _narrow_rows(out: str) -> tuple[list[str], list[list[str]]]:
    """The narrow table's lines before its header, and its rows split into 7 fields + the query text."""
    lines = out.split("\n\n", 2)
    head, body = lines[0].splitlines(), lines[1].splitlines()
    assert body[0].split()[:7] == ["query_id", "ndcg_at_10", "recall_at_10", "mrr", "first_rel", "R", "judged_at_10"]
    assert set(body[1]) == {"-"}
    return head, [line.split(None, 7) for line in body[2:]]


def test_per_query_narrow_table_failures_first_with_values_of_pytrec_eval(tmp_path, capsys):
    import pytrec_eval  # the oracle: a test dependency, missing it fails

    run = _sample_run(tmp_path / "run.txt")
    qrels = _sample_qrels()
    texts = {json.loads(line)["_id"]: json.loads(line)["text"]
             for line in (SAMPLE / "queries.jsonl").read_text().splitlines()}
    queries = write(tmp_path / "queries.tsv", "".join(f"{q}\t{t}\n" for q, t in texts.items()))  # TSV id, text
    assert main([str(SAMPLE / "qrels" / "test.tsv"), str(tmp_path / "run.txt"), "--per-query", "--gain", "linear",
                 "--queries", str(queries), "--k", "1,5"]) == 0  # K = 10 (--top-k) lies past the largest --k
    out = capsys.readouterr().out
    head, rows = _narrow_rows(out)
    assert max(len(line) for line in out.split("\n\n", 2)[1].splitlines() + head) <= 120
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_10", "recip_rank", "num_rel", "P_10"}
                                         ).evaluate(run)
    first = {q: round(1 / v["recip_rank"]) if v["recip_rank"] else None for q, v in ref.items()}
    failing = sorted((q for q, v in ref.items() if v["num_rel"] > 0 and v["P_10"] == 0),
                     key=lambda q: (-ref[q]["num_rel"], -(first[q] or float("inf")), q))
    assert 3 <= len(failing) < len(ref)  # the run has failures and successes
    assert f"failure: no document graded >= 1 in the top 10: {len(failing)} of {len(ref)} evaluated" in head[1]
    assert [row[0] for row in rows[:len(failing)]] == failing  # failures first, worst first
    rest = [row[0] for row in rows[len(failing):]]
    assert sorted(rest) == sorted(set(ref) - set(failing))
    ndcg_rest = [ref[q]["ndcg_cut_10"] for q in rest]
    assert all(a <= b + 1e-12 for a, b in zip(ndcg_rest, ndcg_rest[1:]))  # then the lowest nDCG first
    for row in rows:
        q, ndcg, recall, mrr, first_rel, r, judged = row[:7]
        v = ref[q]
        assert float(ndcg) == pytest.approx(v["ndcg_cut_10"], abs=5.1e-5)
        assert float(recall) == pytest.approx(v["recall_10"], abs=5.1e-5)
        assert float(mrr) == pytest.approx(v["recip_rank"], abs=5.1e-5)
        assert first_rel == str(first[q] or "-") and int(r) == v["num_rel"]
        top = sorted(run[q], key=lambda d: -run[q][d])[:10]
        assert float(judged) == pytest.approx(sum(d in qrels[q] for d in top) / len(top), abs=5.1e-5)
        text = " ".join(texts[q].split())
        shown = row[7]
        assert shown == text or (shown.endswith("…") and text.startswith(shown[:-1]) and len(shown) < len(text))


def test_per_query_narrow_table_marks_unevaluated_queries_and_all_columns_is_the_wide_table(tmp_path, capsys):
    qrels = write(tmp_path / "qrels.txt", QRELS)
    run = write(tmp_path / "run.txt", RUN)
    assert main([str(qrels), str(run), "--per-query", "--k", "1,4"]) == 0
    head, rows = _narrow_rows(capsys.readouterr().out)
    # q2: judged, no results -> a failure; q1: first relevant at 2; q3: R = 0, not evaluated, last
    assert [row[:7] for row in rows] == [["q2", "0.0000", "0.0000", "0.0000", "-", "1", "0.0000"],
                                         ["q1", "0.6399", "1.0000", "0.5000", "2", "2", "0.7500"],
                                         ["q3", "-", "-", "-", "-", "0", "1.0000"]]
    assert "1 of 2 evaluated queries" in head[1] and "query texts: --queries FILE" in head[3]
    # nDCG@10 of q1 by hand: gain 2^g - 1, d1 (2) at rank 2, d3 (1) at rank 4; ideal 3 then 1
    assert float(rows[1][1]) == pytest.approx((3 / np.log2(3) + 1 / np.log2(5)) / (3 + 1 / np.log2(3)), abs=5e-5)
    assert main([str(qrels), str(run), "--all-columns", "--k", "1,4"]) == 0  # implies --per-query
    wide = capsys.readouterr().out.splitlines()
    assert wide[0].split()[:3] == ["query_id", "precision_at_1", "precision_at_4"] and "bpref" in wide[0]
    assert main([str(qrels), str(run), "--per-query", "--json", "--k", "1,4"]) == 0
    plain = capsys.readouterr().out
    assert main([str(qrels), str(run), "--all-columns", "--json", "--k", "1,4"]) == 0
    assert capsys.readouterr().out == plain  # --json is the same with either table


def test_the_narrow_table_in_docs_scoring_is_what_the_command_prints(tmp_path, capsys):
    """docs/scoring.md shows the table for the default job (BM25, k=10) on the sample."""
    from hydra import compose, initialize_config_dir

    from pipeline.job import run

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["tracking=none", f"paths.root={tmp_path}"])
    with pytest.MonkeyPatch.context() as patch:  # the figures are not needed here
        patch.setattr("pipeline.figures.save_run_figures", lambda *args, **kwargs: None)
        run(cfg)
    (trec,) = tmp_path.glob("runs/*/*/results/run.trec")
    capsys.readouterr()
    assert main([str(SAMPLE / "qrels" / "test.tsv"), str(trec), "--per-query", "--corpus",
                 str(SAMPLE / "corpus.jsonl")]) == 0
    out = capsys.readouterr().out.splitlines()
    page = (ROOT / "docs" / "scoring.md").read_text(encoding="utf-8")
    block = page.split("`--per-query` opens with a narrow table", 1)[1].split("```\n", 2)[1].splitlines()
    at, skip = 0, False
    for line in block:  # the lines shown are the lines printed, from the first; "..." skips rows
        if line == "...":
            skip = True
            continue
        found = out.index(line, at) if skip and line in out[at:] else at
        assert out[found] == line
        at, skip = found + 1, False
    table = "\n".join(out).split("\n\n")[:2]
    assert len(table[1].splitlines()) == 2 + 52 and max(len(line) for line in "\n".join(table).splitlines()) <= 120

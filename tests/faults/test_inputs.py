"""Issue 9, "Nothing silently wrong": the input cases, each reproduced as a user meets it.

Every case ends in the right numbers, or in exit status 2 with one line naming the problem
(file and line where there is one) and no traceback.

The scorer runs in this process (``tests/commands.py``: its ``main``, status and output as
a process would give them); a job runs in this process through ``pipeline.api.run_job``
(without its figures),
whose InputError is the one line ``python -m pipeline`` prints (``pipeline.job.run_job``
prints ``str(err)`` and exits with ``err.exit_code``). What needs a real process stays one:
the checks of ``python -m pipeline``'s command line before Hydra starts, Hydra's output
folders, and a closed standard output (the process-level checks below).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from commands import job_in_process, run_command
from forked import pipeline_child

from pipeline.errors import InputError

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}
ENV.pop("HYDRA_FULL_ERROR", None)


def _cli(*args: str, shell: str | None = None, timeout: int = 120):
    """A real process (the process-level checks only)."""
    cmd = shell if shell is not None else [sys.executable, *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=timeout, env=ENV, text=True,
                          shell=shell is not None, executable="/bin/bash" if shell else None)


def score(*args: str | Path, stdin: bytes | None = None):
    return run_command("score", *args, stdin=stdin)


def pipeline(tmp_path: Path, *overrides: str):
    """``python -m pipeline OVERRIDES`` (tracking off, outputs under tmp_path/out) in this process."""
    return job_in_process(f"paths.root={tmp_path / 'out'}", "tracking=none", *overrides)


def job_error(tmp_path: Path, *overrides: str) -> str:
    """The one line a job that fails on bad input prints (exit status 2)."""
    with pytest.raises(InputError) as info:
        pipeline(tmp_path, *overrides)
    assert info.value.exit_code == 2
    return str(info.value)


def one_line_error(proc, *needles: str) -> str:
    """``proc``: a command's result (exit status 2, one line on stderr, no traceback), or the
    message of a job's InputError (one line)."""
    err = proc if isinstance(proc, str) else proc.stderr
    if not isinstance(proc, str):
        assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def pytrec(qrels: dict, run: dict, measures: set[str]) -> dict:
    import pytrec_eval

    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


# --- 2. a UTF-8 byte order mark on the line-by-line path ----------------------------------------


def test_bom_run_with_a_double_space_scores_like_pytrec_eval(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 0\n")
    run = tmp_path / "run.trec"
    run.write_bytes(b"\xef\xbb\xbfq1 Q0 d1 1 2.0 t\nq1 Q0  d2 2 1.0 t\n")  # BOM, then a double space
    proc = score(str(qrels), str(run), "--k", "1,2", "--json", "--gain", "linear")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    ref = pytrec({"q1": {"d1": 1, "d2": 0}}, {"q1": {"d1": 2.0, "d2": 1.0}}, {"P.1,2", "ndcg_cut.2"})["q1"]
    assert got["precision_at_1"] == 1.0 == ref["P_1"]
    assert got["precision_at_2"] == ref["P_2"] and got["ndcg_at_2"] == pytest.approx(ref["ndcg_cut_2"], abs=1e-12)


def test_bom_trec_qrels(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_bytes(b"\xef\xbb\xbfq1 0 d1 1\nq1  0 d2 0\n")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\n")
    proc = score(str(qrels), str(run), "--k", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["precision_at_1"] == 1.0


def _trec_dataset(tmp_path: Path, qrels: bytes, topics: bytes) -> list[str]:
    (tmp_path / "qrels.txt").write_bytes(qrels)
    (tmp_path / "topics.tsv").write_bytes(topics)
    docs = [{"_id": f"d{i}", "text": text} for i, text in enumerate(["bicycle chain oil", "brake pads", "tyre"])]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return ["dataset=trec", f"dataset.qrels={tmp_path / 'qrels.txt'}", f"dataset.queries={tmp_path / 'topics.tsv'}",
            f"dataset.corpus={tmp_path / 'docs.jsonl'}", "k=2", "k_max=3", "objective=ndcg_at_2"]


def test_bom_trec_topics_tsv(tmp_path, capsys):
    overrides = _trec_dataset(tmp_path, b"\xef\xbb\xbfq1 0 d0 1\nq2 0 d1 1\n",
                              b"\xef\xbb\xbfq1\tchain oil\nq2\tbrake\n")
    result = pipeline(tmp_path, *overrides)
    assert "2 queries" in capsys.readouterr().out and result.metrics["n_queries"] == 2


# --- 3. huge grades -------------------------------------------------------------------------------


def test_grade_1024_with_exp_gain_is_bad_input_naming_the_line(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 1024\n")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n")
    line = one_line_error(score(str(qrels), str(run), "--json"), f"{qrels}:2:", "gain=linear")
    assert "1024" in line
    proc = score(str(qrels), str(run), "--json", "--gain", "linear", "--k", "1,2")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["precision_at_2"] == 1.0


def test_grades_whose_sum_overflows_are_bad_input(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1023\nq1 0 d2 1023\n")  # each gain fits, their sum does not
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\n")
    one_line_error(score(str(qrels), str(run), "--json"), str(qrels), "gain=linear")


def test_grade_beyond_64_bits_is_bad_input_at_parse_time(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 99999999999999999999\n")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\n")
    one_line_error(score(str(qrels), str(run), "--json"), f"{qrels}:2:", "64-bit")


def test_huge_grade_in_a_pipeline_run(tmp_path):
    overrides = _trec_dataset(tmp_path, b"q1 0 d0 2000\nq2 0 d1 1\n", b"q1\tchain oil\nq2\tbrake\n")
    one_line_error(job_error(tmp_path, *overrides), "gain=linear")


# --- 6. ids with whitespace; run names with spaces ----------------------------------------------


def test_beir_document_id_with_a_space_round_trips_through_our_scorer(tmp_path):
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    docs = [("doc one", "bicycle chain oil"), ("doc two", "brake pads"), ("d3", "tyre pressure")]
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in docs))
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q 1", "text": "chain oil"}) + "\n"
                                        + json.dumps({"_id": "q2", "text": "brake pads"}) + "\n")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq 1\tdoc one\t1\nq2\tdoc two\t2\n")
    pipeline(tmp_path, "dataset=beir", f"dataset.path={data}", "k=2", "k_max=3", "objective=ndcg_at_2",
             "tracking.run_name='my run'")
    run = next((tmp_path / "out").rglob("run.trec"))
    assert not list((tmp_path / "out").rglob("*.tmp"))
    assert "\tQ0\t" in run.read_text() and "my_run" in run.read_text()
    metrics = json.loads((run.parent / "metrics.json").read_text())["metrics"]
    scored = score(str(data / "qrels" / "test.tsv"), str(run), "--k", "1,2,3", "--json")
    assert scored.returncode == 0, scored.stderr
    again = json.loads(scored.stdout)
    for key in ("precision_at_1", "recall_at_2", "ndcg_at_3", "map_at_3"):
        assert again[key] == pytest.approx(metrics[key], abs=1e-12), key


def test_lone_surrogate_in_an_id_is_one_line_and_no_tmp(tmp_path):
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d\\ud800", "text": "chain oil"}\n{"_id": "d2", "text": "brake"}\n')
    (data / "queries.jsonl").write_text('{"_id": "q1", "text": "chain oil"}\n')
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    try:
        pipeline(tmp_path, "dataset=beir", f"dataset.path={data}", "k=1", "k_max=2", "objective=ndcg_at_1")
    except InputError as err:  # refused (by the loader or the run writer): one line, nothing half-written
        assert err.exit_code == 2
        one_line_error(str(err), "surrogate")
    assert not list((tmp_path / "out").rglob("*.tmp"))


# --- 7. K far beyond the run ---------------------------------------------------------------------


def test_huge_k_on_the_scorer_is_exact_and_fast(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d3 2\nq2 0 d9 1\n")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 3 t\nq1 Q0 d2 2 2 t\nq1 Q0 d3 3 1 t\nq2 Q0 d4 1 1 t\n")
    proc = score(str(qrels), str(run), "--k", "1,3,10000000", "--json", "--gain", "linear")
    assert proc.returncode == 0, proc.stderr
    assert "note: computed K = 1..3" in proc.stderr
    got = json.loads(proc.stdout)
    ref = pytrec({"q1": {"d1": 1, "d3": 2}, "q2": {"d9": 1}}, {"q1": {"d1": 3, "d2": 2, "d3": 1}, "q2": {"d4": 1}},
                 {"P.3", "ndcg_cut.3"})
    assert got["precision_at_3"] == pytest.approx((ref["q1"]["P_3"] + ref["q2"]["P_3"]) / 2, abs=1e-15)
    assert got["precision_at_10000000"] == (2 / 10_000_000 + 0.0) / 2
    assert got["ndcg_at_10000000"] == got["ndcg_at_3"] and got["recall_at_10000000"] == got["recall_at_3"]
    proc = score(str(qrels), str(run), "--k-max", "100000000", "--json")
    assert proc.returncode == 0, proc.stderr


def test_pipeline_k_beyond_the_corpus(tmp_path):
    overrides = _trec_dataset(tmp_path, b"q1 0 d0 1\nq2 0 d1 1\n", b"q1\tchain oil\nq2\tbrake\n")
    overrides = [o for o in overrides if not o.startswith(("k=", "k_max=", "objective="))]
    result = pipeline(tmp_path, *overrides, "k=1000", "k_max=1000", "objective=ndcg_at_10")
    assert result.metrics["n_queries"] == 2 and 0 < result.metrics["recall_at_1000"] <= 1


# --- 8. truncated gzip --------------------------------------------------------------------------
# Each reader on a truncated gzip file: tests/pipeline/test_readers.py
# (test_truncated_gzip_names_the_file); random bytes and cut gzip: tests/faults/test_fuzz.py.
# Here the entry points: the scorer's one line and status 2, and a job's on a TREC and a BEIR dataset.


def _truncated(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode())[:-12])
    return path


def test_truncated_gzip_on_the_scorer_and_in_trec_and_beir_datasets(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(200)))
    run = _truncated(tmp_path, "run.trec.gz", "".join(f"q{i} Q0 d{i} 1 1.0 t\n" for i in range(200)))
    one_line_error(score(str(qrels), str(run)), str(run))
    bad_qrels = _truncated(tmp_path, "qrels.txt.gz", qrels.read_text())
    plain_run = tmp_path / "run.trec"
    plain_run.write_text("q1 Q0 d1 1 1.0 t\n")
    one_line_error(score(str(bad_qrels), str(plain_run)), str(bad_qrels))
    # a job: TREC qrels, then a BEIR corpus
    overrides = _trec_dataset(tmp_path, b"q1 0 d0 1\nq2 0 d1 1\n", b"q1\tchain oil\nq2\tbrake\n")
    gz = _truncated(tmp_path, "qrels.txt.gz", "".join(f"q{i} 0 d{i % 3} 1\n" for i in range(300)))
    overrides = [f"dataset.qrels={gz}" if o.startswith("dataset.qrels=") else o for o in overrides]
    one_line_error(job_error(tmp_path, *overrides), str(gz))
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    corpus = "".join(json.dumps({"_id": f"d{i}", "text": f"text {i}"}) + "\n" for i in range(300))
    _truncated(data, "corpus.jsonl.gz", corpus)
    (data / "queries.jsonl").write_text('{"_id": "q1", "text": "text"}\n')
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    one_line_error(job_error(tmp_path, "dataset=beir", f"dataset.path={data}"), "corpus.jsonl.gz")


# --- 10. bad values on the command line ----------------------------------------------------------


def test_bad_values_exit_2_with_one_line_before_loading(tmp_path):
    """Process-level: ``python -m pipeline`` checks its command line before Hydra starts
    (``pipeline.__main__.check_command_line``) and loads nothing."""
    one_line_error(_cli("-m", "pipeline", f"paths.root={tmp_path / 'out'}", "tracking=none", "k=abc"), "k=abc")
    assert not (tmp_path / "out" / "cache").exists()  # failed before loading and retrieving


def test_a_bad_retriever_value_is_one_line(tmp_path):
    """The same check, in this process: ``run_job`` composes the config as the command does."""
    one_line_error(job_error(tmp_path, "retriever.k1=abc"), "retriever.k1")
    assert not (tmp_path / "out" / "cache").exists()


# --- 11. pipes, standard input, a closed stdout --------------------------------------------------


def _pipe(tmp_path: Path, name: str, data: bytes) -> tuple[Path, threading.Thread]:
    """A named pipe that a thread fills with ``data`` (what ``<(cat FILE)`` gives the command)."""
    path = tmp_path / name
    os.mkfifo(path)

    def write() -> None:
        with open(path, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return path, writer


def test_run_through_a_pipe_and_stdin(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 0\n")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n")
    expected = json.loads(score(str(qrels), str(run), "--json").stdout)
    qrels_pipe, w1 = _pipe(tmp_path, "qrels.pipe", qrels.read_bytes())
    run_pipe, w2 = _pipe(tmp_path, "run.pipe", gzip.compress(run.read_bytes()))  # <(gzip -c RUN)
    piped = score(str(qrels_pipe), str(run_pipe), "--json")
    w1.join(10)
    w2.join(10)
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout) == expected
    stdin = score(str(qrels), "-", "--json", stdin=run.read_bytes())
    assert stdin.returncode == 0, stdin.stderr
    assert json.loads(stdin.stdout) == expected


def test_json_into_head_ends_quietly(tmp_path):
    """Process-level: a closed standard output (``| head``) ends the command with status 0 and no traceback."""
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(3000)))
    run = tmp_path / "run.trec"
    run.write_text("".join(f"q{i} Q0 d{i} 1 1.0 t\n" for i in range(3000)))
    proc = _cli(shell=f"{sys.executable} -m pipeline.score {qrels} {run} --json --per-query | head -c 10")
    assert proc.returncode == 0 and len(proc.stdout) == 10
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_output_folder_that_cannot_be_created_is_one_line(tmp_path):
    """Process-level: Hydra makes the run or sweep folder inside its own error handling (a
    traceback and exit 1 without ``console.OutputDirCheck``). ``python -m pipeline`` in a child
    forked from this process (tests/forked.py: pipeline/__main__.py, Hydra's exit, its status)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for overrides in ([f"hydra.run.dir={a_file}/run"], ["--multirun", "k=3,5"]):
        proc = pipeline_child(*overrides, f"paths.root={a_file}/out", "tracking=none", env=ENV, cwd=REPO).wait(120)
        line = one_line_error(proc, "cannot create the output folder", str(a_file))
        assert ("hydra.sweep.dir" if "--multirun" in overrides else "hydra.run.dir") in line


def test_huge_k_max_on_the_sample_is_linear_and_exact(tmp_path):
    # k=100000 k_max=100000 was still scoring after 10 minutes (placement quadratic in k_max);
    # the per-query CSV would have had millions of columns. 5000 keeps the test short.
    pipeline(tmp_path, "k=5000", "k_max=5000", "gain=linear")
    results = next((tmp_path / "out").rglob("results"))
    payload = json.loads((results / "metrics.json").read_text())
    assert round(payload["metrics"]["ndcg_at_10"], 10) == 0.5412838644  # as at k_max=20: tests/golden (gain_linear)
    recall = payload["curves"]["recall"]
    # Ranks past the corpus (171 documents) are empty: recall stops growing there.
    assert len(recall) == 5000 and recall[170] == recall[4999] > recall[9]
    header = [h.strip('"') for h in (results / "per_query.csv").read_text().splitlines()[0].split(",")]
    assert "ndcg_at_5000" in header and "ndcg_at_10" in header and "ndcg_at_11" not in header

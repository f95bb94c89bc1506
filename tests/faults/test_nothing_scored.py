"""Nothing computed from nothing (issue 28): no metric is printed as 0.0000 with exit status 0
when there is nothing to score.

Each case reproduces a failure of the probe first: relevance_level=4 on the sample (no query
has a relevant document: every metric 0.0000, exit 0, and "0.0% of the top 10 documents are
judged" while 18.8% are), ``pipeline.score`` on all-negative qrels, ``retriever=run_file``
with a run made for another collection, ``pipeline.score`` with no query in common, a sweep
in which one job succeeded ("-1 other job(s) statistically tied"). Now: one line, exit status
2, the counts in the message; a partial overlap is one warning line with the counts.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from commands import run_command, run_job_command
from forked import pipeline_child
from no_figures import figures_off

from pipeline.metrics import judged_warning

# Jobs and commands run in this process (tests/commands.py: the status and output a process
# would give); the sweep is a process: a child forked from this one that runs
# pipeline/__main__.py (tests/forked.py), its exit status the sweep's.

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "pipeline" / "sample"
QRELS = SAMPLE / "qrels" / "test.tsv"
RUN = ROOT / "tests" / "golden" / "inputs" / "sample_run.trec"  # 51 of the sample's 52 queries, 1007 lines


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def _run(*args: str, module: str = "pipeline"):
    """``python -m MODULE ARGS``: a command in this process, a sweep (``-m``) in a forked child."""
    if module != "pipeline":
        return run_command(module.split(".", 1)[1], *args)
    assert "-m" in args, "a single job: _job"
    return pipeline_child(*args, env=_env(), cwd=ROOT).wait(300)


def _job(tmp_path: Path, *overrides: str):
    return run_job_command("tracking=none", f"paths.root={tmp_path}", f"hydra.run.dir={tmp_path / 'job'}", *overrides)


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _qrels(path: Path = QRELS) -> dict[str, dict[str, int]]:
    grades: dict[str, dict[str, int]] = defaultdict(dict)
    for line in path.read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        grades[q][d] = int(g)
    return grades


def _top(run: Path, k: int) -> dict[str, list[str]]:
    """Each query's top k of a run written by the pipeline (already in rank order)."""
    top: dict[str, list[str]] = defaultdict(list)
    for line in run.read_text().splitlines():
        q, _, d, *_ = line.split()
        if len(top[q]) < k:
            top[q].append(d)
    return top


def test_no_relevant_document_at_the_relevance_level_is_an_error(tmp_path):
    done = _job(tmp_path, "relevance_level=4")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert _errors(done.stderr) == [
        f"error: sample ({SAMPLE}): no query can be evaluated: none of the 52 queries with judgments has a document "
        "graded >= relevance_level 4 (the largest grade is 3); every metric would be 0 from no query (lower "
        "relevance_level, or check the qrels)"]
    assert "0.0000" not in done.stdout and not (tmp_path / "job" / "results" / "record.json").exists()


def test_the_judged_warning_uses_the_metrics_definitions(tmp_path):
    """The sample with grade 3 kept for the odd queries only, at relevance_level=3: the even
    queries are left out; the warning's share is judged_at_10 over the evaluated queries,
    computed here from run.trec and the qrels."""
    lines = QRELS.read_text().splitlines()
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("\n".join([lines[0], *("\t".join([q, d, "2" if g == "3" and int(q[1:]) % 2 == 0 else g])
                                           for q, d, g in (line.split("\t") for line in lines[1:]))]) + "\n")
    done = _job(tmp_path, "dataset=trec", f"dataset.qrels={qrels}", f"dataset.queries={SAMPLE / 'queries.jsonl'}",
                f"dataset.corpus={SAMPLE / 'corpus.jsonl'}", "relevance_level=3")
    assert done.returncode == 0, done.stderr[-2000:]
    grades = _qrels(qrels)
    top = _top(tmp_path / "job" / "results" / "run.trec", 10)
    evaluated = [q for q, g in grades.items() if max(g.values()) >= 3]
    assert 0 < len(evaluated) < len(grades)
    share = sum(sum(d in grades[q] for d in top[q]) / len(top[q]) for q in evaluated) / len(evaluated)
    metrics = json.loads((tmp_path / "job" / "results" / "metrics.json").read_text())["metrics"]
    assert metrics["n_queries"] == len(evaluated)
    assert metrics["judged_at_10"] == pytest.approx(share, abs=1e-12)
    assert f"judged_at_10 = {share:.4f} < 0.9 ({share:.1%} of the top 10 documents are judged)" in done.stdout
    # a mean over no query is no share: no warning claims "0.0% judged"
    assert judged_warning({"judged_at_10": 0.0, "n_queries": 0}) is None


def test_score_on_all_negative_qrels_is_an_error(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q01 0 d092 -1\nq01 0 d148 0\nq02 0 d001 -2\n")
    done = _run(str(qrels), str(RUN), "--json", module="pipeline.score")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"error: {qrels}: no query can be evaluated: none of the 2 queries with judgments has a document graded >= "
        "relevance_level 1 (the largest grade is 0); every metric would be 0 from no query (lower relevance_level, "
        "or check the qrels)")


def test_score_refuses_a_run_for_other_queries_or_documents_and_warns_on_a_partial_one(tmp_path):
    lines = RUN.read_text().splitlines()
    other_queries = tmp_path / "other_queries.trec"
    other_queries.write_text("".join(f"x{line}\n" for line in lines))
    done = _run(str(QRELS), str(other_queries), module="pipeline.score")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"error: {other_queries}: none of the run's 51 queries has judgments in the qrels")
    other_docs = tmp_path / "other_docs.trec"
    other_docs.write_text("".join(" ".join([f[0], f[1], "z" + f[2], *f[3:]]) + "\n" for f in map(str.split, lines)))
    done = _run(str(QRELS), str(other_docs), module="pipeline.score")
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {other_docs}: none of the run's ")
    assert "documents is judged in the qrels" in done.stderr
    # a run of 10 queries: scored, one warning line with the counts
    queries = list(dict.fromkeys(line.split()[0] for line in lines))[:10]
    part = tmp_path / "part.trec"
    part.write_text("".join(f"{line}\n" for line in lines if line.split()[0] in queries))
    done = _run(str(QRELS), str(part), "--json", module="pipeline.score")
    assert done.returncode == 0, done.stderr
    assert "warning: the run has results for 10 of the 52 judged queries; the other 42 score 0 (as trec_eval -c)" \
        in done.stderr.splitlines()
    assert json.loads(done.stdout)["n_queries"] == 52


def test_run_file_for_another_collection_is_an_error(tmp_path):
    lines = RUN.read_text().splitlines()
    other = tmp_path / "other.trec"
    other.write_text("".join(" ".join([f[0], f[1], "z" + f[2], *f[3:]]) + "\n" for f in map(str.split, lines)))
    done = _job(tmp_path, "retriever=run_file", f"retriever.path={other}")
    assert done.returncode == 2, done.stderr[-2000:]
    [error] = _errors(done.stderr)
    assert error.startswith(f"error: {other}: none of the documents of the run's 1007 result lines for the "
                            "collection's queries is in the corpus (run: e.g. 'zd")
    assert error.endswith("a run for another collection?")
    queries = tmp_path / "queries.trec"
    queries.write_text("".join(f"x{line}\n" for line in lines))
    done = _job(tmp_path, "retriever=run_file", f"retriever.path={queries}")
    assert done.returncode == 2
    assert _errors(done.stderr)[0].startswith(f"error: {queries}: none of the run's 51 queries is among the "
                                              "collection's evaluated queries")


def test_run_file_with_a_partial_overlap_warns_once_with_the_counts(tmp_path):
    lines = RUN.read_text().splitlines()
    first = lines[0].split()
    part = tmp_path / "part.trec"
    # the first 300 lines, one of them naming a document of no corpus, and a query of no collection
    body = [" ".join([first[0], first[1], "nowhere", "999", "-5", first[5]]), *lines[:300],
            " ".join(["qx", "Q0", "d001", "1", "1", "t"])]
    part.write_text("\n".join(body) + "\n")
    n_queries = len({line.split()[0] for line in lines[:300]})
    done = _job(tmp_path, "retriever=run_file", f"retriever.path={part}")
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "run_file][WARNING]" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].endswith(
        f"run {part}: results for {n_queries} of the 52 evaluated queries (the other {52 - n_queries} score 0); "
        "1 of its 301 result lines for them name documents not in the corpus (skipped: unjudged, e.g. 'nowhere'); "
        "1 other queries in the run (ignored)")


def test_compare_refuses_a_run_file_for_other_queries(tmp_path):
    other = tmp_path / "other.trec"
    other.write_text("".join(f"x{line}\n" for line in RUN.read_text().splitlines()))
    done = _run(str(RUN), str(other), "--qrels", str(QRELS), "--out", str(tmp_path / "r"), module="pipeline.compare")
    assert done.returncode == 2 and done.stdout == ""
    assert _errors(done.stderr)[0].startswith(f"error: {other}: none of the run's 51 queries has judgments in the "
                                              "qrels")
    # the partial one (51 of 52 queries) was one warning line
    assert f"WARNING: {RUN}: the run has results for 51 of the 52 judged queries; the other 1 score 0 (as " \
           "trec_eval -c)" in done.stderr.splitlines()


def test_compare_refuses_job_folders_with_no_evaluated_query(tmp_path):
    """A folder written before this check (every query with evaluated=false) compares nothing."""
    folders = []
    done = run_job_command("tracking=none", f"paths.root={tmp_path}", f"hydra.run.dir={tmp_path / 'a'}", "k=5")
    assert done.returncode == 0, done.stderr[-2000:]
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # the same job twice gives the same folder: one job, copied
    for name in ("a", "b"):
        path = tmp_path / name / "results" / "per_query.csv"
        table = pd.read_csv(path, dtype={"query_id": str})
        assert table["evaluated"].all()
        table["evaluated"] = False
        table.to_csv(path, index=False)
        folders.append(str(tmp_path / name))
    done = _run(*folders, "--out", str(tmp_path / "r"), module="pipeline.compare")
    assert done.returncode == 2 and done.stdout == ""
    assert "no evaluated query: no system has a query with a relevant document" in done.stderr


@pytest.mark.slow
def test_a_sweep_with_one_successful_job_claims_no_tie(tmp_path):
    with figures_off():  # what it says and its table are checked, not its PNGs (tests/no_figures.py)
        done = _run("-m", "relevance_level=1,4", "tracking=none", f"paths.root={tmp_path}")
    assert done.returncode == 2  # one job failed (nothing to evaluate at relevance_level 4)
    assert "\nbest: relevance_level=1 " in done.stdout
    assert "other job(s)" not in done.stdout  # was "-1 other job(s) statistically tied with the best"
    sweep = next((tmp_path / "multirun").glob("*/*"))
    header = (sweep / "summary" / "sweep_table.csv").read_text().splitlines()[0]
    assert "tied_with_best" not in header  # no statistics ran: no job is marked tied or untied


def test_a_cut_off_of_a_billion_is_refused_before_anything_is_allocated(tmp_path):
    done = _job(tmp_path, "k=1000000000", "k_max=1000000000")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert _errors(done.stderr) == [
        "error: k_max=1000000000 (k=1000000000) is past the corpus (171 documents) and past 10000: metrics there "
        "only repeat; use k_max <= 10000"]
    assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr
    ok = _job(tmp_path / "deep", "k=1000", "k_max=1000")  # trec_eval's deepest cut-off stays allowed
    assert ok.returncode == 0, ok.stderr[-2000:]
    precision = json.loads((tmp_path / "deep" / "job" / "results" / "metrics.json").read_text())["curves"]["precision"]
    assert len(precision) == 1000  # past the 171 documents no hit is added: hits/K falls as 1/K
    assert precision[999] * 1000 == pytest.approx(precision[170] * 171, abs=1e-9)

"""Bounded inputs (issue 28, item 5 and its smaller items): grades outside 0..100 in a Label
Studio export, negative grades, one annotator written two ways, a pooling depth far past
the corpus, and a run for another query set or corpus given to ``pipeline.pool --run``.

Each bad input is one line naming the file, exit status 2, and nothing written; the
depth is capped at the corpus size (a subprocess under a 2 GiB address-space limit checks
that nothing the size of the depth is allocated)."""

from __future__ import annotations

import json
import logging
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from commands import run_command

from pipeline.cli import judgments as judgments_command
from pipeline.cli import pool as pool_command
from pipeline.errors import InputError
from pipeline.io.collection import load_beir
from pipeline.io.formats import read_qrels
from pipeline.judging import judgments as jd
from pipeline.judging.pool import run_file_rankings

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "pipeline" / "sample"


def _task(qid: str, did: str, annotations: list[dict]) -> dict:
    return {"id": len(annotations), "data": {"query_id": qid, "doc_id": did, "query": f"question {qid}"},
            "annotations": annotations}


def _annotation(aid: int, who, grade) -> dict:
    return {"id": aid, "completed_by": who, "was_cancelled": False,
            "result": [{"from_name": "grade", "to_name": "document", "type": "choices",
                        "value": {"choices": [str(grade)]}}]}


def _export(tmp_path: Path, tasks: list[dict]) -> Path:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks, indent=1))
    return path


@pytest.mark.parametrize("grade", ["99999999999999999999", "100000", "15000", "101", "-3", "-1"])
def test_a_grade_outside_0_to_100_is_one_line_exit_2_and_nothing_written(grade, tmp_path, capsys):
    """The probe's grades: an OverflowError after the qrels files were written, 74.5 GiB and
    5.3 GB allocations, and -3 accepted (the median of -3 and 2 became 'not judged')."""
    tasks = [_task("q1", "d1", [_annotation(1, {"id": 1, "email": "a@x.org"}, 2),
                                _annotation(2, {"id": 2, "email": "b@x.org"}, 1)]),
             _task("q1", "d2", [_annotation(3, {"id": 1, "email": "a@x.org"}, grade),
                                _annotation(4, {"id": 2, "email": "b@x.org"}, 2)])]
    path = _export(tmp_path, tasks)
    out = tmp_path / "judged"
    assert judgments_command.main([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {path}: task 2 (id 2), annotation 3: grade {grade} is outside 0..100 (grades are integers "
                   "from 0 = not relevant; a negative grade would mean 'not judged')\n")
    assert not out.exists()


def test_grades_0_and_100_are_the_bounds_and_are_kept(tmp_path):
    tasks = [_task("q1", "d1", [_annotation(1, 1, 0), _annotation(2, 2, 100)]),
             _task("q1", "d2", [_annotation(3, 1, 100), _annotation(4, 2, 100)])]
    out = tmp_path / "judged"
    assert judgments_command.main([str(_export(tmp_path, tasks)), "--out", str(out), "--rule", "max"]) == 0
    qrels = read_qrels(out / "qrels.consensus.txt")
    assert sorted(zip(qrels.doc_ids, qrels.grades.tolist())) == [("d1", 100), ("d2", 100)]
    stats = json.loads((out / "agreement.json").read_text())
    # 0 vs 100 and 100 vs 100: kappa = 1 - sum(w O) / sum(w E) with the marginals {0: 1/2, 100: 1/2}
    # and {100: 1}: O puts 1/2 at distance 100; E = O here (b always says 100): kappa 0.
    assert stats["pairs"][0]["kappa_quadratic"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("forms", [
    [{"id": 1, "email": "ann@x.org"}, 1],
    [1, {"id": 1, "email": "ann@x.org"}],
    [{"id": 1}, "1"],
    [{"id": 1, "email": "ann@x.org"}, "1"],
])
def test_one_label_studio_user_written_two_ways_is_one_annotator(forms, tmp_path):
    """Label Studio names the annotator ``completed_by``: a user id, or (in exports made in the
    UI) a user object with the id and e-mail. The id is the user."""
    tasks = [_task("q1", "d1", [_annotation(1, forms[0], 2), _annotation(2, {"id": 2, "email": "bob@x.org"}, 2)]),
             _task("q1", "d2", [_annotation(3, forms[1], 3), _annotation(4, {"id": 2, "email": "bob@x.org"}, 1)])]
    got = jd.read_export(_export(tmp_path, tasks))
    name = "ann@x.org" if any(isinstance(f, dict) and "email" in f for f in forms) else "user1"
    assert got.grades == {name: {("q1", "d1"): 2, ("q1", "d2"): 3}, "bob@x.org": {("q1", "d1"): 2, ("q1", "d2"): 1}}
    stats = jd.agreement(got)
    assert stats["annotators"] == {name: 2, "bob@x.org": 2} and len(stats["pairs"]) == 1


def test_two_users_with_ids_stay_two_annotators(tmp_path):
    tasks = [_task("q1", "d1", [_annotation(1, 1, 2), _annotation(2, "2", 0), _annotation(3, {"id": 12}, 1)])]
    assert jd.read_export(_export(tmp_path, tasks)).annotators == ["user1", "user12", "user2"]


# --- pooling -----------------------------------------------------------------------------------

def _run_file(path: Path, rows: dict[str, list[str]]) -> Path:
    path.write_text("".join(f"{q} Q0 {d} {r + 1} {10 - r} t\n" for q, docs in rows.items() for r, d in enumerate(docs)))
    return path


def _limit_memory() -> None:
    limit = 2 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.slow  # a process of its own under an address-space limit, docs/testing.md
def test_pool_depth_is_capped_at_the_corpus_size(tmp_path):
    """``--depth 1000000000`` tried to allocate 387 GiB on the --run path: now it pools as deep
    as the corpus, the same pool as --depth <corpus size>, within 2 GiB of address space.
    Process-level: the address-space limit needs a process of its own; the reference pool
    (--depth 200) is made in this process."""
    run = _run_file(tmp_path / "r.trec", {"q01": ["d001", "d002", "d003"], "q02": ["d004"]})
    deep = tmp_path / "pool1000000000"
    proc = subprocess.run([sys.executable, "-m", "pipeline.pool", "--run", str(run), "--depth", "1000000000",
                           "--out", str(deep)], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limit_memory, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    done = run_command("pool", "--run", run, "--depth", "200", "--out", tmp_path / "pool200")
    assert done.returncode == 0, done.stderr
    assert (deep / "pool.tsv").read_text() == (tmp_path / "pool200" / "pool.tsv").read_text()
    collection = load_beir(SAMPLE, split="test", name="sample")
    (ranking,) = run_file_rankings([run], collection, 10**12)
    assert ranking.shape == (collection.n_queries, collection.n_docs)
    assert ranking[collection.query_ids.index("q01"), :4].tolist() == [
        collection.doc_ids.index("d001"), collection.doc_ids.index("d002"), collection.doc_ids.index("d003"), -1]


def test_pool_run_for_another_query_set_is_an_error_naming_the_overlap(tmp_path, capsys):
    run = _run_file(tmp_path / "other.trec", {"x1": ["d001"], "x2": ["d002"], "x3": ["d003"]})
    out = tmp_path / "pool"
    assert pool_command.main(["--run", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {run}: none of the run's 3 queries is a query of the collection (52 queries; run: e.g. "
                   "'x1', 'x2', 'x3'; collection: e.g. 'q01', 'q02', 'q03'): a run for another query set?\n")
    assert not out.exists()


def test_pool_run_for_another_corpus_is_an_error(tmp_path, capsys):
    run = _run_file(tmp_path / "other.trec", {"q01": ["z1", "z2"], "q02": ["z3"]})
    assert pool_command.main(["--run", str(run), "--out", str(tmp_path / "pool")]) == 2
    err = capsys.readouterr().err
    assert ("none of the documents of the run's 3 result lines for the collection's queries is in the corpus "
            "(run: e.g. 'z1', 'z2', 'z3'; corpus: e.g. 'd001', 'd002', 'd003'): a run for another corpus?") in err
    assert err.count("\n") == 1


def test_pool_run_with_a_partial_overlap_is_one_warning_line_with_counts(tmp_path, capsys, caplog):
    run = _run_file(tmp_path / "part.trec", {"q01": ["d001", "zz9"], "q02": ["d004"], "x1": ["d001"], "x2": ["d002"]})
    out = tmp_path / "pool"
    with caplog.at_level(logging.WARNING, logger="pipeline.judging.pool"):
        assert pool_command.main(["--run", str(run), "--out", str(out), "--depth", "5"]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"run {run}: 2 of its 4 queries are not in the collection (ignored); 1 of the 3 result lines "
                        "of the others name documents not in the corpus (skipped, e.g. 'zz9'); its queries cover 2 "
                        "of the collection's 52"]
    pooled = [line.split("\t") for line in (out / "pool.tsv").read_text().splitlines()[1:]]
    judged = read_qrels(SAMPLE / "qrels" / "test.tsv")
    judged_pairs = set(zip(judged.query_ids.tolist(), judged.doc_ids.tolist()))
    expected = {("q01", "d001"), ("q02", "d004")} - judged_pairs
    assert {tuple(p) for p in pooled} == expected


def test_a_run_fully_inside_the_collection_warns_nothing(tmp_path, caplog):
    run = _run_file(tmp_path / "ok.trec", {"q01": ["d001"], "q02": ["d004"]})
    collection = load_beir(SAMPLE, split="test", name="sample")
    with caplog.at_level(logging.WARNING, logger="pipeline.judging.pool"):
        (ranking,) = run_file_rankings([run], collection, 3)
    assert not caplog.records and ranking.shape == (collection.n_queries, 3)
    assert np.count_nonzero(ranking >= 0) == 2


def test_run_file_rankings_raises_input_error_in_the_library(tmp_path):
    run = _run_file(tmp_path / "other.trec", {"x1": ["d001"]})
    collection = load_beir(SAMPLE, split="test", name="sample")
    with pytest.raises(InputError, match="none of the run's 1 queries"):
        run_file_rankings([run], collection, 3)

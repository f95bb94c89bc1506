"""pipeline.judgments: Label Studio export -> qrels per annotator and consensus, agreement
checked against scikit-learn and the krippendorff package, one-line errors."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from pipeline.cli import judgments as command
from pipeline.io.formats import read_qrels
from pipeline.judging import judgments as jd

ANNOTATORS = ("ann@example.org", "bob@example.org", "cy@example.org")


def _random_grades(seed: int, n_items: int = 60, missing: float = 0.25) -> dict[str, dict[tuple[str, str], int]]:
    """Three annotators with correlated grades 0-3 and some items left out by each."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 4, n_items)
    grades: dict[str, dict[tuple[str, str], int]] = {who: {} for who in ANNOTATORS}
    for i in range(n_items):
        for who in ANNOTATORS:
            if rng.random() < missing:
                continue
            grades[who][(f"q{i % 7}", f"d{i:03d}")] = int(np.clip(truth[i] + rng.integers(-1, 2), 0, 3))
    return grades


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agreement_equals_sklearn_and_krippendorff(seed, make_export, write_export):
    import krippendorff  # the oracles, imported where used (sklearn: ~1 s at collection on every worker)
    from sklearn.metrics import cohen_kappa_score

    grades = _random_grades(seed)
    stats = jd.agreement(jd.read_export(write_export(make_export(grades))), relevance_level=2)
    pairs = {tuple(p["annotators"]): p for p in stats["pairs"]}
    assert len(pairs) == 3
    for x, y in itertools.combinations(ANNOTATORS, 2):
        common = sorted(grades[x].keys() & grades[y].keys())
        a = [grades[x][i] for i in common]
        b = [grades[y][i] for i in common]
        pair = pairs[(x, y)]
        assert pair["n_items"] == len(common)
        assert pair["kappa_quadratic"] == pytest.approx(
            cohen_kappa_score(a, b, weights="quadratic", labels=[0, 1, 2, 3]), abs=1e-12)
        assert pair["kappa_quadratic_binary"] == pytest.approx(
            cohen_kappa_score(np.array(a) >= 2, np.array(b) >= 2, weights="quadratic"), abs=1e-12)
        assert pair["exact_agreement"] == pytest.approx(np.mean(np.array(a) == np.array(b)))
    # The reliability matrix built here, independently: annotators x items, NaN = not graded.
    items = sorted({i for by in grades.values() for i in by})
    matrix = np.array([[grades[w].get(i, np.nan) for i in items] for w in sorted(ANNOTATORS)], dtype=float)
    assert stats["n_items"] == len(items)
    assert stats["alpha_ordinal"] == pytest.approx(
        krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal"), abs=1e-12)
    binary = np.where(np.isnan(matrix), np.nan, (matrix >= 2).astype(float))
    assert stats["alpha_ordinal_binary"] == pytest.approx(
        krippendorff.alpha(reliability_data=binary, level_of_measurement="ordinal"), abs=1e-12)


def test_kappa_uses_grade_distances_not_label_positions():
    """Grades 0 and 3 only: quadratic weights are 9 apart (sklearn with the 0-3 labels),
    not 1 (sklearn with the labels it sees)."""
    from sklearn.metrics import cohen_kappa_score

    a, b = [0, 0, 3, 3, 1], [0, 3, 3, 3, 0]
    assert jd.quadratic_kappa(np.array(a), np.array(b)) == pytest.approx(
        cohen_kappa_score(a, b, weights="quadratic", labels=[0, 1, 2, 3]))
    assert np.isnan(jd.quadratic_kappa(np.array([2, 2]), np.array([2, 2])))  # no chance disagreement


@pytest.mark.parametrize("grades, median, majority, maximum", [
    ([2], 2, 2, 2),
    ([0, 3], 0, 0, 3),          # even count: lower middle; tie of counts: the lowest grade
    ([1, 2, 3], 2, 1, 3),
    ([3, 3, 1], 3, 3, 3),
    ([0, 1, 2, 3], 1, 0, 3),
    ([2, 2, 3, 3, 0], 2, 2, 3),
])
def test_consensus_rules(grades, median, majority, maximum):
    assert jd.consensus_grade(grades, "median") == median
    assert jd.consensus_grade(grades, "majority") == majority
    assert jd.consensus_grade(grades, "max") == maximum


def test_cli_writes_qrels_per_annotator_consensus_and_disagreements(make_export, write_export, tmp_path, capsys):
    grades = {
        "ann@example.org": {("q1", "d1"): 3, ("q1", "d2"): 0, ("q2", "d1"): 1, ("q2", "d3"): 2},
        "bob@example.org": {("q1", "d1"): 2, ("q1", "d2"): 3, ("q2", "d1"): 0},
    }
    tasks = make_export(grades)
    tasks[0]["annotations"].append({"id": 99, "completed_by": {"id": 7, "email": "cy@example.org"},
                                    "was_cancelled": True, "result": []})  # skipped: left out
    out = tmp_path / "j"
    assert command.main([str(write_export(tasks)), "--out", str(out), "--rule", "max"]) == 0
    ann = read_qrels(out / "qrels.ann_example.org.txt")
    assert sorted(zip(ann.query_ids, ann.doc_ids, ann.grades.tolist())) == [
        ("q1", "d1", 3), ("q1", "d2", 0), ("q2", "d1", 1), ("q2", "d3", 2)]
    cons = read_qrels(out / "qrels.consensus.txt")
    assert sorted(zip(cons.query_ids, cons.doc_ids, cons.grades.tolist())) == [
        ("q1", "d1", 3), ("q1", "d2", 3), ("q2", "d1", 1), ("q2", "d3", 2)]
    lines = (out / "disagreements.tsv").read_text().splitlines()
    assert lines[0].split("\t")[:4] == ["query_id", "doc_id", "spread", "crosses_relevance_level"]
    # worst first: spread 3 (q1 d2), then spread 1 crossing grade 1 (q2 d1), then spread 1 (q1 d1)
    assert [tuple(line.split("\t")[:4]) for line in lines[1:]] == [
        ("q1", "d2", "3", "1"), ("q2", "d1", "1", "1"), ("q1", "d1", "1", "0")]
    stats = json.loads((out / "agreement.json").read_text())
    assert stats["export"]["cancelled"] == 1 and stats["n_items"] == 4 and stats["n_items_multiply_graded"] == 3
    assert "Krippendorff" in capsys.readouterr().out


def test_latest_annotation_of_an_annotator_counts(make_export, write_export):
    tasks = make_export({"ann@example.org": {("q1", "d1"): 1}})
    tasks[0]["annotations"].append({**tasks[0]["annotations"][0], "id": 50,
                                    "result": [{"from_name": "grade", "value": {"choices": ["3: answers"]}}]})
    got = jd.read_export(write_export(tasks))
    assert got.grades == {"ann@example.org": {("q1", "d1"): 3}} and got.report["regraded"] == 1


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not valid JSON"),
    ({"tasks": []}, "expected a list of tasks"),
    ([{"id": 3, "data": {"doc_id": "d1"}, "annotations": []}], "task 1 (id 3): data has no 'query_id'"),
    ([{"id": 3, "data": {"query_id": "q", "doc_id": "d"},
       "annotations": [{"id": 1, "result": [{"from_name": "grade", "value": {"choices": ["high"]}}]}]}],
     "grade 'high' is not an integer"),
    ([], "the export has no tasks"),
])
def test_bad_export_is_one_line_and_exit_2(content, problem, write_export, capsys):
    path = write_export(content if isinstance(content, str) else json.dumps(content))
    assert command.main([str(path), "--out", str(path.parent / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and problem in err and str(path) in err and "Traceback" not in err


def test_bad_rule_is_exit_2(make_export, write_export, capsys):
    assert command.main([str(write_export(make_export({"a": {("q", "d"): 1}}))), "--rule", "mean"]) == 2
    assert "--rule must be one of median, majority, max" in capsys.readouterr().err

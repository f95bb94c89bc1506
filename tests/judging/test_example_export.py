"""The sample Label Studio export of docs/judging.md (``docs/examples/labelstudio_export.json``)
through ``python -m pipeline.judgments``, checked against an independent reading of the JSON,
scikit-learn and the ``krippendorff`` package; and the ``reading:`` line that interprets alpha
(Krippendorff 2004) and kappa (Landis & Koch 1977) for values in every band."""

from __future__ import annotations

import contextlib
import io
import json
import re
import statistics
from pathlib import Path

import numpy as np
import pytest

from pipeline.cli import judgments as command
from pipeline.io.formats import read_qrels
from pipeline.judging import judgments as jd

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "labelstudio_export.json"
PAGE = REPO / "docs" / "judging.md"


def _oracle_grades() -> dict[str, dict[tuple[str, str], int]]:
    """annotator e-mail -> (query, doc) -> grade, read from the JSON here (no pipeline code)."""
    grades: dict[str, dict[tuple[str, str], int]] = {}
    for task in json.loads(EXAMPLE.read_text(encoding="utf-8")):
        item = (task["data"]["query_id"], task["data"]["doc_id"])
        for annotation in task["annotations"]:
            assert not annotation["was_cancelled"]
            (choice,) = annotation["result"][0]["value"]["choices"]
            grades.setdefault(annotation["completed_by"]["email"], {})[item] = int(choice)
    return grades


def _qrels(path: Path) -> dict[tuple[str, str], int]:
    q = read_qrels(path)
    return dict(zip(zip(q.query_ids.tolist(), q.doc_ids.tolist()), q.grades.tolist()))


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    out = tmp_path_factory.mktemp("example") / "judged"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert command.main([str(EXAMPLE), "--out", str(out)]) == 0
    return out, printed.getvalue()


def test_the_example_is_small_graded_by_two_annotators_and_on_the_sample_collection():
    grades = _oracle_grades()
    assert sorted(grades) == ["ann@example.org", "bob@example.org"]
    assert grades["ann@example.org"].keys() == grades["bob@example.org"].keys() and len(grades["ann@example.org"]) == 8
    assert {g for by in grades.values() for g in by.values()} == {0, 1, 2, 3}
    sample = json.loads("[" + ",".join((REPO / "pipeline" / "sample" / "queries.jsonl").read_text().splitlines()) + "]")
    texts = {q["_id"]: q["text"] for q in sample}
    for task in json.loads(EXAMPLE.read_text(encoding="utf-8")):
        assert task["data"]["query"] == texts[task["data"]["query_id"]]


def test_the_example_gives_the_qrels_and_agreement_of_the_oracle(judged):
    import krippendorff  # the oracles, imported where used: sklearn costs ~1 s at collection on every worker
    from sklearn.metrics import cohen_kappa_score

    out, _ = judged
    grades = _oracle_grades()
    for who, by in grades.items():
        assert _qrels(out / f"qrels.{who.replace('@', '_')}.txt") == by
    items = sorted(grades["ann@example.org"])
    both = [[grades[who][i] for i in items] for who in sorted(grades)]
    # the median rule: the lower middle grade (statistics.median_low)
    assert _qrels(out / "qrels.consensus.txt") == {i: statistics.median_low([g[i] for g in grades.values()])
                                                   for i in items}
    stats = json.loads((out / "agreement.json").read_text())
    (pair,) = stats["pairs"]
    a, b = np.array(both[0]), np.array(both[1])
    assert pair["kappa_quadratic"] == pytest.approx(cohen_kappa_score(a, b, weights="quadratic",
                                                                      labels=[0, 1, 2, 3]), abs=1e-12)
    assert pair["kappa_quadratic_binary"] == pytest.approx(cohen_kappa_score(a >= 1, b >= 1, weights="quadratic"),
                                                           abs=1e-12)
    matrix = np.array(both, dtype=float)
    assert stats["alpha_ordinal"] == pytest.approx(
        krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal"), abs=1e-12)
    assert stats["alpha_ordinal_binary"] == pytest.approx(
        krippendorff.alpha(reliability_data=(matrix >= 1).astype(float), level_of_measurement="ordinal"), abs=1e-12)
    rows = (out / "disagreements.tsv").read_text().splitlines()[1:]
    assert len(rows) == sum(x != y for x, y in zip(a, b)) == 4


def test_the_reading_line_of_the_example(judged):
    import krippendorff
    from sklearn.metrics import cohen_kappa_score

    _, printed = judged
    grades = _oracle_grades()
    items = sorted(grades["ann@example.org"])
    a, b = (np.array([grades[w][i] for i in items]) for w in sorted(grades))
    matrix = np.array([a, b], dtype=float)
    alpha = krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal")
    alpha_bin = krippendorff.alpha(reliability_data=(matrix >= 1).astype(float), level_of_measurement="ordinal")
    kappa = cohen_kappa_score(a, b, weights="quadratic", labels=[0, 1, 2, 3])
    kappa_bin = cohen_kappa_score(a >= 1, b >= 1, weights="quadratic")
    assert 0.667 <= alpha < 0.8 and alpha_bin < 0.667 and kappa > 0.8 and 0.4 < kappa_bin <= 0.6  # the example's bands
    (line,) = [line for line in printed.splitlines() if line.startswith("reading: ")]
    assert line.startswith(f"reading: alpha graded {alpha:.4f} tentative, binary {alpha_bin:.4f} unreliable "
                           "(Krippendorff 2004: >= 0.800 reliable, >= 0.667 tentative conclusions only); "
                           f"kappa graded {kappa:.4f} almost perfect, binary {kappa_bin:.4f} moderate (Landis & Koch "
                           "1977: "), line


def test_the_page_shows_what_the_command_prints_on_the_example(tmp_path, monkeypatch, capsys):
    page = PAGE.read_text(encoding="utf-8")
    assert "](examples/labelstudio_export.json)" in page
    command_line, shown = re.search(r"```bash\n(python -m pipeline\.cli judgments docs/examples/\S+ --out (\S+))\n```\n\n"
                                    r"```\n(.*?)```", page, re.S).group(1, 3)
    monkeypatch.chdir(tmp_path)  # the page's --out is relative: write it under tmp_path
    argv = command_line.split()[4:]
    argv[0] = str(REPO / argv[0])
    assert command.main(argv) == 0
    assert capsys.readouterr().out == shown


# --------------------------------------------------------------------------- the bands


@pytest.mark.parametrize("value, word", [
    (1.0, "reliable"), (0.95, "reliable"), (0.800, "reliable"), (0.7999, "tentative"), (0.667, "tentative"),
    (0.6669, "unreliable"), (0.2, "unreliable"), (-0.3, "unreliable"), (None, "undefined"), (float("nan"), "undefined"),
])
def test_alpha_bands_of_krippendorff_2004(value, word):
    assert jd.alpha_band(value) == word


@pytest.mark.parametrize("value, word", [
    (-0.05, "poor"), (0.0, "slight"), (0.2, "slight"), (0.205, "fair"), (0.4, "fair"), (0.55, "moderate"),
    (0.6, "moderate"), (0.7, "substantial"), (0.8, "substantial"), (0.81, "almost perfect"), (1.0, "almost perfect"),
    (None, "undefined"),
])
def test_kappa_bands_of_landis_and_koch_1977(value, word):
    assert jd.kappa_band(value) == word


def _stats(alpha, alpha_bin, kappas) -> dict:
    return {"alpha_ordinal": alpha, "alpha_ordinal_binary": alpha_bin,
            "pairs": [{"annotators": [f"a{i}", f"b{i}"], "n_items": 5, "kappa_quadratic": k, "kappa_quadratic_binary": kb}
                      for i, (k, kb) in enumerate(kappas)]}


@pytest.mark.parametrize("alpha, alpha_bin, kappa, kappa_bin, words", [
    (0.9, 0.85, 0.9, 0.82, ("0.9000 reliable", "0.8500 reliable", "0.9000 almost perfect", "0.8200 almost perfect")),
    (0.7, 0.5, 0.7, 0.5, ("0.7000 tentative", "0.5000 unreliable", "0.7000 substantial", "0.5000 moderate")),
    (0.1, -0.2, 0.3, 0.1, ("0.1000 unreliable", "-0.2000 unreliable", "0.3000 fair", "0.1000 slight")),
    (0.0, None, -0.1, None, ("0.0000 unreliable", "undefined", "-0.1000 poor", "undefined")),
])
def test_the_reading_line_for_values_in_each_band(alpha, alpha_bin, kappa, kappa_bin, words):
    line = jd.agreement_reading(_stats(alpha, alpha_bin, [(kappa, kappa_bin)]))
    assert "\n" not in line
    assert line == (f"reading: alpha graded {words[0]}, binary {words[1]} ({jd.ALPHA_SOURCE}); "
                    f"kappa graded {words[2]}, binary {words[3]} ({jd.KAPPA_SOURCE})")
    assert "Krippendorff 2004" in line and "Landis & Koch 1977" in line


def test_the_reading_line_with_several_pairs_gives_the_range_of_kappa():
    line = jd.agreement_reading(_stats(0.75, 0.6, [(0.85, 0.3), (0.5, None), (0.65, 0.7)]))
    assert "kappa graded 0.5000 moderate to 0.8500 almost perfect over 3 pairs, " \
           "binary 0.3000 fair to 0.7000 substantial over 2 pairs" in line
    assert jd.agreement_reading(_stats(0.75, 0.6, [])).endswith("kappa: no two annotators graded the same item")

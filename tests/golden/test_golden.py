"""The golden outputs (tests/golden/golden.py) are reproduced exactly: a refactor that
changes a number is a bug. Strict for what ``expected/`` holds (a missing key or file is an
error); what is new (a key, a file) is allowed and listed as a ``golden.NewOutputs`` warning."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("golden", Path(__file__).with_name("golden.py"))
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def produced(tmp_path_factory, migrated_store, sample_embeddings):
    """The golden jobs' outputs, normalized: logged to a copy of the session's migrated store, the
    dense job reading the run's one encoding of the sample (golden.run_all)."""
    root = tmp_path_factory.mktemp("golden")
    golden.run_all(root, store=migrated_store, embeddings=sample_embeddings)
    return golden.collect(root)


@pytest.fixture(scope="module")
def expected():
    return golden.load()


def test_every_golden_entry_is_recorded(expected):
    assert set(golden.JOBS) <= set(expected["numbers"])
    assert {"sweep_0", "sweep_3", "sweep_parent", "compare", *golden.SCORES} <= set(expected["numbers"])


@pytest.mark.parametrize("entry", [*golden.JOBS, "sweep_0", "sweep_1", "sweep_2", "sweep_3", "sweep_parent",
                                   "sweep_compare_report", *golden.SCORES, "compare"])
def test_numbers_are_equal(produced, expected, entry):
    diffs = golden.differences(expected["numbers"][entry], produced["numbers"].get(entry), entry)
    assert not diffs, "\n".join(diffs[:30])


def test_files_are_equal(produced, expected):
    missing = sorted(set(expected["files"]) - set(produced["files"]))
    assert not missing, f"expected files not produced: {missing}"
    diffs = [d for name, text in expected["files"].items()
             for d in golden.file_differences(name, text, produced["files"][name])]
    assert not diffs, "\n".join(diffs[:30])


def test_what_is_new_is_listed(produced, expected, record_property):
    """The schema part: keys and files produced that ``expected/`` does not hold are allowed;
    they are listed (a warning in pytest's summary, and the test's ``new_outputs`` property)."""
    new = golden.additions(expected["numbers"], produced["numbers"]) + [
        f"file {name}" for name in golden.new_files(expected["files"], produced["files"])]
    record_property("new_outputs", new)
    if new:
        warnings.warn(golden.NewOutputs(f"{len(new)} new key(s) or file(s), not in tests/golden/expected "
                                        f"(allowed): {', '.join(new[:40])}{' ...' if len(new) > 40 else ''}"))


def test_the_comparison_catches_a_changed_number(expected):
    """The checker itself: a metric moved by 1e-9 and a changed byte are both reported."""
    import copy

    changed = copy.deepcopy(expected["numbers"]["bm25"])
    changed["record"]["metrics"]["ndcg_at_10"] += 1e-9
    assert golden.differences(expected["numbers"]["bm25"], changed)
    text = expected["files"]["bm25/run.trec"]
    assert golden.file_differences("bm25/run.trec", text, text.replace(" 1 ", " 2 ", 1))
    dense = expected["files"]["dense/run.trec"]
    first = dense.splitlines()[0].split()
    bumped = " ".join([*first[:4], f"{float(first[4]) * (1 + 1e-7):.8f}", *first[5:]])
    assert not golden.file_differences("dense/run.trec", dense, dense.replace(dense.splitlines()[0], bumped, 1))


def test_a_new_key_is_allowed_and_listed_and_a_missing_key_fails(expected):
    """The schema part of the checker: a key or a file only the new run has is no difference
    and is listed; a key or a file the expected outputs have and the run lacks is an error."""
    import copy

    before = expected["numbers"]["dense"]
    grown = copy.deepcopy(before)
    grown["record"]["metrics"]["new_metric_at_10"] = 0.5
    grown["mlflow"]["tags"]["new.tag"] = "x"
    assert golden.differences(before, grown, "dense") == []
    assert golden.additions(before, grown, "dense") == ["dense/mlflow/tags/new.tag",
                                                        "dense/record/metrics/new_metric_at_10"]
    shrunk = copy.deepcopy(before)
    del shrunk["mlflow"]["metrics"]["ndcg_at_10"]
    assert golden.differences(before, shrunk, "dense") == [
        f"dense/mlflow/metrics/ndcg_at_10: missing (expected {before['mlflow']['metrics']['ndcg_at_10']})"]
    files = dict(expected["files"])
    assert golden.new_files(expected["files"], {**files, "dense/new.md": "x"}) == ["dense/new.md"]
    assert golden.new_files(expected["files"], files) == []

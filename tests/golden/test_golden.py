"""The golden outputs (tests/golden/golden.py) are reproduced exactly: a refactor that
changes a number is a bug."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("golden", Path(__file__).with_name("golden.py"))
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    golden.run_all(root)
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
    assert sorted(produced["files"]) == sorted(expected["files"])
    diffs = [d for name, text in expected["files"].items()
             for d in golden.file_differences(name, text, produced["files"][name])]
    assert not diffs, "\n".join(diffs[:30])


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

"""benchmarks/ann.py: the measurements behind benchmarks/README.md's "no approximate index pays off on
random vectors" (small sizes; the timings are not asserted, the recalls are)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

# From its file: the benchmarks folder on sys.path would hide the pipeline package behind
# benchmarks/pipeline.py for every later import in this process.
_spec = importlib.util.spec_from_file_location("bench_ann", Path(__file__).resolve().parents[2] / "benchmarks" / "ann.py")
ann = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ann)


def test_recall_helper_counts_the_true_top_found():
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    found = np.array([[4, 3, 9, -1], [8, 7, 6, 5]])
    assert ann.recall_at(found, truth) == (2 / 4 + 4 / 4) / 2


def test_ivf_recall_on_random_vectors_follows_the_share_of_lists_scanned():
    rows = ann.ivf_on_random(13_000, 200, [16, 64, 128, ann.NLIST])
    recalls = [r["recall"] for r in rows]
    assert recalls == sorted(recalls)  # more lists scanned: a superset of candidates
    assert recalls[-1] >= 0.999  # every list: exact search
    # No clusters to exploit: scanning a quarter of the lists finds about a quarter of the top 100.
    assert 0.1 < recalls[1] < 0.7


def test_hnsw_on_structured_vectors_reaches_exact_recall():
    rows = ann.hnsw_on_structured(3_000, 100, [128, 512])
    assert rows[0]["recall"] >= 0.98 and rows[1]["recall"] >= 0.999

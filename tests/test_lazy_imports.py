"""Lazy imports: a job and the scorer load only what they use (issue 14, "A job at the limit").

Each command runs in a fresh interpreter under ``python -X importtime``, which writes one
line per module the process imports to its own stderr. The tests read those lines:

- ``python -m pipeline tracking=none`` on the bundled sample with BM25 imports no torch,
  sentence-transformers, optuna, numba or mlflow; it draws its figures itself (matplotlib).
- ``python -m pipeline.cli score`` imports none of pandas, matplotlib, Hydra, MLflow, SciPy or
  torch, and still prints the right numbers;
- ``python -m pipeline.cli compare --help`` (the one runner, the comparison's parser) imports
  none of them either.

Each of those starts a process: they are in the slow layer (docs/testing.md); the readers of
the ``-X importtime`` lines and the pandas-free arrow bridges are checked in the quick one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "PYTHONPROFILEIMPORTTIME")}
TIMEOUT_S = 300  # a cold job takes ~3 s; a loaded 2-core machine can be 10x slower


def imported(stderr: str) -> set[str]:
    """Top-level packages of every module in ``-X importtime`` output
    (``import time: self [us] | cumulative | <indent>name``). An import that failed (a
    library probing for an optional package) is listed too."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and name != "imported package":
                names.add(name.split(".")[0])
    return names


def test_importtime_lines_are_read():
    err = "import time: self [us] | cumulative | imported package\nimport time: 5 | 9 |   numpy.linalg\nother\n"
    assert imported(err) == {"numpy"}


@pytest.mark.slow  # a fresh interpreter (what it imports): a process, docs/testing.md
def test_a_bm25_job_without_tracking_imports_no_heavy_module_and_still_draws(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pipeline", "tracking=none", "retriever=bm25",
         f"paths.root={tmp_path / 'out'}", f"hydra.run.dir={run_dir}"],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, env=ENV,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = imported(proc.stderr)
    assert {"pipeline", "hydra", "numpy", "scipy", "matplotlib"} <= modules  # the reading works: BM25 needs scipy.sparse
    heavy = {"torch", "sentence_transformers", "transformers", "optuna", "mlflow", "numba", "bm25s", "pandas"}
    assert not heavy & modules, f"the job imported {sorted(heavy & modules)}"
    results = run_dir / "results"
    for name in ("k_sweep.png", "precision_recall.png"):
        png = (results / "plots" / name).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000, name
    assert (results / "record.json").is_file()


@pytest.mark.slow  # a fresh interpreter (what it imports): a process, docs/testing.md
def test_the_scorer_imports_only_what_scoring_needs(tmp_path):
    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.txt"
    qrels.write_text("q1 0 d1 2\nq1 0 d2 0\nq1 0 d3 1\nq2 0 d9 1\n")
    run.write_text("q1 Q0 d2 1 3.0 t\nq1 Q0 d1 2 2.0 t\nq1 Q0 d3 3 1.0 t\nq2 Q0 d8 1 1.0 t\n")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pipeline.cli", "score", str(qrels), str(run), "--json",
         "--k", "1,2"],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, env=ENV,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = imported(proc.stderr)
    assert {"pipeline", "numpy", "pyarrow"} <= modules
    heavy = {"pandas", "matplotlib", "hydra", "omegaconf", "mlflow", "scipy", "torch"}
    assert not heavy & modules, f"the scorer imported {sorted(heavy & modules)}"
    means = json.loads(proc.stdout)
    # q1: d2 (grade 0), d1 (2), d3 (1); q2 retrieves nothing relevant; 2 queries with relevant documents.
    assert means["n_queries"] == 2
    assert means["precision_at_1"] == 0.0 and means["precision_at_2"] == 0.25
    assert means["recall_at_2"] == 0.25  # q1: 1 of 2 relevant in the top 2; q2: 0 of 1
    assert abs(means["mrr"] - 0.25) < 1e-12  # q1: first relevant at rank 2; q2: none


@pytest.mark.slow  # a fresh interpreter (what it imports): a process, docs/testing.md
def test_a_commands_help_imports_no_heavy_module():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeline.cli", "compare", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: python -m pipeline.cli compare")
    modules = imported(proc.stderr)
    assert {"pipeline", "numpy"} <= modules
    heavy = {"pandas", "matplotlib", "hydra", "omegaconf", "mlflow", "scipy", "torch", "sqlalchemy"}
    assert not heavy & modules, f"compare --help imported {sorted(heavy & modules)}"


def test_formats_numpy_bridges_equal_pyarrows_own():
    """``to_numpy``/``from_numpy`` (no pandas) give what pyarrow's own conversions give."""
    import numpy as np
    import pyarrow as pa

    from pipeline.io.formats import from_numpy, to_numpy

    ints = pa.chunked_array([pa.array([5, 6, 7], pa.int32()), pa.array([8, 9], pa.int32())])
    floats = pa.array([0.5, -1.25, 3.0, 1e-300]).slice(1)
    strings = pa.chunked_array([pa.array(["a", "b c"]), pa.array(["", "é"])]).combine_chunks().slice(1)
    for values in (ints, ints.combine_chunks().slice(2), floats, strings, pa.chunked_array([], pa.int64())):
        ours, theirs = to_numpy(values), values.to_numpy(zero_copy_only=False)
        assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist()
    with_nulls = pa.array([1, None, 3, None, 5], pa.int64()).slice(1)
    assert to_numpy(with_nulls, fill=-1).tolist() == with_nulls.fill_null(-1).to_numpy().tolist() == [-1, 3, -1, 5]
    for array in (np.arange(4, dtype=np.int64)[::2], np.array([1.5, 2.5], np.float32)):
        assert from_numpy(array).equals(pa.array(array))


@pytest.mark.slow  # a fresh interpreter (what it imports): a process, docs/testing.md
def test_arrow_array_equals_pa_array_without_pandas():
    """``formats.arrow_array`` builds what ``pa.array`` builds, in a process that then has no pandas."""
    code = """
import sys
import numpy as np
from pipeline.io.formats import arrow_array
cases = [np.array([True, False, True] * 5), np.arange(7)[::2], np.array([1.5, -2.0]), ["a", None, "é", ""],
         [1, None, 3], [1.5, None], [True, None, False], np.array(["x", "y"], dtype=object), [np.int64(3), 4], []]
built = [arrow_array(c) for c in cases] + [arrow_array([1, None], __import__("pyarrow").int32())]
assert "pandas" not in sys.modules
import pyarrow as pa
expected = [pa.array(c) for c in cases] + [pa.array([1, None], pa.int32())]
for ours, theirs in zip(built, expected):
    assert ours.equals(theirs), (ours, theirs)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow  # a fresh interpreter (what it imports): a process, docs/testing.md
def test_a_job_loads_neither_the_sweep_summary_nor_the_comparison():
    """``pipeline.__main__`` imports ``pipeline.sweep`` (the callback); the sweep's end
    (``pipeline.sweep.summary``) and the comparison are loaded only where a sweep ends."""
    code = ("import sys, pipeline.__main__, pipeline.sweep\n"
            "assert hasattr(pipeline.sweep, 'SweepCallback')\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('pipeline.sweep.summary', 'pipeline.comparison',"
            " 'pipeline.figures')))\n"
            "assert not loaded, loaded\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]

"""What a sweep prints on a non-terminal: one line per job, then its summary (issue 25).

The README's flagship sweep (18 jobs: retriever x reorder x k on the bundled sample) must
print at most 18 + 22 lines, stdout and stderr together, plus its progress (issue 35: at most
one line per 10% of its jobs, and how long it took) (its verdict: one line per factor
and the best set, issue 32), into a new store (the worst case: the "creating a new store"
note, the parent run and its link). It runs into a new experiment of the suite's migrated
store (creating one costs seconds), where it prints everything but the note, so it gets one
line less; the note is one line and a new store adds nothing else to a sweep's output
(tests/pipeline/test_app_sweeps.py's joblib sweep creates its store). Each job's stage times stay
in its ``pipeline.log``; the judged-coverage warning is printed once for the sweep. ``-v``
(or ``verbose=true``) brings back every job's full block.

The dense retriever reads the sample's embeddings from the module's cache folder, a copy of the
run's shared one (tests/sample_embeddings.py). The sweeps run in this process
(``run_pipeline_command``, tests/commands.py: ``python -m pipeline -m ...`` with its two
streams captured as pipes would be, Python's warnings included); what the process itself
prints is tests/pipeline/test_app_sweeps.py's (a sweep's exit status) and tests/test_processes.py's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from commands import run_pipeline_command
from no_figures import figures_off
from sample_embeddings import copy_sample_embeddings

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = ["retriever=bm25,dense,hybrid", "reorder=none,lost_in_the_middle", "k=3,5,10"]
N_JOBS = 18
JOB_LINE = re.compile(r"^#(?P<num>\d+) (?P<name>[^:]+): ndcg_at_10 (?P<ndcg>0\.\d{4}), recall_at_(?P<k>\d+) 0\.\d{4}, "
                      r"mrr 0\.\d{4}, context_utility_at_(?P=k) 0\.\d{4}$")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    return env


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory, sample_embeddings) -> Path:
    """The module's cache folder, a copy of the sample's embeddings (tests/sample_embeddings.py:
    encoded once per test run): what this file checks is what a sweep prints, not MiniLM."""
    return copy_sample_embeddings(sample_embeddings, tmp_path_factory.mktemp("sweep_output_cache"))


def _sweep(root: Path, cache: Path, *args: str):
    """``python -m pipeline -m ARGS`` in this process with stdout and stderr captured (not a
    terminal), and every line it printed, both streams together. What it prints is checked, not
    its PNGs: none is rendered (tests/no_figures.py; the summary's figures are drawn where they
    are checked)."""
    with figures_off():
        proc = run_pipeline_command("-m", *args, f"paths.root={root}", f"cache_dir={cache}", env=_env())
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, proc.stdout.splitlines() + proc.stderr.splitlines()


@pytest.mark.slow
def test_the_flagship_sweep_prints_one_line_per_job_then_its_summary(tmp_path, cache_dir, migrated_store):
    (tmp_path / "out").mkdir()
    shutil.copy(migrated_store, tmp_path / "out" / "mlflow.db")  # paths.root's store, without an experiment
    started = time.monotonic()
    proc, lines = _sweep(tmp_path / "out", cache_dir, *FLAGSHIP)
    text = "\n".join(lines)
    # + the sweep's progress (issue 35): a line each 10% of the jobs or each 30 s, whichever
    # comes first (at most 9, plus one per 30 s on a slow machine), and how long it took;
    # - the new store's note, the one line a new store adds (module docstring)
    progress = 9 + int((time.monotonic() - started) // 30)
    assert not [line for line in lines if line.startswith("note: no MLflow store")], text
    assert len(lines) <= N_JOBS + 22 - 1 + 1 + progress, f"{len(lines)} lines:\n{text}"
    assert len([line for line in lines if re.match(r"sweep: \d+% \(\d+ of 18 jobs\), ", line)]) <= progress, text
    assert re.search(r"^sweep: 18 jobs in \d.* \([\d.]+ jobs/s\)$", text, re.M), text
    jobs = [m for line in lines if (m := JOB_LINE.match(line))]
    assert sorted(int(m["num"]) for m in jobs) == list(range(N_JOBS)), text  # each job: exactly one line
    assert {m["k"] for m in jobs} == {"3", "5", "10"}
    # The numbers on a job's line are the job's own (its record).
    sweep = next((tmp_path / "out" / "multirun").glob("*/*"))
    for m in jobs:
        metrics = json.loads((sweep / m["num"] / "results" / "metrics.json").read_text())["metrics"]
        assert m["ndcg"] == f"{metrics['ndcg_at_10']:.4f}"
    # Stage times and per-job blocks: in each job's pipeline.log, not on the console.
    assert "[pipeline.job][INFO]" not in text
    assert not [line for line in lines if line.startswith(("results: ", "MLflow run ", "  ndcg_at_"))]
    assert all("[pipeline.job][INFO] - retrieve:" in (sweep / str(n) / "pipeline.log").read_text()
               for n in range(N_JOBS))
    assert not re.search(r"\[HYDRA\]\s+#\d+ : ", text)  # the launcher's own line per job is gone
    # The judged-coverage warning: once, for the sweep (every sample job is below 0.9), each job at its k.
    warnings = [line for line in lines if "judged_at_" in line and "biased low" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: judged_at_k < 0.9 in 18 of 18 jobs"), text
    assert "of each job's top k documents are judged, k = 3, 5, 10;" in warnings[0]
    assert "pool them" in warnings[0]  # the bundled sample is this project's own: pooling is possible
    # The summary names the distinct results and ends with the runs table's link.
    assert "ndcg_at_10: 3 distinct results among 18 jobs" in text
    # the verdict: one line per factor, then the jobs that could be the best with their evidence
    assert re.search(r"^retriever: ", text, re.M) and re.search(r"^best on ndcg_at_10: dense ", text, re.M), text
    assert "reorder: no difference (identical results at every level: ndcg_at_10 cannot see reorder)" in lines
    assert "statistically tied" not in text
    assert re.search(r"^open it: mlflow ui .*#/experiments/\d+/runs\?viewStateShareKey=headline&workflowType="
                     r"machine_learning$", lines[-1]), lines[-1]


@pytest.mark.slow  # a 2-job sweep
def test_verbose_brings_back_every_jobs_block(tmp_path, cache_dir):
    """``-v`` is ``verbose=true`` on the command line (``console.verbose_argv``, before Hydra
    reads it): one sweep shows what both spellings bring back."""
    from pipeline import console

    assert console.verbose_argv(["-m", "k=3,5", "tracking=none", "-v"]) == ["-m", "k=3,5", "tracking=none",
                                                                          "verbose=true"]
    _, lines = _sweep(tmp_path / "v", cache_dir, "k=3,5", "tracking=none", "-v")
    text = "\n".join(lines)
    assert len([line for line in lines if line.startswith("results: ")]) == 2, text
    assert len(re.findall(r"\[pipeline\.job\]\[INFO\] - retrieve: ", text)) == 2, text
    assert len(re.findall(r"\[HYDRA\]\s+#\d+ : ", text)) == 2, text  # the launcher's line per job
    # each job's block warns at its own k (issue 37)
    assert sorted(m[1] for line in lines if (m := re.match(r"warning: (judged_at_\d+) = ", line))) == [
        "judged_at_3", "judged_at_5"], text
    assert not any(JOB_LINE.match(line) for line in lines)

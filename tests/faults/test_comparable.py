"""Comparable or refused (issue 28): ``pipeline.compare`` and a sweep's summary compare only
systems scored under the same definition (gain, relevance_level, judged_only, qrels,
collection, the depth of full-depth metrics).

Each case reproduces a failure of the probe: two jobs that differ only in how they were
scored came out as "nDCG -0.036, significant" (gain=linear), "+0.146, significant"
(judged_only), or a relevance_level or a collection change with a warning on stderr only.
Now: one line naming the setting and the systems, exit status 2; ``--allow-mixed`` compares
and marks the console table and report.md as mixed; a sweep over a scoring setting names no
overall best. Jobs run on the bundled sample with ``tracking=none`` (a second each), in this
process (``run_job``, without figures); the sweep runs in this process too (``run_pipeline_command``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from commands import job_in_process, run_pipeline_command
from no_figures import figures_off

from pipeline.cli import compare as compare_command
from pipeline.comparison import build_report, load_systems

from pipeline.cli import compare as compare_command  # the command (pipeline.compare is the API function)

ROOT = Path(__file__).resolve().parents[2]
QRELS = ROOT / "pipeline" / "sample" / "qrels" / "test.tsv"
FAST = ["--n-resamples", "500", "--n-permutations", "500"]
#: name -> the overrides of a job that differs from "base" only in how it is scored (or where).
JOBS = {"base": [], "linear": ["gain=linear"], "judged_only": ["judged_only=true"],
        "relevance_level": ["relevance_level=2"], "long": ["dataset=sample_long"], "k1": ["retriever.k1=0.5"]}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def _run(*args: str):
    """``python -m pipeline ARGS`` in this process (the sweep; tests/commands.py)."""
    return run_pipeline_command(*args, env=_env())


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("comparable")
    folders = {}
    for name, overrides in JOBS.items():
        job_in_process("tracking=none", f"paths.root={root}", f"hydra.run.dir={root / name}", *overrides)
        folders[name] = root / name
    return folders


def _compare(capsys, *args: str) -> tuple[int, str, str]:
    """``compare ARGS`` (fewer resamples) in this process: its status, stdout and stderr. Its PNGs
    are not rendered (tests/no_figures.py): what it refuses, says and computes is checked here."""
    with figures_off():
        code = compare_command.main([*args, *FAST])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("other, setting", [("linear", "gain differs (exp: bm25 k10; linear: bm25 k10 gain=linear)"),
                                            ("judged_only", "judged_only differs (false: bm25 k10; true: "),
                                            ("relevance_level", "relevance_level differs (1: bm25 k10; 2: "),
                                            ("long", "collection (digest) differs (")])
def test_systems_scored_differently_are_refused_in_one_line(jobs, tmp_path, capsys, other, setting):
    code, out, err = _compare(capsys, str(jobs["base"]), str(jobs[other]), "--out", str(tmp_path / "r"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: not comparable: ") and setting in err and "--allow-mixed" in err
    assert not (tmp_path / "r").exists()  # nothing written for a refused comparison


def test_the_same_definition_compares_as_before(jobs, tmp_path, capsys):
    code, out, err = _compare(capsys, str(jobs["base"]), str(jobs["k1"]), "--json", "--out", str(tmp_path / "r"),
                              "--baseline", str(jobs["base"]))  # the marks are against the best unless named
    assert code == 0, err
    report = json.loads(out)
    assert "mixed" not in report and "scoring_unknown" not in report
    assert report["comparisons"][0]["vs_baseline"][0]["system"] == "bm25 k10 k1=0.5"
    scoring = load_systems([str(jobs["base"])], ["ndcg_at_10"])[0].scoring
    assert (scoring["gain"], scoring["relevance_level"], scoring["judged_only"], scoring["depth"]) == (
        "exp", "1", "false", "20")


def test_allow_mixed_compares_and_says_so_first(jobs, tmp_path, capsys):
    code, out, err = _compare(capsys, str(jobs["base"]), str(jobs["linear"]), "--allow-mixed",
                              "--out", str(tmp_path / "r"), "--baseline", str(jobs["base"]))
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("MIXED COMPARISON (--allow-mixed)") and "gain differs" in first
    md = (tmp_path / "r" / "report.md").read_text().splitlines()
    assert md[2].startswith("**MIXED COMPARISON") and "gain differs" in md[2]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["mixed"] == {"gain": {"exp": ["bm25 k10"], "linear": ["bm25 k10 gain=linear"]}}
    # the numbers are still each job's own: the difference is the per-query difference of the tables
    tables = [pd.read_csv(jobs[n] / "results" / "per_query.csv", dtype={"query_id": str}).set_index("query_id")
              for n in ("base", "linear")]
    diff = next(c for c in report["comparisons"] if c["metric"] == "ndcg_at_10")["vs_baseline"][0]["diff"]
    assert diff == pytest.approx((tables[1]["ndcg_at_10"] - tables[0]["ndcg_at_10"]).mean(), abs=1e-12)


def test_a_run_file_carries_the_settings_it_was_scored_with(jobs, tmp_path, capsys):
    run = tmp_path / "base.trec"
    shutil.copy(jobs["base"] / "results" / "run.trec", run)
    # the job and its own run file, scored alike: comparable (qrels digests equal, depth equal)
    code, out, err = _compare(capsys, str(jobs["base"]), str(run), "--qrels", str(QRELS), "--json",
                              "--out", str(tmp_path / "a"))
    assert code == 0, err
    assert "mixed" not in json.loads(out)
    run_system = load_systems([str(run)], ["ndcg_at_10"], qrels=str(QRELS))[0]
    assert run_system.scoring["qrels_digest"] == json.loads(
        (jobs["base"] / "results" / "metrics.json").read_text())["scoring"]["qrels_digest"]
    assert run_system.scoring["depth"] == "20"
    # the run file scored with gain=linear against a gain=exp job: refused
    code, _, err = _compare(capsys, str(jobs["base"]), str(run), "--qrels", str(QRELS), "--gain", "linear",
                            "--out", str(tmp_path / "b"))
    assert code == 2 and "gain differs (exp: bm25 k10; linear: base)" in err
    # against other qrels (one grade changed): refused on the qrels
    lines = QRELS.read_text().splitlines()
    other = tmp_path / "other.tsv"
    body = lines[1].split("\t")
    other.write_text("\n".join([lines[0], "\t".join([*body[:2], str(int(body[2]) + 1)]), *lines[2:]]) + "\n")
    code, _, err = _compare(capsys, str(jobs["base"]), str(run), "--qrels", str(other), "--out", str(tmp_path / "c"))
    assert code == 2 and "qrels (digest) differs" in err


def test_an_older_record_is_unknown_not_refused(jobs, tmp_path, capsys, caplog):
    old = tmp_path / "old"
    shutil.copytree(jobs["k1"], old)
    path = old / "results" / "metrics.json"
    metrics = json.loads(path.read_text())
    del metrics["scoring"]  # written before issue 28
    path.write_text(json.dumps(metrics))
    systems = load_systems([str(jobs["base"]), str(old)], ["ndcg_at_10"])
    assert systems[1].scoring["qrels_digest"] is None and systems[1].scoring["gain"] == "exp"
    assert systems[1].scoring["depth"] == "20"  # max(k, k_max) within the corpus, from the params
    report = build_report(systems, ["ndcg_at_10"], n_resamples=200, n_permutations=200)
    assert report.data["scoring_unknown"] == {"qrels_digest": [systems[1].name]}
    assert "qrels (digest) is not recorded for" in caplog.text
    # an older record of another gain is still refused: what is recorded is checked
    systems[1].scoring["gain"] = "linear"
    with pytest.raises(Exception, match="gain differs"):
        build_report(systems, ["ndcg_at_10"], n_resamples=200, n_permutations=200)


def test_depth_matters_for_full_depth_metrics_only(jobs, tmp_path):
    systems = load_systems([str(jobs["base"]), str(jobs["k1"])], ["ndcg_at_10", "mrr"])
    systems[1].scoring["depth"] = "100"  # as a job with k_max=100
    with pytest.raises(Exception, match=r"depth \(the cut-off of mrr, map, bpref\) differs"):
        build_report(systems, ["ndcg_at_10", "mrr"], n_resamples=200, n_permutations=200)
    report = build_report(systems, ["ndcg_at_10"], n_resamples=200, n_permutations=200)
    assert "mixed" not in report.data


@pytest.mark.slow
def test_a_sweep_over_scoring_settings_names_no_overall_best(tmp_path, store):
    # its store: the ``store`` fixture's migrated copy, at paths.root/mlflow.db where the sweep logs
    assert store == f"sqlite:///{tmp_path / 'mlflow.db'}"
    with figures_off():  # what it says and computes is checked here, not its PNGs (tests/no_figures.py)
        done = _run("-m", "gain=exp,linear", "judged_only=false,true", "retriever.k1=0.9,1.5", f"paths.root={tmp_path}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\nbest:" not in done.stdout
    assert "no overall best: the jobs were scored under different definitions (gain, judged_only)" in done.stdout
    sweep = next((tmp_path / "multirun").glob("*/*"))
    table = pd.read_csv(sweep / "summary" / "sweep_table.csv")
    assert sorted(set(table["scoring"])) == ["gain=exp judged_only=false", "gain=exp judged_only=true",
                                             "gain=linear judged_only=false", "gain=linear judged_only=true"]
    for label, rows in table.groupby("scoring"):
        assert len(rows) == 2
        best = rows.iloc[0]
        assert best["ndcg_at_10"] == rows["ndcg_at_10"].max()  # best first within its setting
        assert f"  {label}: {best['run_name']}: ndcg_at_10 {best['ndcg_at_10']:.4f}" in done.stdout
        report = json.loads((sweep / "summary" / "compare" / label.replace(" ", "_") / "report.json").read_text())
        assert "mixed" not in report and len(report["systems"]) == 2
        means = {s["name"]: s["mean"] for s in report["comparisons"][0]["systems"]}
        np.testing.assert_allclose(sorted(means.values()), sorted(rows["ndcg_at_10"]), atol=1e-6)  # csv: 6 digits
    from mlflow import MlflowClient

    parent = json.loads((sweep / "mlflow_sweep.json").read_text())["parent_run_id"]
    run = MlflowClient(store).get_run(parent)
    assert not any(k.startswith("best") for k in run.data.tags) and "best_ndcg_at_10" not in run.data.metrics
    assert "no overall best" in run.data.tags["mlflow.note.content"]

"""``python -m pipeline.compare``: the numbers of its report against scipy/statsmodels computed
directly on the jobs' per_query.csv, TREC run files against ``pipeline.score``, MLflow sweeps,
``--log``, and bad input (one line, exit status 2).

Three BM25 jobs on the bundled sample (``retriever.k1=0.3``, ``retriever.b=0.2``, ``k=5``) are
made once per module with ``python -m pipeline tracking=none``, in this process (``run_job``,
without figures); the commands and the sweep run in this process too (tests/commands.py).
"""

from __future__ import annotations

import json
import re
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from commands import job_in_process, run_command, run_pipeline_command
from no_figures import figures_off

from pipeline.cli import compare as compare_command
from pipeline import comparison as compare

ROOT = Path(__file__).resolve().parents[2]
QRELS = ROOT / "pipeline" / "sample" / "qrels" / "test.tsv"
METRICS = list(compare.DEFAULT_METRICS)
JOBS = {"k1": "retriever.k1=0.3", "b": "retriever.b=0.2", "k5": "k=5"}
FAST = ["--n-resamples", "2000", "--n-permutations", "2000"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def _run(*args: str):
    """``python -m pipeline ARGS`` in this process (the sweep; tests/commands.py)."""
    return run_pipeline_command(*args, env=_env())


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, Path]:
    """Three job folders (each holding results/), one BM25 setting each."""
    root = tmp_path_factory.mktemp("compare_jobs")
    folders = {}
    for name, override in JOBS.items():
        job_in_process("tracking=none", f"paths.root={root}", f"hydra.run.dir={root / name}", override)
        folders[name] = root / name
    return folders


@pytest.fixture
def no_pngs():
    """For the tests that check a comparison's numbers and words, not its PNGs: no PNG rendered
    (tests/no_figures.py). The JSON report's test draws them (the command's forest and per-query
    figures), the MLflow sweep's its main effects; --log's logs them as files, not rendered."""
    with figures_off():
        yield


def _per_query(folder: Path) -> pd.DataFrame:
    table = pd.read_csv(folder / "results" / "per_query.csv", dtype={"query_id": str})
    return table[table["evaluated"]].set_index("query_id").sort_index()


def _compare(capsys, *args: str) -> tuple[int, str, str]:
    code = compare_command.main([*args])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys, *args: str) -> dict:
    code, out, err = _compare(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)  # the whole of stdout is the report


def _by_metric(report: dict) -> dict[str, dict]:
    return {c["metric"]: c for c in report["comparisons"]}


def test_the_json_report_equals_scipy_on_the_per_query_tables(jobs, tmp_path, capsys):
    out = tmp_path / "report"
    report = _json(capsys, *(str(jobs[n]) for n in JOBS), "--out", str(out), "--baseline", str(jobs["k1"]))
    tables = {n: _per_query(jobs[n]) for n in JOBS}
    names = [s["name"] for s in report["systems"]]
    assert names == ["bm25 k10 k1=0.3", "bm25 k10 b=0.2", "bm25 k5"]  # run names differ: no [override] needed
    assert report["baseline"] == names[0] and report["baseline_named"] and report["metrics"] == METRICS
    assert report["n_queries"] == len(tables["k1"]) == 52
    base = tables["k1"]
    fisher_p = []
    for metric, c in _by_metric(report).items():
        for s, n in zip(c["systems"], JOBS):
            assert s["mean"] == pytest.approx(tables[n][metric].mean(), abs=1e-12)
            assert s["ci_low"] <= s["mean"] <= s["ci_high"]
        for v, n in zip(c["vs_baseline"], ["b", "k5"]):
            x, y = tables[n][metric].to_numpy(), base[metric].to_numpy()
            d = x - y
            assert v["diff"] == pytest.approx(d.mean(), abs=1e-12)
            if np.any(d != 0):
                assert v["p"]["t"] == pytest.approx(scipy.stats.ttest_rel(x, y).pvalue, rel=1e-9)
                assert v["p"]["wilcoxon"] == pytest.approx(scipy.stats.wilcoxon(d).pvalue, rel=1e-9)
            wins, losses = int((d > 1e-12).sum()), int((d < -1e-12).sum())
            assert (v["wins"], v["losses"]) == (wins, losses)
            if wins + losses:
                assert v["p"]["sign"] == pytest.approx(scipy.stats.binomtest(wins, wins + losses).pvalue, rel=1e-9)
            fisher_p.append(v["p"]["fisher"])
    # one Holm family: every comparison of every metric
    from statsmodels.stats.multitest import multipletests

    adjusted = [v["p_adjusted"]["fisher"] for c in report["comparisons"] for v in c["vs_baseline"]]
    np.testing.assert_allclose(adjusted, multipletests(fisher_p, method="holm")[1], rtol=1e-12)
    assert report["n_comparisons"] == 6
    # the BCa interval of a mean is scipy's for the same seed and resamples
    ndcg = _by_metric(report)["ndcg_at_10"]["systems"][1]
    ref = scipy.stats.bootstrap((tables["b"]["ndcg_at_10"].to_numpy(),), np.mean, n_resamples=10_000, method="BCa",
                                rng=np.random.default_rng(0))
    assert (ndcg["ci_low"], ndcg["ci_high"]) == pytest.approx(tuple(ref.confidence_interval), abs=1e-10)
    # best, ties, the per-query scores, the files
    for metric in METRICS:
        means = {s["name"]: s["mean"] for s in _by_metric(report)[metric]["systems"]}
        assert means[report["best"][metric][0]] == max(means.values())
        assert report["tied_with_best"][metric][0] in report["best"][metric]
        assert report["per_query"]["scores"][metric][names[2]] == tables["k5"][metric].tolist()
    assert report["per_query"]["query_ids"] == base.index.tolist()
    assert {"report.md", "report.json", "forest.png", "per_query_diff.png"} <= {p.name for p in out.iterdir()}
    assert not (out / "main_effects.png").exists()  # separate jobs, not a sweep
    assert json.loads((out / "report.json").read_text())["comparisons"] == report["comparisons"]


@pytest.fixture(scope="module")
def better(jobs, tmp_path_factory) -> Path:
    """A copy of the k1 job whose every evaluated query gains 0.05 on each default metric."""
    folder = tmp_path_factory.mktemp("better") / "better"
    shutil.copytree(jobs["k1"], folder)
    path = folder / "results" / "per_query.csv"
    table = pd.read_csv(path, dtype={"query_id": str})
    for metric in METRICS:
        table.loc[table["evaluated"], metric] += 0.05
    record = json.loads((folder / "results" / "record.json").read_text())
    record["run_name"] = "better"
    (folder / "results" / "record.json").write_text(json.dumps(record))
    table.to_csv(path, index=False)
    return folder


def test_the_console_leads_with_the_verdict_and_marks_against_the_best(jobs, better, tmp_path, capsys, no_pngs):
    code, out, err = _compare(capsys, str(jobs["k1"]), str(better), str(jobs["b"]), *FAST, "--out",
                              str(tmp_path / "r"), "--delta", "0.02")
    assert code == 0, err
    lines = out.splitlines()
    # the answer first: per metric, the best set with its evidence (not against the first system)
    assert lines[0].startswith("best on ndcg_at_10: better ") and "all 2 others are worse" in lines[0], lines[0]
    row = {name: next(line for line in lines if line.startswith(name)) for name in ("better", "bm25 k10 k1=0.3")}
    assert row["better"].count(compare.BEST) == 3 and row["better"].count("best") == 3
    # k1 is "better" minus 0.05 on every query: worse, its simultaneous interval (diff +- HSD) excludes 0
    cell = re.search(r"-0\.050 \[(-0\.\d+), (-0\.\d+)\] p [\d.e-]+ worse", row["bm25 k10 k1=0.3"])
    assert cell and float(cell[1]) + float(cell[2]) == pytest.approx(-0.1, abs=2e-3), row["bm25 k10 k1=0.3"]
    assert compare.SIGNIFICANT not in out and not any(line.startswith("sensitivity:") for line in lines)
    assert f"report: {(tmp_path / 'r').resolve()}" in out
    md = (tmp_path / "r" / "report.md").read_text()
    assert "**0.6224**" in md and "![forest.png](forest.png)" in md and "## Every test" not in md
    # --all-tests: the full table of tests, against the best (said), with its marks and sensitivity
    code, out, err = _compare(capsys, str(jobs["k1"]), str(better), str(jobs["b"]), *FAST, "--out",
                              str(tmp_path / "r2"), "--delta", "0.02", "--all-tests")
    assert code == 0, err
    lines = out.splitlines()
    assert "every test (--all-tests), against better:" in lines
    full = lines[lines.index("every test (--all-tests), against better:"):]
    row = next(line for line in full if line.startswith("bm25 k10 k1=0.3"))
    assert "-0.050 [-0.050, -0.050]" + compare.SIGNIFICANT in row
    assert any(line.startswith("sensitivity:") and "needs" in line for line in full)
    assert "## Every test (--all-tests), against better" in (tmp_path / "r2" / "report.md").read_text()


def test_trec_run_files_are_scored_like_pipeline_score(jobs, tmp_path, capsys, no_pngs):
    runs = []
    for name in ("k1", "b"):
        runs.append(tmp_path / f"{name}.trec")
        shutil.copy(jobs[name] / "results" / "run.trec", runs[-1])
    report = _json(capsys, *map(str, runs), "--qrels", str(QRELS), *FAST, "--out", str(tmp_path / "r"))
    assert [s["name"] for s in report["systems"]] == ["k1", "b"]
    for run, name in zip(runs, ("k1", "b")):
        done = run_command("score", QRELS, run, "--json")
        assert done.returncode == 0, done.stderr
        reference = json.loads(done.stdout)
        table = _per_query(jobs[name])
        for metric, c in _by_metric(report).items():
            mean = next(s["mean"] for s in c["systems"] if s["name"] == run.stem)
            assert mean == pytest.approx(reference[metric], abs=1e-12)
            assert mean == pytest.approx(table[metric].mean(), abs=1e-12)  # the job's own numbers
    # a job folder and a run file compare too (same queries)
    mixed = _json(capsys, str(jobs["k1"]), str(runs[1]), "--qrels", str(QRELS), *FAST, "--out", str(tmp_path / "m"))
    assert _by_metric(mixed)["ndcg_at_10"]["vs_baseline"][0]["diff"] == pytest.approx(
        _by_metric(report)["ndcg_at_10"]["vs_baseline"][0]["diff"], abs=1e-12)


def test_report_for_folders_is_the_commands_report(jobs, tmp_path, capsys, no_pngs):
    data = compare.report_for_folders([jobs["k1"], jobs["k5"]], ["ndcg_at_10"], n_resamples=2000,
                                      n_permutations=2000, out=tmp_path / "f")
    cli = _json(capsys, str(jobs["k1"]), str(jobs["k5"]), "--metric", "ndcg_at_10", *FAST, "--out", str(tmp_path / "c"))
    assert data["comparisons"] == cli["comparisons"]
    assert (tmp_path / "f" / "report.json").is_file()
    system = compare.load_system(jobs["b"] / "results", ["map", "precision_at_3"])
    assert system.run_name == "bm25 k10 b=0.2" and system.overrides["retriever.b"] == "0.2"
    assert len(system.scores["map"]) == 52


def test_parse_overrides_undoes_hydra_escapes():
    assert compare.parse_overrides(r"retriever.k1=0.5 tracking.uri=sqlite\:////tmp/x.db +extra=1 k=3") == {
        "retriever.k1": "0.5", "tracking.uri": "sqlite:////tmp/x.db", "extra": "1", "k": "3"}


def _drop_query(jobs, tmp_path) -> Path:
    folder = tmp_path / "short"
    shutil.copytree(jobs["k5"], folder)
    path = folder / "results" / "per_query.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:4] + lines[5:]))  # q04 is gone
    return folder


@pytest.mark.parametrize("case", ["missing file", "bad metric", "column beyond k_max", "query missing",
                                  "run file without qrels", "unknown baseline", "one system"])
def test_bad_input_is_one_line_and_status_2(case, jobs, tmp_path):
    a, b = str(jobs["k1"]), str(jobs["b"])
    args, expected = {
        "missing file": ([a, str(tmp_path / "nope")], f"error: {tmp_path / 'nope'}: no such file or folder"),
        "bad metric": ([a, b, "--metric", "ndgc_at_10"], "error: --metric: 'ndgc_at_10' is not a metric"),
        "column beyond k_max": ([a, b, "--metric", "ndcg_at_50"],
                                f"error: {jobs['k1'] / 'results' / 'per_query.csv'}:1: no column ndcg_at_50"),
        "query missing": ([a, str(_drop_query(jobs, tmp_path))] if case == "query missing" else [],
                          f"error: {tmp_path / 'short' / 'results' / 'per_query.csv'}: no score for 1 of the 52"),
        "run file without qrels": ([a, str(jobs["b"] / "results" / "run.trec")], "error: "),
        "unknown baseline": ([a, b, "--baseline", "zzz"], "error: --baseline: 'zzz' is none of the systems"),
        "one system": ([a], "error: "),
    }[case]
    done = run_command("compare", *args, "--out", tmp_path / "r")  # status and output as a process's
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith(expected), done.stderr
    if case == "missing file":  # the whole line (was test_the_command_line_prints_one_line_and_no_traceback)
        assert done.stderr.strip() == expected
    assert not (tmp_path / "r").exists()


def test_a_missing_query_scores_zero_when_asked(jobs, tmp_path, capsys, no_pngs):
    short = _drop_query(jobs, tmp_path)
    report = _json(capsys, str(jobs["k5"]), str(short), "--missing", "zero", *FAST, "--out", str(tmp_path / "r"))
    assert report["zero_filled"] == {report["systems"][1]["name"]: ["q04"]}
    full, cut = _per_query(jobs["k5"])["ndcg_at_10"], _per_query(short)["ndcg_at_10"]
    assert _by_metric(report)["ndcg_at_10"]["systems"][1]["mean"] == pytest.approx(cut.sum() / len(full))


def test_log_puts_the_report_on_a_new_run_in_experiment_compare(jobs, tmp_path, store, capsys, no_pngs):
    code, out, err = _compare(capsys, str(jobs["k1"]), str(jobs["b"]), *FAST, "--out", str(tmp_path / "r"),
                              "--log", "--tracking-uri", store)
    assert code == 0, err
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("compare")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_id in out
    assert run.data.params["metrics"] == ",".join(METRICS) and run.data.params["test"] == "fisher"
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"report.md", "report.json", "forest.png"}
    assert json.loads((tmp_path / "r" / "report.json").read_text())["mlflow"]["run_id"] == run.info.run_id


@pytest.mark.slow
def test_an_mlflow_sweep_compares_its_jobs_and_logs_to_its_parent(tmp_path, store, capsys):
    sweep = tmp_path / "sweep"
    with figures_off():  # the sweep's own PNGs are not checked here (tests/no_figures.py)
        done = _run("-m", "retriever.k1=0.5,1.2", f"tracking.uri={store}", f"paths.root={tmp_path}",
                    f"hydra.sweep.dir={sweep}")
    assert done.returncode == 0, done.stderr[-3000:]
    parent = json.loads((sweep / "mlflow_sweep.json").read_text())["parent_run_id"]

    with figures_off(keep=("main_effects.png",)):  # the one PNG checked here
        report = _json(capsys, f"mlflow:{parent}", "--tracking-uri", store, *FAST, "--out", str(tmp_path / "ml"),
                       "--log")
    names = [s["name"] for s in report["systems"]]
    assert names == ["k1=0.5 bm25 k10", "k1=1.2 bm25 k10"]
    assert all(s["kind"] == "mlflow" and s["run_id"] for s in report["systems"])
    for i, job in enumerate(("0", "1")):
        table = _per_query(sweep / job)
        for metric, c in _by_metric(report).items():
            assert c["systems"][i]["mean"] == pytest.approx(table[metric].mean(), abs=1e-12)
    assert list(report["factors"]) == ["retriever.k1"]
    assert [lv["value"] for lv in report["main_effects"]["ndcg_at_10"]["retriever.k1"]] == ["0.5", "1.2"]
    assert (tmp_path / "ml" / "main_effects.png").stat().st_size > 10_000  # drawn
    assert report["mlflow"] == {"run_id": parent, "uri": store, "sweep_parent": True}
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    logged = {a.path for a in client.list_artifacts(parent, "compare/ml")}
    assert "compare/ml/report.md" in logged and "compare/ml/main_effects.png" in logged

    # the sweep's folder gives the same numbers; its runs by id and by experiment too (their numbers
    # are checked, not their PNGs: main_effects.png above is)
    with figures_off():
        folder = _json(capsys, str(sweep), *FAST, "--out", str(tmp_path / "folder"))
        by_id = _json(capsys, *(f"mlflow:{s['run_id']}" for s in report["systems"]), "--tracking-uri", store, *FAST,
                      "--out", str(tmp_path / "ids"))
        by_exp = _json(capsys, "mlflow-experiment:sample:params.`retriever.k1` = '1.2'", "--tracking-uri", store,
                       str(sweep / "0"), *FAST, "--out", str(tmp_path / "exp"))
    assert folder["comparisons"] == report["comparisons"]
    assert by_id["comparisons"] == report["comparisons"]
    assert [s["kind"] for s in by_exp["systems"]] == ["mlflow", "job"]


def test_a_per_query_table_is_read_from_its_used_columns_only(tmp_path):
    """read_per_query converts only query_id, evaluated and the metrics asked for;
    what it returns and the errors it names are those of the whole table."""
    from pipeline.comparison import read_per_query
    from pipeline.errors import InputError

    path = tmp_path / "per_query.csv"
    path.write_text('\ufeffquery_id,query,evaluated,ndcg_at_1,ndcg_at_10,recall_at_10\n'
                    '007,"a, ""quoted"" query",true,1,0.5,0.25\n'
                    'q2,plain,false,0,0,0\n'
                    'q3,"two\nlines",True,0,0.75,1\n', encoding="utf-8")
    assert read_per_query(path, ["ndcg_at_10", "recall_at_10"]) == {
        "ndcg_at_10": {"007": 0.5, "q3": 0.75}, "recall_at_10": {"007": 0.25, "q3": 1.0}}
    with pytest.raises(InputError, match=r"no column ndcg_at_50 \(it has ndcg_at_1 .. ndcg_at_10\)"):
        read_per_query(path, ["ndcg_at_50"])
    path.write_text("query_id,ndcg_at_10\nq1,0.5\nq2,0.25\nq1,1\n")
    with pytest.raises(InputError) as err:
        read_per_query(path, ["ndcg_at_10"])
    assert str(err.value) == f"error: {path}:4: query 'q1' appears twice (first on line 2)"
    path.write_text("query,ndcg_at_10\nq1,0.5\n")
    with pytest.raises(InputError, match="no query_id column"):
        read_per_query(path, ["ndcg_at_10"])


def test_run_files_compare_at_a_cut_off_past_their_depth_like_trec_eval(tmp_path, capsys, no_pngs):
    import pytrec_eval

    qrels = {"q1": {"d1": 1, "d2": 1, "d3": 1}, "q2": {"d4": 2}, "q3": {"d1": 1}}
    runs = {"a": {"q1": {"d1": 3.0, "d9": 2.0}, "q2": {"d4": 1.0}, "q3": {"d8": 1.0}},
            "b": {"q1": {"d2": 3.0, "d3": 2.0}, "q2": {"d5": 1.0}, "q3": {"d1": 1.0}}}
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    for name, run in runs.items():
        (tmp_path / f"{name}.trec").write_text("".join(
            f"{q} Q0 {d} {r} {s} {name}\n" for q, docs in run.items() for r, (d, s) in enumerate(docs.items(), 1)))
    report = _json(capsys, str(tmp_path / "a.trec"), str(tmp_path / "b.trec"), "--qrels", str(tmp_path / "qrels.tsv"),
                   "--metric", "precision_at_20", "--metric", "recall_at_20", *FAST, "--out", str(tmp_path / "r"))
    for metric, measure in (("precision_at_20", "P_20"), ("recall_at_20", "recall_20")):
        oracle = {name: pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(run) for name, run in runs.items()}
        for row in _by_metric(report)[metric]["systems"]:
            expected = np.mean([oracle[row["name"]][q][measure] for q in qrels])
            assert row["mean"] == pytest.approx(expected, abs=1e-12), (metric, row["name"])

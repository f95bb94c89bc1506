"""Nothing silently wrong, round four (issue 33, items 6, 9 and 10): bounds and output paths
checked before any work, annotators that cannot overwrite the consensus, and the smaller items.

- Every count has a bound that fits memory, checked before any work: one line naming the
  option, exit status 2 (``score --top-k``, ``compare --n-resamples/--n-permutations/--seed``).
- An output folder that is a file (``compare --out``, ``pool --out``, ``index chroma --path``)
  and a collection name Chroma refuses are one line before the corpus is read or encoded.
- An annotator whose e-mail is ``consensus`` keeps their grades in their own file; deeply
  nested JSON and a tab in a document id are one line naming the export.
- A record with a NaN metric is refused by sync; a run name that is the tracking password is
  redacted; a NaN per-query value is named as such, not as ``None``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import compare as compare_command
from pipeline.cli import index as index_command
from pipeline.cli import judgments as judgments_command
from pipeline.cli import pool as pool_command
from pipeline.cli import score as score_command
from pipeline.errors import InputError, bounded_int
from pipeline.io import results as res
from pipeline.comparison.systems import read_per_query

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "pipeline" / "sample"


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:") or "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("args, option", [
    (["--n-resamples", "1000000000"], "--n-resamples"),  # 44.7 GiB of bootstrap means
    (["--n-resamples", "1e9"], "--n-resamples"),
    (["--n-permutations", "1000000000"], "--n-permutations"),  # no cap at all
    (["--n-resamples", "0"], "--n-resamples"),
    (["--seed", "-1"], "--seed"),  # "seed must be ..." without the option's name
])
def test_compare_counts_have_bounds_checked_before_any_work(args, option, tmp_path, capsys):
    # the systems do not exist: the option is refused before anything is read
    with pytest.raises(SystemExit) as exit_:
        compare_command.main([str(tmp_path / "a"), str(tmp_path / "b"), *args])
    assert exit_.value.code == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: argument {option}: expected") and args[1] in line


def test_the_bounds_admit_their_largest_value():
    assert bounded_int(1, compare_command.MAX_DRAWS)("1e6") == 1_000_000 == compare_command.MAX_DRAWS
    with pytest.raises(Exception):
        bounded_int(1, 10)("2.5")


def test_score_top_k_is_bounded_before_the_run_is_read(tmp_path, capsys):
    """It once tried to allocate 387 GiB (queries x 1e9) for the drill-down."""
    with pytest.raises(SystemExit) as exit_:
        score_command.main([str(SAMPLE / "qrels" / "test.tsv"), str(tmp_path / "no-such-run"), "--per-query",
                            "--top-k", "1000000000"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --top-k: expected an integer from 1 to 10,000, got '1000000000'" in err
    assert "Traceback" not in err


def test_compare_out_that_is_a_file_is_refused_before_the_systems_are_read(tmp_path, capsys):
    taken = tmp_path / "report"
    taken.write_text("mine")
    assert compare_command.main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(taken)]) == 2
    assert _one_error_line(capsys) == f"error: {taken}: --out is a file, not a folder"
    assert taken.read_text() == "mine"
    below = taken / "sub"
    assert compare_command.main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(below)]) == 2
    assert _one_error_line(capsys) == f"error: {below}: --out: {taken} is a file, not a folder"


def test_pool_out_that_is_a_file_is_refused_before_the_collection_is_read(tmp_path, capsys):
    taken = tmp_path / "pool"
    taken.write_text("mine")
    # the dataset path does not exist either: the --out check comes first
    code = pool_command.main(["dataset=beir", f"dataset.path={tmp_path / 'none'}", "--run", str(tmp_path / "run"),
                              "--out", str(taken)])
    assert code == 2
    assert _one_error_line(capsys) == f"error: {taken}: --out is a file, not a folder"
    assert taken.read_text() == "mine"


def test_index_chroma_path_that_is_a_file_is_refused_before_encoding(tmp_path, capsys):
    taken = tmp_path / "chroma_db"
    taken.write_text("mine")
    assert index_command.main(["chroma", "--path", str(taken), "--collection", "sample",
                               "dataset=beir", f"dataset.path={tmp_path / 'none'}"]) == 2
    assert _one_error_line(capsys) == f"error: {taken}: --path is a file, not a folder"


@pytest.mark.parametrize("name", ["../x", "ab", "a..b", "_abc", "abc_", "10.0.0.1", "a/b", "x" * 513])
def test_index_chroma_collection_names_chroma_refuses_are_usage_errors(name, tmp_path, capsys):
    """Each was once refused by chromadb only after the corpus was encoded (22 s on the sample)."""
    import chromadb

    with pytest.raises(SystemExit) as exit_:
        index_command.main(["chroma", "--path", str(tmp_path / "db"), "--collection", name])
    assert exit_.value.code == 2
    assert "argument --collection:" in capsys.readouterr().err
    assert not (tmp_path / "db").exists()
    with pytest.raises(Exception):  # the oracle: chromadb refuses it too
        chromadb.EphemeralClient().create_collection(name)


@pytest.mark.parametrize("name", ["abc", "a_b-c.d", "Sample.2", "x" * 512])
def test_index_chroma_collection_names_chroma_accepts_pass(name):
    import chromadb

    assert index_command.collection_name(name) == name
    client = chromadb.EphemeralClient()
    client.create_collection(name)
    client.delete_collection(name)


@pytest.mark.slow  # MLflow creates a store
def test_compare_log_says_when_it_creates_a_store(tmp_path, capsys):
    """Jobs and sweeps print this note; compare --log once created the store silently."""
    qrels = SAMPLE / "qrels" / "test.tsv"
    judged: dict[str, list[str]] = {}
    for line in qrels.read_text().splitlines()[1:]:
        qid, did, _ = line.split("\t")
        judged.setdefault(qid, []).append(did)
    runs = []
    for name, order in (("first", 1), ("reversed", -1)):
        runs.append(tmp_path / f"{name}.trec")
        runs[-1].write_text("".join(f"{q} Q0 {d} {r} {100 - r} {name}\n" for q, docs in judged.items()
                                    for r, d in enumerate(docs[::order], start=1)))
    store = tmp_path / "store" / "mlflow.db"
    assert compare_command.main([*map(str, runs), "--qrels", str(qrels), "--log", "--tracking-uri",
                                 f"sqlite:///{store}", "--out", str(tmp_path / "cmp"), "--n-resamples", "100",
                                 "--n-permutations", "100"]) == 0
    out = capsys.readouterr().out
    assert f"note: no MLflow store in {store.parent}; creating a new one, {store}" in out
    assert store.is_file() and f"at sqlite:///{store}" in out
    assert compare_command.main([*map(str, runs), "--qrels", str(qrels), "--log", "--tracking-uri",
                                 f"sqlite:///{store}", "--out", str(tmp_path / "cmp2"), "--n-resamples", "100",
                                 "--n-permutations", "100"]) == 0
    assert "creating a new one" not in capsys.readouterr().out  # once only


def _annotation(aid: int, email: str, grade: int) -> dict:
    return {"id": aid, "completed_by": {"id": aid % 10, "email": email}, "was_cancelled": False,
            "result": [{"from_name": "grade", "to_name": "document", "type": "choices",
                        "value": {"choices": [str(grade)]}}]}


def _export(tmp_path: Path, rows: list[tuple[str, str, list[tuple[str, int]]]]) -> Path:
    tasks = [{"id": i + 1, "data": {"query_id": q, "doc_id": d, "query": f"question {q}"},
              "annotations": [_annotation(10 * (i + 1) + j, who, g) for j, (who, g) in enumerate(graders)]}
             for i, (q, d, graders) in enumerate(rows)]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks))
    return path


@pytest.mark.parametrize("email", ["consensus", "Consensus", "consensus."])
def test_an_annotator_named_consensus_keeps_their_grades(email, tmp_path, capsys):
    """The annotator's file was overwritten by the consensus (median) while the console named both."""
    path = _export(tmp_path, [("q1", "d1", [(email, 3), ("bob@x.org", 0), ("eve@x.org", 1)]),
                              ("q1", "d2", [(email, 2), ("bob@x.org", 0), ("eve@x.org", 0)])])
    out = tmp_path / "judged"
    assert judgments_command.main([str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    files = sorted(p.name for p in out.glob("qrels.*.txt"))
    assert len({name.casefold() for name in files}) == len(files) == 4
    theirs = out / f"qrels.{email.strip('.')}_.txt"
    assert f"{email}: 2 grades -> {theirs}" in printed
    assert theirs.read_text() == "q1 0 d1 3\nq1 0 d2 2\n"  # their own grades
    assert (out / "qrels.consensus.txt").read_text() == "q1 0 d1 1\nq1 0 d2 0\n"  # the medians
    stats = json.loads((out / "agreement.json").read_text())
    assert sorted(stats["qrels"].values()) == sorted(str(out / name) for name in files if name != "qrels.consensus.txt")


@pytest.mark.parametrize("level", ["0", "-1", "101"])
def test_judgments_relevance_level_is_a_grade(level, tmp_path, capsys):
    """0 or below made every graded document relevant (the binary agreement then undefined)."""
    path = _export(tmp_path, [("q1", "d1", [("a@x.org", 1), ("b@x.org", 2)])])
    with pytest.raises(SystemExit) as exit_:
        judgments_command.main([str(path), "--out", str(tmp_path / "judged"), "--relevance-level", level])
    assert exit_.value.code == 2
    assert f"argument --relevance-level: expected a grade from 1 to 100, got '{level}'" in capsys.readouterr().err
    assert not (tmp_path / "judged").exists()


def test_deeply_nested_json_is_one_line(tmp_path, capsys):
    path = tmp_path / "export.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert judgments_command.main([str(path), "--out", str(tmp_path / "judged")]) == 2
    assert _one_error_line(capsys) == f"error: {path}: not a Label Studio JSON export: nested too deeply"


def test_a_tab_in_a_document_id_names_the_task_not_a_run(tmp_path, capsys):
    path = _export(tmp_path, [("q1", "d1", [("a@x.org", 1)]), ("q1", "d\t2", [("a@x.org", 2)])])
    out = tmp_path / "judged"
    assert judgments_command.main([str(path), "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert line == (f"error: {path}: task 2 (id 2): document id 'd\\t2' contains a tab or a line break: "
                    "a qrels file cannot hold it")
    assert not out.exists()


def _record(metric: float) -> dict:
    return {"format": res.RECORD_FORMAT, "job_key": "k" * 32, "experiment": "e", "run_name": "r", "params": {},
            "metrics": {"ndcg_at_10": metric, "mrr": 0.5}, "curves": {}, "tags": {}, "tracking": None, "k": 10,
            "dataset": {"name": "d", "digest": "0" * 64, "source": "d"}, "start_time_ms": 0}


@pytest.mark.parametrize("value, shown", [(float("nan"), "NaN"), (float("inf"), "Infinity")])
def test_sync_refuses_a_record_with_a_nan_metric(value, shown, tmp_path, capsys):
    from pipeline.cli.sync import main

    results = tmp_path / "job" / "results"
    results.mkdir(parents=True)
    res.write_record(results, _record(value))
    store = tmp_path / "mlflow.db"
    assert main([str(tmp_path / "job"), "--tracking-uri", f"sqlite:///{store}"]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == (f"error: {results / res.RECORD}: metrics key 'ndcg_at_10' is not a finite number: "
                           f"{shown}")
    assert "sync: 0 logged" in out and not store.exists()


def test_a_run_name_that_is_the_tracking_password_is_redacted(monkeypatch):
    """MLflow hid it; record.json and run.trec (both written from Settings.run_name) kept it."""
    from hydra import compose, initialize_config_dir

    from pipeline.config import Settings

    secret = "Pw-run-name-7Q"
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", secret)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"tracking.run_name=bm25 {secret}"])
    settings = Settings.of(cfg)
    assert settings.run_name == "bm25 ***"
    assert secret not in json.dumps(dict(settings.config.tracking))


def test_a_nan_per_query_value_is_named_as_such(tmp_path):
    table = tmp_path / "per_query.csv"
    table.write_text("query_id,ndcg_at_10\nq1,0.5\nq2,nan\n")
    with pytest.raises(InputError) as err:
        read_per_query(table, ["ndcg_at_10"])
    assert str(err.value) == (f"error: {table}:3: ndcg_at_10 of query 'q2' is not a finite number "
                              "(empty, nan or null)")

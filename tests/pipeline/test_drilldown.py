"""The per-query drill-down (``pipeline.io.drilldown``): the columns it adds to ``per_query.csv``
and the MLflow table, ``failures.md``, and ``pipeline.score --per-query [--corpus]``.

Values on the bundled sample are checked against an independent computation from the files
on disk (the job's ``run.trec``, the sample's qrels and corpus): pytrec_eval for R
(``num_rel``), the first relevant rank (``recip_rank``) and the failures (``P_10`` = 0 with
``num_rel`` > 0); plain Python for the judged share and the top-k cells."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from pipeline.io import drilldown
from pipeline.metrics import Qrels

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "pipeline" / "sample"
QRELS = SAMPLE / "qrels" / "test.tsv"
CORPUS = SAMPLE / "corpus.jsonl"
K = 10
ENTRY = re.compile(r'^(\S+) \((-|-?\d+)\)(?: "(.*)")?$')


# --------------------------------------------------------------------------- references


def _qrels() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in QRELS.read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        out.setdefault(q, {})[d] = int(g)
    return out


def _run(results: Path) -> dict[str, list[str]]:
    """The job's ranking, from its run.trec, in rank order."""
    rows: dict[str, list[tuple[int, str]]] = {}
    for line in (results / "run.trec").read_text().splitlines():
        q, _, d, rank, _, _ = line.split()
        rows.setdefault(q, []).append((int(rank), d))
    return {q: [d for _, d in sorted(pairs)] for q, pairs in rows.items()}


def _texts() -> dict[str, str]:
    docs = {}
    for line in CORPUS.read_text().splitlines():
        obj = json.loads(line)
        docs[obj["_id"]] = " ".join(part for part in (obj.get("title", ""), obj["text"]) if part)
    return docs


def _queries() -> dict[str, str]:
    return {obj["_id"]: obj["text"] for obj in map(json.loads, (SAMPLE / "queries.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def reference(job):
    """pytrec_eval on the job's run.trec (scores = -rank: its order is the run's order)."""
    import pytrec_eval

    qrels, run = _qrels(), _run(job)
    scored_run = {q: {d: float(-r) for r, d in enumerate(docs, start=1)} for q, docs in run.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"num_rel", "recip_rank", f"P_{K}"}, relevance_level=1)
    values = evaluator.evaluate(scored_run)
    failing = [q for q in values if values[q]["num_rel"] > 0 and values[q][f"P_{K}"] == 0]
    first = {q: (round(1 / v["recip_rank"]) if v["recip_rank"] > 0 else None) for q, v in values.items()}
    never = float("inf")
    worst_first = sorted(failing, key=lambda q: (-values[q]["num_rel"], -(first[q] or never), q))
    return {"values": values, "first": first, "failures": worst_first, "qrels": qrels, "run": run}


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """One BM25 job on the sample (k=10, tracking off): its results folder."""
    from hydra import compose, initialize_config_dir

    from pipeline.job import run

    root = tmp_path_factory.mktemp("drilldown")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["tracking=none", f"paths.root={root}", f"k={K}"])
    with pytest.MonkeyPatch.context() as patch:  # the figures are not checked here (~3 s saved)
        patch.setattr("pipeline.figures.save_run_figures", lambda *args, **kwargs: None)
        run(cfg)
    (results,) = root.glob("runs/*/*/results")
    return results


def _table(results: Path) -> list[dict[str, str]]:
    with open(results / "per_query.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _entries(cell: str) -> list[tuple[str, str, str | None]]:
    out = []
    for part in cell.split(" | ") if cell else []:
        match = ENTRY.match(part)
        assert match, part
        out.append(match.groups())
    return out


def _failure_ids(markdown: str) -> list[str]:
    return re.findall(r"^## (\S+?)(?::|$)", markdown, flags=re.M)


# --------------------------------------------------------------------------- the job's artifacts


def test_per_query_csv_has_the_drill_down_columns_equal_to_an_independent_computation(job, reference):
    rows = _table(job)
    assert rows, "empty per_query.csv"
    assert list(rows[0])[:2] == ["query_id", "query"]
    for name in drilldown.column_names(K) + ["n_relevant"]:
        assert name in rows[0], name
    qrels, run, values, queries, texts = (reference["qrels"], reference["run"], reference["values"], _queries(),
                                          _texts())
    assert {r["query_id"] for r in rows} == set(values)
    for row in rows:
        q = row["query_id"]
        assert row["query"] == queries[q]
        assert int(row["n_relevant"]) == values[q]["num_rel"]  # R
        first = reference["first"][q]
        assert row["first_relevant_rank"] == ("" if first is None else str(first))
        top = run[q][:K]
        judged = sum(1 for d in top if qrels[q].get(d, -1) >= 0)
        assert float(row[f"judged_at_{K}"]) == pytest.approx(judged / len(top), abs=1e-12)
        entries = _entries(row[f"top_{K}"])
        assert [d for d, _, _ in entries] == top
        for d, grade, snippet in entries:
            assert grade == (str(qrels[q][d]) if d in qrels[q] else "-")
            flat = " ".join(texts[d].split()).replace('"', "'")
            assert snippet and len(snippet) <= drilldown.SNIPPET_CHARS
            assert flat.startswith(snippet.removesuffix("…")) and (snippet == flat or snippet.endswith("…"))
    assert any(row["first_relevant_rank"] == "" for row in rows) or reference["failures"]


def test_failures_md_lists_exactly_the_failing_queries_worst_first(job, reference):
    markdown = (job / drilldown.FAILURES_FILE).read_text()
    expected = reference["failures"]
    assert expected, "the sample run has no failing query: this test would check nothing"
    assert _failure_ids(markdown) == expected
    assert f"{len(expected)} of {len(reference['values'])} evaluated queries" in markdown
    qrels, run, queries, texts = reference["qrels"], reference["run"], _queries(), _texts()
    sections = re.split(r"^## ", markdown, flags=re.M)[1:]
    for q, section in zip(expected, sections):
        assert section.startswith(f"{q}: {queries[q]}\n")
        retrieved = re.findall(r"^\d+\. `([^`]+)` \((-|\d+)\)", section, flags=re.M)
        assert [d for d, _ in retrieved] == run[q][:K]
        assert all(g == (str(qrels[q][d]) if d in qrels[q] else "-") for d, g in retrieved)
        relevant = sorted((d for d, g in qrels[q].items() if g >= 1), key=lambda d: (-qrels[q][d], d))
        shown = re.findall(r"^- `([^`]+)` \((\d+)\) (retrieved at rank (\d+)|not retrieved) \"(.*)\"$", section,
                           flags=re.M)
        assert [d for d, *_ in shown] == relevant[: drilldown.MAX_RELEVANT_SHOWN]
        for d, grade, where, rank, snippet in shown:
            assert int(grade) == qrels[q][d]
            assert (rank and run[q].index(d) + 1 == int(rank) > K) or (not rank and d not in run[q])
            assert " ".join(texts[d].split()).startswith(snippet.removesuffix("…"))


def test_the_mlflow_table_has_the_drill_down_columns(job, store):
    """The job's folder logged to a store: per_query_table.json (the UI's table) carries the
    query text, R, the first relevant rank, the judged share and the top k with snippets."""
    from mlflow import MlflowClient

    from pipeline import tracking

    record = json.loads((job / "record.json").read_text())
    assert record["table_columns"][:5] == ["query_id", "query", "n_relevant", "first_relevant_rank",
                                           f"judged_at_{K}"]
    assert record["table_columns"][-1] == f"top_{K}"
    run_id = tracking.log_results(job, tracking.StoreSettings(uri=store, artifact_root=str(Path(store[10:]).parent)))
    client = MlflowClient(tracking_uri=store)
    local = client.download_artifacts(run_id, "per_query_table.json", str(Path(store[10:]).parent / "dl"))
    table = json.loads(Path(local).read_text())
    assert table["columns"] == record["table_columns"]
    rows = {row[0]: dict(zip(table["columns"], row)) for row in table["data"]}
    for row in _table(job):
        logged = rows[row["query_id"]]
        assert logged["query"] == row["query"] and logged[f"top_{K}"] == row[f"top_{K}"]
        assert logged["first_relevant_rank"] == (None if row["first_relevant_rank"] == ""
                                                 else int(row["first_relevant_rank"]))
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert drilldown.FAILURES_FILE in artifacts


# --------------------------------------------------------------------------- pipeline.score


def test_score_per_query_with_corpus_prints_the_drill_down(job, reference, capsys):
    from pipeline.cli.score import main

    assert main([str(QRELS), str(job / "run.trec"), "--per-query", "--corpus", str(CORPUS), "--k", "5,10"]) == 0
    out = capsys.readouterr().out
    table, failures = out.split("# Failures: queries with no relevant document in the top 10\n")
    assert _failure_ids(failures) == reference["failures"]
    queries, texts = _queries(), _texts()
    q = reference["failures"][0]
    assert f"## {q}: {queries[q]}" in failures  # the query text, from queries.jsonl beside the corpus
    first_doc = reference["run"][q][0]
    assert f'1. `{first_doc}`' in failures and drilldown.snippet(texts[first_doc]) in failures
    for line in table.splitlines():  # every query's header line in the top-k listing
        match = re.match(r"^(\S+)  R=(\d+)  first relevant: (\S+)  judged@10: ", line)
        if match:
            qid, r, first = match.groups()
            assert int(r) == reference["values"][qid]["num_rel"]
            assert first == str(reference["first"][qid] or "-")


def test_score_per_query_json_and_without_corpus(job, reference, capsys):
    from pipeline.cli.score import main

    assert main([str(QRELS), str(job / "run.trec"), "--per-query", "--json", "--k", "10"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["failures"] == reference["failures"]
    csv_rows = {row["query_id"]: row for row in _table(job)}
    for q, row in payload["per_query"].items():
        assert row["first_relevant_rank"] == reference["first"][q]
        assert row["query"] is None
        top = row[f"top_{K}"]
        assert [t["doc_id"] for t in top] == reference["run"][q][:K]
        assert all(t["snippet"] is None for t in top)
        assert [(t["doc_id"], "-" if t["grade"] is None else str(t["grade"])) for t in top] == \
            [(d, g) for d, g, _ in _entries(csv_rows[q][f"top_{K}"])]
    assert main([str(QRELS), str(job / "run.trec"), "--per-query", "--k", "10"]) == 0
    out = capsys.readouterr().out
    assert _failure_ids(out) == reference["failures"]
    assert '"' not in out.split("Top 10 per query")[1]  # ids and grades, no snippets


def test_score_bad_corpus_is_one_line_exit_2(tmp_path, job, capsys):
    from pipeline.cli.score import main

    bad = tmp_path / "corpus.jsonl"
    bad.write_text('{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": \n')
    assert main([str(QRELS), str(job / "run.trec"), "--corpus", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{bad}:2" in err and "JSON" in err
    assert main([str(QRELS), str(job / "run.trec"), "--corpus", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


# --------------------------------------------------------------------------- hand-made cases


def _hand_made() -> drilldown.DrillDown:
    """q0: R = 3 (d0 grade 2, d5 grade 1, a judged document missing from the corpus grade 3),
    d1 grade 0 (judged), d2 grade -1 (unjudged); top 3 = d1, d2, d4, d5 at rank 4.
    q1: R = 1, ranking [d3] only. q2: no judgments, nothing retrieved."""
    qrels = Qrels(query_idx=np.array([0, 0, 0, 0, 0, 1]), doc_idx=np.array([0, 1, 2, 5, -1, 3]),
                  grade=np.array([2, 0, -1, 1, 3, 1]))
    doc_idx = np.array([[1, 2, 4, 5], [3, -1, -1, -1], [-1, -1, -1, -1]])
    docs = [f"d{i}" for i in range(6)]
    texts = ["zero", 'one  "quoted"\n text', "two", "three", "x" * 100, "five"]
    return drilldown.drill_down(["q0", "q1", "q2"], docs, doc_idx, qrels, k=3, relevance_level=1,
                                query_texts=["first query", "second", "third"], doc_texts=texts)


def test_hand_made_values():
    drill = _hand_made()
    cols = drill.columns()
    assert cols["query"] == ["first query", "second", "third"]
    assert cols["first_relevant_rank"].to_pylist() == [4, 1, None]
    assert cols["judged_at_3"].tolist() == [1 / 3, 1.0, 0.0]  # / retrieved in the top 3; 0 when none
    assert drill.n_relevant.tolist() == [3, 1, 0]
    long = "x" * 59 + "…"
    first = "d1 (0) \"one 'quoted' text\" | d2 (-) \"two\" | d4 (-) " + f'"{long}"'
    assert cols["top_3"].to_pylist() == [first, 'd3 (1) "three"', ""]
    assert drill.failures() == [0]  # q2 has no relevant document: not evaluated, not a failure
    md = drill.failures_markdown()
    assert _failure_ids(md) == ["q0"]
    assert "- `d0` (2) not retrieved \"zero\"\n- `d5` (1) retrieved at rank 4 \"five\"\n" \
           "- 1 judged relevant document(s) not in the corpus" in md
    bare = drilldown.drill_down(["q0", "q1", "q2"], [f"d{i}" for i in range(6)], drill.doc_idx, drill.qrels, 3)
    assert bare.columns()["top_3"].to_pylist() == ["d1 (0) | d2 (-) | d4 (-)", "d3 (1)", ""]
    assert bare.columns()["query"] == ["", "", ""]


def test_snippets_read_only_a_head_of_the_text_and_still_equal_the_whole_text_reference():
    def reference(text, chars=drilldown.SNIPPET_CHARS):
        flat = " ".join(text.split()).replace('"', "'")
        return flat if len(flat) <= chars else flat[: chars - 1].rstrip() + "…"

    texts = ["é" * 70, '  a\u00a0b\tc "q"  ', " " * 300 + "tail", "x" * 60, "y" * 61, "ab " * 30, "",
             "日本語 " * 20, "a" * 58 + "   b" + "c" * 10]
    assert drilldown.snippets(texts) == [reference(t) for t in texts]
    assert drilldown.snippets([None]) == [None] and drilldown.snippet(None) is None


def test_failures_worst_first_and_none_message():
    # R: q0 1, q1 2, q2 2, q3 2; q1 and q3 retrieve their first relevant document at rank 3, q2 never.
    qrels = Qrels(query_idx=np.array([0, 1, 1, 2, 2, 3, 3]), doc_idx=np.array([9, 2, 8, 7, 8, 2, 9]),
                  grade=np.array([1, 1, 1, 1, 1, 1, 1]))
    doc_idx = np.array([[0, 1, 2], [0, 1, 2], [0, 1, 3], [0, 1, 2]])
    drill = drilldown.drill_down(["q0", "q1", "q2", "q3"], [f"d{i}" for i in range(10)], doc_idx, qrels, k=2)
    assert [drill.query_ids[q] for q in drill.failures()] == ["q2", "q1", "q3", "q0"]
    ok = drilldown.drill_down(["q0"], ["d0"], np.array([[0]]), Qrels(np.array([0]), np.array([0]), np.array([1])), 1)
    assert ok.failures() == [] and "No failures" in ok.failures_markdown()


def test_table_columns_keep_one_judged_column_and_put_the_top_k_last():
    from pipeline.tracking.mapping import table_columns  # the UI table of the MLflow run

    cols = table_columns(["precision_at_5", "judged_at_5", "mrr", "n_relevant", "evaluated"], 5)
    assert cols == ["query_id", "query", "n_relevant", "first_relevant_rank", "judged_at_5", "precision_at_5",
                    "mrr", "evaluated", "top_5"]
    drill = drilldown.drill_down(["q0"], ["d0"], np.array([[0]]), Qrels(np.array([0]), np.array([0]), np.array([1])), 5)
    table = drilldown.with_columns({"query_id": ["q0"], "judged_at_5": ["theirs"]}, drill)
    assert list(table) == ["query_id", "query", "judged_at_5", "first_relevant_rank", "top_5"]
    assert table["judged_at_5"] == ["theirs"]

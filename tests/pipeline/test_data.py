"""Tests for pipeline.io.collection: real collections, every bad input, soft problems, digest, formats."""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from commands import run_job_command

from pipeline.io.collection import REPORT_KEYS, load_beir, load_ir_datasets, load_sample, load_trec
from pipeline.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
HAS_MAIN = (ROOT / "pipeline" / "__main__.py").exists()

DOCS = [
    {"_id": "d1", "title": "Chain care", "text": "Lubricate the chain after rain."},
    {"_id": "d2", "title": "", "text": "Brake pads wear out."},
    {"_id": "d3", "title": "Tires", "text": "Check the pressure weekly."},
    {"_id": "d4", "title": "Wheels", "text": "True the wheel with a spoke key."},
]
QUERIES = [
    {"_id": "q1", "text": "how to oil a chain"},
    {"_id": "q2", "text": "unjudged query"},
    {"_id": "q3", "text": "tire pressure"},
]
QRELS = [("q3", "d3", 2), ("q1", "d1", 3), ("q1", "d2", 0)]


def jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def write_beir(
    folder: Path,
    docs: list[dict] | str = DOCS,
    queries: list[dict] | str = QUERIES,
    qrels: list[tuple[str, str, int]] | str = QRELS,
    gz: bool = False,
    split: str = "test",
) -> Path:
    """A BEIR folder in ``folder``; strings are written verbatim (for malformed inputs)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    corpus_text = docs if isinstance(docs, str) else jsonl(docs)
    if gz:
        with gzip.open(folder / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.write(corpus_text)
    else:
        (folder / "corpus.jsonl").write_text(corpus_text, encoding="utf-8")
    (folder / "queries.jsonl").write_text(queries if isinstance(queries, str) else jsonl(queries), encoding="utf-8")
    if not isinstance(qrels, str):
        qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in qrels)
    (folder / "qrels" / f"{split}.tsv").write_text(qrels, encoding="utf-8")
    return folder


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    return write_beir(tmp_path / "bikes")


def judgments(c) -> set[tuple[str, str, int]]:
    """The collection's judgments as (query id, doc id or None, grade)."""
    return {
        (c.query_ids[q], c.doc_ids[d] if d >= 0 else None, int(g))
        for q, d, g in zip(c.qrels.query_idx, c.qrels.doc_idx, c.qrels.grade)
    }


def raises_input_error(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    return info.value


# --------------------------------------------------------------------------- real collections


def real(name: str) -> Path:
    path = DATA / name
    if not path.is_dir():
        pytest.skip(f"real collection {name!r} not found at {path} (../shared/data is absent)")
    return path


@pytest.mark.parametrize(
    "name, n_docs, n_queries, n_judged, grades",
    [
        ("cranfield", 1400, 225, 1612, {1: 363, 2: 734, 3: 387, 4: 128}),
        ("scifact", 5183, 300, 339, {1: 339}),
        ("vaswani", 11429, 93, 2083, {1: 2083}),
    ],
)
def test_real_collections_load_with_documented_counts(name, n_docs, n_queries, n_judged, grades):
    c = load_beir(real(name))
    assert (c.n_docs, c.n_queries, len(c.qrels.grade)) == (n_docs, n_queries, n_judged)
    values, counts = np.unique(c.qrels.grade, return_counts=True)
    assert dict(zip(values.tolist(), counts.tolist())) == grades
    assert c.name == name
    assert (c.qrels.doc_idx >= 0).all() and c.report["qrels_unknown_docs"] == 0
    assert len(set(c.doc_ids)) == n_docs and len(c.doc_texts) == n_docs
    assert len(c.digest) == 64


def test_cranfield_details_match_its_readme():
    c = load_beir(real("cranfield"))
    assert c.report["empty_docs"] == 2  # documents 471 and 995 are empty in the original
    assert c.doc_texts[c.doc_ids.index("471")] == ""
    # 995 is empty yet judged relevant (grade 2) for query 125
    assert ("125", "995", 2) in judgments(c)
    assert c.query_ids == [str(i) for i in range(1, 226)]  # file order
    # title + " " + text, and the text repeats the title (as the README says)
    title = "experimental investigation of the aerodynamics of a wing in a slipstream ."
    assert c.doc_texts[0].startswith(f"{title} {title}")


def test_scifact_loads_in_under_a_second():
    path = real("scifact")
    load_beir(path)  # warm the file cache and the imports
    best = min(_timed(load_beir, path) for _ in range(2))
    assert best < 1.0, f"SciFact took {best:.2f}s"


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


# --------------------------------------------------------------------------- BEIR basics


def test_beir_texts_order_and_indices(beir):
    c = load_beir(beir)
    assert c.name == "bikes" and c.source == str(beir)
    assert c.doc_ids == ["d1", "d2", "d3", "d4"]
    assert c.doc_texts == [
        "Chain care Lubricate the chain after rain.",
        "Brake pads wear out.",  # empty title: just the text
        "Tires Check the pressure weekly.",
        "Wheels True the wheel with a spoke key.",
    ]
    assert c.query_ids == ["q1", "q3"]  # file order, only judged queries
    assert c.query_texts == ["how to oil a chain", "tire pressure"]
    # canonical order: by query index, then document index
    assert c.qrels.query_idx.tolist() == [0, 0, 1]
    assert c.qrels.doc_idx.tolist() == [0, 1, 2]
    assert c.qrels.grade.tolist() == [3, 0, 2]
    assert c.qrels.grade.dtype == np.int64 and c.qrels.doc_idx.dtype == np.int64
    assert c.report == {**dict.fromkeys(REPORT_KEYS, 0), "queries_without_judgments": 1}


def test_beir_fields_join_and_name_are_configurable(tmp_path):
    docs = [{"_id": "a", "heading": "H", "body": "B", "title": "T", "text": "X"}]
    folder = write_beir(tmp_path / "f", docs=docs, qrels=[("q1", "a", 1)])
    c = load_beir(folder, title_field="heading", text_field="body", join=" | ", name="custom")
    assert c.doc_texts == ["H | B"] and c.name == "custom"
    assert load_beir(folder, title_field=None).doc_texts == ["X"]


def test_beir_other_split_and_gz_qrels(tmp_path):
    folder = write_beir(tmp_path / "f", qrels=[("q3", "d4", 1)], split="dev")
    with gzip.open(folder / "qrels" / "train.tsv.gz", "wt") as fh:
        fh.write("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    assert judgments(load_beir(folder, split="dev")) == {("q3", "d4", 1)}
    assert judgments(load_beir(folder, split="train")) == {("q1", "d2", 1)}


def test_gz_corpus_gives_the_same_collection(tmp_path):
    plain = load_beir(write_beir(tmp_path / "plain"))
    packed = load_beir(write_beir(tmp_path / "packed", gz=True))
    assert packed.doc_texts == plain.doc_texts and packed.digest == plain.digest


def test_numeric_ids_are_read_as_strings(tmp_path):
    docs, queries = [{"_id": 7, "text": "seven"}], [{"_id": 1, "text": "x"}]
    folder = write_beir(tmp_path / "f", docs=docs, queries=queries, qrels=[("1", "7", 1)])
    c = load_beir(folder)
    assert c.doc_ids == ["7"] and c.query_ids == ["1"] and judgments(c) == {("1", "7", 1)}


# --------------------------------------------------------------------------- texts read from the file


def _awkward_corpus(folder: Path) -> Path:
    """A plain corpus.jsonl with what a byte-offset reader could get wrong: a byte order mark,
    blank and whitespace lines between records, CRLF endings, non-ASCII text, a numeric id,
    a null text, a lone surrogate escape, no newline at the end."""
    lines = [
        '{"_id": "a", "title": "Été", "text": "naïve café ünïcode"}\r\n',
        "\n",
        '{"_id": 7, "title": "", "text": "seven"}\n',
        "   \n",
        '{"_id": "n", "title": "only a title", "text": null}\n',
        '{"_id": "s", "title": "", "text": "lone \\ud800 surrogate"}\n',
        '{"_id": "z", "title": "last", "text": "no newline"}',
    ]
    qrels = [("q1", "a", 1), ("q1", "z", 2)]
    write_beir(folder, docs="".join(lines), qrels=qrels)
    corpus = folder / "corpus.jsonl"
    corpus.write_bytes(b"\xef\xbb\xbf" + corpus.read_bytes())
    return folder


def test_lazy_texts_are_exactly_the_texts_in_memory(tmp_path, monkeypatch):
    import pipeline.io.collection as data
    from pipeline.io.collection import records

    folder = _awkward_corpus(tmp_path / "f")
    held = load_beir(folder, lazy_texts=False)
    lazy = load_beir(folder, lazy_texts=True)
    assert isinstance(held.doc_texts, list) and isinstance(lazy.doc_texts, data.FileTexts)
    assert lazy.digest == held.digest and lazy.doc_ids == held.doc_ids == ["a", "7", "n", "s", "z"]
    assert held.doc_texts[0] == "Été naïve café ünïcode" and held.doc_texts[2] == "only a title"
    texts = lazy.doc_texts
    assert len(texts) == 5 and list(texts) == held.doc_texts
    assert [texts[i] for i in range(-5, 5)] == held.doc_texts * 2
    for sl in (slice(1, 4), slice(0, 5), slice(3, 99), slice(4, 1), slice(None, None, 2), slice(None, None, -1)):
        assert texts[sl] == held.doc_texts[sl]
    with pytest.raises(IndexError):
        texts[5]
    monkeypatch.setattr(records, "READ_DOCS", 2)  # iteration in reads of 2 documents
    assert list(texts) == held.doc_texts


def test_lazy_texts_by_default_only_for_a_large_plain_corpus(tmp_path, monkeypatch):
    import pipeline.io.collection as data
    from pipeline.io.collection import loaders

    plain, packed = write_beir(tmp_path / "plain"), write_beir(tmp_path / "packed", gz=True)
    assert isinstance(load_beir(plain).doc_texts, list)  # 16 MiB and more by default
    monkeypatch.setattr(loaders, "LAZY_TEXTS_MIN_BYTES", 10)  # the module whose load_beir reads it
    assert isinstance(load_beir(plain).doc_texts, data.FileTexts)
    assert isinstance(load_beir(plain, lazy_texts=False).doc_texts, list)
    assert isinstance(load_beir(packed, lazy_texts=True).doc_texts, list)  # gzip: no byte offsets


def test_lazy_texts_refuse_a_corpus_that_changed(tmp_path):
    folder = write_beir(tmp_path / "f")
    corpus = folder / "corpus.jsonl"
    texts = load_beir(folder, lazy_texts=True).doc_texts
    assert texts[1] == "Brake pads wear out."
    # edited in place: size and time differ
    corpus.write_text(corpus.read_text().replace("Brake pads", "Brake shoes"), encoding="utf-8")
    err = raises_input_error(lambda: texts[1])
    assert err.path == str(corpus) and "changed since it was loaded" in err.problem
    # an id rewritten in place with size, inode and time kept: the id read gives it away
    texts = load_beir(folder, lazy_texts=True).doc_texts
    st = corpus.stat()
    with open(corpus, "r+b") as fh:  # same length: "d3" -> "d9"
        data_ = fh.read().replace(b'"_id": "d3"', b'"_id": "d9"')
        fh.seek(0)
        fh.write(data_)
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert corpus.stat().st_size == st.st_size
    err = raises_input_error(lambda: texts[2])
    assert "document 2 is 'd9', was 'd3'" in err.problem
    assert texts[0] == "Chain care Lubricate the chain after rain."  # the unchanged records still read


def test_lazy_texts_duplicate_id_still_names_both_lines(tmp_path):
    docs = DOCS + [{"_id": "d2", "text": "again"}]
    err = raises_input_error(load_beir, write_beir(tmp_path / "f", docs=docs), lazy_texts=True)
    assert err.line == 5 and err.problem == "duplicate document id 'd2' (first on line 2)"


def test_a_job_on_lazy_texts_gives_the_same_results(tmp_path, monkeypatch):
    """The whole job (BM25 indexing reads the texts in batches) on the sample, texts held or not
    (without its figures: drawn from the metrics compared here, checked in test_plots.py)."""
    from hydra import compose, initialize_config_dir

    from pipeline.job import run

    monkeypatch.setattr("pipeline.figures.save_run_figures", lambda *args, **kwargs: None)
    metrics = {}
    for lazy in ("false", "true"):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[
                "tracking=none", "dataset=beir", f"dataset.path={ROOT / 'pipeline' / 'sample'}",
                f"dataset.lazy_texts={lazy}", f"paths.root={tmp_path / lazy}"])
        assert run(cfg) > 0.5
        (found,) = (tmp_path / lazy).rglob("results/metrics.json")
        metrics[lazy] = json.loads(found.read_text())["metrics"]
    assert {k: v for k, v in metrics["true"].items() if not k.startswith("time_")} == {
        k: v for k, v in metrics["false"].items() if not k.startswith("time_")}
    assert metrics["true"]["ndcg_at_10"] > 0.5


# --------------------------------------------------------------------------- hard errors


def test_missing_folder(tmp_path):
    err = raises_input_error(load_beir, tmp_path / "nope")
    assert str(err) == f"error: {tmp_path / 'nope'}: dataset folder not found"


def test_path_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    err = raises_input_error(load_beir, tmp_path / "file")
    assert err.path == str(tmp_path / "file") and "expected a BEIR folder" in err.problem


@pytest.mark.parametrize("missing, words", [("corpus.jsonl", "no corpus file"), ("queries.jsonl", "no queries file")])
def test_missing_corpus_or_queries_file(beir, missing, words):
    (beir / missing).unlink()
    err = raises_input_error(load_beir, beir)
    assert err.path == str(beir) and words in err.problem


def test_missing_split_names_the_available_ones(beir):
    err = raises_input_error(load_beir, beir, split="dev")
    assert err.path == str(beir / "qrels" / "dev.tsv")
    assert "no qrels for split 'dev'" in err.problem and "available splits: test" in err.problem


@pytest.mark.parametrize(
    "line2, words",
    [
        ('{"_id": "d2", "text": "unterminated}', "malformed JSON"),
        ('["d2", "text"]', "expected a JSON object, found list"),
        ('{"title": "t", "text": "no id"}', "no '_id' key"),
        ('{"_id": "d2", "title": "no text"}', "no 'text' key"),
        ('{"_id": ["d2"], "text": "x"}', "'_id' must be a string"),
        ('{"_id": "d2", "text": 5}', "'text' must be a string"),
        ('{"_id": "  ", "text": "x"}', "'_id' is empty"),
    ],
)
def test_bad_corpus_line_is_named(tmp_path, line2, words):
    corpus = json.dumps(DOCS[0]) + "\n" + line2 + "\n" + json.dumps(DOCS[2]) + "\n"
    folder = write_beir(tmp_path / "f", docs=corpus)
    err = raises_input_error(load_beir, folder)
    assert (err.path, err.line) == (str(folder / "corpus.jsonl"), 2)
    assert words in err.problem
    assert str(err).startswith(f"error: {folder / 'corpus.jsonl'}:2: ")


def test_bad_line_in_gz_corpus_counts_blank_lines(tmp_path):
    corpus = json.dumps(DOCS[0]) + "\n\n" + "{oops\n"
    folder = write_beir(tmp_path / "f", docs=corpus, gz=True)
    err = raises_input_error(load_beir, folder)
    assert (err.path, err.line) == (str(folder / "corpus.jsonl.gz"), 3) and "malformed JSON" in err.problem


def test_invalid_utf8_line(tmp_path):
    folder = write_beir(tmp_path / "f")
    with open(folder / "corpus.jsonl", "ab") as fh:
        fh.write(b'{"_id": "d9", "text": "caf\xe9"}\n')
    err = raises_input_error(load_beir, folder)
    assert err.line == 5 and "not valid UTF-8" in err.problem


def test_corrupt_gzip(tmp_path):
    folder = write_beir(tmp_path / "f")
    (folder / "corpus.jsonl").unlink()
    (folder / "corpus.jsonl.gz").write_bytes(b"this is not gzip data")
    err = raises_input_error(load_beir, folder)
    assert err.path == str(folder / "corpus.jsonl.gz") and "cannot read corpus file" in err.problem


def test_bad_query_line(tmp_path):
    folder = write_beir(tmp_path / "f", queries=jsonl(QUERIES[:1]) + '{"_id": "q2"}\n')
    err = raises_input_error(load_beir, folder)
    assert (err.path, err.line) == (str(folder / "queries.jsonl"), 2) and "query has no 'text' key" in err.problem


def test_duplicate_document_id_names_both_lines(tmp_path):
    docs = DOCS + [{"_id": "d2", "text": "again"}]
    folder = write_beir(tmp_path / "f", docs=docs)
    err = raises_input_error(load_beir, folder)
    assert (err.path, err.line) == (str(folder / "corpus.jsonl"), 5)
    assert err.problem == "duplicate document id 'd2' (first on line 2)"


def test_first_repeated_document_id_is_the_one_reported(tmp_path):
    docs = DOCS + [{"_id": "d3", "text": "x"}, {"_id": "d1", "text": "y"}]
    err = raises_input_error(load_beir, write_beir(tmp_path / "f", docs=docs))
    assert err.line == 5 and err.problem == "duplicate document id 'd3' (first on line 3)"


def test_equal_id_hashes_without_equal_ids_are_not_duplicates():
    from pipeline.io.collection.assemble import raise_duplicate_doc

    ids = ["a", "b", "c"]  # pretend "a" collided with another id's 64-bit hash
    assert raise_duplicate_doc(ids, {hash("a")}, lambda: iter(()), "corpus") is None
    with pytest.raises(InputError, match="duplicate document id 'a' \\(first on line 1\\)"):
        records = [(1, "a", ""), (2, "b", ""), (7, "a", "")]
        raise_duplicate_doc(ids + ["a"], {hash("a")}, lambda: iter(records), "corpus")


def test_duplicate_query_id_names_both_lines(tmp_path):
    folder = write_beir(tmp_path / "f", queries=QUERIES + [{"_id": "q1", "text": "again"}])
    err = raises_input_error(load_beir, folder)
    assert (err.path, err.line) == (str(folder / "queries.jsonl"), 4)
    assert err.problem == "duplicate query id 'q1' (first on line 1)"


@pytest.mark.parametrize(
    "qrels, line, words",
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq3\td3\thigh\n", 3, "grade 'high' is not an integer"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq3\td3\t1.5\n", 3, "grade '1.5' is not an integer"),
        ("qid\tdocid\trel\nq1\td1\t1\n", 1, "header"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq3\td3\n", 3, "expected 3 columns, found 2"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\n", 3, "twice with different grades"),
    ],
)
def test_bad_qrels_come_from_read_qrels_with_line(tmp_path, qrels, line, words):
    folder = write_beir(tmp_path / "f", qrels=qrels)
    err = raises_input_error(load_beir, folder)
    assert (err.path, err.line) == (str(folder / "qrels" / "test.tsv"), line)
    assert words in err.problem


def test_empty_qrels_file(tmp_path):
    folder = write_beir(tmp_path / "f", qrels="")
    err = raises_input_error(load_beir, folder)
    assert err.path == str(folder / "qrels" / "test.tsv") and "empty" in err.problem


def test_empty_corpus(tmp_path):
    folder = write_beir(tmp_path / "f", docs="\n\n")
    err = raises_input_error(load_beir, folder)
    assert err.path == str(folder / "corpus.jsonl") and err.problem == "corpus has no documents"


def test_no_evaluable_query(tmp_path):
    folder = write_beir(tmp_path / "f", qrels=[("x1", "d1", 1), ("x2", "d2", 1)])
    err = raises_input_error(load_beir, folder)
    assert err.path == str(folder / "queries.jsonl")
    assert "no evaluable query" in err.problem and "none of the 3 queries" in err.problem


def test_strict_mode_rejects_unknown_document_with_its_line(tmp_path):
    folder = write_beir(tmp_path / "f", qrels=[("q1", "d1", 1), ("q3", "ghost", 1)])
    assert load_beir(folder).report["qrels_unknown_docs"] == 1  # lenient by default
    err = raises_input_error(load_beir, folder, strict=True)
    assert (err.path, err.line) == (str(folder / "qrels" / "test.tsv"), 3)
    assert "judged document 'ghost' (query 'q3') is not in the corpus" in err.problem


def test_strict_mode_rejects_unknown_query_with_its_line(tmp_path):
    folder = write_beir(tmp_path / "f", qrels=[("q1", "d1", 1), ("q1", "d2", 0), ("q9", "d1", 1)])
    err = raises_input_error(load_beir, folder, strict=True)
    assert (err.path, err.line) == (str(folder / "qrels" / "test.tsv"), 4)
    assert "judged query 'q9' is not in the queries file" in err.problem


# --------------------------------------------------------------------------- soft problems


def test_soft_problems_are_counted_kept_and_logged(tmp_path, caplog):
    docs = DOCS + [{"_id": "d5", "title": "", "text": "   "}]
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n"
        for q, d, g in [
            ("q1", "d1", 3),
            ("q1", "ghost", 2),  # unknown document: kept, counts in R
            ("q1", "d1", 3),  # identical duplicate: dropped, counted
            ("q7", "d2", 1),  # unknown query: dropped, counted
            ("q7", "d3", 1),
            ("q8", "d3", 1),
            ("q3", "d5", 1),
        ]
    )
    folder = write_beir(tmp_path / "f", docs=docs, qrels=qrels)
    with caplog.at_level(logging.INFO, logger="pipeline.io.collection"):
        c = load_beir(folder)
    assert c.report == {
        "empty_docs": 1,
        "empty_queries": 0,
        "duplicate_judgments": 1,
        "qrels_unknown_docs": 1,
        "qrels_unknown_queries": 2,
        "qrels_dropped_judgments": 3,
        "queries_without_judgments": 1,
    }
    assert judgments(c) == {("q1", "d1", 3), ("q1", None, 2), ("q3", "d5", 1)}
    assert c.doc_texts[4] == "   "  # empty documents are kept as they are
    warned = {r.getMessage() for r in caplog.records if r.levelno == logging.WARNING}
    for key in ("empty_docs", "duplicate_judgments", "qrels_unknown_docs", "qrels_unknown_queries"):
        assert any(f"[{key}]" in m for m in warned), key
    assert any("[queries_without_judgments]" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_empty_evaluated_query_is_counted(tmp_path):
    queries = [{"_id": "q1", "text": " "}, {"_id": "q3", "text": None}, {"_id": "q2", "text": ""}]
    c = load_beir(write_beir(tmp_path / "f", queries=queries))
    assert c.query_texts == [" ", ""] and c.report["empty_queries"] == 2  # q2 is not judged


def test_unknown_documents_keep_their_place_in_canonical_order(tmp_path):
    qrels = [("q1", "zz", 1), ("q1", "d2", 1), ("q1", "aa", 2)]
    c = load_beir(write_beir(tmp_path / "f", qrels=qrels))
    assert c.qrels.doc_idx.tolist() == [-1, -1, 1]
    assert c.qrels.grade.tolist() == [2, 1, 1]  # -1 entries ordered by document id: aa, zz


# --------------------------------------------------------------------------- digest


def test_digest_is_stable_across_identical_copies_and_layouts(tmp_path):
    base = load_beir(write_beir(tmp_path / "a")).digest
    assert load_beir(write_beir(tmp_path / "b")).digest == base  # an identical copy
    # same content, different layout: key order, spacing, blank lines, gz, qrels order, name
    docs = "\n".join(json.dumps(dict(reversed(list(d.items()))), indent=None, separators=(" , ", " : ")) for d in DOCS)
    queries = "\n\n".join(json.dumps(q) for q in QUERIES) + "\n\n"
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in reversed(QRELS))
    other = write_beir(tmp_path / "c", docs=docs, queries=queries, qrels=qrels, gz=True)
    assert load_beir(other, name="renamed").digest == base


def _changed(kind: str) -> tuple[list, list, list]:
    docs = [dict(d) for d in DOCS]
    queries = [dict(q) for q in QUERIES]
    qrels = list(QRELS)
    if kind == "doc text":
        docs[3]["text"] += "!"
    elif kind == "doc title":
        docs[0]["title"] = "Chain Care"
    elif kind == "doc id":
        docs[3]["_id"] = "d4b"
    elif kind == "unjudged doc added":
        docs.append({"_id": "d5", "text": "new"})
    elif kind == "doc order":
        docs[0], docs[1] = docs[1], docs[0]
    elif kind == "query text":
        queries[2]["text"] = "tyre pressure"
    elif kind == "grade":
        qrels[0] = ("q3", "d3", 1)
    elif kind == "judgment added":
        qrels.append(("q3", "d4", 0))
    elif kind == "judgment removed":
        qrels.pop()
    elif kind == "judged query added":
        qrels.append(("q2", "d4", 1))
    return docs, queries, qrels


@pytest.mark.parametrize(
    "kind",
    ["doc text", "doc title", "doc id", "unjudged doc added", "doc order", "query text", "grade",
     "judgment added", "judgment removed", "judged query added"],
)
def test_digest_changes_with_any_content_change(tmp_path, kind):
    base = load_beir(write_beir(tmp_path / "a")).digest
    docs, queries, qrels = _changed(kind)
    assert load_beir(write_beir(tmp_path / "b", docs=docs, queries=queries, qrels=qrels)).digest != base


def test_digest_separates_field_boundaries(tmp_path):
    """("ab", "c") and ("a", "bc") differ; the boundary sits in unjudged documents only."""
    queries, qrels = [{"_id": "q", "text": "x"}], [("q", "j", 1)]
    judged = {"_id": "j", "text": "judged"}
    one = write_beir(tmp_path / "a", docs=[judged, {"_id": "ab", "text": "c"}], queries=queries, qrels=qrels)
    two = write_beir(tmp_path / "b", docs=[judged, {"_id": "a", "text": "bc"}], queries=queries, qrels=qrels)
    three = write_beir(tmp_path / "c", docs=[judged, {"_id": "a", "text": "b"}, {"_id": "c", "text": ""}],
                       queries=queries, qrels=qrels)
    digests = {load_beir(f).digest for f in (one, two, three)}
    assert len(digests) == 3


def test_digest_ignores_queries_outside_the_split(tmp_path):
    base = load_beir(write_beir(tmp_path / "a")).digest
    queries = QUERIES + [{"_id": "q4", "text": "another unjudged query"}]
    assert load_beir(write_beir(tmp_path / "b", queries=queries)).digest == base


# --------------------------------------------------------------------------- TREC files


def write_trec(folder: Path, gz: bool = False) -> dict[str, Path]:
    """The same content as ``write_beir`` but as TREC qrels, TSV queries, TSV corpus."""
    folder.mkdir(parents=True, exist_ok=True)
    opener = (lambda p: gzip.open(p, "wt", encoding="utf-8")) if gz else (lambda p: open(p, "w", encoding="utf-8"))
    suffix = ".gz" if gz else ""
    paths = {
        "qrels": folder / f"qrels.txt{suffix}",
        "queries": folder / f"topics.tsv{suffix}",
        "corpus": folder / f"docs.tsv{suffix}",
    }
    with opener(paths["qrels"]) as fh:
        fh.write("".join(f"{q} 0 {d} {g}\n" for q, d, g in QRELS))
    with opener(paths["queries"]) as fh:
        fh.write("".join(f"{q['_id']}\t{q['text']}\n" for q in QUERIES))
    with opener(paths["corpus"]) as fh:
        fh.write("_id\ttitle\ttext\n" + "".join(f"{d['_id']}\t{d['title']}\t{d['text']}\n" for d in DOCS))
    return paths


@pytest.mark.parametrize("gz", [False, True])
def test_trec_files_give_the_same_collection_as_beir(tmp_path, gz):
    beir = load_beir(write_beir(tmp_path / "beir"))
    c = load_trec(**write_trec(tmp_path / "trec", gz=gz))
    assert c.name == "trec" and c.doc_texts == beir.doc_texts and c.query_ids == beir.query_ids
    assert judgments(c) == judgments(beir) and c.digest == beir.digest


def test_trec_two_column_corpus_and_jsonl_queries(tmp_path):
    (tmp_path / "c.txt").write_text("d1\tfirst doc\nd2\tsecond doc\n")
    (tmp_path / "q.jsonl").write_text(jsonl([{"_id": "q1", "text": "second"}]))
    (tmp_path / "qrels").write_text("q1 0 d2 1\n")
    c = load_trec(tmp_path / "qrels", tmp_path / "q.jsonl", tmp_path / "c.txt", name="tiny")
    assert c.doc_texts == ["first doc", "second doc"] and judgments(c) == {("q1", "d2", 1)}


def test_trec_jsonl_corpus_detected_by_content(tmp_path):
    (tmp_path / "corpus").write_text(jsonl(DOCS))
    (tmp_path / "q.tsv").write_text("id\ttext\nq1\toil\n")  # header recognised and skipped
    (tmp_path / "qrels").write_text("q1 0 d1 1\n")
    c = load_trec(tmp_path / "qrels", tmp_path / "q.tsv", tmp_path / "corpus")
    assert c.n_docs == 4 and c.query_ids == ["q1"]


def test_trec_tsv_column_count_must_be_consistent(tmp_path):
    (tmp_path / "c.tsv").write_text("d1\tt\tfirst\nd2\tsecond\n")
    (tmp_path / "q.tsv").write_text("q1\toil\n")
    (tmp_path / "qrels").write_text("q1 0 d1 1\n")
    err = raises_input_error(load_trec, tmp_path / "qrels", tmp_path / "q.tsv", tmp_path / "c.tsv")
    assert (err.path, err.line) == (str(tmp_path / "c.tsv"), 2) and "expected 3 tab-separated columns" in err.problem


def test_trec_queries_need_two_columns(tmp_path):
    paths = write_trec(tmp_path)
    paths["queries"].write_text("q1\toil\tchain\n")
    err = raises_input_error(load_trec, **paths)
    assert (err.path, err.line) == (str(paths["queries"]), 1) and "found 3" in err.problem


def test_trec_missing_file_and_bad_format(tmp_path):
    paths = write_trec(tmp_path)
    err = raises_input_error(load_trec, paths["qrels"], paths["queries"], tmp_path / "absent.tsv")
    assert str(err) == f"error: {tmp_path / 'absent.tsv'}: corpus file not found"
    err = raises_input_error(load_trec, **paths, corpus_format="xml")
    assert "unknown format 'xml'" in err.problem


def test_trec_qrels_errors_name_the_line(tmp_path):
    paths = write_trec(tmp_path)
    paths["qrels"].write_text("q1 0 d1 1\nq3 0 d3\n")
    err = raises_input_error(load_trec, **paths)
    assert (err.path, err.line) == (str(paths["qrels"]), 2) and "expected 4 columns" in err.problem


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("gz", [False, True])
def test_byte_order_marks_are_dropped_from_every_file(tmp_path, gz):
    """A UTF-8 BOM (Windows editors write one) changes no id, text, judgment or digest."""
    plain = load_trec(**write_trec(tmp_path / "plain"))
    paths = write_trec(tmp_path / "bom", gz=gz)
    for path in paths.values():
        data = path.read_bytes()
        if gz:
            path.write_bytes(gzip.compress(BOM + gzip.decompress(data)))
        else:
            path.write_bytes(BOM + data)
    c = load_trec(**paths)
    assert c.query_ids == plain.query_ids and c.doc_ids == plain.doc_ids and c.doc_texts == plain.doc_texts
    assert judgments(c) == judgments(plain) and c.digest == plain.digest


def test_byte_order_mark_on_tsv_topics_and_irregular_qrels(tmp_path):
    """The line-by-line readers: TSV topics (no header) and qrels the fast reader refuses."""
    (tmp_path / "topics.tsv").write_bytes(BOM + b"q1\toil\n")
    (tmp_path / "qrels.txt").write_bytes(BOM + b"q1  0 d1 1\n")  # two blanks: line by line
    (tmp_path / "docs.tsv").write_bytes(BOM + b"d1\tchain oil\n")
    c = load_trec(tmp_path / "qrels.txt", tmp_path / "topics.tsv", tmp_path / "docs.tsv")
    assert c.query_ids == ["q1"] and c.doc_ids == ["d1"] and judgments(c) == {("q1", "d1", 1)}


def test_byte_order_mark_on_beir_jsonl_and_qrels(tmp_path):
    base = load_beir(write_beir(tmp_path / "a"))
    folder = write_beir(tmp_path / "b")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        (folder / name).write_bytes(BOM + (folder / name).read_bytes())
    assert load_beir(folder, name="a").digest == base.digest


def test_invalid_utf8_in_qrels_names_the_line(tmp_path):
    folder = write_beir(tmp_path / "f")
    (folder / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq3\td\xe93\t2\n")
    err = raises_input_error(load_beir, folder)
    assert (err.path, err.line) == (str(folder / "qrels" / "test.tsv"), 3) and "not valid UTF-8" in err.problem


# --------------------------------------------------------------------------- ir_datasets


@pytest.fixture
def irds_id(tmp_path, monkeypatch) -> str:
    """Register a dataset built from local TSV/TREC files under a unique id."""
    ir_datasets = pytest.importorskip("ir_datasets")
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds_home"))
    paths = write_trec(tmp_path / "irds")
    docs = tmp_path / "irds" / "docs2.tsv"  # TsvDocs has no title column: id<TAB>text
    docs.write_text("".join(f"{d['_id']}\t{d['text']}\n" for d in DOCS))
    dataset_id = f"pipeline-test/{tmp_path.name}"
    ir_datasets.registry.register(
        dataset_id,
        ir_datasets.create_dataset(
            docs_tsv=str(docs), queries_tsv=str(paths["queries"]), qrels_trec=str(paths["qrels"])
        ),
    )
    return dataset_id


def test_ir_datasets_matches_the_same_files_read_directly(irds_id, tmp_path):
    c = load_ir_datasets(irds_id)
    files = tmp_path / "irds"
    direct = load_trec(files / "qrels.txt", files / "topics.tsv", files / "docs2.tsv")
    assert c.name == irds_id and c.source == f"ir_datasets:{irds_id}"
    assert c.doc_ids == direct.doc_ids and c.doc_texts == direct.doc_texts
    assert c.query_ids == ["q1", "q3"] and judgments(c) == judgments(direct)
    assert c.digest == direct.digest and c.report == direct.report


def test_ir_datasets_unknown_id():
    pytest.importorskip("ir_datasets")
    err = raises_input_error(load_ir_datasets, "no/such/dataset-for-tests")
    assert "unknown ir_datasets id 'no/such/dataset-for-tests'" in err.problem


def test_ir_datasets_duplicate_document(irds_id, tmp_path):
    with open(tmp_path / "irds" / "docs2.tsv", "a") as fh:
        fh.write("d1\tagain\n")
    err = raises_input_error(load_ir_datasets, irds_id)
    assert err.path == f"ir_datasets:{irds_id}/docs" and err.line == 5 and "first on line 1" in err.problem


def test_ir_datasets_judgments_follow_the_qrels_file_rule(irds_id, tmp_path):
    with open(tmp_path / "irds" / "qrels.txt", "a") as fh:
        fh.write("q3 0 d3 2\n")  # identical repeat: dropped and counted, as from a file
    assert load_ir_datasets(irds_id).report["duplicate_judgments"] == 1
    with open(tmp_path / "irds" / "qrels.txt", "a") as fh:
        fh.write("q1 0 d1 1\n")  # judgment 5 disagrees with judgment 2
    err = raises_input_error(load_ir_datasets, irds_id)
    assert (err.path, err.line) == (f"ir_datasets:{irds_id}/qrels", 5)
    assert err.problem == "query 'q1' judges document 'd1' twice with different grades (3 at judgment 2, 1 here)"


# --------------------------------------------------------------------------- sample


def test_sample_collection():
    c = load_sample()
    assert c.name == "sample" and c.n_docs >= 150 and c.n_queries >= 40
    assert set(np.unique(c.qrels.grade).tolist()) == {0, 1, 2, 3}
    assert (c.qrels.doc_idx >= 0).all()
    assert all(v == 0 for v in c.report.values()), c.report
    relevant = np.bincount(c.qrels.query_idx[c.qrels.grade >= 1], minlength=c.n_queries)
    distractors = np.bincount(c.qrels.query_idx[c.qrels.grade == 0], minlength=c.n_queries)
    assert relevant.min() >= 1 and relevant.max() <= 5 and distractors.min() >= 1
    assert all(2 <= t.count(". ") + 1 for t in c.doc_texts)  # prose, not keywords
    assert load_sample(name="bikes").digest == c.digest


# --------------------------------------------------------------------------- config files


def test_every_dataset_config_instantiates(tmp_path, irds_id):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    beir = write_beir(tmp_path / "cfg_beir")
    trec = write_trec(tmp_path / "cfg_trec")
    overrides = {
        "sample": {},
        "beir": {"path": str(beir)},
        "trec": {k: str(v) for k, v in trec.items()},
        "ir_datasets": {"id": irds_id},
        "sample_long": {},
    }
    files = sorted((ROOT / "conf" / "dataset").glob("*.yaml"))
    assert {f.stem for f in files} == set(overrides)
    for f in files:
        cfg = OmegaConf.merge(OmegaConf.load(f), overrides[f.stem])
        c = instantiate(cfg)
        assert c.n_docs > 0 and c.n_queries > 0, f.stem
    with pytest.raises(Exception, match="Missing mandatory value"):
        instantiate(OmegaConf.load(ROOT / "conf" / "dataset" / "beir.yaml"))


# --------------------------------------------------------------------------- command line


def run_cli(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python -m pipeline OVERRIDES`` as a process, from ``tmp_path``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *overrides, f"hydra.run.dir={tmp_path / 'hydra'}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _bad_beir(tmp_path: Path, case: str) -> Path:
    """A BEIR folder with one mistake (``case``); "missing": no folder at all."""
    folder = tmp_path / "data"
    if case == "malformed":
        write_beir(folder, docs=json.dumps(DOCS[0]) + "\n{broken\n")
    elif case == "grade":
        write_beir(folder, qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\nq3\td3\tx\n")
    elif case == "duplicate":
        write_beir(folder, queries=QUERIES + [{"_id": "q1", "text": "again"}])
    return folder


def _assert_one_line(result, folder: Path, where: str, words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    expected = f"error: {folder / where}" if where else f"error: {folder}"
    assert expected in result.stderr and words in result.stderr


@pytest.mark.skipif(not HAS_MAIN, reason="pipeline/__main__.py (the app) is not written yet")
@pytest.mark.parametrize(
    "case, where, words",
    [
        ("malformed", "corpus.jsonl:2", "malformed JSON"),
        ("grade", "qrels/test.tsv:3", "is not an integer"),
        ("duplicate", "queries.jsonl:4", "duplicate query id 'q1' (first on line 1)"),
        ("missing", "", "dataset folder not found"),
    ],
)
def test_cli_reports_bad_input_with_status_2(tmp_path, case, where, words):
    """The job in this process (tests/commands.py); the same as a process:
    test_the_command_lines_job_ends_bad_input_in_one_line_and_status_2."""
    folder = _bad_beir(tmp_path, case)
    result = run_job_command("dataset=beir", f"dataset.path={folder}", f"hydra.run.dir={tmp_path / 'hydra'}",
                             f"paths.root={tmp_path / 'outputs'}")
    _assert_one_line(result, folder, where, words)


@pytest.mark.slow  # a process: ``python -m pipeline`` costs seconds of start-up (docs/testing.md)
@pytest.mark.skipif(not HAS_MAIN, reason="pipeline/__main__.py (the app) is not written yet")
def test_the_command_lines_job_ends_bad_input_in_one_line_and_status_2(tmp_path):
    """Process-level: ``python -m pipeline`` on a malformed corpus prints one line (the one
    ``pipeline.job.run_job`` prints before ``sys.exit(2)`` inside Hydra's main) and exits 2."""
    folder = _bad_beir(tmp_path, "malformed")
    _assert_one_line(run_cli(tmp_path, "dataset=beir", f"dataset.path={folder}"), folder, "corpus.jsonl:2",
                     "malformed JSON")

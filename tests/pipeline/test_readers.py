"""The one line reader (pipeline/io/readers.py) and what qrels and run files get from it:
byte order marks dropped on both paths, faults named by file and line, one dedupe rule."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.errors import InputError
from pipeline.io.formats import dedupe_judgments, read_qrels, read_run, tie_break_rule
from pipeline.io.readers import BOM, first_text_line, raw_lines, require_file, text_lines

QRELS = "q1 0 d1 2\nq1 0 d2 0\nq2 0 d3 1\n"
RUN = "q1 Q0 d2 1 9.5 t\nq1 Q0 d1 2 9.0 t\nq2 Q0 d3 1 1.0 t\n"
IRREGULAR = {  # the same content in a layout that defeats pyarrow: the line-by-line path
    QRELS: "q1  0 d1 2\nq1 0\td2 0 \nq2 0 d3  1\n",
    RUN: "q1 Q0  d2 1 9.5 t\nq1\tQ0 d1 2 9.0 t \nq2 Q0 d3 1  1.0 t\n",
}


def write(path: Path, data: bytes) -> Path:
    if path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def qrels_rows(path: Path) -> list[tuple[str, str, int]]:
    q = read_qrels(path)
    return list(zip(q.query_ids.tolist(), q.doc_ids.tolist(), q.grades.tolist()))


def run_rows(path: Path) -> list[tuple[str, str, float]]:
    r = read_run(path)
    return list(zip(r.query_ids.tolist(), r.doc_ids.tolist(), r.scores.tolist()))


# --------------------------------------------------------------------------- the reader


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_lines_are_numbered_blank_lines_skipped_bom_dropped(tmp_path, suffix):
    path = write(tmp_path / f"f.txt{suffix}", BOM + b"a b\n\n  \nc\xc3\xa9\r\n")
    assert list(raw_lines(path, "test")) == [(1, b"a b\n"), (4, b"c\xc3\xa9\r\n")]
    assert list(text_lines(path, "test")) == [(1, "a b\n"), (4, "c\u00e9\r\n")]
    assert first_text_line(path, "test") == "a b"


def test_bom_is_dropped_on_the_first_line_only(tmp_path):
    path = write(tmp_path / "f.txt", BOM + b"x\n" + BOM + b"y\n")
    assert [line for _, line in text_lines(path, "test")] == ["x\n", "\ufeffy\n"]


def test_universal_newlines_split_a_bare_carriage_return(tmp_path):
    path = write(tmp_path / "f.txt", b"a\rb\r\nc\r\rd")
    assert list(raw_lines(path, "test")) == [(1, b"a\rb\r\n"), (2, b"c\r\rd")]
    # line 4 is a lone \r: blank, so counted but not yielded
    assert list(raw_lines(path, "test", universal_newlines=True)) == [(1, b"a\r"), (2, b"b\r\n"), (3, b"c\r"), (5, b"d")]


def test_empty_file_has_no_first_line(tmp_path):
    assert first_text_line(write(tmp_path / "f.txt", BOM + b"\n \n"), "test") is None


def test_bad_utf8_names_the_line(tmp_path):
    path = write(tmp_path / "f.txt", b"ok\ncaf\xe9\n")
    with pytest.raises(InputError) as info:
        list(text_lines(path, "test"))
    assert (info.value.path, info.value.line) == (str(path), 2)
    assert "line is not valid UTF-8 (invalid continuation byte at byte 3)" in info.value.problem


def test_require_file(tmp_path):
    with pytest.raises(InputError, match="run file not found"):
        require_file(tmp_path / "absent", "run")
    with pytest.raises(InputError, match="run path is a folder"):
        require_file(tmp_path, "run")
    assert require_file(write(tmp_path / "r", b"x"), "run") == tmp_path / "r"


# --------------------------------------------------------------------------- qrels and runs


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("irregular", [False, True], ids=["fast path", "line-by-line path"])
def test_bom_is_dropped_on_both_paths_of_qrels_and_runs(tmp_path, suffix, irregular):
    plain_qrels = qrels_rows(write(tmp_path / "plain.qrels", QRELS.encode()))
    plain_run = run_rows(write(tmp_path / "plain.run", RUN.encode()))
    qrels_text = IRREGULAR[QRELS] if irregular else QRELS
    run_text = IRREGULAR[RUN] if irregular else RUN
    assert qrels_rows(write(tmp_path / f"q.txt{suffix}", BOM + qrels_text.encode())) == plain_qrels
    assert run_rows(write(tmp_path / f"r.txt{suffix}", BOM + run_text.encode())) == plain_run


def test_bom_before_a_beir_qrels_header(tmp_path):
    text = "query-id\tcorpus-id\tscore\nq1\td1\t2\n"
    assert qrels_rows(write(tmp_path / "fast.tsv", BOM + text.encode())) == [("q1", "d1", 2)]
    slow = text.replace("\t2\n", "\t 2\n")  # the blank defeats the fast reader
    assert qrels_rows(write(tmp_path / "slow.tsv", BOM + slow.encode())) == [("q1", "d1", 2)]


def test_carriage_return_line_endings_read_alike_on_both_paths(tmp_path):
    fast = qrels_rows(write(tmp_path / "fast.txt", QRELS.replace("\n", "\r").encode()))
    slow = qrels_rows(write(tmp_path / "slow.txt", IRREGULAR[QRELS].replace("\n", "\r").encode()))
    assert fast == slow == qrels_rows(write(tmp_path / "plain.txt", QRELS.encode()))


@pytest.mark.parametrize("what", ["qrels", "run"])
def test_bad_utf8_in_qrels_and_runs_names_the_line(tmp_path, what):
    text = (QRELS if what == "qrels" else RUN).encode().replace(b"d3", b"d\xff3")  # line 3
    path = write(tmp_path / f"{what}.txt", text)
    with pytest.raises(InputError) as info:
        (read_qrels if what == "qrels" else read_run)(path)
    assert str(info.value).startswith(f"error: {path}:3: line is not valid UTF-8 (invalid start byte at byte ")


def _trec_queries(path: Path) -> None:
    """load_trec with ``path`` as its queries (plain qrels and corpus beside it)."""
    from pipeline.io.collection import load_trec

    (path.parent / "qrels.txt").write_text("q1 0 d1 1\n")
    (path.parent / "docs.tsv").write_text("_id\ttitle\ttext\nd1\t\tchain oil\n")
    load_trec(qrels=path.parent / "qrels.txt", queries=path, corpus=path.parent / "docs.tsv")


#: A truncated gzip file on each reader: (the reader, a line of its format, the name in the message).
TRUNCATED = {
    "corpus": (lambda path: list(raw_lines(path, "corpus")), "line {}\n", "corpus"),
    "qrels": (read_qrels, "q1 0 d{} 1\n", "qrels"),
    "run": (read_run, "q1 Q0 d{} 1 1.0 t\n", "run"),
    "queries (load_trec)": (_trec_queries, "q{}\tchain oil\n", "queries"),
}


@pytest.mark.parametrize("cut", ["half", "trailer"])
@pytest.mark.parametrize("what", list(TRUNCATED))
def test_truncated_gzip_names_the_file(tmp_path, what, cut):
    """One test for every reader (was four, in two files): the file cut in half, or only its
    8-byte trailer gone. The entry points (scorer, job): tests/faults/test_inputs.py; random
    bytes and cut gzip of any content: tests/faults/test_fuzz.py."""
    reader, line, name = TRUNCATED[what]
    blob = gzip.compress("".join(line.format(i) for i in range(5000)).encode())
    path = tmp_path / f"{name}.txt.gz"
    path.write_bytes(blob[: len(blob) // 2] if cut == "half" else blob[:-8])
    with pytest.raises(InputError) as info:
        reader(path)
    assert info.value.path == str(path) and info.value.problem.startswith(f"cannot read {name} file ("), info.value
    if what == "corpus":
        assert info.value.line is not None


# --------------------------------------------------------------------------- one dedupe rule


def test_dedupe_judgments_drops_identical_repeats_and_counts_them():
    q = pa.array(["q1", "q1", "q2", "q1"])
    d = pa.array(["d1", "d2", "d1", "d1"])
    kept = dedupe_judgments(q, d, np.array([1, 0, 2, 1]), "x", np.array([1, 2, 3, 4]))
    assert kept.n_duplicates == 1 and kept.query_ids.tolist() == ["q1", "q1", "q2"]
    assert kept.doc_ids.tolist() == ["d1", "d2", "d1"] and kept.grades.tolist() == [1, 0, 2]


def test_dedupe_judgments_names_the_first_disagreement():
    q = pa.array(["q1", "q2", "q1", "q2", "q1"])
    d = pa.array(["d1", "d1", "d1", "d1", "d1"])
    with pytest.raises(InputError) as info:
        dedupe_judgments(q, d, np.array([1, 0, 1, 3, 2]), "f.txt", lambda: np.array([2, 3, 5, 7, 9]))
    assert (info.value.path, info.value.line) == ("f.txt", 7)
    assert info.value.problem == "query 'q2' judges document 'd1' twice with different grades (0 on line 3, 3 here)"


def test_a_malformed_line_after_a_disagreement_reports_the_disagreement(tmp_path):
    path = write(tmp_path / "q.txt", b"q1 0 d1 1\nq1  0 d1 2\nq1 0 d2 x\n")
    with pytest.raises(InputError) as info:
        read_qrels(path)
    assert info.value.line == 2 and "different grades (1 on line 1, 2 here)" in info.value.problem


# --------------------------------------------------------------------------- tie rules


def test_tie_break_vocabulary():
    assert tie_break_rule("docid_desc") == "docid_desc" and tie_break_rule("doc_index") == "doc_index"
    assert tie_break_rule("score") == "file_order"  # the scorer's earlier name
    with pytest.raises(ValueError, match="unknown tie_break 'random'"):
        tie_break_rule("random")
    with pytest.raises(ValueError, match="needs a corpus"):
        tie_break_rule("doc_index", ("file_order", "docid_desc"))


def test_the_whitespace_list_is_every_character_str_split_splits_on():
    from pipeline.io.formats import WHITESPACE

    assert WHITESPACE == "".join(chr(c) for c in range(0x110000) if chr(c).isspace())

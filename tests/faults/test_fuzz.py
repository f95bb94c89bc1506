"""Fuzzing the readers (issue 9): random bytes and valid files with noise (BOM, CRLF, tabs,
blank lines, unicode), plain and gzip. Every read either equals a small, obviously correct
reference parse of the same bytes (formats.py's documented rules), or raises InputError
naming the file. Never another exception, never a different value.
"""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings, strategies as st

from pipeline.io import collection as data
from pipeline.errors import InputError
from pipeline.io.formats import read_qrels, read_run

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)


class Bad(Exception):
    """The reference parser rejects the file."""


def ref_lines(raw: bytes) -> list[str]:
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Bad from None
    return re.split(r"\r\n|\r|\n", text)


def ref_fields(line: str, n: int) -> list[str]:
    parts = line.split("\t")
    if "\t" in line and len(parts) == n:
        return [p.strip() for p in parts]
    return line.split()


def ref_run(raw: bytes) -> list[tuple[str, str, float]]:
    rows, seen = [], set()
    for line in ref_lines(raw):
        f = ref_fields(line, 6)
        if not f:
            continue
        if len(f) != 6 or not f[0] or not f[2] or not FLOAT.fullmatch(f[4]) or not math.isfinite(float(f[4])):
            raise Bad
        if (f[0], f[2]) in seen:
            raise Bad
        seen.add((f[0], f[2]))
        rows.append((f[0], f[2], float(f[4])))
    if not rows:
        raise Bad
    return rows


def ref_qrels(raw: bytes) -> list[tuple[str, str, int]]:
    if not any(line.split() for line in ref_lines(raw)):
        raise Bad
    first_raw = next(line for line in ref_lines(raw) if line.split())
    n = 4 if len(ref_fields(first_raw, 4)) == 4 else 3
    fields = [ref_fields(line, n) for line in ref_lines(raw)]
    fields = [f for f in fields if f]
    if n == 3:
        if len(fields[0]) != 3 or tuple(x.lower() for x in fields[0]) != ("query-id", "corpus-id", "score"):
            raise Bad
        fields = fields[1:]
    rows, grades = [], {}
    for f in fields:
        if len(f) != n or not f[0] or not f[-2] or not INT.fullmatch(f[-1]) or abs(int(f[-1])) >= 2**63:
            raise Bad
        key, g = (f[0], f[-2]), int(f[-1])
        if key in grades:
            if grades[key] != g:
                raise Bad
            continue
        grades[key] = g
        rows.append((f[0], f[-2], g))
    if not rows:
        raise Bad
    return rows


def _write(tmp: Path, name: str, raw: bytes, gz: bool) -> Path:
    path = tmp / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def check(reader, reference, raw: bytes, tmp: Path, gz: bool) -> None:
    path = _write(tmp, "f.txt", raw, gz)
    try:
        expected = reference(raw)
    except Bad:
        expected = None
    try:
        got = reader(path)
    except InputError as err:
        assert str(path) in str(err)
        assert expected is None, (raw, err, expected)
        return
    assert expected is not None, (raw, got)
    assert got == expected, (raw, got, expected)


def run_rows(path: Path):
    r = read_run(path)
    return list(zip(r.query_ids.tolist(), r.doc_ids.tolist(), r.scores.tolist()))


def qrels_rows(path: Path):
    q = read_qrels(path)
    return list(zip(q.query_ids.tolist(), q.doc_ids.tolist(), q.grades.tolist()))


ids = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), min_size=1, max_size=6)
noise = st.sampled_from(["", " ", "\t", "  ", "\u00a0", "\x0b"])
newline = st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\n \n"])
bom = st.sampled_from([b"", b"\xef\xbb\xbf"])


@st.composite
def noisy_run(draw) -> bytes:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        sep = draw(st.sampled_from([" ", "\t", "  "]))
        cols = [draw(ids), "Q0", draw(ids), str(draw(st.integers(1, 9))),
                draw(st.one_of(st.floats(allow_nan=False, allow_infinity=False).map(repr), st.sampled_from(["1", ".5", "1e3", "inf", "x", "1_0"]))),
                draw(st.sampled_from(["t", "run 1", ""]))]
        out.append(draw(noise) + sep.join(cols) + draw(noise) + draw(newline))
    return draw(bom) + "".join(out).encode("utf-8")


@st.composite
def noisy_qrels(draw) -> bytes:
    beir = draw(st.booleans())
    out = ["query-id\tcorpus-id\tscore\n"] if beir else []
    for _ in range(draw(st.integers(1, 6))):
        sep = "\t" if beir else draw(st.sampled_from([" ", "\t", "  "]))
        grade = draw(st.one_of(st.integers(-3, 5).map(str), st.sampled_from(["1024", "99999999999999999999", "0x1", "+1", "١", "1.0"])))
        cols = [draw(ids), draw(ids), grade] if beir else [draw(ids), "0", draw(ids), grade]
        out.append(draw(noise) + sep.join(cols) + draw(noise) + draw(newline))
    return draw(bom) + "".join(out).encode("utf-8")


@SETTINGS
@given(st.one_of(noisy_run(), st.binary(max_size=200)), st.booleans())
@example(b"\x1c", False)  # blank to Python's split, not to the byte-level blank check: was read as an empty run
def test_run_reader(tmp_path_factory, raw, gz):
    check(run_rows, ref_run, raw, tmp_path_factory.mktemp("run"), gz)


@SETTINGS
@given(st.one_of(noisy_qrels(), st.binary(max_size=200)), st.booleans())
def test_qrels_reader(tmp_path_factory, raw, gz):
    check(qrels_rows, ref_qrels, raw, tmp_path_factory.mktemp("qrels"), gz)


@SETTINGS
@given(st.binary(max_size=300), st.booleans())
def test_truncated_or_random_gzip_is_input_error(tmp_path_factory, raw, gz):
    tmp = tmp_path_factory.mktemp("gz")
    path = tmp / "x.txt.gz"
    path.write_bytes(gzip.compress(raw)[: len(raw) // 2] if gz else raw)
    for reader in (read_run, read_qrels):
        try:
            reader(path)
        except InputError as err:
            assert str(path) in str(err)


@st.composite
def noisy_jsonl(draw) -> bytes:
    out = []
    for _ in range(draw(st.integers(1, 5))):
        rid = draw(st.one_of(ids, st.integers(0, 99), st.none()))
        text = draw(st.one_of(st.text(max_size=8), st.none(), st.integers()))
        import json

        out.append(draw(noise) + json.dumps({"_id": rid, "text": text}) + draw(st.sampled_from(["\n", "\r\n", "\n\n"])))
    return draw(bom) + "".join(out).encode("utf-8")


@SETTINGS
@given(st.one_of(noisy_jsonl(), st.binary(max_size=200)), st.booleans(), st.sampled_from(["corpus", "queries"]))
def test_jsonl_corpus_and_queries_never_crash(tmp_path_factory, raw, gz, what):
    tmp = tmp_path_factory.mktemp("jsonl")
    path = _write(tmp, f"{what}.jsonl", raw, gz)
    records = data.read_corpus(path, "jsonl") if what == "corpus" else data.read_queries(path, "jsonl")
    try:
        rows = list(records)
    except InputError as err:
        assert str(path) in str(err)
        return
    for _, rid, text in rows:
        assert isinstance(rid, str) and rid.strip() and isinstance(text, str)

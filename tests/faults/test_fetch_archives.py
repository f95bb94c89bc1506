"""``python -m pipeline.fetch`` on hostile archives (issue 28, item 5): links, devices,
absolute and ``..`` paths, a file where a folder must be, zip bombs and lying sizes, in zip
and tar. Each is one line on stderr, exit status 2, and leaves nothing behind. The archives
are built here in ``tmp_path`` and served by a ``file://`` URL (urllib reads it like the
BEIR server's, without a network); bombs are kept small with a low ``--max-unpacked``, and
one small bomb checks the default ratio."""

from __future__ import annotations

import hashlib
import io
import stat
import tarfile
import warnings
import zipfile
from pathlib import Path

import pytest

from pipeline.cli import fetch as command
from pipeline.errors import InputError
from pipeline.io import fetch

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "pipeline" / "sample"
BEIR_FILES = {f: (SAMPLE / f).read_bytes() for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")}


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _zip(path: Path, entries: list[tuple[str, bytes, int | None]]) -> Path:
    """A zip of (name, data, unix mode or None) entries; a mode marks the entry as made on Unix."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Duplicate name": made on purpose
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if mode is not None:
                info.create_system = 3
                info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def _tar(path: Path, entries: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tf.addfile(entry)
            else:
                info = tarfile.TarInfo(entry[0])
                info.size = len(entry[1])
                tf.addfile(info, io.BytesIO(entry[1]))
    return path


def _tar_info(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def _served(tmp_path: Path, archive: Path, name: str) -> tuple[str, str]:
    """(base URL, md5) serving ``archive`` as ``BASE/name.zip`` (the name fetch asks for)."""
    served = tmp_path / "served"
    served.mkdir(exist_ok=True)
    target = served / f"{name}.zip"
    target.write_bytes(archive.read_bytes())
    return served.as_uri(), _md5(target)


def _run(tmp_path: Path, archive: Path, capsys, *extra: str, name: str = "coll") -> tuple[int, str, str, Path]:
    url, md5 = _served(tmp_path, archive, name)
    into = tmp_path / "data"
    code = command.main([name, "--into", str(into), "--url", url, "--md5", md5, *extra])
    out, err = capsys.readouterr()
    return code, out, err, into


def _assert_refused(code: int, err: str, into: Path, problem: str, name: str = "coll") -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and problem in err and "Traceback" not in err, err
    # nothing half-extracted, no download kept, nothing outside DIR
    assert not into.exists() or sorted(p.name for p in into.iterdir()) == []
    assert not (into.parent / "escaped.txt").exists() and not Path("/tmp/escaped.txt").exists()


SYMLINK = stat.S_IFLNK | 0o777
FILE = stat.S_IFREG | 0o644


@pytest.mark.parametrize("entries, problem", [
    # the probe's case: a file under a symlink entry (NotADirectoryError, exit 1, before)
    ([("coll/link", b"/etc", SYMLINK), ("coll/link/passwd", b"x", FILE)], "is a symbolic link"),
    ([("coll/corpus.jsonl", b"../../../etc/passwd", SYMLINK)], "is a symbolic link"),
    ([("coll/dev", b"", stat.S_IFCHR | 0o600)], "is a device"),
    ([("coll/fifo", b"", stat.S_IFIFO | 0o600)], "is a pipe or socket"),
    ([("../escaped.txt", b"x", None)], "would land outside"),
    ([("coll/../../escaped.txt", b"x", None)], "would land outside"),
    ([("/tmp/escaped.txt", b"x", None)], "would land outside"),
    ([("C:/escaped.txt", b"x", None)], "would land outside"),
    ([("coll\\..\\..\\escaped.txt", b"x", None)], "would land outside"),
    ([("coll/a", b"file", None), ("coll/a/b", b"x", None)], "lies under 'coll/a', which is a file"),
    ([("coll/a", b"one", None), ("coll/a", b"two", None)], "appears twice"),
])
def test_a_zip_with_links_devices_or_escaping_paths_is_refused(entries, problem, tmp_path, capsys):
    archive = _zip(tmp_path / "evil.zip", entries)
    code, _, err, into = _run(tmp_path, archive, capsys)
    _assert_refused(code, err, into, problem)


@pytest.mark.parametrize("entries, problem", [
    ([_tar_info("coll/link", tarfile.SYMTYPE, "/etc"), ("coll/link/passwd", b"x")], "is a symbolic link"),
    ([("coll/corpus.jsonl", b"{}"), _tar_info("coll/hard", tarfile.LNKTYPE, "coll/corpus.jsonl")],
     "is a hard link"),  # issue 33: once called a symbolic link
    ([_tar_info("coll/tty", tarfile.CHRTYPE)], "is a device"),
    ([_tar_info("coll/disk", tarfile.BLKTYPE)], "is a device"),
    ([_tar_info("coll/fifo", tarfile.FIFOTYPE)], "is a pipe or socket"),
    ([("../escaped.txt", b"x")], "would land outside"),
    ([("/tmp/escaped.txt", b"x")], "would land outside"),
    ([("coll/a", b"file"), ("coll/a/b", b"x")], "which is a file"),
])
def test_a_tar_with_links_devices_or_escaping_paths_is_refused(entries, problem, tmp_path, capsys):
    archive = _tar(tmp_path / "evil.tar.gz", entries)
    code, _, err, into = _run(tmp_path, archive, capsys)
    _assert_refused(code, err, into, problem)


def test_a_zip_bomb_is_refused_at_the_default_ratio(tmp_path, capsys):
    """4 MB of zeros packs into a few KB: past 10 times the archive's size, before a byte is written."""
    archive = _zip(tmp_path / "bomb.zip", [("coll/zeros", bytes(4 * 10**6), None)])
    packed = archive.stat().st_size
    assert packed * fetch.RATIO < 4 * 10**6
    assert fetch.default_limit(packed) == fetch.RATIO * packed
    assert fetch.default_limit(10**12) == fetch.MAX_UNPACKED == 20 * 10**9
    code, _, err, into = _run(tmp_path, archive, capsys)
    _assert_refused(code, err, into, f"unpacks to 4,000,000 bytes, more than the limit of {fetch.RATIO * packed:,}")


def test_a_bomb_within_ratio_is_refused_by_a_lower_limit_and_passes_a_higher_one(tmp_path, capsys):
    entries = [(f"coll/{name}", data, None) for name, data in BEIR_FILES.items()]
    archive = _zip(tmp_path / "big.zip", [*entries, ("coll/zeros.bin", bytes(2 * 10**6), None)])
    code, _, err, into = _run(tmp_path, archive, capsys)  # > 10x: refused by default
    _assert_refused(code, err, into, "--max-unpacked raises it")
    code, _, err, into = _run(tmp_path, archive, capsys, "--max-unpacked", "100k")
    _assert_refused(code, err, into, "more than the limit of 100,000")
    code, out, err, into = _run(tmp_path, archive, capsys, "--max-unpacked", "10M")
    assert code == 0, err
    assert (into / "coll" / "zeros.bin").stat().st_size == 2 * 10**6
    assert f"dataset.path={into / 'coll'}" in out


def test_sizes_that_lie_are_counted_while_unpacking(tmp_path, capsys):
    """The central directory says 10 bytes, the entry holds 1 MB: refused, nothing left."""
    archive = _zip(tmp_path / "liar.zip", [("coll/zeros", bytes(10**6), None)])
    data = bytearray(archive.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    data[central + 24:central + 28] = (10).to_bytes(4, "little")  # uncompressed size, central directory
    local = data.index(b"PK\x03\x04")
    data[local + 22:local + 26] = (10).to_bytes(4, "little")  # and the local header
    archive.write_bytes(bytes(data))
    with zipfile.ZipFile(archive) as zf:
        assert zf.infolist()[0].file_size == 10  # the lie is what a reader sees
    code, _, err, into = _run(tmp_path, archive, capsys, "--max-unpacked", "1000")
    _assert_refused(code, err, into, str(archive.parent / "data" / ".coll.zip.part"))


def test_extraction_counts_the_bytes_it_writes(tmp_path):
    """The byte count while writing stops at the limit even when the declared sizes fit it."""
    archive = _zip(tmp_path / "a.zip", [("coll/a", bytes(5000), None), ("coll/b", bytes(5000), None)])
    into = tmp_path / "into"
    into.mkdir()
    with zipfile.ZipFile(archive) as zf:
        members = fetch.members(archive, zf)
        with pytest.raises(InputError, match="unpacks to more than 6,000 bytes .*'coll/b'"):
            fetch.extract(archive, zf, members, into, 6000)


def test_a_zip_with_two_top_level_entries_prints_the_right_dataset_path(tmp_path, capsys):
    """The BEIR folder is one of two top-level entries: the hint names it, not its parent."""
    entries = [(f"mini/{name}", data, None) for name, data in BEIR_FILES.items()]
    archive = _zip(tmp_path / "two.zip", [*entries, ("README.txt", b"read me", None)])
    code, out, err, into = _run(tmp_path, archive, capsys, name="coll")
    assert code == 0, err
    assert out.strip().splitlines()[-1] == f"run it: python -m pipeline dataset=beir dataset.path={into / 'coll' / 'mini'}"
    assert (into / "coll" / "mini" / "corpus.jsonl").read_bytes() == BEIR_FILES["corpus.jsonl"]


def test_a_tar_collection_unpacks_like_a_zip(tmp_path, capsys):
    archive = _tar(tmp_path / "c.tar.gz", [(f"coll/{name}", data) for name, data in BEIR_FILES.items()])
    code, out, err, into = _run(tmp_path, archive, capsys)
    assert code == 0, err
    for name, data in BEIR_FILES.items():
        assert (into / "coll" / name).read_bytes() == data
    assert f"dataset.path={into / 'coll'}\n" in out


def test_leftovers_of_a_killed_unpack_are_removed(tmp_path, capsys):
    entries = [(f"coll/{name}", data, None) for name, data in BEIR_FILES.items()]
    archive = _zip(tmp_path / "ok.zip", entries)
    into = tmp_path / "data"
    (into / ".coll.unpacking-abc123" / "coll").mkdir(parents=True)
    (into / ".coll.unpacking-abc123" / "coll" / "corpus.jsonl").write_bytes(b"half")
    code, _, err, into = _run(tmp_path, archive, capsys)
    assert code == 0, err
    assert sorted(p.name for p in into.iterdir()) == ["coll"]


@pytest.mark.parametrize("text, value", [("100", 100), ("100k", 10**5), ("2.5M", 2_500_000), ("30G", 30 * 10**9),
                                         ("2GiB", 2 * 2**30), ("1 TB", 10**12)])
def test_max_unpacked_sizes(text, value):
    assert command.size(text) == value


@pytest.mark.parametrize("text", ["", "ten", "5X", "-1", "0"])
def test_bad_max_unpacked_is_a_usage_error(text, capsys):
    with pytest.raises(SystemExit) as exit_info:
        command.main(["coll", "--max-unpacked", text])
    assert exit_info.value.code == 2 and "expected a size" in capsys.readouterr().err

"""Download, verify and unpack a BEIR collection (the library of ``python -m pipeline.cli fetch``).

The zip of collection NAME is ``BASE/NAME.zip`` on BEIR's server (:data:`BASE_URL`) or a
mirror, and is checked against the MD5 that BEIR publishes for it (:data:`CHECKSUMS`, from
the table in BEIR's README) or one the caller gives. The download goes to
``DIR/.NAME.zip.part`` and continues where it stopped when the server honours HTTP ranges;
the zip is unpacked into a temporary folder inside DIR and renamed to ``DIR/NAME`` only when
complete, with a note (:data:`MARKER`: name, URL, MD5, every file and its size) that
:func:`verified` checks on the next call. An archive (zip, or tar by its content) may hold only
files and folders: links, devices, entries that would land outside the folder (absolute paths,
``..``) and a file where a folder must be are refused, and so is an archive that unpacks to
more than :func:`default_limit` (10 times its size, at most 20 GB; ``max_unpacked`` replaces
it), on the sizes it declares before anything is written and on the bytes really read while
writing. A refused archive leaves nothing behind. Bad input is an ``InputError`` (exit
status 2); a failed download is :class:`FetchFailed` (exit status 3).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from pipeline.errors import InputError, StoreError

log = logging.getLogger(__name__)

BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"
URL_ENV = "RAG_EVAL_BEIR_URL"
MARKER = ".fetched.json"
TIMEOUT_S = 30.0
CHUNK = 1 << 20
#: An archive may unpack to RATIO times its size, and never to more than MAX_UNPACKED bytes,
#: unless ``--max-unpacked`` says otherwise (:func:`default_limit`).
RATIO = 10
MAX_UNPACKED = 20 * 10**9

#: MD5 of each public BEIR zip, as published in the table of BEIR's README
#: (github.com/beir-cellar/beir, "Available Datasets"). Sizes are BEIR's (corpus documents).
CHECKSUMS: dict[str, str] = {
    "scifact": "5f7d1de60b170fc8027bb7898e2efca1",  # 5K docs, 300 test queries
    "nfcorpus": "a89dba18a62ef92f7d323ec890a0d38d",  # 3.6K docs, 323 test queries, graded
    "arguana": "8ad3e3c2a5867cdced806d6503f29b99",  # 8.67K docs, 1,406 queries
    "fiqa": "17918ed23cd04fb15047f73e6c3bd9d9",  # 57K docs, 648 test queries
    "scidocs": "38121350fc3a4d2f48850f6aff52e4a9",  # 25K docs, 1,000 queries
    "trec-covid": "ce62140cb23feb9becf6270d0d1fe6d1",  # 171K docs, 50 queries, deep judgments
    "webis-touche2020": "46f650ba5a527fc69e0a6521c5a23563",  # 382K docs
    "quora": "18fb154900ba42a600f84b839c173167",  # 523K docs
    "cqadupstack": "4e41456d7df8ee7760a7f866133bda78",  # 457K docs in 12 sub-forum folders
    "nq": "d4d3d2e48787a744b6f6e691ff534307",  # 2.68M docs
    "hotpotqa": "f412724f78b0d91183a0e86805e16114",  # 5.23M docs
    "dbpedia-entity": "c2a39eb420a3164af735795df012ac2c",  # 4.63M docs
    "fever": "5a818580227bfb4b35bb6fa46d9b6c03",  # 5.42M docs
    "climate-fever": "8b66f0a9126c521bae2bde127b4dc99d",  # 5.42M docs
    "msmarco": "444067daf65d982533ea17ebd59501e4",  # 8.84M docs
}

OFFLINE_HINT = ("copy a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) from a machine that has one, "
                "then run: python -m pipeline dataset=beir dataset.path=FOLDER")


class FetchFailed(StoreError):
    """The download failed (unreachable, HTTP error, wrong checksum): exit status 3."""


def _expected_md5(name: str, md5: str | None) -> str:
    if md5 is not None:
        md5 = md5.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{32}", md5):
            raise InputError(f"--md5 must be 32 hexadecimal digits, got {md5!r}")
        return md5
    if name not in CHECKSUMS:
        raise InputError(f"no published checksum for {name!r}: known collections are {', '.join(sorted(CHECKSUMS))} "
                         "(give --md5 for another BEIR zip)")
    return CHECKSUMS[name]


def md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _listing(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (but the note) and its size."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MARKER}


def verified(target: Path, md5: str) -> bool:
    """Whether ``target`` holds what ``pipeline.fetch`` unpacked from the zip with ``md5``:
    its note names that checksum and every file listed there has its size."""
    try:
        note = json.loads((target / MARKER).read_text())
        return note.get("md5") == md5 and all((target / f).is_file() and (target / f).stat().st_size == size
                                              for f, size in note["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _is_beir(folder: Path) -> bool:
    return ((folder / "corpus.jsonl").is_file() or (folder / "corpus.jsonl.gz").is_file()) and \
        (folder / "queries.jsonl").is_file() and (folder / "qrels").is_dir()


def _reason(err: BaseException) -> str:
    reason = getattr(err, "reason", err)
    if isinstance(reason, socket.gaierror):
        return "the name does not resolve"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "no answer"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    return str(reason) or type(reason).__name__


def download(url: str, part: Path, progress: bool, say: Callable[[str], None] = log.info) -> None:
    """``url`` into ``part``, continuing a partial file when the server honours ranges; the
    folder of ``part`` is made once the server answers. ``say`` gets the progress messages
    (the command prints them; a progress bar on stderr with ``progress``)."""
    have = part.stat().st_size if part.exists() else 0
    host = urlsplit(url).hostname or url
    request = urllib.request.Request(url, headers={"User-Agent": "rag-retrieval-eval/pipeline.fetch"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the part is already whole (or longer): let the checksum decide
            return
        raise FetchFailed(f"error: {url}: HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:
        raise FetchFailed(f"error: cannot reach {host} ({_reason(err)}); this machine looks offline: "
                          f"{OFFLINE_HINT}") from None
    with response:
        resumed = have and response.status == 206
        if have and not resumed:
            have = 0  # the server sent the whole file
        total = response.headers.get("Content-Length")
        total = int(total) + have if total and total.isdigit() else None
        size = f" ({total / 1e6:.1f} MB)" if total else ""
        say(f"downloading {url}{size}" + (f", continuing after {have / 1e6:.1f} MB" if resumed else ""))
        try:
            part.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"cannot create {part.parent}: {err.strerror or err}") from None
        from tqdm import tqdm

        bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                   desc=url.rsplit("/", 1)[-1], file=sys.stderr, disable=not progress)
        try:
            with open(part, "ab" if resumed else "wb") as fh:
                while block := response.read(CHUNK):
                    fh.write(block)
                    bar.update(len(block))
        except (urllib.error.URLError, OSError) as err:
            raise FetchFailed(f"error: the download from {host} broke off ({_reason(err)}); run the same "
                              f"command again to continue it") from None
        finally:
            bar.close()


def default_limit(archive_bytes: int) -> int:
    """The most an archive may unpack to unless the caller says otherwise: :data:`RATIO` times
    its size, and never more than :data:`MAX_UNPACKED` (a bomb of zeros compresses 1000:1,
    BEIR's JSONL about 3:1)."""
    return min(RATIO * archive_bytes, MAX_UNPACKED)


@dataclass(frozen=True)
class Member:
    """One regular file or folder of an archive, checked: its path parts inside the folder."""

    name: str
    parts: tuple[str, ...]
    is_dir: bool
    size: int
    handle: Any  # zipfile.ZipInfo or tarfile.TarInfo


def _special(mode: int) -> str | None:
    """What a file mode is when it is not a regular file or a folder (None when it is one)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return "a pipe or socket"
    return None


def _member(archive: Path, name: str, is_dir: bool, size: int, special: str | None, handle: Any) -> Member:
    """A checked member; InputError for a link, a device, or a path that is absolute, climbs
    out with ``..``, or is not portable (a backslash, a drive letter)."""
    if special:
        raise InputError(f"{archive}: entry {name!r} is {special}; archives may hold only files and folders")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name:
        raise InputError(f"{archive}: entry {name!r} would land outside the folder (an absolute or non-portable path)")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise InputError(f"{archive}: entry {name!r} would land outside the folder (a '..' in its path)")
    if not parts:
        is_dir = True
    return Member(name, parts, is_dir, size, handle)


def members(archive: Path, opened: Any) -> list[Member]:
    """Every member of an open zip or tar, checked (:func:`_member`), and checked together:
    no path twice, no file where another member needs a folder."""
    if isinstance(opened, zipfile.ZipFile):
        found = []
        for info in opened.infolist():
            mode = info.external_attr >> 16 if info.create_system == 3 else 0  # 3: Unix, which stores st_mode
            found.append(_member(archive, info.filename, info.is_dir(), info.file_size,
                                 _special(mode) if mode and not info.is_dir() else None, info))
    else:
        found = [_member(archive, info.name, info.isdir(), info.size, _tar_special(info), info)
                 for info in opened.getmembers()]
    files = {m.parts: m for m in found if not m.is_dir}
    if len(files) != sum(not m.is_dir for m in found):
        seen: set[tuple[str, ...]] = set()
        dup = next(m for m in found if not m.is_dir and (m.parts in seen or seen.add(m.parts)))  # type: ignore[func-returns-value]
        raise InputError(f"{archive}: entry {dup.name!r} appears twice")
    for m in found:
        for i in range(1, len(m.parts)):
            if m.parts[:i] in files:
                raise InputError(f"{archive}: entry {m.name!r} lies under {files[m.parts[:i]].name!r}, which is a file")
    return found


def _tar_special(info: Any) -> str | None:
    """What a tar member is when it is not a regular file or a folder (None when it is one):
    a hard link is named as one (tar's LNKTYPE), not as a symbolic link."""
    if info.isfile() or info.isdir():
        return None
    if info.type == tarfile.LNKTYPE:
        return "a hard link"
    kinds = {tarfile.SYMTYPE: stat.S_IFLNK, tarfile.CHRTYPE: stat.S_IFCHR, tarfile.BLKTYPE: stat.S_IFBLK,
             tarfile.FIFOTYPE: stat.S_IFIFO}
    return _special(kinds.get(info.type, 0)) or "not a regular file"


def _open_archive(archive: Path) -> Any:
    """The archive opened as a zip or a tar (plain, gz, bz2, xz), whatever its name says."""
    if zipfile.is_zipfile(archive):
        try:
            return zipfile.ZipFile(archive)
        except zipfile.BadZipFile as err:
            raise InputError(f"{archive}: not a zip file ({err})") from None
    try:
        return tarfile.open(archive)
    except (tarfile.TarError, OSError, EOFError) as err:
        raise InputError(f"{archive}: neither a zip nor a tar archive ({err})") from None


def extract(archive: Path, opened: Any, found: list[Member], root: Path, limit: int) -> int:
    """Write the members under ``root``, counting the bytes really read (a declared size can
    lie); InputError once they pass ``limit``. Returns the bytes written."""
    written = 0
    for m in found:
        path = root.joinpath(*m.parts)
        if m.is_dir:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        source = opened.open(m.handle) if isinstance(opened, zipfile.ZipFile) else opened.extractfile(m.handle)
        with source, open(path, "xb") as out:
            while block := source.read(CHUNK):
                written += len(block)
                if written > limit:
                    raise InputError(f"{archive}: unpacks to more than {limit:,} bytes (stopped at {m.name!r}, "
                                     "whatever its header declares); a zip bomb? --max-unpacked raises the limit")
                out.write(block)
    return written


def unpack(archive: Path, name: str, into: Path, max_unpacked: int | None = None) -> tuple[Path, Path]:
    """Unpack the zip or tar ``archive`` into a new temporary folder in ``into``; returns (that
    folder, the collection folder in it: the archive's single top folder, else the temporary
    folder itself). Refused (InputError, and nothing left behind): links, devices, paths that
    are absolute or climb out, a file where a folder must be, and more than ``max_unpacked``
    bytes (default :func:`default_limit`), checked on the declared sizes before anything is
    written and on the bytes actually read while writing. The caller removes the temporary folder."""
    limit = default_limit(archive.stat().st_size) if max_unpacked is None else int(max_unpacked)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.unpacking-", dir=into))
    try:
        with _open_archive(archive) as opened:
            found = members(archive, opened)
            declared = sum(m.size for m in found if not m.is_dir)
            if declared > limit:
                raise InputError(f"{archive}: unpacks to {declared:,} bytes, more than the limit of {limit:,} "
                                 f"({archive.stat().st_size:,} bytes packed); a zip bomb? --max-unpacked raises it")
            extract(archive, opened, found, tmp, limit)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, zipfile.BadZipFile) or type(err).__module__ == "tarfile":
            raise InputError(f"{archive}: a damaged archive ({err})") from None
        if isinstance(err, OSError):
            raise InputError(f"cannot unpack {archive} into {into}: {err.strerror or err}") from None
        raise
    entries = [p for p in tmp.iterdir() if p.name != "__MACOSX"]
    return tmp, entries[0] if len(entries) == 1 and entries[0].is_dir() else tmp


def collection_folders(target: Path) -> list[Path]:
    """The BEIR folders of a fetched collection: ``target`` itself when it is one, else its
    sub-folders that are (e.g. cqadupstack's twelve forums)."""
    if _is_beir(target):
        return [target]
    return sorted(p for p in target.iterdir() if p.is_dir() and _is_beir(p))


def fetch(name: str, into: Path, base_url: str, md5: str | None = None, force: bool = False,
          progress: bool = False, say: Callable[[str], None] = log.info, max_unpacked: int | None = None) -> Path:
    """Download, verify and unpack collection ``name`` into ``into/name``; returns that folder.
    ``say`` gets what happens (already there, downloading, done), one line at a time;
    ``max_unpacked`` replaces the archive's :func:`default_limit` (:func:`unpack`)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or ".." in name:
        raise InputError(f"{name!r} is not a collection name (letters, digits, '.', '_', '-')")
    expected = _expected_md5(name, md5)
    into = Path(into)
    target = into / name
    if target.exists() and not force:
        if verified(target, expected):
            say(f"{target}: already there and verified ({name}, md5 {expected}); nothing to do")
            return target
        if not (target / MARKER).exists():
            raise InputError(f"{target} exists and was not fetched here; use it as it is "
                             f"(dataset.path={target}), remove it, or give --force to replace it")
        say(f"{target}: incomplete or changed since it was fetched; fetching it again")
    url = f"{base_url.rstrip('/')}/{name}.zip"
    part = into / f".{name}.zip.part"
    started = time.perf_counter()
    download(url, part, progress, say)
    got = md5_of(part)
    if got != expected:
        part.unlink(missing_ok=True)
        raise FetchFailed(f"error: {url}: checksum mismatch (md5 {got}, expected {expected}); "
                          "the download was deleted and nothing was unpacked")
    for stale in [*into.glob(f".{name}.unpacking-*"), *into.glob(f".{name}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)  # left by a fetch that was killed half-way
    tmp: Path | None = None
    try:  # a verified zip is not kept: the note in the folder vouches for it from now on
        tmp, folder = unpack(part, name, into, max_unpacked)
        if not collection_folders(folder):
            raise InputError(f"{url} is not a BEIR collection (no corpus.jsonl, queries.jsonl and qrels/)")
        note = {"name": name, "url": url, "md5": expected,
                "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "files": _listing(folder)}
        (folder / MARKER).write_text(json.dumps(note, indent=1) + "\n")
        old = None
        if target.exists():  # --force, or a broken earlier fetch: swap it out, then delete it
            old = Path(tempfile.mkdtemp(prefix=f".{name}.old-", dir=into))
            os.replace(target, old / name)
        os.replace(folder, target)  # the collection appears whole, or not at all
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already when the zip had no top folder
        part.unlink(missing_ok=True)
    files = json.loads((target / MARKER).read_text())["files"]
    size = sum(files.values())
    say(f"{target}: {len(files)} files, {size / 1e6:.1f} MB, md5 verified, in {time.perf_counter() - started:.1f} s")
    return target

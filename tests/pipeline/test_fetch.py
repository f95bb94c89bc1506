"""``python -m pipeline.fetch`` against a local HTTP server (127.0.0.1, started and stopped
here) serving a zipped BEIR folder made from the bundled sample: download, checksum,
unpack, idempotence, resume, and the failures (wrong checksum, unreachable host, a zip
whose entries escape), each one line and no leftovers; then a pipeline run on the result."""

from __future__ import annotations

import hashlib
import json
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from commands import job_in_process, run_command

from pipeline.cli import fetch as fetch_command
from pipeline.io import fetch

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "pipeline" / "sample"
NAME = "minisample"
FILES = ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"]


class _Handler(SimpleHTTPRequestHandler):
    """Serves the folder, honours ``Range: bytes=N-`` (as the BEIR server does) and records
    every request's path and Range header."""

    requests: list[tuple[str, str | None]]

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self.requests.append((self.path, self.headers.get("Range")))
        spec = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if not spec or not path.is_file():
            return super().do_GET()
        start = int(spec.removeprefix("bytes=").rstrip("-"))
        data = path.read_bytes()
        if start >= len(data):
            self.send_error(416)
            return
        self.send_response(206)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        self.wfile.write(data[start:])


def _zip_folder(zip_path: Path, top: str, entries: dict[str, bytes]) -> str:
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(f"{top}/{name}" if top else name, data)
    return hashlib.md5(zip_path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base URL, served folder, request log, md5 of minisample.zip), stopped at the end."""
    root = tmp_path_factory.mktemp("beir-server")
    md5 = _zip_folder(root / f"{NAME}.zip", NAME, {f: (SAMPLE / f).read_bytes() for f in FILES})
    requests: list[tuple[str, str | None]] = []
    handler = partial(type("H", (_Handler,), {"requests": requests}), directory=str(root))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", root, requests, md5
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _leftovers(into: Path) -> list[str]:
    return sorted(p.name for p in into.iterdir() if p.name.startswith("."))


def test_fetch_downloads_verifies_unpacks_and_is_idempotent(server, tmp_path, capsys):
    url, _, requests, md5 = server
    into = tmp_path / "data"
    before = len(requests)
    assert fetch_command.main([NAME, "--into", str(into), "--url", url, "--md5", md5]) == 0
    target = into / NAME
    for f in FILES:  # byte for byte what was zipped
        assert (target / f).read_bytes() == (SAMPLE / f).read_bytes()
    note = json.loads((target / fetch.MARKER).read_text())
    assert note["md5"] == md5 and note["url"] == f"{url}/{NAME}.zip"
    assert note["files"] == {f: (SAMPLE / f).stat().st_size for f in FILES}
    assert _leftovers(into) == []  # no .part, no .unpacking-* folder
    assert len(requests) == before + 1
    out = capsys.readouterr().out
    assert f"dataset.path={target}" in out

    # Again: nothing downloaded, it says so.
    assert fetch_command.main([NAME, "--into", str(into), "--url", url, "--md5", md5]) == 0
    assert len(requests) == before + 1
    assert "already there and verified" in capsys.readouterr().out

    # A file changed since: fetched again, and right again.
    (target / "queries.jsonl").write_text("{}\n")
    assert fetch_command.main([NAME, "--into", str(into), "--url", url, "--md5", md5]) == 0
    assert (target / "queries.jsonl").read_bytes() == (SAMPLE / "queries.jsonl").read_bytes()
    assert len(requests) == before + 2 and _leftovers(into) == []


def test_fetch_continues_a_partial_download(server, tmp_path):
    url, root, requests, md5 = server
    into = tmp_path / "data"
    into.mkdir()
    whole = (root / f"{NAME}.zip").read_bytes()
    (into / f".{NAME}.zip.part").write_bytes(whole[: len(whole) // 2])
    assert fetch_command.main([NAME, "--into", str(into), "--url", url, "--md5", md5]) == 0
    assert requests[-1] == (f"/{NAME}.zip", f"bytes={len(whole) // 2}-")
    assert fetch.verified(into / NAME, md5) and _leftovers(into) == []


def _cli(*args: str):
    """``python -m pipeline.fetch ARGS`` in this process (tests/commands.py): status and output."""
    return run_command("fetch", *args)


def test_a_bad_checksum_fails_cleanly(server, tmp_path):
    url, _, _, md5 = server
    into = tmp_path / "data"
    wrong = "0" * 32
    done = _cli(NAME, "--into", str(into), "--url", url, "--md5", wrong)
    assert done.returncode == 3
    assert done.stderr.splitlines() == [done.stderr.strip()] and "checksum mismatch" in done.stderr
    assert md5 in done.stderr and wrong in done.stderr and "Traceback" not in done.stderr
    assert not (into / NAME).exists() and _leftovers(into) == []


def test_an_unreachable_host_is_one_line_and_says_what_to_do(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = _cli("scifact", "--into", str(tmp_path / "data"), "--url", f"http://127.0.0.1:{port}")
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "cannot reach 127.0.0.1" in done.stderr
    assert "copy a BEIR folder" in done.stderr and done.stdout == ""
    assert not (tmp_path / "data").exists()


def test_unknown_names_bad_checksums_and_foreign_folders_are_input_errors(tmp_path, capsys):
    assert fetch_command.main(["no-such-collection", "--into", str(tmp_path)]) == 2
    assert "known collections are" in capsys.readouterr().err
    assert fetch_command.main(["scifact", "--md5", "xyz", "--into", str(tmp_path)]) == 2
    assert fetch_command.main(["../up", "--md5", "0" * 32, "--into", str(tmp_path)]) == 2
    (tmp_path / "scifact").mkdir()  # a folder fetch did not make is left alone
    assert fetch_command.main(["scifact", "--into", str(tmp_path)]) == 2
    assert "was not fetched here" in capsys.readouterr().err


def test_a_zip_whose_entries_escape_is_refused(server, tmp_path, capsys):
    url, root, _, _ = server
    md5 = _zip_folder(root / "evil.zip", "", {"../escaped.txt": b"x", "corpus.jsonl": b"{}\n"})
    into = tmp_path / "a" / "data"
    assert fetch_command.main(["evil", "--into", str(into), "--url", url, "--md5", md5]) == 2
    assert "would land outside" in capsys.readouterr().err
    assert not (tmp_path / "a" / "escaped.txt").exists() and not (into / "evil").exists()
    assert _leftovers(into) == []


def test_a_pipeline_run_on_the_fetched_collection(server, tmp_path):
    url, _, _, md5 = server
    assert fetch_command.main([NAME, "--into", str(tmp_path / "data"), "--url", url, "--md5", md5]) == 0
    folder = tmp_path / "data" / NAME
    job_in_process("dataset=beir", f"dataset.path={folder}", "tracking=none", f"hydra.run.dir={tmp_path / 'run'}",
                   f"cache_dir={tmp_path / 'cache'}")  # in this process (tests/commands.py)
    results_dir = tmp_path / "run" / "results"
    metrics = json.loads((results_dir / "metrics.json").read_text())
    judged = {line.split("\t")[0] for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:] if line}
    corpus = [line for line in (folder / "corpus.jsonl").read_text().splitlines() if line.strip()]
    assert metrics["collection"]["name"] == NAME
    assert metrics["collection"]["n_docs"] == len(corpus)
    assert metrics["collection"]["n_queries"] == len(judged)
    run_queries = {line.split()[0] for line in (results_dir / "run.trec").read_text().splitlines()}
    assert run_queries == judged

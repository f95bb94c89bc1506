"""A real Label Studio server for the tests, from its own virtual environment.

Label Studio pins Django, numpy and more, so it lives in a virtual environment of its own:
``LABEL_STUDIO_VENV`` (default ``~/.cache/rag-retrieval-eval/label-studio-venv``, made by
``.ci/run``), or ``LABEL_STUDIO_BIN`` naming the ``label-studio`` executable directly.

A fresh data folder costs Django's migrations (about 7 minutes on the loaded 2-core CI
machine), so the first use builds a migrated template folder, keyed by Label Studio's
version, under ``~/.cache/rag-retrieval-eval/label-studio-template-<version>``
(``LABEL_STUDIO_TEMPLATE_DIR`` moves it), with two users and their legacy API tokens; each
test server starts on a copy of it (about 30 s). ``python tests/judging/lsserver.py``
builds the template (``.ci/run`` does, right after the install).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CACHE = Path.home() / ".cache" / "rag-retrieval-eval"
VENV = Path(os.environ.get("LABEL_STUDIO_VENV", CACHE / "label-studio-venv")).expanduser()
BIN = Path(os.environ.get("LABEL_STUDIO_BIN", VENV / "bin" / "label-studio")).expanduser()
TEMPLATE_BUILD_TIMEOUT_S = 1500


@dataclass(frozen=True)
class User:
    email: str
    password: str
    token: str  # a legacy API token (40 hex characters)


ADMIN = User("admin@example.com", "judging-admin-pw", "0a" * 20)
ANNOTATOR = User("annotator2@example.com", "judging-annotator-pw", "0b" * 20)


def version() -> str | None:
    """Label Studio's version in the executable's environment, or None when it is missing."""
    if not BIN.is_file():
        return None
    python = BIN.parent / "python"
    code = "import importlib.metadata as m; print(m.version('label-studio'))"
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def template_dir(ls_version: str) -> Path:
    default = CACHE / f"label-studio-template-{ls_version}"
    return Path(os.environ.get("LABEL_STUDIO_TEMPLATE_DIR", default)).expanduser()


def environment(data_dir: Path) -> dict[str, str]:
    """No update check (it calls pypi.org), no analytics, the data folder; nothing inherited
    that would point Label Studio elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABEL_STUDIO_", "DJANGO_"))}
    env.update(
        LABEL_STUDIO_BASE_DATA_DIR=str(data_dir),
        LABEL_STUDIO_LATEST_VERSION_CHECK="false",
        LABEL_STUDIO_COLLECT_ANALYTICS="false",
        COLLECT_ANALYTICS="false",
        PYTHONUNBUFFERED="1",
    )
    return env


def build_template(ls_version: str, timeout_s: float = TEMPLATE_BUILD_TIMEOUT_S) -> float:
    """Migrate a data folder and create the two users (``label-studio init``); seconds taken.
    Built in a temporary folder and renamed into place, so a killed build leaves nothing."""
    target = template_dir(ls_version)
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for user in (ADMIN, ANNOTATOR):  # the first creates the organization, legacy tokens on
            cmd = [str(BIN), "init", "--username", user.email, "--password", user.password,
                   "--user-token", user.token, "--enable-legacy-api-token", "--quiet"]
            left = timeout_s - (time.perf_counter() - start)
            done = subprocess.run(cmd, env=environment(work / "data"), cwd=work, capture_output=True, text=True,
                                  timeout=max(left, 1))
            if done.returncode != 0:
                raise RuntimeError(f"label-studio init failed ({done.returncode}): {done.stderr[-2000:]}")
        os.replace(work, target) if not target.exists() else shutil.rmtree(work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return time.perf_counter() - start


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Server:
    """``label-studio start`` on 127.0.0.1 on a copy of the template; a context manager that
    always stops it (the whole process group) and checks that it is gone."""

    def __init__(self, template: Path, workdir: Path, start_timeout_s: float = 240):
        self.data = workdir / "ls-data"
        shutil.copytree(template / "data", self.data)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "label-studio.log"
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.start_seconds = float("nan")

    def __enter__(self) -> "Server":
        start = time.perf_counter()
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(BIN), "start", "--no-browser", "--internal-host", "127.0.0.1", "-p", str(self.port)],
            env=environment(self.data), cwd=self.data.parent, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        try:
            while not healthy(self.url):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"label-studio exited with {self.proc.returncode}: {self.log_tail()}")
                if time.perf_counter() - start > self.start_timeout_s:
                    raise TimeoutError(f"label-studio not healthy after {self.start_timeout_s:.0f} s: {self.log_tail()}")
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.perf_counter() - start
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


if __name__ == "__main__":
    found = version()
    if found is None:
        sys.exit(f"label-studio not found at {BIN}")
    if (template_dir(found) / "data").is_dir():
        print(f"Label Studio {found}: template ready at {template_dir(found)}")
    else:
        print(f"Label Studio {found}: template built in {build_template(found):.0f} s at {template_dir(found)}")

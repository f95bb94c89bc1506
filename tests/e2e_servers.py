"""The end-to-end layer's servers, in one place (a pytest plugin that tests/conftest.py loads).

Each server is a session-scoped fixture: it starts the first time a test asks for it, is shared
by every later test of the session (of the pytest-xdist worker, under ``-n 2``), and is stopped
at the end of the session, with its whole process group. Every server binds 127.0.0.1 on a free
port. The servers:

- ``mlflow_server``: ``mlflow server`` on a sqlite store with proxied artifacts;
- ``stopped_mlflow_server``: a server that really ran and was stopped (its URI refuses connections);
- ``postgres``: a throwaway PostgreSQL 15 cluster (Debian's ``postgresql``);
- ``team_server``: ``mlflow server --app-name basic-auth`` on ``postgres`` (docs/team-server.md),
  users admin, alice and bob;
- ``chroma_server``: ``chroma run`` on a folder of its own (its port);
- ``ray_cluster``: a local Ray of 2 CPUs, driven by this process (its GCS address);
- ``label_studio``: ``label-studio start`` on a copy of the migrated template (lsserver.py).

Ray, Chroma and Label Studio serve one file each and cost memory and CPU while idle: they are
stopped right after the last test of their file that uses them (``RELEASE_AFTER_FILE``), and
start again if a later file asks. Any test that uses one of these fixtures is marked ``e2e``
(docs/testing.md).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Generous: on a loaded 2-core machine `mlflow server` takes ~25 s to answer /health.
SERVER_START_TIMEOUT_S = float(os.environ.get("MLFLOW_TEST_SERVER_TIMEOUT_S", "120"))
#: The basic-auth users of the team server (MLflow wants passwords of at least 12 characters).
ADMIN = "admin"
TEAM = ("alice", "bob")
#: The environment variable whose value marks every process of the tests' Ray (tests/ray).
RAY_MARKER = "PIPELINE_TEST_MARKER"
RAY_GRACE_S = 15.0  # Ray's raylet and GCS take a few seconds to exit after ray.shutdown()
#: The tests' Ray runs its workers at the tests' own priority: Ray starts them at nice 15 (so
#: that its raylet and GCS stay responsive on a busy node), which on a 2-core machine running
#: the suite's other pytest worker starves them (an actor's start, a sweep job, seconds each,
#: took several times longer). ``_system_config`` of ``ray.init`` for the session's Ray; a Ray
#: that a command starts reads the same setting from its environment (``RAY_WORKER_ENV``).
RAY_SYSTEM_CONFIG = {"worker_niceness": 0}
RAY_WORKER_ENV = {f"RAY_{key}": str(value) for key, value in RAY_SYSTEM_CONFIG.items()}

#: Every server fixture: a test that uses one is in the end-to-end layer.
SERVER_FIXTURES = ("mlflow_server", "stopped_mlflow_server", "postgres", "team_server", "chroma_server",
                   "ray_cluster", "label_studio")
#: The servers stopped after the last test of a file that uses them (one file each).
RELEASE_AFTER_FILE = ("ray_cluster", "chroma_server", "label_studio")


# --------------------------------------------------------------------------- plumbing


def quiet_env() -> dict[str, str]:
    """The environment for the servers and the jobs: no telemetry, no inherited MLflow
    settings that would redirect or slow the run, one thread per numeric library."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def health(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop_group(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM the process group of ``proc`` (started with ``start_new_session``), SIGKILL what
    is left after ``grace_s``; also when the leader is already gone and its children are not."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def carriers(marker: str) -> list[int]:
    """The processes (other than this one) whose environment holds ``marker``."""
    needle = marker.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def assert_nothing_left(marker: str, what: str, grace_s: float = RAY_GRACE_S) -> None:
    deadline = time.monotonic() + grace_s
    while (left := carriers(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    names = []
    for pid in left:
        try:
            names.append((Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
        except OSError:
            names.append(f"{pid} (gone)")
    assert not left, f"{what} left processes alive: {names}"


# --------------------------------------------------------------------------- MLflow


@dataclass
class MlflowServer:
    """A running ``mlflow server`` in its own process group."""

    uri: str
    port: int
    root: Path  # backend db and artifacts live here
    proc: subprocess.Popen
    log_path: Path

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no server log)"

    def alive(self) -> bool:
        return self.proc.poll() is None and health(self.uri)

    def stop(self) -> None:
        """Terminate the whole process group (uvicorn workers included), then wait until
        the port no longer answers."""
        stop_group(self.proc)
        deadline = time.monotonic() + 30
        while health(self.uri, timeout=1.0) and time.monotonic() < deadline:
            time.sleep(0.5)


def launch_mlflow(root: Path, *args: str, env: dict[str, str] | None = None, what: str = "mlflow server",
                  timeout: float = SERVER_START_TIMEOUT_S) -> MlflowServer:
    """``mlflow server ARGS`` on a free 127.0.0.1 port with artifacts under ``root``; returns
    once ``/health`` answers (fails the test with the server's log otherwise)."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "mlflow", "server", *args, "--host", "127.0.0.1", "--port", str(port),
           # Proxied artifacts (MLflow 3 default --serve-artifacts): new experiments get
           # mlflow-artifacts:/ locations, the client uploads over HTTP, the server stores here.
           "--artifacts-destination", str(root / "artifacts"),
           # Explicit: also ignores a stray MLFLOW_SERVER_ALLOWED_HOSTS in the environment.
           "--allowed-hosts", f"127.0.0.1:{port},localhost:{port},127.0.0.1,localhost"]
    full = quiet_env()
    # No GenAI job runner (~8 huey worker processes): it slows start and stop on a small
    # machine, and tracking runs, metrics and artifacts do not need it.
    full["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    full.update(env or {})
    log_path = root / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=full, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = MlflowServer(uri=uri, port=port, root=root, proc=proc, log_path=log_path)
    deadline = time.monotonic() + timeout
    while not health(uri):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            pytest.fail(f"{what} did not answer {uri}/health within {timeout:.0f} s "
                        f"(exit {proc.returncode}):\n{server.log_tail()}")
        time.sleep(0.3)
    return server


def start_mlflow_server(root: Path, timeout: float = SERVER_START_TIMEOUT_S) -> MlflowServer:
    """A plain ``mlflow server`` (one worker, sqlite backend under ``root``)."""
    return launch_mlflow(root, "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                         timeout=timeout)


# --------------------------------------------------------------------------- the team server


@dataclass
class TeamServer:
    """The team's ``mlflow server``: PostgreSQL backend and auth stores, basic auth on."""

    server: MlflowServer
    postgres: Any  # e2e_postgres.Postgres
    users: dict[str, str]  # username -> password (ADMIN included)

    @property
    def uri(self) -> str:
        return self.server.uri

    def env(self, user: str | None) -> dict[str, str]:
        """The environment of a job run as ``user`` (None: no credentials at all)."""
        env = quiet_env()
        if user is not None:
            env["MLFLOW_TRACKING_USERNAME"] = user
            env["MLFLOW_TRACKING_PASSWORD"] = self.users[user]
        return env

    def client(self, monkeypatch: pytest.MonkeyPatch, user: str = ADMIN):
        """An MlflowClient that authenticates as ``user``: the variables MLflow reads, set for
        the calling test only (``monkeypatch``), so no later test inherits them."""
        from mlflow import MlflowClient

        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", self.users[user])
        return MlflowClient(tracking_uri=self.uri)


def _create_users(uri: str, users: dict[str, str]) -> None:
    """The team's users, created by the admin through the auth app's REST endpoint
    (``POST /api/2.0/mlflow/users/create``, what ``AuthServiceClient.create_user`` sends): plain
    HTTP with basic auth, since importing ``mlflow.server.auth.client`` loads the whole server
    (Flask, FastAPI, the SQLAlchemy stores: ~3 s of CPU) into the tests' process."""
    token = base64.b64encode(f"{ADMIN}:{users[ADMIN]}".encode()).decode()
    for name in TEAM:
        request = urllib.request.Request(
            f"{uri}/api/2.0/mlflow/users/create", method="POST",
            data=json.dumps({"username": name, "password": users[name]}).encode(),
            headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            created = json.loads(resp.read())["user"]
        assert created["username"] == name and not created["is_admin"], created


def start_team_server(root: Path, pg, timeout: float = SERVER_START_TIMEOUT_S) -> TeamServer:
    """Create the two databases and their owner, write the auth config, start ``mlflow
    server --app-name basic-auth`` with one worker, and create the team's users.

    One uvicorn worker serves the concurrent requests of many clients from its thread pool,
    each with its own PostgreSQL connection: the writers at once that the tests check are the
    clients (three sweeps, joblib's workers). A second worker would import the whole server
    again (~5 s of CPU) for nothing a test reads; docs/team-server.md runs more for throughput."""
    db_password = secrets.token_urlsafe(16)
    pg.execute(f"CREATE ROLE mlflow LOGIN PASSWORD '{db_password}'",
               "CREATE DATABASE mlflow OWNER mlflow", "CREATE DATABASE mlflow_auth OWNER mlflow")
    root.mkdir(parents=True, exist_ok=True)
    users = {ADMIN: secrets.token_urlsafe(18), **{name: secrets.token_urlsafe(18) for name in TEAM}}
    auth_ini = root / "basic_auth.ini"
    auth_ini.write_text(
        "[mlflow]\n"
        # EDIT: every teammate may log runs into an experiment another one created (the
        # experiment is the dataset's name, shared by the team).
        "default_permission = EDIT\n"
        f"database_uri = {pg.url('mlflow_auth', 'mlflow', db_password)}\n"
        f"admin_username = {ADMIN}\n"
        f"admin_password = {users[ADMIN]}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        # Without the cache every request pays a scrypt check (~0.15 s of CPU).
        "auth_cache_ttl_seconds = 300\n")
    auth_ini.chmod(0o600)
    server = launch_mlflow(root, "--app-name", "basic-auth", "--workers", "1",
                           "--backend-store-uri", pg.url("mlflow", "mlflow", db_password),
                           env={"MLFLOW_AUTH_CONFIG_PATH": str(auth_ini),
                                "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16)},
                           what="mlflow server (basic-auth, PostgreSQL)", timeout=timeout)
    try:
        _create_users(server.uri, users)
    except BaseException:
        server.stop()
        raise
    return TeamServer(server=server, postgres=pg, users=users)


# --------------------------------------------------------------------------- the fixtures


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    """A live MLflow tracking server for the session's tests, stopped at the end. Tests share
    it: each looks only at its own runs (by run id, or an experiment of its own)."""
    server = start_mlflow_server(tmp_path_factory.mktemp("mlflow_server"))
    try:
        yield server
    finally:
        server.stop()


@dataclass
class StoppedServer:
    """Where a server ran: its URI (which now refuses connections) and port."""

    uri: str
    port: int


@pytest.fixture(scope="session")
def stopped_mlflow_server() -> StoppedServer:
    """A server that really ran and was then stopped: its URI now refuses connections. What a
    client meets there is a refused connection whatever the server was, so it is an HTTP server
    in this process that answered ``/health`` on a free port and was shut down (an ``mlflow
    server`` costs seconds to start, for the same refused connection)."""
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    port = server.server_address[1]
    uri = f"http://127.0.0.1:{port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert health(uri), f"{uri} did not answer /health"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert not health(uri), f"{uri} still answers after it was stopped"
    return StoppedServer(uri=uri, port=port)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL 15 cluster of its own (skips when Debian's postgresql is not installed)."""
    from e2e_postgres import pg_missing, start_postgres

    reason = pg_missing()
    if reason:
        pytest.skip(reason)
    # Not under pytest's tmp_path: that folder is private to root, and the cluster runs as
    # the postgres user. Nor under a private TMPDIR, for the same reason: /tmp where it exists.
    folder = Path(tempfile.mkdtemp(prefix="pg-tests-", dir="/tmp" if Path("/tmp").is_dir() else None))
    pg = None
    try:
        pg = start_postgres(folder)
        yield pg
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def team_server(postgres, tmp_path_factory: pytest.TempPathFactory):
    """``mlflow server --app-name basic-auth`` on ``postgres``, users admin, alice and bob."""
    team = start_team_server(tmp_path_factory.mktemp("team_server"), postgres)
    try:
        yield team
    finally:
        team.server.stop()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory):
    """``chroma run`` on a free port of 127.0.0.1 (its port), stopped (and waited for) at the end."""
    from pipeline.errors import InputError
    from retrievers.chroma import connect

    chroma = shutil.which("chroma")
    assert chroma, "the chroma command (chromadb, the test extra) is missing"
    port = free_port()
    folder = tmp_path_factory.mktemp("chroma-server")
    proc = subprocess.Popen([chroma, "run", "--path", str(folder), "--port", str(port), "--host", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            env={**os.environ, "ANONYMIZED_TELEMETRY": "False"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                connect(host="127.0.0.1", port=port)
                break
            except InputError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield port
    finally:
        stop_group(proc, grace_s=20)


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray of 2 CPUs, started in this process (which is its driver); its address lets
    subprocesses join it. Its workers run at the tests' priority (``RAY_SYSTEM_CONFIG``).
    Every Ray process carries a marker in its environment; at the end Ray is shut down and
    none may be left."""
    import ray

    marker = f"ray-tests-{uuid.uuid4().hex}"
    os.environ[RAY_MARKER] = marker  # inherited by every Ray process started below
    try:
        context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                           _system_config=RAY_SYSTEM_CONFIG)
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()
        os.environ.pop(RAY_MARKER, None)
    assert_nothing_left(marker, "the tests' Ray")


def _lsserver():
    """tests/judging/lsserver.py (the module test_labelstudio.py imports, or loaded from its file)."""
    if "lsserver" not in sys.modules:
        spec = importlib.util.spec_from_file_location("lsserver", REPO / "tests" / "judging" / "lsserver.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["lsserver"] = module
        spec.loader.exec_module(module)
    return sys.modules["lsserver"]


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory: pytest.TempPathFactory):
    """``label-studio start`` (tests/judging/lsserver.py) on a copy of the migrated template,
    built first when missing; at the end its whole process group is stopped and checked gone."""
    lsserver = _lsserver()
    version = lsserver.version()
    if version is None:
        pytest.skip(f"label-studio not installed at {lsserver.BIN} (.ci/run installs it in its own virtual "
                    "environment; LABEL_STUDIO_BIN points elsewhere)")
    template = lsserver.template_dir(version)
    if not (template / "data").is_dir():
        seconds = lsserver.build_template(version)
        print(f"\nLabel Studio {version}: migrated template built in {seconds:.0f} s at {template}")
    server = lsserver.Server(template, tmp_path_factory.mktemp("label-studio"))
    with server:
        yield server
    assert server.proc.poll() is not None and not lsserver.healthy(server.url), "Label Studio still runs"


# --------------------------------------------------------------------------- the layer


def pytest_collection_modifyitems(session, config, items):
    """Mark every test that uses a server ``e2e`` and ``slow`` (docs/testing.md: the layer is
    part of the slow one); note, per file, the last test that uses a server of RELEASE_AFTER_FILE."""
    last: dict[tuple[str, str], str] = {}
    for item in items:
        names = getattr(item, "fixturenames", ())
        if any(name in SERVER_FIXTURES for name in names):
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.slow)
        for name in RELEASE_AFTER_FILE:
            if name in names:
                last[(item.nodeid.split("::", 1)[0], name)] = item.nodeid
    releases: dict[str, list[str]] = {}
    for (_, name), nodeid in last.items():
        releases.setdefault(nodeid, []).append(name)
    config.stash[_LAST_USER] = releases


_LAST_USER = pytest.StashKey[dict[str, list[str]]]()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of its file that uses it, stop a server of RELEASE_AFTER_FILE (its
    session fixture is finished: a later file that asks for it starts it again)."""
    if nextitem is None:  # the last test: the session's teardown stops every server
        return
    for name in item.config.stash.get(_LAST_USER, {}).get(item.nodeid, ()):
        definitions = item._fixtureinfo.name2fixturedefs.get(name)
        if definitions and definitions[-1].cached_result is not None:
            definitions[-1].finish(item._request)

"""Fixtures for the team-server fault tests: a throwaway PostgreSQL cluster (Debian's
``postgresql`` package) and an ``mlflow server`` on it with MLflow's basic-auth app, both
bound to 127.0.0.1 on free ports and stopped at the end even when a test fails.

The server helpers of ``tests/pipeline/conftest.py`` (``MlflowServer``, the quiet
environment, free ports, the health probe) are reused by loading that file under a name of
its own: ``tests/`` is not a package, so ``import conftest`` would find whichever conftest
pytest imported last. Only helpers are taken from it, never its fixtures.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_pipeline_helpers():
    name = "_pipeline_test_server_helpers"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "pipeline" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_helpers = _load_pipeline_helpers()
MlflowServer = _helpers.MlflowServer
quiet_env = _helpers._quiet_env
free_port = _helpers._free_port
health = _helpers._health
SERVER_START_TIMEOUT_S = _helpers.SERVER_START_TIMEOUT_S

#: Debian's postgresql (the version ``.ci/run`` installs); PG_BIN overrides.
PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_START_TIMEOUT_S = 60

#: The basic-auth users of the tests (MLflow wants passwords of at least 12 characters).
ADMIN = "admin"
TEAM = ("alice", "bob")


def _pg_missing() -> str | None:
    missing = [tool for tool in ("initdb", "pg_ctl", "postgres") if not (PG_BIN / tool).is_file()]
    if missing:
        return (f"PostgreSQL binaries {', '.join(missing)} not found in {PG_BIN} "
                "(apt-get install -y postgresql; .ci/run installs it)")
    try:
        import flask_wtf  # noqa: F401  (the basic-auth app's CSRF protection)
    except ImportError:
        return "Flask-WTF is not installed: MLflow's basic-auth app needs mlflow[auth]"
    try:
        import psycopg  # noqa: F401  (SQLAlchemy 2.1's driver for postgresql:// URIs)
    except ImportError:
        return "psycopg (3) is not installed (pip install -e '.[test]')"
    return None


def _as_owner() -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the ``postgres`` user then."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as the postgres user")
    return [runuser, "-u", "postgres", "--"]


@dataclass
class Postgres:
    """A PostgreSQL cluster in a temporary folder, listening on 127.0.0.1 only."""

    data: Path
    port: int
    superuser: str
    password: str
    log_path: Path

    def url(self, database: str, user: str | None = None, password: str | None = None) -> str:
        return (f"postgresql://{user or self.superuser}:{password or self.password}"
                f"@127.0.0.1:{self.port}/{database}")

    def execute(self, *statements: str) -> None:
        import psycopg

        # autocommit: CREATE DATABASE cannot run in a transaction.
        with psycopg.connect(host="127.0.0.1", port=self.port, user=self.superuser, password=self.password,
                             dbname="postgres", connect_timeout=10, autocommit=True) as conn:
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)

    def query(self, database: str, sql: str, args: tuple = ()) -> list[tuple]:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=self.superuser, password=self.password,
                             dbname=database, connect_timeout=10) as conn:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall()

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no postgres log)"

    def stop(self) -> None:
        subprocess.run([*_as_owner(), str(PG_BIN / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast",
                        "-w", "-t", "30"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)


def start_postgres(folder: Path) -> Postgres:
    """initdb + pg_ctl start in ``folder`` (owned by ``postgres`` when run as root), password
    authentication over TCP on a free 127.0.0.1 port, the unix socket inside ``folder``."""
    owner = _as_owner()
    data = folder / "data"
    password = secrets.token_urlsafe(16)
    pwfile = folder / "pwfile"
    pwfile.write_text(password + "\n")
    log_path = folder / "postgres.log"
    log_path.touch()
    if owner:
        for path in (folder, pwfile, log_path):
            shutil.chown(path, "postgres", "postgres")
    env = {**quiet_env(), "LC_ALL": "C.UTF-8"}
    init = subprocess.run(
        [*owner, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", f"--pwfile={pwfile}",
         "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )
    if init.returncode != 0:
        pytest.fail(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
    port = free_port()
    # A throwaway cluster: durability off, which is what makes it start and write fast.
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={folder} "
               "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
    pg = Postgres(data=data, port=port, superuser="postgres", password=password, log_path=log_path)
    start = subprocess.run(
        [*owner, str(PG_BIN / "pg_ctl"), "start", "-D", str(data), "-l", str(log_path), "-o", options,
         "-w", "-t", str(PG_START_TIMEOUT_S)],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PG_START_TIMEOUT_S + 30,
    )
    if start.returncode != 0:
        pg.stop()
        pytest.fail(f"pg_ctl start failed ({start.returncode}):\n{start.stdout}\n{start.stderr}\n{pg.log_tail()}")
    return pg


@dataclass
class TeamServer:
    """The team's ``mlflow server``: PostgreSQL backend and auth stores, basic auth on."""

    server: MlflowServer
    postgres: Postgres
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

    def client(self, user: str = ADMIN):
        """An MlflowClient that authenticates as ``user`` (the env vars MLflow reads)."""
        from mlflow import MlflowClient

        os.environ["MLFLOW_TRACKING_USERNAME"] = user
        os.environ["MLFLOW_TRACKING_PASSWORD"] = self.users[user]
        return MlflowClient(tracking_uri=self.uri)


def start_team_server(root: Path, pg: Postgres, timeout: float = SERVER_START_TIMEOUT_S) -> TeamServer:
    """Create the two databases and their owner, write the auth config, start ``mlflow
    server --app-name basic-auth`` with 2 workers, and create the team's users."""
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
        "auth_cache_ttl_seconds = 300\n"
    )
    auth_ini.chmod(0o600)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable, "-m", "mlflow", "server",
        "--app-name", "basic-auth",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--workers", "2",
        "--backend-store-uri", pg.url("mlflow", "mlflow", db_password),
        "--artifacts-destination", str(root / "artifacts"),
        "--allowed-hosts", f"127.0.0.1:{port},localhost:{port},127.0.0.1,localhost",
    ]
    env = quiet_env()
    env.update(
        MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
        MLFLOW_AUTH_CONFIG_PATH=str(auth_ini),
        MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_hex(16),
    )
    log_path = root / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = MlflowServer(uri=uri, port=port, root=root, proc=proc, log_path=log_path)
    deadline = time.monotonic() + timeout
    while not health(uri):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            pytest.fail(f"mlflow server (basic-auth, PostgreSQL) did not answer {uri}/health within "
                        f"{timeout:.0f} s (exit {proc.returncode}):\n{server.log_tail()}")
        time.sleep(0.5)
    team = TeamServer(server=server, postgres=pg, users=users)
    try:
        from mlflow.server.auth.client import AuthServiceClient

        saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
        os.environ.update(MLFLOW_TRACKING_USERNAME=ADMIN, MLFLOW_TRACKING_PASSWORD=users[ADMIN])
        try:
            admin = AuthServiceClient(uri)
            for name in TEAM:
                admin.create_user(name, users[name])
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    except BaseException:
        server.stop()
        raise
    return team


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL 15 cluster of its own (skips when Debian's postgresql is not installed)."""
    reason = _pg_missing()
    if reason:
        pytest.skip(reason)
    # Not under pytest's tmp_path: that folder is private to root, and the cluster runs as
    # the postgres user. Nor under a private TMPDIR, for the same reason: /tmp where it exists.
    folder = Path(tempfile.mkdtemp(prefix="pg-faults-", dir="/tmp" if Path("/tmp").is_dir() else None))
    pg = None
    try:
        pg = start_postgres(folder)
        yield pg
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def team_server(postgres, tmp_path_factory: pytest.TempPathFactory):
    """``mlflow server --app-name basic-auth`` on ``postgres``, users admin, alice and bob."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    team = start_team_server(tmp_path_factory.mktemp("team_server"), postgres)
    try:
        yield team
    finally:
        team.server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

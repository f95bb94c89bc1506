"""A throwaway PostgreSQL 15 cluster for the end-to-end layer (the ``postgres`` fixture of
tests/e2e_servers.py, which imports this module when a test first asks for it): Debian's
``postgresql`` binaries, a cluster in a temporary folder, password authentication over TCP on a
free 127.0.0.1 port, durability off."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_servers import free_port, quiet_env

#: Debian's postgresql (the version ``.ci/run`` installs); PG_BIN overrides.
PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_START_TIMEOUT_S = 60


def pg_missing() -> str | None:
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
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
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
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PG_START_TIMEOUT_S + 30)
    if start.returncode != 0:
        pg.stop()
        pytest.fail(f"pg_ctl start failed ({start.returncode}):\n{start.stdout}\n{start.stderr}\n{pg.log_tail()}")
    return pg

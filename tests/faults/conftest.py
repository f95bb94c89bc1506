"""Fixtures for the fault tests.

The team server (PostgreSQL + ``mlflow server --app-name basic-auth``) that
test_team_server.py uses is one of the session's servers: ``postgres`` and ``team_server``
in tests/e2e_servers.py, started once per session and shared.

``store``: a fresh copy of one migrated sqlite store of the session (tests/conftest.py).
"""

from __future__ import annotations


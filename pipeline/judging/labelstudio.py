"""A small Label Studio HTTP client (the standard library only): projects, task import, export.

Authentication: the token is ``LABEL_STUDIO_API_KEY`` (the name Label Studio's SDK reads). A
legacy token (40 hex characters) is sent as ``Authorization: Token <token>``; a personal
access token (a JWT refresh token, three dot-separated parts) is first exchanged at
``POST /api/token/refresh`` for an access token, sent as ``Authorization: Bearer <access>``.
Label Studio 1.23 enables personal access tokens for new organizations; legacy tokens work
where the organization allows them (Organization > Settings > Access Token Settings).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from pipeline.errors import InputError

TOKEN_ENV = "LABEL_STUDIO_API_KEY"


def token_from_env() -> str:
    """The API token from ``LABEL_STUDIO_API_KEY``; InputError saying where to get one when unset."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise InputError(f"--label-studio needs an API token in the environment variable {TOKEN_ENV} "
                         "(Label Studio: Account & Settings > Personal Access Token or Legacy Token)")
    return token


class Client:
    """Label Studio's API at ``url``, authenticated by ``token`` (the module docstring)."""

    def __init__(self, url: str, token: str, timeout_s: float = 60.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        if token.count(".") == 2:  # a personal access token: a JWT refresh token
            access = self.request("POST", "/api/token/refresh", {"refresh": token}, auth=None)["access"]
            self.auth = f"Bearer {access}"
        else:
            self.auth = f"Token {token}"

    def request(self, method: str, path: str, body: Any = None, auth: str | None | bool = True) -> Any:
        """One API call: ``body`` sent as JSON, the JSON answer returned (None when empty);
        an HTTP error or no connection is InputError naming the call. ``auth=None``: no token."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth is True:
            headers["Authorization"] = self.auth
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            detail = err.read()[:300].decode("utf-8", "replace").replace("\n", " ")
            raise InputError(f"Label Studio {method} {path}: HTTP {err.code} {detail}", self.url) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise InputError(f"Label Studio {method} {path}: cannot connect ({reason})", self.url) from None
        return json.loads(raw) if raw else None

    def create_project(self, title: str, label_config: str) -> int:
        """Create a project; its id."""
        return int(self.request("POST", "/api/projects", {"title": title, "label_config": label_config})["id"])

    def import_tasks(self, project: int, tasks: list[dict[str, Any]]) -> int:
        """Import tasks (the body of tasks.json); the number Label Studio reports imported."""
        answer = self.request("POST", f"/api/projects/{project}/import", tasks)
        return int(answer.get("task_count", len(tasks)))

    def tasks(self, project: int) -> list[dict[str, Any]]:
        """Every task of the project."""
        answer = self.request("GET", f"/api/tasks?project={project}&page_size=100000")
        return answer["tasks"] if isinstance(answer, dict) else answer

    def annotate(self, task: int, grade: int, choices: str = "grade", to_name: str = "document") -> dict[str, Any]:
        """Post one grade as the token's user."""
        result = [{"from_name": choices, "to_name": to_name, "type": "choices", "value": {"choices": [str(grade)]}}]
        return self.request("POST", f"/api/tasks/{task}/annotations", {"result": result, "was_cancelled": False})

    def export(self, project: int) -> list[dict[str, Any]]:
        """The project's JSON export (what the UI's Export > JSON gives)."""
        return self.request("GET", f"/api/projects/{project}/export?exportType=JSON&download_all_tasks=true")

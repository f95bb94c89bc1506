"""Credentials of a team server (MLflow's client reads them from the environment,
docs/team-server.md): kept out of every param, tag, record, message and log. :func:`redact`
hides them and any ``user:password@`` of a URL in text the pipeline shows or stores, and
:func:`auth_refusal` turns a server's 401/403 into one line that says what to set."""

from __future__ import annotations

import os
import re

#: Where MLflow's client reads a team server's credentials from.
CREDENTIAL_ENV = ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")

# A URL's user-info, also as Hydra writes an override in a sweep (every ":" escaped: "http\://a\:pw@h").
_SCHEME = r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*\\?://)"
_URL_USERINFO = re.compile(_SCHEME + r"(?P<user>[^:/?#@\s\\]*)(?P<sep>\\?:)(?P<secret>[^@/?#\s]*)@")
_URL_TOKEN = re.compile(_SCHEME + r"(?!\*\*\*@)[^:/?#@\s\\]+@")
_URL_ANY_USERINFO = re.compile(_SCHEME + r"[^/?#@\s]*@")
# A secret in a URL's query string (?token=..., &api_key=...), also with Hydra's escaped "=".
_QUERY_SECRET = re.compile(r"(?P<name>[?&](?:access_token|token|api[_-]?key|password|passwd|secret|signature|sig)"
                           r"\\?=)(?P<secret>[^&#\s]+)", re.IGNORECASE)
_STATUS_IN_MESSAGE = re.compile(r"\berror code (401|403)\b|\b(401|403) Client Error\b")


def redact(text: str) -> str:
    """``text`` (a URI, a message, a config dump) with every password hidden: the password of
    a ``scheme://user:password@host`` URL becomes ``***`` (a ``scheme://token@host`` URL's
    token too, and a secret query parameter such as ``?token=``), and so does any occurrence of the
    values of :data:`CREDENTIAL_ENV` in this process's environment."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}{m['sep']}***@", str(text))
    text = _URL_TOKEN.sub(lambda m: f"{m['scheme']}***@", text)  # https://TOKEN@host: the whole user-info
    text = _QUERY_SECRET.sub(lambda m: f"{m['name']}***" if m["secret"] != "***" else m[0], text)
    for name in CREDENTIAL_ENV:
        secret = os.environ.get(name, "")
        if len(secret) >= 4:  # a one-letter "password" would mangle every message
            text = text.replace(secret, "***")
    return text


def without_credentials(uri: str) -> str:
    """``uri`` with its ``user:password@`` (or ``token@``) removed: the form of a store's URI
    that records, markers, sweep files and messages hold. The job reaches the server with the
    URI as given, kept in memory only (``StoreSettings.login``); ``pipeline.sync`` later reads
    the credentials from MLFLOW_TRACKING_USERNAME/PASSWORD, or from its ``--tracking-uri``."""
    return _QUERY_SECRET.sub(lambda m: f"{m['name']}***", _URL_ANY_USERINFO.sub(lambda m: m["scheme"], str(uri)))


def http_status(exc: BaseException) -> int | None:
    """401 or 403 when ``exc`` (or an exception it wraps) is the server refusing a request:
    MLflow's REST errors carry an error code, the artifact uploads a requests response; None
    for any other failure."""
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        code = getattr(err, "error_code", None)
        if code == "UNAUTHENTICATED":
            return 401
        if code == "PERMISSION_DENIED":
            return 403
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status in (401, 403):
            return int(status)
        found = _STATUS_IN_MESSAGE.search(str(err))
        if found:
            return int(found.group(1) or found.group(2))
        err = err.__cause__ or err.__context__
    return None


def auth_refusal(exc: BaseException, uri: str) -> str | None:
    """One line for a tracking server that refused the job's credentials (HTTP 401) or its
    user's permission (HTTP 403), None for any other failure. No password in it."""
    status = http_status(exc)
    if status == 401:
        return (f"the MLflow server at {redact(uri)} refused the credentials "
                "(set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)")
    if status == 403:
        user = os.environ.get("MLFLOW_TRACKING_USERNAME") or "this user"
        return (f"the MLflow server at {redact(uri)} denied {user} permission (HTTP 403): an admin grants "
                "EDIT on the experiment, or sets default_permission = EDIT (docs/team-server.md)")
    return None

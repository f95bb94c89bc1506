"""A Ray runtime for the time it is needed: the one this process has, one started here, or a
cluster joined; and ``ray`` itself, imported with the settings this project wants.

Used by the dense retriever's encoding on Ray (``retriever.encode.engine=ray``,
``retrievers.dense.ray_encode``), by the Ray launcher (``hydra/launcher=ray``,
``hydra_plugins/pipeline_ray_launcher``) and by ``python -m pipeline``'s check for the ray extra.
Nothing here is about encoding: it sits in the library tier so that none of them imports the
others for it.

- :func:`import_ray`: the ``ray`` module, or a one-line InputError (exit status 2) naming the
  ``ray`` extra; imported inside it (the extra is optional, and ``ray`` is heavy: ``pipeline.lazy``).
- :func:`ray_runtime`: Ray connected for a block; an address that cannot be reached is
  :class:`RayFailed` (one line, exit status 3), found within seconds (:func:`check_reachable`).
- :func:`quiet_token_notice`: Ray's "Token authentication is enabled" notice left out.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import InputError, StoreError
from pipeline.io.progress import is_terminal

EXTRA_HINT = 'install the ray extra: pip install -e ".[ray]"'
CONNECT_TIMEOUT_S = 5.0


#: Ray's logger of its token-authentication setup, and the notice it logs each time ``ray.init``
#: starts a local runtime with ``RAY_AUTH_MODE`` unset: token authentication on, Ray's own default,
#: nothing for a user to act on. The runtime this project starts leaves it out
#: (:func:`quiet_token_notice`); that logger's other lines (authentication disabled) still show.
TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TOKEN_NOTICE)


@contextmanager
def quiet_token_notice() -> Iterator[None]:
    """Ray's "Token authentication is enabled" notice left out for the block (a filter on its
    one logger, removed after): every sweep on Ray printed it."""
    logger, drop = logging.getLogger(TOKEN_LOGGER), _DropTokenNotice()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


class RayFailed(StoreError):
    """Ray could not be reached, or the encoding on it failed: one line, exit status 3
    (like a tracking store that cannot be reached), never a traceback."""


def import_ray(what: str) -> Any:
    """The ``ray`` module, or InputError (exit 2) naming the extra that installs it. Ray reads
    its settings when imported, so two defaults go first: the workers' lines reach the console
    as they come (not merged into ``[repeated 2x across cluster]`` seconds later), and without
    colour codes where standard output is not a terminal."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not is_terminal(sys.stdout):  # where Ray prints the workers' lines
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    try:
        import ray
    except ImportError as err:
        raise InputError(f"{what} needs Ray ({err}); {EXTRA_HINT}") from None
    return ray


def check_reachable(address: str) -> None:
    """RayFailed unless ``HOST:PORT`` of ``address`` (``ray://HOST:PORT`` or ``HOST:PORT``)
    accepts a TCP connection within a few seconds: ``ray.init`` itself retries for a minute
    or more before it gives up. ``auto`` (and anything without a port) is left to ``ray.init``."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise RayFailed(f"Ray address {address!r}: not HOST:PORT or ray://HOST:PORT") from None
    if not host or port is None:
        return
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise RayFailed(f"cannot reach the Ray cluster at {address} ({err.strerror or err}); "
                        "start it (ray start --head) or fix the address") from None


@contextmanager
def ray_runtime(address: str | None, what: str, **init: Any) -> Iterator[Any]:
    """Ray, connected for the duration of the block: the runtime this process already has,
    or one started here (``address`` None) or joined (a cluster's address); shut down (or
    disconnected) at the end only if this call started it. ``init``: more ``ray.init``
    arguments, those that are None left out (``num_cpus`` only when starting Ray here).
    Yields the ``ray`` module. An address that cannot be reached is RayFailed."""
    ray = import_ray(what)
    if ray.is_initialized():
        yield ray
        return
    if address is not None and address != "local":
        check_reachable(address)
        init = {k: v for k, v in init.items() if k not in ("num_cpus", "num_gpus")}
    arguments = {k: v for k, v in init.items() if v is not None}
    try:
        with quiet_token_notice():
            ray.init(address=None if address == "local" else address, **arguments)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise RayFailed(f"{what}: cannot start or join Ray (address {address or 'local'}): {first}") from None
    try:
        yield ray
    finally:
        ray.shutdown()

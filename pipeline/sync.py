"""``python -m pipeline.sync [FOLDER ...]``: log to MLflow every finished job that is not there yet.

The disk is the queue. Each job writes its results folder, ``record.json`` last, before any
MLflow call; logging a folder is idempotent (see ``pipeline.tracking.log_results``). Sync
walks the folders (default: ``outputs``), logs each complete job that has no
``mlflow_run.json`` marker for its store, and closes the parent run of each sweep that
never wrote its summary (a sweep that was interrupted) as KILLED, with its finished jobs
nested under it. Running it twice logs nothing twice.

``--tracking-uri`` logs to another store than the one each record names.

The tracking process (``tracking.Tracker``) is this module too. ``python -m pipeline.sync
--serve SOCKET`` is the one that jobs share: it imports mlflow at once, then serves every
job that connects to the Unix socket, until none has for ``--idle`` seconds
(:func:`serve_shared`). ``python -m pipeline.sync --stdin`` is a job's own one, serving its
standard input. Either serves one JSON request per line and answers one JSON line each, in
order; every request also carries the job's working folder (``"cwd"``):

- ``{"op": "open", "tracking": {...}}``: open (create) the store;
- ``{"op": "log", "results": DIR, "tracking": {...}, "note_failure": bool}``: log a folder;
- ``{"op": "sweep_start", "sweep_dir": DIR, "experiment": NAME, "sweep_id": ID, "tags": {...}, "tracking": {...}}``;
- ``{"op": "sweep_end", "sweep_dir": DIR, "objective": KEY, "status": S, "tracking": {...}}``;
- ``{"op": "draw", "folder": DIR, "curves": {...}, "k": K, "title": T}``: a job's figures
  (``pipeline.plots.figure_request``; ``tracking.TrackerFigures``);
- ``{"op": "flush"}``: nothing; its answer says every earlier request is done.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from pipeline import results as res
from pipeline import tracking
from pipeline.errors import InputError

log = logging.getLogger(__name__)


def _settings(request: dict[str, Any]) -> tracking.StoreSettings:
    return tracking.StoreSettings.of(request["tracking"])


def _log(request: dict[str, Any]) -> str:
    results = Path(request["results"])
    try:
        return tracking.log_results(results, _settings(request))
    except (tracking.TrackingError, InputError) as err:
        if request.get("note_failure"):
            record_tags: dict[str, str] = {}
            try:
                record_tags = res.read_record(results)["tags"]
            except InputError:
                pass
            res.write_failed(results.parent, record_tags.get(tracking.TAG_OVERRIDES, ""),
                             f"error: {err}\nThe results are safe on disk in {results.resolve()}.")
        raise


def _sweep_start(request: dict[str, Any]) -> dict[str, str]:
    settings = _settings(request)
    found = tracking.start_sweep(settings, request["experiment"], request["sweep_id"], request.get("tags", {}))
    sweep_dir = Path(request["sweep_dir"])
    info = tracking.read_sweep_file(sweep_dir)
    res.write_json(sweep_dir / res.SWEEP_FILE, {**info, **found, "experiment": request["experiment"]})
    import scipy.stats  # noqa: F401  (~1.4 s, now while the jobs compute: the summary's tests need it)

    return found


def _sweep_end(request: dict[str, Any]) -> str:
    from pipeline.summary import end_sweep

    return end_sweep(Path(request["sweep_dir"]), request["objective"], _settings(request),
                     request.get("status", "FINISHED"))


def _handle(request: dict[str, Any]) -> Any:
    op = request.get("op")
    if op == "open":
        if tracking._sqlite_path(_settings(request).uri) is not None:
            tracking.ensure_store(_settings(request))
        return None
    if op == "log":
        return _log(request)
    if op == "sweep_start":
        return _sweep_start(request)
    if op == "sweep_end":
        return _sweep_end(request)
    if op == "draw":
        from pipeline.plots import draw_request

        draw_request(request)
        return None
    if op == "flush":
        return None
    if op == "release":  # a job about to build a large index: leave once no job is connected
        _RELEASED.set()
        return None
    raise ValueError(f"unknown request {op!r}")


#: One request at a time, whichever job sent it (each changes to its job's working folder).
_HANDLING = threading.Lock()
#: Set by a "release" request: the shared process leaves as soon as no job is connected.
_RELEASED = threading.Event()
#: Set by SIGTERM: the shared process leaves once the jobs connected now have closed.
_STOPPING = threading.Event()


def _answer(line: bytes | str, journal: bool = False) -> dict[str, Any]:
    request: Any = None
    try:
        request = json.loads(line)
        with _HANDLING:
            if request.get("cwd"):
                os.chdir(request["cwd"])  # relative store and folder paths are the job's
            answer = {"ok": True, "result": _handle(request)}
    except Exception as exc:
        text = str(exc) if isinstance(exc, (tracking.TrackingError, InputError)) else f"{type(exc).__name__}: {exc}"
        answer = {"ok": False, "error": text}
    if journal:  # the shared process's log: what it did for whom
        request = request if isinstance(request, dict) else {}
        what = " ".join(str(request[k]) for k in ("results", "sweep_dir", "folder") if k in request)
        outcome = "ok" if answer["ok"] else f"failed: {answer['error']}"
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {request.get('op', '?')} {what} {outcome}", file=sys.stderr, flush=True)
    return answer


def _serve_lines(lines: Iterable[bytes | str], answers: Any, journal: bool = False) -> None:
    """Answer each request line in order; once the asker is gone, do the rest unanswered."""
    try:
        for line in lines:
            if not line.strip():
                continue
            answer = _answer(line, journal)
            if answers is None:
                continue
            try:
                answers.write((json.dumps(answer) + "\n").encode())
            except OSError:  # the job is gone (a closed pipe): log what it queued, answer no more
                try:
                    answers.close()
                except OSError:
                    pass
                answers = None
    except ConnectionError:  # a job that closed its end with answers unread: its requests are done
        pass


def _warm() -> None:
    tracking.warm()  # ~4 s of imports, before the first request arrives
    # mlflow's imports leave ~270k objects for the cyclic garbage collector: its first full
    # pass then fell inside the job's first log (~0.23 s of the job's wait). Do it now,
    # while the job computes, and move them out of its sight (they live as long as we do).
    gc.collect()
    gc.freeze()


def _load_plots() -> None:
    """Import matplotlib for the figures jobs hand over (``draw``), once the first job is done:
    ~1 s that no job waits for after that. Holds the request lock meanwhile."""
    with _HANDLING:
        if "pipeline.plots" in sys.modules:
            return
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401

        import pipeline.plots  # noqa: F401

        gc.collect()
        gc.freeze()


def serve() -> None:
    """A job's own tracking process: answer requests from standard input until it closes.

    The answers own the real standard output; anything mlflow prints goes to stderr."""
    # Ctrl-C reaches the whole process group: the job handles it and lets this process
    # finish logging what was queued (bounded by the job's wait), so ignore it here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers: Any = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    _warm()
    _serve_lines(sys.stdin.buffer, answers)


#: How long a shared tracking process that is starting waits for one that is ending (and
#: still holds the lock) to finish.
LOCK_WAIT_S = 30.0


def serve_shared(address: Path, idle_s: float) -> int:
    """The shared tracking process (``tracking.shared_address``): serve every job that connects
    to the Unix socket ``address``, each connection in a thread of its own and one request at
    a time, until no job has been connected for ``idle_s`` seconds.

    One process per address: it holds ``<address>.lock`` (flock) for its whole life, so a
    second one started at the same moment waits for the lock, then finds the socket served
    and ends. Leaving, it first removes the socket (so no job can connect any more), then
    serves the jobs that connected before that to the end. A process killed outright leaves a
    socket nobody listens on: the next job gets "connection refused" and starts a new one,
    which removes it."""
    import fcntl
    import socket

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the jobs
    signal.signal(signal.SIGTERM, lambda *_: _STOPPING.set())  # leave once the connected jobs are done
    lock = open(str(address) + ".lock", "a")
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() > deadline:
                return 0
            time.sleep(0.05)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(address))
        return 0  # served already (by one that got the lock first and is still there)
    except OSError:
        pass
    finally:
        probe.close()
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")  # for `python -m pipeline.sync --stop`
    lock.flush()
    try:
        address.unlink()  # left by one that was killed
    except FileNotFoundError:
        pass
    try:
        os.ftruncate(2, 0)  # the log file (stderr) is this process's alone now
    except OSError:
        pass  # not a file
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)
    try:
        server.bind(str(address))
    finally:
        os.umask(old_mask)
    server.listen(64)
    inode = address.stat().st_ino
    _warm()

    state = {"active": 0, "last": time.monotonic()}
    done = threading.Condition()

    def session(conn: Any) -> None:
        try:
            with conn, conn.makefile("rb") as lines, conn.makefile("wb", buffering=0) as answers:
                _serve_lines(lines, answers, journal=True)
        except OSError:
            pass
        finally:
            with done:
                state["active"] -= 1
                state["last"] = time.monotonic()
                done.notify_all()
                idle = state["active"] == 0
            if idle and "pipeline.plots" not in sys.modules:
                threading.Thread(target=_load_plots, name="plots").start()

    def start(conn: Any) -> None:
        conn.setblocking(True)
        _RELEASED.clear()  # another job wants it
        with done:
            state["active"] += 1
        threading.Thread(target=session, args=(conn,), name="job").start()

    server.settimeout(0.25)
    while True:
        try:
            start(server.accept()[0])
            continue
        except socket.timeout:
            pass
        if _STOPPING.is_set():
            break
        with done:
            if state["active"] == 0 and (_RELEASED.is_set() or time.monotonic() - state["last"] >= idle_s):
                break
    try:  # no new job can connect from here on ...
        if address.stat().st_ino == inode:
            address.unlink()
    except FileNotFoundError:
        pass
    server.setblocking(False)
    while True:  # ... and those that connected just before are served
        try:
            start(server.accept()[0])
        except (BlockingIOError, socket.timeout):
            break
    server.close()
    with done:
        done.wait_for(lambda: state["active"] == 0)
    return 0


def sync(folders: Sequence[Path], uri: str | None = None) -> tuple[int, int, list[str]]:
    """Log every finished job under ``folders`` and close interrupted sweeps.

    Returns (jobs logged or found logged, sweeps closed, errors)."""
    from pipeline.summary import log_pending, summarize

    errors: list[str] = []
    logged = 0
    for results in res.find_results(list(folders)):
        try:
            record = res.read_record(results)
            if record["tracking"] is None and uri is None:
                continue  # a job run with tracking=none: logged only when asked (--tracking-uri)
            run_id = tracking.log_results(results, _store(record, uri))
        except (tracking.TrackingError, InputError) as err:
            errors.append(f"{results}: {err}")
            continue
        logged += 1
        failed = results.parent / res.FAILED
        if failed.exists():  # the job had finished; only its logging had failed
            failed.unlink()
        print(f"{results.parent}: MLflow run {run_id}")
    closed = 0
    sweeps = sorted({p.parent for folder in folders for p in _sweep_files(Path(folder))})
    for sweep_dir in sweeps:
        if (sweep_dir / res.SUMMARY / "sweep_table.csv").exists():
            continue  # the sweep ended and closed its parent itself
        jobs = res.find_results([sweep_dir])
        if not jobs:
            continue
        record = res.read_record(jobs[0])
        if record["tracking"] is None and uri is None:
            continue
        settings = _store(record, uri)
        objective = str(record["params"].get("objective", "ndcg_at_10"))
        try:
            log_pending(sweep_dir, settings, retry_failed=True)
            print(summarize(sweep_dir, objective, settings, status="KILLED"))
            closed += 1
        except (tracking.TrackingError, InputError) as err:
            errors.append(f"{sweep_dir}: {err}")
    return logged, closed, errors


def _store(record: dict[str, Any], uri: str | None) -> tracking.StoreSettings:
    """The store a record names, or ``uri`` (--tracking-uri) with the record's other settings."""
    settings = tracking.StoreSettings.of(record["tracking"] or {"uri": uri})
    return settings if uri is None else dataclasses.replace(settings, uri=uri)


def _sweep_files(folder: Path) -> list[Path]:
    if (folder / res.SWEEP_FILE).is_file():
        return [folder / res.SWEEP_FILE]
    return list(folder.rglob(res.SWEEP_FILE))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.sync",
        description="Log to MLflow every finished job (results/record.json) that is not in its store yet, "
                    "and close the parent runs of interrupted sweeps as KILLED. Safe to run any number of times.",
    )
    parser.add_argument("folders", nargs="*", type=Path, help="job, sweep or outputs folders (default: outputs)")
    parser.add_argument("--tracking-uri", help="log to this store instead of the one each job recorded")
    parser.add_argument("--stdin", action="store_true", help=argparse.SUPPRESS)  # a job's own tracking process
    parser.add_argument("--serve", type=Path, metavar="SOCKET", help=argparse.SUPPRESS)  # the shared one
    parser.add_argument("--idle", type=float, default=tracking.TRACKER_IDLE_S, help=argparse.SUPPRESS)
    parser.add_argument("--stop", action="store_true",
                        help="stop this user's shared tracking processes (once the jobs connected to them end) and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.stdin:
        serve()
        return 0
    if args.serve is not None:
        return serve_shared(args.serve, args.idle)
    if args.stop:
        stopped = tracking.stop_shared()
        print(f"stopped {len(stopped)} shared tracking process(es)" + (f": pid {', '.join(map(str, stopped))}" if stopped else ""))
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    folders = args.folders or [Path("outputs")]
    for folder in folders:
        if not folder.exists():
            print(f"error: {folder}: no such folder", file=sys.stderr)
            return 2
    logged, closed, errors = sync(folders, args.tracking_uri)
    print(f"synced {logged} job(s), closed {closed} interrupted sweep(s)")
    for error in errors:
        print(error, file=sys.stderr)
    return 3 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

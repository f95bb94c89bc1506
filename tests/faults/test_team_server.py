"""Team scale on a real database: ``tracking=server`` against ``mlflow server`` with a
PostgreSQL backend store and MLflow's basic-auth app, as docs/team-server.md runs it (the
session's ``team_server``, tests/e2e_servers.py: this file's tests share it).

- Three sweeps started at once by one user (three processes): a joblib sweep of 2 jobs, whose
  two worker processes log too, and two basic sweeps of 1 job each; 4 job runs and 3 parent
  runs reach PostgreSQL, none lost, every job FINISHED and nested under its own sweep's
  parent, its metrics those of its folder.
- A job without credentials is refused with one clear line, exit status 3 and its results
  on disk; a second user's job with MLFLOW_TRACKING_USERNAME/PASSWORD lands in the shared
  experiment; no password reaches params, tags, the job's output or its folder.
- Secrets stay secret (issue 28): ``tracking.uri=http://alice:PASSWORD@host`` reaches the
  server, and the password is in no file, param, tag, description or log line: not in
  ``record.json``, ``config.yaml``, ``mlflow_run.json``, the ``.hydra/`` copies Hydra saves, a
  sweep's ``multirun.yaml`` and ``mlflow_sweep.json``, the jobs' logs, the console, nor in any
  run the server holds (the jobs' and the sweep parent's params, tags, ``hydra_overrides``,
  descriptions) or any artifact it stores. ``pipeline.sync`` later reaches the server with
  MLFLOW_TRACKING_USERNAME/PASSWORD, the credentials the records do not hold;
  ``pipeline.sync --tracking-uri`` and ``pipeline.compare --log --tracking-uri`` with the
  password in the URI show it nowhere either (issue 33): not on the console, in report.json
  or the runs. (This was tests/faults/test_secrets.py, on a server of its own.)

The sweeps and the refused job are processes (what they check is three processes at once, a
process's exit status and console): the refused job is ``python -m pipeline``, the three
sweeps and the password test's sweep children forked from this process that run
``pipeline/__main__.py`` (tests/forked.py, without a new interpreter's imports); the accepted
job, the job with the password in its URI and the syncs run in this process
(tests/commands.py), with the environment they would get. Before the forks this process
imports what a sweep imports (tests/forked.py's ``import_what_a_sweep_imports``), once, for the
children to inherit.

- The server is two processes, the ``mlflow server`` command and one uvicorn worker, without
  MLflow's GenAI job runner (its huey consumers: eight more processes).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from commands import run_command, run_job_command
from e2e_servers import quiet_env
from forked import import_what_a_sweep_imports, pipeline_child

REPO = Path(__file__).resolve().parents[2]

#: Each sweep's launcher and its k values (its jobs). The claim is three writers at once, each
#: job nested under its own sweep's parent, not the sweeps' size: the basic launcher's job runs
#: in the sweep's process, which holds that, and one job is enough. One sweep is joblib's, two
#: jobs in two loky worker processes that log with the credentials they inherit (the only
#: joblib sweep against a server in the suite); a loky worker pays the imports again (~3 s of
#: CPU each), so the other two are basic.
SWEEPS = (("joblib", (1, 2)), ("basic", (1,)), ("basic", (2,)))
SWEEP_TIMEOUT_S = 420  # all three sweeps together: ~15 s on 2 idle cores
JOB_TIMEOUT_S = 120
EXPERIMENT = "sample"  # the default dataset's name
RUN_LINE = re.compile(r"^MLflow run (?P<run_id>[0-9a-f]{32}) \((?P<name>[^)]*)\) in experiment '(?P<exp>[^']*)' at (?P<uri>\S+)$", re.M)


def refused_line(uri: str) -> str:
    """The one line a job prints when the server answers 401 (no or wrong credentials).
    pipeline/tracking/__init__.py maps MLflow's RestException 401/403 to it."""
    return (f"error: the MLflow server at {uri} refused the credentials "
            "(set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)")


def _explain(proc_or_text) -> str:
    if isinstance(proc_or_text, str):
        return proc_or_text[-6000:]
    p = proc_or_text
    return f"exit {p.returncode}\n--- stdout ---\n{p.stdout[-4000:]}\n--- stderr ---\n{p.stderr[-4000:]}"


def _overrides(team, folder: Path, *overrides: str) -> list[str]:
    return ["tracking=server", f"tracking.uri={team.uri}", "tracking.http_retries=0", f"paths.root={folder}",
            f"hydra.run.dir={folder / 'run'}", *overrides]


def _start_job(team, user: str | None, folder: Path, *overrides: str) -> subprocess.Popen:
    """``python -m pipeline`` as ``user`` (None: no credentials), started: ``_finish`` waits."""
    return subprocess.Popen([sys.executable, "-m", "pipeline", *_overrides(team, folder, *overrides)], cwd=REPO,
                            env=team.env(user), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def _finish(proc: subprocess.Popen, timeout: float = JOB_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _as_user(monkeypatch, env: dict[str, str]) -> None:
    """This process's environment as a job's would be: no MLFLOW_* of the test's, ``env``'s."""
    for key in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("MLFLOW_"):
            monkeypatch.setenv(key, value)


def _job_here(team, user: str | None, folder: Path, monkeypatch, *overrides: str):
    """The job of ``_start_job`` in this process (tests/commands.py): its status and output."""
    _as_user(monkeypatch, team.env(user))
    return run_job_command(*_overrides(team, folder, *overrides))


def _no_secret(secret: str, where: str, text: str) -> None:
    assert secret not in text, f"the password appears in {where}"


def _files_without(secret: str, folder: Path) -> None:
    """No file under ``folder`` holds the password (record.json, config.yaml, Hydra's own
    .hydra/*.yaml, logs, markers...)."""
    checked = 0
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix not in {".png", ".npy", ".parquet"}:
            _no_secret(secret, str(path), path.read_text(errors="replace"))
            checked += 1
    assert checked, f"no files under {folder}"


def _run_without(secret: str, run) -> None:
    for key, value in {**run.data.params, **run.data.tags}.items():
        _no_secret(secret, f"param/tag {key} of run {run.info.run_id}", f"{key}={value}")


# --------------------------------------------------------------------------- three sweeps at once
@pytest.mark.slow
def test_three_sweeps_at_once_lose_nothing(team_server, tmp_path, monkeypatch):
    user = "alice"
    password = team_server.users[user]
    procs = []
    import_what_a_sweep_imports()
    for n, (launcher, ks) in enumerate(SWEEPS, start=1):
        root = tmp_path / f"sweep{n}"
        root.mkdir()
        # joblib's n_jobs: 2, not its default of one worker per CPU (on a bigger machine, idle workers)
        workers = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
        args = ["-m", f"hydra/launcher={launcher}", *workers, f"k={','.join(map(str, ks))}", "tracking=server",
                f"tracking.uri={team_server.uri}", f"paths.root={root}", f"hydra.sweep.dir={root / 'multirun'}"]
        # Three processes forked from this one, each in a session of its own (joblib's workers
        # with it): tests/forked.py runs pipeline/__main__.py there, without a new interpreter.
        procs.append((root, ks, pipeline_child(*args, env=team_server.env(user), cwd=REPO, prepare=os.setsid)))

    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while any(proc.poll() is None for _, _, proc in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    for _, _, proc in procs:  # the sweeps and their joblib workers
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    outputs = {root: proc.wait(timeout=30) for root, _, proc in procs}
    for root, _, _ in procs:
        done = outputs[root]
        assert done.returncode == 0, (f"{root.name} exited {done.returncode} (-9: killed after "
                                      f"{SWEEP_TIMEOUT_S} s)\n{_explain(done.stdout)}\n{_explain(done.stderr)}\n"
                                      f"--- server ---\n{team_server.server.log_tail()}")

    client = team_server.client(monkeypatch)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    all_runs = []
    for root, ks, _ in procs:
        sweep_dir = root / "multirun"
        sweep_id = json.loads((sweep_dir / "mlflow_sweep.json").read_text())["sweep_id"]
        runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.sweep_id = '{sweep_id}'",
                                  max_results=1000)
        all_runs += runs
        parents = [r for r in runs if r.data.tags.get("sweep_parent") == "true"]
        assert len(parents) == 1, f"{root.name}: {len(parents)} parent runs for sweep {sweep_id}"
        parent = parents[0]
        assert parent.info.status == "FINISHED", f"{root.name}: parent run {parent.info.status}"
        jobs = [r for r in runs if r is not parent]
        # the swept keys first; a key of one value is not swept (a single job's name: "bm25 k1")
        names = [f"k{k} bm25" if len(ks) > 1 else f"bm25 k{k}" for k in ks]
        assert sorted(r.info.run_name for r in jobs) == sorted(names), root.name
        assert len({r.data.tags["job_key"] for r in jobs}) == len(ks), f"{root.name}: a job logged twice"
        for run in jobs:
            assert run.info.status == "FINISHED", f"{root.name}: {run.info.run_name} is {run.info.status}"
            assert run.data.tags.get("mlflow.parentRunId") == parent.info.run_id, \
                f"{root.name}: {run.info.run_name} is not nested under its sweep's parent"
        # Each run holds its own folder's numbers (no job logged into another's run).
        on_disk = {}
        for record in sweep_dir.glob("*/results/record.json"):
            data = json.loads(record.read_text())
            on_disk[data["run_name"]] = data["metrics"]
            marker = json.loads((record.parent / "mlflow_run.json").read_text())
            assert marker["uri"] == team_server.uri
        assert sorted(on_disk) == sorted(r.info.run_name for r in jobs), f"{root.name}: job folders"
        for run in jobs:
            assert run.data.metrics["ndcg_at_10"] == pytest.approx(on_disk[run.info.run_name]["ndcg_at_10"],
                                                                   rel=1e-12, abs=1e-15)
            assert run.data.metrics["n_queries"] == on_disk[run.info.run_name]["n_queries"]

    assert len(all_runs) == sum(len(ks) + 1 for _, ks in SWEEPS)
    # They are in PostgreSQL: the server's backend store, read directly.
    ids = [r.info.run_id for r in all_runs]
    stored = team_server.postgres.query("mlflow", "SELECT run_uuid, status FROM runs WHERE run_uuid = ANY(%s)", (ids,))
    assert sorted(stored) == sorted((r.info.run_id, "FINISHED") for r in all_runs)

    for root, _, _ in procs:  # alice's password: nowhere in what the sweeps wrote or logged
        stdout, stderr = outputs[root].stdout, outputs[root].stderr
        _no_secret(password, f"{root.name} stdout", stdout)
        _no_secret(password, f"{root.name} stderr", stderr)
        _files_without(password, root / "multirun")
    for run in all_runs:
        _run_without(password, run)


# --------------------------------------------------------------------------- the server's processes
def _group(pgid: int) -> list[str]:
    """The command lines of the processes of process group ``pgid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_the_team_server_is_two_processes_one_uvicorn_worker_and_no_job_runner(team_server):
    """What the server costs the suite (~11 s of CPU to start, mostly imports): the ``mlflow
    server`` command and the one uvicorn worker it starts (``--workers 1``), and none of the
    GenAI job runner's huey consumers that MLflow 3 starts unless
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false (tests/e2e_servers.py sets it for every server)."""
    procs = _group(team_server.server.proc.pid)
    assert len(procs) == 2, procs
    assert sum(" -m uvicorn " in p and "--workers 1 " in p for p in procs) == 1, procs
    assert not [p for p in procs if "huey" in p], procs


# --------------------------------------------------------------------------- credentials
@pytest.mark.slow
def test_credentials_refused_or_accepted_never_logged(team_server, tmp_path, monkeypatch):
    # No credentials: refused with one clear line and exit status 3, from a process; bob's job
    # (below, in this process) runs meanwhile.
    started = _start_job(team_server, None, tmp_path / "anon")
    user = "bob"
    password = team_server.users[user]
    job = _job_here(team_server, user, tmp_path / "bob", monkeypatch)
    anon = _finish(started)
    assert anon.returncode == 3, _explain(anon)
    results = (tmp_path / "anon" / "run" / "results").resolve()
    errors = [line for line in anon.stderr.splitlines() if line.startswith("error:")]
    assert errors == [refused_line(team_server.uri)], _explain(anon)
    assert f"The results are safe on disk in {results}" in anon.stderr, _explain(anon)
    assert "Traceback" not in anon.stdout + anon.stderr, _explain(anon)
    assert "MLflow run" not in anon.stdout
    assert json.loads((results / "metrics.json").read_text())["metrics"]["ndcg_at_10"] > 0
    assert (results / "record.json").is_file()

    # bob (not the user whose sweeps may have created the experiment) logs with his credentials.
    assert job.returncode == 0, _explain(job)
    match = RUN_LINE.search(job.stdout)
    assert match, f"no 'MLflow run ...' line\n{_explain(job)}"
    assert (match["exp"], match["uri"]) == (EXPERIMENT, team_server.uri)
    run = team_server.client(monkeypatch).get_run(match["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params, "no params logged"
    bob_results = tmp_path / "bob" / "run" / "results"
    on_disk = json.loads((bob_results / "metrics.json").read_text())["metrics"]
    assert run.data.metrics["ndcg_at_10"] == pytest.approx(on_disk["ndcg_at_10"], rel=1e-12, abs=1e-15)

    # The password is nowhere: params, tags, output, record.json, config.yaml, Hydra's files.
    _run_without(password, run)
    _no_secret(password, "the job's stdout", job.stdout)
    _no_secret(password, "the job's stderr", job.stderr)
    for name in ("record.json", "config.yaml"):
        assert (bob_results / name).is_file(), name
    _files_without(password, tmp_path / "bob")
    # ... nor in what the server stored for the run (the artifacts it was sent).
    for path in team_server.server.artifacts.rglob("*"):
        if path.is_file() and path.suffix != ".png":
            _no_secret(password, f"server artifact {path}", path.read_text(errors="replace"))


# --------------------------------------------------------------------------- a password in the URI
SECRETS_EXPERIMENT = "secrets"  # its own experiment on the shared server: its runs are counted
TIMEOUT_S = 300


def _env(**extra: str) -> dict[str, str]:
    env = quiet_env()  # no MLFLOW_* credentials inherited
    env.update(HF_HUB_OFFLINE="1", **extra)
    return env


def _files_holding_no(secret: str, folder: Path) -> int:
    """How many files under ``folder`` were read (every byte, binary files too); fails on the
    first that holds ``secret``."""
    checked = 0
    for path in folder.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the password is in {path}"
            checked += 1
    return checked


def _secrets_runs(client) -> list:
    """The runs of this test: the jobs' experiment and the comparisons' ('compare')."""
    ids = [e.experiment_id for e in client.search_experiments() if e.name in (SECRETS_EXPERIMENT, "compare")]
    return client.search_runs(ids, max_results=100) if ids else []


@pytest.mark.slow
def test_a_password_in_the_tracking_uri_is_written_nowhere(team_server, tmp_path, capsys, monkeypatch):
    password = team_server.users["alice"]
    uri_with_password = team_server.uri.replace("http://", f"http://alice:{password}@")
    sweep = tmp_path / "sweep"
    common = ["tracking=server", f"tracking.uri={uri_with_password}", f"tracking.experiment={SECRETS_EXPERIMENT}",
              f"paths.root={tmp_path / 'out'}"]
    # The sweep is a process (its console, Hydra's launcher lines): a child forked from this one
    # that runs pipeline/__main__.py (tests/forked.py; a new interpreter's imports would add
    # seconds and check nothing more here). The job runs in this process meanwhile, with the
    # environment a process of _env() would have.
    import_what_a_sweep_imports()
    started = pipeline_child("-m", "k=3,5", "verbose=true", *common, f"hydra.sweep.dir={sweep}", env=_env(),
                             cwd=REPO)
    try:
        _as_user(monkeypatch, _env())
        job = run_job_command(*common, f"hydra.run.dir={tmp_path / 'job'}", figures=True)  # its PNGs read too
    finally:
        swept = started.wait(TIMEOUT_S)
    assert job.returncode == 0, job.stderr[-3000:]
    assert swept.returncode == 0, swept.stderr[-3000:]
    for proc in (job, swept):
        assert password not in proc.stdout + proc.stderr
    assert "alice\\:***@" in swept.stdout  # verbose: the launcher's line of each job's overrides (Hydra escapes ":")
    # every file the job and the sweep wrote, and every artifact the server stores
    assert _files_holding_no(password, tmp_path) > 40
    assert (tmp_path / "job" / ".hydra" / "overrides.yaml").read_text().count("alice:***@") == 1
    assert (sweep / "multirun.yaml").is_file() and (sweep / "0" / ".hydra" / "hydra.yaml").is_file()
    assert _files_holding_no(password, team_server.server.artifacts) > 10

    client = team_server.client(monkeypatch)  # admin, for this test only
    runs = _secrets_runs(client)
    assert len(runs) == 4  # the job, the sweep's parent and its two jobs
    assert {r.info.status for r in runs} == {"FINISHED"}
    for run in runs:
        _run_without(password, run)
    jobs = [r for r in runs if r.data.tags.get("sweep_parent") != "true"]
    assert all(r.data.tags["hydra_overrides"].replace("\\", "").count("tracking.uri=http://alice:***@") == 1
               for r in jobs)
    assert all(r.data.params["tracking.uri"] == uri_with_password.replace(password, "***") for r in jobs)

    # The records name the server without the password; sync reaches it with the environment's.
    synced = run_command("sync", str(tmp_path / "job"), str(sweep),
                         env=_env(MLFLOW_TRACKING_USERNAME="alice", MLFLOW_TRACKING_PASSWORD=password))
    assert synced.returncode == 0, synced.stderr[-3000:]
    assert "sync: 0 logged, 3 already logged, 0 closed" in synced.stdout
    assert password not in synced.stdout + synced.stderr
    assert _files_holding_no(password, tmp_path) > 40

    # Every other command that takes a tracking URI, in this process (issue 33): sync and
    # compare --log, to a new run in "compare" and to the sweep's parent run.
    from pipeline.cli.compare import main as compare
    from pipeline.cli.sync import main as sync

    capsys.readouterr()
    assert sync([str(tmp_path / "job"), "--tracking-uri", uri_with_password]) == 0
    assert compare([str(tmp_path / "job"), str(sweep / "0"), "--log", "--tracking-uri", uri_with_password,
                    "--out", str(tmp_path / "compare"), "--n-resamples", "200", "--n-permutations", "200"]) == 0
    assert compare([str(sweep), "--log", "--tracking-uri", uri_with_password, "--out", str(tmp_path / "swept"),
                    "--n-resamples", "200", "--n-permutations", "200"]) == 0
    out, err = capsys.readouterr()
    assert password not in out + err
    assert f"at {team_server.uri}" in out and "sync: 0 logged, 1 already logged" in out
    logged = [json.loads((tmp_path / name / "report.json").read_text())["mlflow"] for name in ("compare", "swept")]
    assert [(m["uri"], m["sweep_parent"]) for m in logged] == [(team_server.uri, False), (team_server.uri, True)]
    assert _files_holding_no(password, tmp_path) > 50
    runs = _secrets_runs(client)
    assert len(runs) == 5  # the comparison's own run besides the four
    for run in runs:
        _run_without(password, run)
    assert _files_holding_no(password, team_server.server.artifacts) > 15


# --------------------------------------------------------------------------- the helpers (no server)
def test_redact_hides_passwords(monkeypatch):
    from pipeline.tracking import redact

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "env-Secret-123456")
    text = ("http://bob:url-Secret-123456@mlflow.lab:5000/#/ postgresql://mlflow:db-Secret-1@127.0.0.1:5432/mlflow "
            "password env-Secret-123456 at http://127.0.0.1:5000")
    out = redact(text)
    for secret in ("url-Secret-123456", "db-Secret-1", "env-Secret-123456"):
        assert secret not in out
    assert "http://bob:***@mlflow.lab:5000/#/" in out
    assert "postgresql://mlflow:***@127.0.0.1:5432/mlflow" in out
    assert out.endswith("at http://127.0.0.1:5000")
    assert redact("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    # a secret in the query string, also as Hydra escapes a sweep's override; other parameters stay
    assert redact("https://h/api?x=1&token=q-Secret-9&tokens=2") == "https://h/api?x=1&token=***&tokens=2"
    assert redact("http\\://h/?API_KEY\\=k-Secret-9") == "http\\://h/?API_KEY\\=***"
    from pipeline.tracking import StoreSettings

    settings = StoreSettings(uri="https://h/mlflow?token=q-Secret-9")
    assert settings.uri == "https://h/mlflow?token=***" and settings.login == "https://h/mlflow?token=q-Secret-9"
    assert "q-Secret-9" not in repr(settings) and "q-Secret-9" not in str(settings.as_dict())


def test_auth_refusal_names_the_fix(monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import PERMISSION_DENIED, UNAUTHENTICATED

    from pipeline.tracking import auth_refusal

    uri = "http://127.0.0.1:5000"
    try:  # wrapped, as the tracking code re-raises it
        try:
            raise MlflowException("API request to endpoint ... failed with error code 401 != 200",
                                  error_code=UNAUTHENTICATED)
        except MlflowException as exc:
            raise RuntimeError("logging failed") from exc
    except RuntimeError as wrapped:
        assert auth_refusal(wrapped, uri) == refused_line(uri).removeprefix("error: ")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "bob")
    denied = auth_refusal(MlflowException("Permission denied", error_code=PERMISSION_DENIED), uri)
    assert denied is not None and "bob" in denied and "403" in denied and "\n" not in denied
    assert auth_refusal(ConnectionError("connection refused"), uri) is None
    assert auth_refusal(MlflowException("bad filter"), uri) is None

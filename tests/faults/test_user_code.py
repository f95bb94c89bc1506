"""The user's retriever code behind one boundary (issue 33, items 1 and 2).

Reproduced first on the code before: a function that calls ``sys.exit(0)`` ended the job (and
a sweep of it) with status 0, no error and no summary; a function that never returns hung the
job forever and Ctrl-C could not stop it (the thread pool waited for its threads). Now: any
exception from user code, ``SystemExit`` and ``KeyboardInterrupt`` included, is that query's
failure in one line naming the retriever and the query; ``retriever.timeout_s`` fails a stuck
call; Ctrl-C ends a job within seconds while a call is stuck (130, nothing written, no process
left); a sweep goes on past a failing job, writes its summary and closes its parent run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from pipeline.errors import InputError
from retrievers.calls import run_calls
from retrievers.python_function import PythonRetriever

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["d001", "d002", "d003"]

#: The user's module: one function per behaviour; ``stuck`` writes a file once called.
USER_MODULE = textwrap.dedent(
    """
    import os, posix, sys, time

    def good(text, k):
        return [("d001", 2.0), ("d002", 1.0)] if text.startswith("How") else [("d003", 1.0)]

    def exit_(text, k):
        sys.exit(0)

    def interrupt(text, k):
        raise KeyboardInterrupt

    def exit_on_chain(text, k):
        if "chain" in text:
            sys.exit(3)
        return good(text, k)

    def hard_exit(text, k):
        os._exit(0)

    def fork_and_exit(text, k):  # a child of the user's code ends as os._exit says (multiprocessing's do)
        pid = os.fork()
        if pid == 0:
            try:
                os._exit(7)
            finally:
                posix._exit(9)  # only if os._exit raised in the child
        return [("d001", float(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])))]

    def stuck(text, k):
        flag = os.environ.get("STUCK_FLAG")
        if flag:
            open(flag, "a").close()
        time.sleep(3600)
    """
)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """The module above under a name of its own (a fresh import per test)."""
    name = f"ur_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def search(target: str, texts: list[str], **settings):
    retriever = PythonRetriever(target, show_progress_bar=False, **settings)
    retriever.index(DOCS, DOCS)
    return retriever, retriever.search([f"q{i}" for i in range(len(texts))], texts, 2)


@pytest.mark.parametrize("function, what", [("exit_", "it called sys.exit(0)"),
                                            ("interrupt", "KeyboardInterrupt")])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_sys_exit_and_keyboard_interrupt_raised_by_user_code_are_the_querys_failure(user_module, function, what,
                                                                                     concurrency):
    with pytest.raises(InputError) as err:
        search(f"{user_module}:{function}", ["a", "b"], concurrency=concurrency)
    message = str(err.value)
    assert message.startswith(f"error: retriever=python: query 'q0' failed: {what}") and "\n" not in message


def test_a_batched_function_that_exits_fails_its_batch(user_module):
    with pytest.raises(InputError, match=r"the batch of queries 'q0'..'q1' \(2 queries\) failed: it called sys.exit"):
        search(f"{user_module}:exit_", ["a", "b"], batched=True)


def _errors_in_a_child(*attempts) -> list[str]:
    """Each attempt in one child forked from this process (tests/forked.py), the line of each
    InputError it raised: code that calls ``os._exit`` runs there, so that without the guard it
    is the child that ends (status 0, not a word, as the job did), not this test's process."""
    from forked import forked

    def task() -> int:
        for attempt in attempts:
            try:
                attempt()
            except InputError as err:
                print(err)
        return 3

    done = forked(task)
    assert done.returncode == 3, done
    return done.stdout.splitlines()


@pytest.mark.parametrize("settings, failed", [({"concurrency": 1}, "query 'q0'"), ({"concurrency": 4}, "query 'q0'"),
                                              ({"batched": True}, "the batch of queries 'q0'..'q1' (2 queries)")])
def test_os_exit_in_the_users_code_is_its_querys_failure(user_module, settings, failed):
    """``os._exit``, which no ``except`` catches, fails the query (or batch) in one line as
    ``sys.exit`` does."""
    assert _errors_in_a_child(lambda: search(f"{user_module}:hard_exit", ["a", "b"], **settings)) == [
        f"error: retriever=python: {failed} failed: it called os._exit(0) "
        "(retriever.on_error=skip scores such queries as empty and goes on)"]


def test_os_exit_in_a_factory_or_at_import_is_one_line(tmp_path, monkeypatch):
    """The user's factory (LangChain, LlamaIndex) and the import of the user's module run behind
    the same guard as each call."""
    from retrievers.calls import build_from_factory, load_callable

    (tmp_path / "ur_hard_factory.py").write_text("import os\ndef make():\n    os._exit(3)\n")
    (tmp_path / "ur_hard_import.py").write_text("import os\nos._exit(4)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _errors_in_a_child(lambda: build_from_factory("ur_hard_factory:make", 10, {}, object, "retriever"),
                              lambda: load_callable("ur_hard_import:search", "retriever.target")) == [
        "error: retriever.factory=ur_hard_factory:make failed: it called os._exit(3)",
        "error: retriever.target=ur_hard_import:search: cannot import 'ur_hard_import': it called os._exit(4)"]


def test_os_exit_anywhere_but_in_the_users_call_ends_its_process_with_its_status(user_module):
    """The guard turns ``os._exit`` into a failure only in a thread running the user's code, in
    its process: a child that code forks ends with the status it gives (7, as the score), and
    once the guard is in place a forked child of this process (tests/forked.py: its main thread,
    outside the user's code) ends with its own (5)."""
    from forked import forked

    from retrievers import calls

    _, ranking = search(f"{user_module}:fork_and_exit", ["a"])
    assert ranking.scores[0, 0] == 7.0
    assert os._exit is calls._guarded_exit
    assert forked(lambda: os._exit(5)).returncode == 5


def test_on_error_skip_goes_on_past_an_exiting_query(user_module):
    retriever, ranking = search(f"{user_module}:exit_on_chain", ["How chain", "How else"], on_error="skip")
    assert ranking.doc_idx.tolist() == [[-1, -1], [0, 1]]
    assert retriever.report["external_failed_queries"] == 1


def test_a_stuck_call_fails_after_the_timeout_and_the_others_go_on(user_module):
    start = time.monotonic()
    with pytest.raises(InputError, match=r"query 'q0' failed: timed out: no answer after 0.3 s \(retriever.timeout_s\)"):
        search(f"{user_module}:stuck", ["a"], timeout_s=0.3)
    assert time.monotonic() - start < 3


def test_timeouts_replace_the_stuck_workers():
    """Two of four calls hang; with two workers both are replaced, so the other two still run."""
    import threading

    release = threading.Event()

    def call(i: int) -> int:
        if i < 2:
            release.wait(30)
        return i * 10

    start = time.monotonic()
    try:
        got = list(run_calls(call, 4, workers=2, timeout_s=0.3))
    finally:
        release.set()
    assert [type(err).__name__ if err else result for result, err in got] == ["CallTimeout", "CallTimeout", 20, 30]
    assert time.monotonic() - start < 3


def test_timeout_settings_are_checked():
    with pytest.raises(ValueError, match="timeout_s must be a number of seconds >= 0"):
        PythonRetriever("x:y", timeout_s=-1)
    assert PythonRetriever("x:y", timeout_s=0).timeout_s is None and PythonRetriever("x:y").timeout_s == 60.0


def test_a_module_that_exits_at_import_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "ur_exits_at_import.py").write_text("import sys\nsys.exit(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InputError, match=r"cannot import 'ur_exits_at_import': it called sys.exit\(1\)"):
        search("ur_exits_at_import:search", ["a"])


# --------------------------------------------------------------------------- in processes


def _env(tmp_path: Path, **extra: str) -> tuple[dict[str, str], str]:
    marker = f"outlive-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]), PIPELINE_TEST_MARKER=marker, **extra)
    return env, marker


def _carriers(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _assert_nothing_left(marker: str) -> None:
    deadline = time.monotonic() + 2
    while (left := _carriers(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left alive: {left}"


def _module(tmp_path: Path) -> str:
    (tmp_path / "ur.py").write_text(USER_MODULE)
    return "ur"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_ctrl_c_ends_a_job_whose_call_is_stuck(tmp_path):
    module = _module(tmp_path)
    flag = tmp_path / "called"
    env, marker = _env(tmp_path, STUCK_FLAG=str(flag))
    job = tmp_path / "job"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "tracking=none", f"paths.root={tmp_path}",
                             f"hydra.run.dir={job}", "retriever=python", f"retriever.target={module}:stuck",
                             "retriever.timeout_s=null"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "the user function was never called"
        time.sleep(0.05)
    time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the job did not end within 10 s of Ctrl-C")
    assert time.monotonic() - sent < 5
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted (SIGINT)" in err and "Traceback" not in err
    assert not (job / "results").exists()  # nothing half-written
    assert "interrupted (SIGINT): the job stopped before its end" in (job / "pipeline.log").read_text()
    _assert_nothing_left(marker)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_a_stuck_call_times_out_and_the_job_exits_2(tmp_path):
    module = _module(tmp_path)
    env, marker = _env(tmp_path)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipeline", "tracking=none", f"paths.root={tmp_path}",
                           f"hydra.run.dir={tmp_path / 'job'}", "retriever=python", f"retriever.target={module}:stuck",
                           "retriever.timeout_s=1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: retriever=python: query 'q01' failed: timed out: no answer after 1 s (retriever.timeout_s)")
    assert time.monotonic() - start < 60
    _assert_nothing_left(marker)


@pytest.mark.slow
def test_a_job_whose_retriever_calls_os_exit_exits_2_in_one_line(tmp_path, user_module):
    """The job (a child forked from this process, tests/forked.py) had ended with status 0, no
    results and not a word."""
    from forked import pipeline_child

    env, _ = _env(tmp_path)
    done = pipeline_child("tracking=none", f"paths.root={tmp_path}", f"hydra.run.dir={tmp_path / 'job'}",
                          "retriever=python", f"retriever.target={user_module}:hard_exit", env=env, cwd=ROOT).wait()
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines()[-1] == (
        "error: retriever=python: query 'q01' failed: it called os._exit(0) "
        "(retriever.on_error=skip scores such queries as empty and goes on)"), done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "job" / "results").exists()


@pytest.mark.slow
def test_a_sweep_goes_on_past_a_job_whose_retriever_exits(tmp_path, user_module, store):
    """The issue's command, in 2 jobs (it had 4, 2 of them failing): the first job fails in
    one line, the sweep goes on to the second; the summary is written and the parent run closed
    as FAILED; the sweep exits 2. In this process (tests/commands.py): a ``sys.exit(0)`` that
    escaped the retriever would end the sweep there with status 0, as it ended the process; the
    exit status 2 of a sweep process with a failed job is checked in a process by
    tests/pipeline/test_app_sweeps.py (test_a_failing_job_does_not_stop_the_sweep). Its store
    is the ``store`` fixture's migrated copy."""
    from commands import run_pipeline_command
    from mlflow import MlflowClient

    from pipeline import tracking

    env, _ = _env(tmp_path)
    sweep = tmp_path / "sweep"
    done = run_pipeline_command("-m", "retriever=python", f"retriever.target={user_module}:exit_,{user_module}:good",
                                f"paths.root={tmp_path}", f"tracking.uri={store}", f"hydra.sweep.dir={sweep}",
                                env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    failed = [line for line in done.stderr.splitlines() if line.startswith("job ")]
    assert len(failed) == 1 and all("failed: it called sys.exit(0)" in line for line in failed), done.stderr
    assert failed[0].startswith("job 0"), done.stderr  # the first job failed ...
    assert [p.parent.parent.name for p in sweep.glob("*/results/record.json")] == ["1"]  # ... and the next one ran
    assert (sweep / "summary").is_dir()
    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parents = [r for r in runs if r.data.tags.get(tracking.TAG_SWEEP_PARENT) == "true"]
    assert len(parents) == 1 and parents[0].info.status == "FAILED"

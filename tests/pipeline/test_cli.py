"""The one front door and the one error model (issue 34): ``pipeline.cli`` and ``pipeline.errors``.

In-process: the runner's one line and exit status for each kind of error, the one parser's
one-line usage error, the dispatcher and its console script, the old ``pipeline.<command>``
spellings (they run, and cannot be imported), the job's unwrapping of Hydra's errors, and
the one compose and the one default tracking URI.
"""

from __future__ import annotations

import importlib
import runpy
import signal
import sys
import tomllib
from pathlib import Path

import pytest
from hydra.errors import InstantiationException

from pipeline import config, job
from pipeline.cli import COMMANDS
from pipeline.cli import __main__ as front
from pipeline.cli import fetch as fetch_command
from pipeline.cli.runner import Parser, run
from pipeline.errors import InputError, Interrupted, PipelineError, StoreError, exit_line
from pipeline.io.fetch import FetchFailed
from pipeline.tracking import TrackingError
from retrievers.dense.ray_encode import RayFailed

REPO = Path(__file__).resolve().parents[2]
QRELS = REPO / "pipeline" / "sample" / "qrels" / "test.tsv"
RUN = REPO / "tests" / "golden" / "inputs" / "sample_run.trec"
NAMES = ("score", "compare", "sync", "pool", "judgments", "fetch", "index")


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    """The runner's ``start`` sets these (setdefault) where there is no terminal: keep them local."""
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE", "NO_COLOR"):
        monkeypatch.setenv(name, "1")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# ----------------------------------------------------------------------------- the error model


def test_each_error_has_its_line_and_status():
    assert exit_line(InputError("bad grade", "q.tsv", 3)) == ("error: q.tsv:3: bad grade", 2)
    assert exit_line(TrackingError("cannot reach http://h:5000")) == ("error: cannot reach http://h:5000", 3)
    assert exit_line(job.TrackingFailed("error: the store failed\nresults on disk"))[1] == 3
    assert exit_line(FetchFailed("error: HTTP 404")) == ("error: HTTP 404", 3)
    assert exit_line(RayFailed("no cluster")) == ("error: no cluster", 3)  # an InputError spelled exit_code = 3
    assert exit_line(KeyboardInterrupt()) == ("interrupted (SIGINT)", 130)
    assert exit_line(Interrupted(signal.SIGTERM)) == ("interrupted (SIGTERM)", 143)
    assert exit_line(Interrupted(signal.SIGINT, "interrupted; run it again")) == ("interrupted; run it again", 130)
    assert exit_line(ValueError("first\nsecond")) == ("error: ValueError: first", 1)


def test_the_classes_form_one_hierarchy_and_interrupted_passes_except_exception():
    for cls, status in ((InputError, 2), (StoreError, 3), (TrackingError, 3), (job.TrackingFailed, 3),
                        (FetchFailed, 3)):
        assert issubclass(cls, PipelineError) and cls.exit_status == status, cls
    assert issubclass(TrackingError, StoreError) and issubclass(FetchFailed, StoreError)
    assert InputError("x").exit_code == 2  # the older name still answers
    with pytest.raises(Interrupted):
        try:
            raise Interrupted(signal.SIGTERM)
        except Exception:  # what a catch around user code does: it must not swallow a stop
            pytest.fail("Interrupted was caught as an Exception")


def test_the_job_finds_the_error_behind_hydras_wrappers():
    try:
        try:
            raise ValueError("k1 must be >= 0, got -1")
        except ValueError as cause:
            raise InstantiationException("Error in call to target\nfull_key: retriever") from cause
    except InstantiationException as wrapped:
        found = job.user_error(wrapped)
    assert isinstance(found, InputError) and exit_line(found) == ("error: retriever: k1 must be >= 0, got -1", 2)
    store = TrackingError("down")
    try:
        raise RuntimeError("while logging") from store
    except RuntimeError as outer:
        assert job.user_error(outer) is store
    assert job.user_error(ValueError("a bug")) is None


# ----------------------------------------------------------------------------- the runner


def _parser() -> Parser:
    parser = Parser(prog="python -m pipeline.cli test")
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--debug", action="store_true")
    return parser


@pytest.mark.parametrize("error, status, line", [
    (InputError("bad", "f.tsv"), 2, "error: f.tsv: bad"),
    (TrackingError("cannot open http://me:s3cr3t-pw@host:5000"), 3, "error: cannot open http://me:***@host:5000"),
    (KeyboardInterrupt(), 130, "interrupted (SIGINT)"),
    (Interrupted(signal.SIGTERM), 143, "interrupted (SIGTERM)"),
])
def test_the_runner_prints_one_line_and_returns_the_status(error, status, line, capsys):
    def body(args):
        raise error

    assert run(_parser(), body, []) == status
    assert _one_line(capsys) == line


def test_the_runner_returns_the_bodys_status_and_leaves_bugs_and_debug_to_tracebacks(capsys):
    assert run(_parser(), lambda args: None, []) == 0
    assert run(_parser(), lambda args: args.n, ["--n", "4"]) == 4

    def bug(args):
        raise ZeroDivisionError("a bug")

    with pytest.raises(ZeroDivisionError):
        run(_parser(), bug, [])

    def bad(args):
        raise InputError("bad")

    with pytest.raises(InputError):
        run(_parser(), bad, ["--debug"])


def test_the_parser_error_is_one_line_and_status_2(capsys):
    with pytest.raises(SystemExit) as stop:
        run(_parser(), lambda args: 0, ["--n", "x"])
    assert stop.value.code == 2
    assert _one_line(capsys) == "error: argument --n: invalid int value: 'x'"  # argparse alone prints the usage too


def test_an_interrupted_download_says_how_to_continue(monkeypatch, tmp_path, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(fetch_command, "fetch", interrupted)
    assert fetch_command.main(["scifact", "--into", str(tmp_path)]) == 130
    assert _one_line(capsys) == "interrupted; run the same command again to continue the download"


# ----------------------------------------------------------------------------- the front door


def test_help_lists_every_command_once_with_one_line(capsys):
    assert front.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "python -m pipeline.cli COMMAND" in out and "rag-eval COMMAND" in out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS) and sorted(listed) == sorted(NAMES)
    assert front.main([]) == 2
    assert front.main(["nope"]) == 2 and "'nope' is not a command" in capsys.readouterr().err


def test_a_command_runs_through_the_front_door_and_the_console_script(capsys):
    import json

    script = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["rag-eval"]
    module, _, name = script.partition(":")
    assert getattr(importlib.import_module(module), name) is front.main
    assert front.main(["score", str(QRELS), str(RUN), "--json", "--k", "10"]) == 0
    means = json.loads(capsys.readouterr().out)
    assert means["n_queries"] == 52 and 0.0 < means["ndcg_at_10"] < 1.0


@pytest.mark.parametrize("name", NAMES)
def test_the_old_modules_cannot_be_imported_and_name_the_new_place(name):
    with pytest.raises(ImportError, match=rf"pipeline\.cli\.{name} \(run it as `python -m pipeline\.cli {name}`\)"):
        importlib.import_module(f"pipeline.{name}")
    assert f"pipeline.{name}" not in sys.modules
    assert importlib.import_module(f"pipeline.cli.{name}").main.__module__ == f"pipeline.cli.{name}"


def test_the_old_spelling_still_runs(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pipeline.score", str(QRELS), str(RUN), "--k", "5"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module("pipeline.score", run_name="__main__", alter_sys=True)
    assert stop.value.code == 0
    assert "ndcg" in capsys.readouterr().out


# ----------------------------------------------------------------------------- one compose, one default store


def test_one_compose_and_one_default_tracking_uri():
    from pipeline.comparison import DEFAULT_TRACKING_URI as compare_default
    from pipeline.tracking.store import DEFAULT_TRACKING_URI

    cfg = config.compose(["tracking=local"])
    assert cfg.tracking.uri == DEFAULT_TRACKING_URI == compare_default == config.TrackingConfig().uri
    with pytest.raises(InputError, match=r"^error: retriever=nope: ") as err:
        config.compose(["retriever=nope"])
    assert "\n" not in str(err.value)

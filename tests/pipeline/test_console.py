"""What the console shows a newcomer: the app help, no ANSI codes or progress bars where no
terminal reads them, no plugin chatter, one line per failure (a model that cannot be had,
a failed Optuna trial), and every failed job's log holding its error."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from commands import run_command, run_pipeline_command

from pipeline import console
from pipeline.errors import InputError
from retrievers import dense

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MLFLOW_", "HF_", "TQDM_")) and k not in ("HYDRA_FULL_ERROR", "NO_COLOR")}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               **extra)
    return env


def _pipeline(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m pipeline ARGS``: a process (the unknown model's check times the whole process)."""
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, env=env or _env(),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ----------------------------------------------------------------------------- help


@pytest.mark.slow  # a Hydra start-up: 5 to 30 s on a loaded 2-core machine
def test_the_app_help_lists_groups_options_launchers_sweepers_and_examples():
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    done = run_pipeline_command("--help", env=_env())  # in this process (tests/commands.py)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("python -m pipeline") and "powered by Hydra" not in text
    conf = REPO / "conf"
    for group in sorted(p for p in conf.iterdir() if p.is_dir() and p.name != "hydra"):
        options = ", ".join(sorted(f.stem for f in group.glob("*.yaml")))
        assert f"{group.name}: {options}" in text, group.name
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        launchers, sweepers = loader.get_group_options("hydra/launcher"), loader.get_group_options("hydra/sweeper")
    GlobalHydra.instance().clear()
    listed = lambda title: re.findall(r"^(\w+)\s{2,}", text.split(f"== {title}")[1].split("==")[1], re.M)  # noqa: E731
    assert sorted(listed("Launchers")) == sorted(launchers)
    assert sorted(listed("Sweepers")) == sorted(sweepers)
    assert "== Examples ==" in text and "python -m pipeline.cli fetch" in text and "k: 10" in text  # $CONFIG
    # every command module (a pipeline/cli/*.py with a main()) is listed
    commands = sorted(p.stem for p in (REPO / "pipeline" / "cli").glob("*.py")
                      if "\ndef main(" in p.read_text() and p.stem not in ("__main__", "runner"))
    assert len(commands) >= 7, commands
    assert sorted(listed("Other commands")) == commands


def test_score_help_points_into_the_repository_and_explains_tie_break():
    done = run_command("score", "--help")
    assert done.returncode == 0
    # every page it names is in the repository (definition_card.md: the file each run writes)
    pages = set(re.findall(r"(?<![\w/.])((?:docs/)?[\w.-]+\.md)\b", done.stdout)) - {"definition_card.md"}
    assert "README.md" in pages and all((REPO / page).is_file() for page in pages), pages
    tie = done.stdout.split("\n  --tie-break")[1].split("\n  --")[0]  # its entry under options
    assert "trec_eval" in tie and "file_order" in tie


# ----------------------------------------------------------------------------- no terminal


def test_setup_turns_progress_bars_and_colour_off_only_without_a_terminal(monkeypatch):
    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    for var in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE", "NO_COLOR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "stderr", Stream(True))
    monkeypatch.setattr(sys, "stdout", Stream(True))
    console.setup()
    assert not {"HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE", "NO_COLOR"} & set(os.environ)
    monkeypatch.setattr(sys, "stderr", Stream(False))
    monkeypatch.setattr(sys, "stdout", Stream(False))
    console.setup()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == os.environ["TQDM_DISABLE"] == os.environ["NO_COLOR"] == "1"


@pytest.mark.parametrize("tty", [True, False])
def test_the_encoding_progress_bar_shows_on_a_terminal_only(monkeypatch, tty):
    # The retriever draws its own bar (passages and passages/s) on stderr, on a terminal only;
    # the model's own bar is always off.
    seen, written = [], []

    class Encoder:
        def encode(self, texts, batch_size=32, **kwargs):
            seen.append(kwargs["show_progress_bar"])
            return np.ones((len(texts), 4), np.float32)

    class Stream:
        def isatty(self):
            return tty

        def write(self, text):
            written.append(text)
            return len(text)

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stderr", Stream())
    dense.DenseRetriever(encoder=Encoder(), show_progress_bar=True).encode(["a", "b"])
    bar = "".join(written)
    written.clear()
    dense.DenseRetriever(encoder=Encoder(), show_progress_bar=False).encode(["a"])
    assert not any(seen) and not written
    assert ("passages" in bar) == tty


# ----------------------------------------------------------------------------- finding a model


def _hub_cache(root: Path, name: str, revision: str = "abc123") -> Path:
    repo = root / ("models--" + name.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def test_a_cached_hub_model_loads_from_its_snapshot_folder_without_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")  # unreachable: must not matter
    snapshot = _hub_cache(tmp_path, "org/model")
    assert dense.resolve_model("org/model") == str(snapshot)
    bare = _hub_cache(tmp_path, "sentence-transformers/mini", "def456")  # bare names mean sentence-transformers/<name>
    assert dense.resolve_model("mini") == str(bare)
    assert dense.model_identity("org/model") == {"name": "org/model", "snapshot": "abc123"}
    assert dense.model_identity("org/other") == {"name": "org/other"}


def test_models_that_cannot_be_had_are_one_line_input_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.bin").write_text("x")
    cases = {
        "foo/bar": "cannot be reached",
        str(tmp_path / "empty"): "holds no model",
        str(tmp_path / "file.bin"): "is a file",
        str(tmp_path / "missing"): "no such model folder",
    }
    for model, problem in cases.items():
        with pytest.raises(InputError) as err:
            dense.resolve_model(model)
        assert problem in str(err.value) and "\n" not in str(err.value), model
        assert str(err.value).startswith(f"error: retriever.model={model}: ")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match="HF_HUB_OFFLINE is set"):
        dense.resolve_model("foo/bar")
    assert dense.resolve_model(None) == dense.default_model_path()


@pytest.mark.slow
def test_an_unknown_model_fails_in_seconds_with_one_line_and_exit_2(tmp_path):
    """Before: 175 lines of retry warnings over 87 s, then a traceback. Now the job fails
    where it needs the model, at once; the process as a whole is Python's and Hydra's
    start-up (about 5 s idle, up to 20 s on a loaded 2-core machine)."""
    start = time.perf_counter()
    done = _pipeline("retriever=dense", "retriever.model=foo/bar", "tracking=none", f"paths.root={tmp_path}",
                     f"hydra.run.dir={tmp_path / 'run'}",
                     env=_env(HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HUB_CACHE=str(tmp_path / "hub")),
                     timeout=120)
    elapsed = time.perf_counter() - start
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: retriever.model=foo/bar: ")
    assert "Traceback" not in done.stdout + done.stderr and "Retrying" not in done.stdout + done.stderr
    log = (tmp_path / "run" / "pipeline.log").read_text()
    assert done.stderr.strip() in log  # the job's log has it
    stamps = [datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f") for line in log.splitlines() if line.startswith("[")]
    in_job = (stamps[-1] - stamps[0]).total_seconds()  # from the collection loaded to the error
    assert in_job < 5 and elapsed < 60, f"{in_job:.1f} s in the job, {elapsed:.1f} s in all"


# ----------------------------------------------------------------------------- failures and logs


def test_a_failed_objective_makes_optuna_fail_the_trial_not_raise_twice():
    objective = console.FailedObjective("job 3 (k=5): error: bad")
    with pytest.raises(console.JobFailed) as err:  # not a ValueError/TypeError: the sweeper marks the trial FAIL
        float(objective)
    assert not isinstance(err.value, (ValueError, TypeError))
    quiet = console.QuietSweeper()

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("hydra_plugins.hydra_optuna_sweeper._impl", logging.WARNING, "", 0, msg, None, None)

    assert not quiet.filter(record(f"Failed experiment: {err.value}"))
    assert not quiet.filter(record(f"Failed [{err.value!r}] times out of 1 with max_failure_rate=0.0."))
    assert quiet.filter(record("Best value: 0.5"))
    assert quiet.filter(logging.LogRecord("pipeline", logging.ERROR, "", 0, str(err.value), None, None))


def test_a_study_whose_every_trial_failed_ends_in_one_line(monkeypatch, capsys):
    """On a stand-in for the sweeper's module (importing the real one imports optuna: seconds)."""
    import types

    import hydra_plugins.hydra_optuna_sweeper as plugin

    message = {"text": "No trials are completed yet."}

    class OptunaSweeperImpl:
        def sweep(self, arguments):  # what the sweeper's study.best_trial raises after all trials failed
            raise ValueError(message["text"])

    _impl = types.ModuleType("hydra_plugins.hydra_optuna_sweeper._impl")
    _impl.OptunaSweeperImpl = OptunaSweeperImpl
    monkeypatch.setitem(sys.modules, _impl.__name__, _impl)
    monkeypatch.setattr(plugin, "_impl", _impl, raising=False)
    console.tolerate_no_completed_trial()
    console.tolerate_no_completed_trial()  # once only
    assert _impl.OptunaSweeperImpl.sweep(None, []) is None  # the sweep's end (summary, exit 2) still runs
    assert capsys.readouterr().err == "error: no trial of the Optuna study completed (each one failed, see above)\n"
    message["text"] = "something else"
    with pytest.raises(ValueError, match="something else"):
        _impl.OptunaSweeperImpl.sweep(None, [])


def test_to_log_file_writes_the_error_and_traceback_to_the_job_log_only(tmp_path, capsys):
    root = logging.getLogger()
    handler = logging.FileHandler(tmp_path / "pipeline.log")
    root.addHandler(handler)
    try:
        try:
            raise KeyError("boom")
        except KeyError as exc:
            console.to_log_file("the job failed: KeyError: 'boom'", exc)
        console.to_log_file("error: data.tsv:3: bad grade")
    finally:
        root.removeHandler(handler)
        handler.close()
    log = (tmp_path / "pipeline.log").read_text()
    assert "the job failed: KeyError: 'boom'" in log and "Traceback" in log and "error: data.tsv:3: bad grade" in log
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_an_optuna_sweep_with_a_failing_trial_is_quiet_and_logged(tmp_path):
    """Trial 0 samples k1 < 0 (refused by BM25), trial 1 a valid k1 (seed 0): no ANSI codes,
    no alembic chatter when the sweep creates the store, one line for the failed trial, no
    traceback, the failed job's log holds its error and the sweep exits 2."""
    done = run_pipeline_command("-m", "experiment=tune_bm25", "hydra.sweeper.n_trials=2",  # in this process
                                "retriever.k1=interval(-1.2,0.8)", f"paths.root={tmp_path}", env=_env())
    both = done.stdout + done.stderr
    assert done.returncode == 2, both[-3000:]
    assert not ANSI.search(both) and "\r" not in both
    assert "setup plugin" not in both and "Traceback" not in both and "Error executing job" not in both
    assert "A new study created" in done.stdout  # Optuna's message, through Hydra's logging
    failed = [line for line in done.stderr.splitlines() if line.startswith("job 0 (")]
    assert len(failed) == 1 and "error: retriever: BM25 needs k1 >= 0" in failed[0]
    assert "Failed experiment" not in done.stdout
    logs = sorted(tmp_path.glob("multirun/*/*/0/pipeline.log"))
    assert len(logs) == 1 and "error: retriever: BM25 needs k1 >= 0" in logs[0].read_text()
    assert not ANSI.search(logs[0].read_text())

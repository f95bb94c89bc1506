"""Progress of long stages (pipeline/io/progress.py): a bar on a terminal, log lines elsewhere."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap

import pytest

from pipeline.io.progress import Progress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pipeline.io.progress"]


def test_a_line_per_tenth_with_done_total_rate_and_time_left_when_not_a_terminal(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="pipeline.io.progress"):
        with Progress("encoding", 1000, "passages", clock=clock, terminal=False, quiet_s=0) as p:
            for _ in range(100):
                clock.now += 1.0  # 10 passages/s
                p.update(10)
    got = lines(caplog)
    # 10%..90%: one line each (100% is the closing line, not another progress line)
    percents = [int(m.group(1)) for m in map(re.compile(r"encoding: (\d+)% ").match, got) if m]
    assert percents == [10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert got[0] == "encoding: 10% (100 of 1,000 passages), 10.0 passages/s, about 1 min 30 s left"
    assert got[-1] == "encoding: 1,000 passages in 1 min 40 s (10.0 passages/s)"


def test_a_line_every_30_s_when_tenths_are_slow(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="pipeline.io.progress"):
        p = Progress("indexing", 1_000_000, "documents", clock=clock, terminal=False)
        for _ in range(130):  # 130 s, 1,000 documents a second: 13% in all
            clock.now += 1.0
            p.update(1000)
    got = lines(caplog)
    # after the 10 quiet seconds: a line at 30 s, 60 s, 90 s, at 10% (100 s), then 30 s later
    assert [g.split(" (")[0] for g in got] == ["indexing: 3%", "indexing: 6%", "indexing: 9%", "indexing: 10%",
                                               "indexing: 13%"]
    assert got[-1].endswith("(130,000 of 1,000,000 documents), 1,000.0 documents/s, about 14 min 30 s left")


def test_a_short_stage_prints_no_progress_lines_and_its_end_at_debug(caplog):
    clock = Clock()
    with caplog.at_level(logging.DEBUG, logger="pipeline.io.progress"):
        with Progress("chunking", 50, "documents", clock=clock, terminal=False) as p:
            for _ in range(5):
                clock.now += 0.1
                p.update(10)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "chunking: 50 documents in 0.5 s (100.0 documents/s)")]


def test_an_interrupted_stage_says_how_far_it_got_and_its_note(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="pipeline.io.progress"), pytest.raises(KeyboardInterrupt):
        with Progress("encoding docs", 5183, "passages", clock=clock, terminal=False,
                      note=lambda: "2,048 of them cached") as p:
            clock.now += 330
            p.update(2048)
            raise KeyboardInterrupt
    assert lines(caplog)[-1] == ("encoding docs interrupted (KeyboardInterrupt) after 2,048 of 5,183 passages "
                                 "in 5 min 30 s; 2,048 of them cached")


def test_durations():
    assert [duration(s) for s in (4.24, 65, 3 * 3600 + 7 * 60 + 5)] == ["4.2 s", "1 min 5 s", "3 h 7 min"]


@pytest.mark.slow
def test_progress_lines_reach_a_pipe_and_a_sigterm_is_announced(tmp_path):
    # A real process whose stderr is a pipe: progress lines (no bar, no carriage returns);
    # SIGTERM mid-stage: the interrupted line, then the default action (status -15).
    script = textwrap.dedent("""
        import logging, os, signal, sys, time
        from pipeline.io.progress import Progress, announce_termination
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        with Progress("work", 100, "items", quiet_s=0, every_s=0.05) as p, announce_termination(p):
            for i in range(100):
                time.sleep(0.01)
                p.update(1)
                if i == 49:
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -15, done.stderr
    assert "\r" not in done.stderr and "work: 10% (10 of 100 items)" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("WARNING work interrupted (SIGTERM) after 50 of 100 items")


@pytest.mark.parametrize("name", ["tokens", "sentences", "none"])
def test_chunking_slice_by_slice_gives_the_spans_of_the_whole(monkeypatch, caplog, name):
    # Chunking a large corpus reports its progress by chunking slices of the documents; every
    # chunker cuts each document on its own, so the spans are those of one call on all.
    import random

    import numpy as np

    from pipeline.chunkers import counted
    from pipeline.chunkers.splitters import NoChunker, SentenceChunker, TokenChunker

    chunker = {"tokens": TokenChunker(size=32, overlap=8), "sentences": SentenceChunker(size=40),
               "none": NoChunker()}[name]
    rng = random.Random(1)
    words = "alpha beta gamma delta epsilon. zeta eta theta! iota kappa lambda mu\n\nnu xi omicron".split(" ")
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 100))) for _ in range(300)]
    monkeypatch.setattr(counted, "MIN_SLICE", 32)
    clock = Clock()
    monkeypatch.setattr(counted, "Progress", lambda *a, **k: Progress(*a, **k, clock=clock, quiet_s=0))
    real = chunker.spans

    def slow_spans(part):
        clock.now += 1.0
        return real(part)

    monkeypatch.setattr(chunker, "spans", slow_spans)
    with caplog.at_level(logging.INFO, logger="pipeline.chunkers.counted"):
        got = counted.spans_with_progress(chunker, texts)
    np.testing.assert_array_equal(got, real(texts))
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == f"chunking ({name}): 10% (32 of 300 documents), 32.0 documents/s, about 8.4 s left"
    assert said[-1] == f"chunking ({name}): 300 documents in 10.0 s (30.0 documents/s)" and len(said) == 10


def test_an_error_that_is_not_an_interruption_leaves_its_own_line_alone(caplog):
    # A model that cannot be loaded, a bad setting: the caller's one-line error says it all.
    with caplog.at_level(logging.DEBUG, logger="pipeline.io.progress"), pytest.raises(ValueError):
        with Progress("encoding", 10, "passages", terminal=False):
            raise ValueError("no such model")
    assert caplog.records == []
    with caplog.at_level(logging.DEBUG, logger="pipeline.io.progress"), pytest.raises(OSError):
        with Progress("encoding", 10, "passages", terminal=False) as p:
            p.update(4)
            raise OSError(28, "No space left on device")
    assert [r.getMessage().split(" in ")[0] for r in caplog.records] == [
        "encoding interrupted (OSError: [Errno 28] No space left on device) after 4 of 10 passages"]


@pytest.mark.parametrize("stdout_tty", [True, False])
def test_a_bar_on_a_terminal_and_lines_too_when_the_log_goes_elsewhere(monkeypatch, capsys, caplog, stdout_tty):
    # `python -m pipeline > job.log`: the bar on the terminal (stderr), the lines in the file
    # (stdout, where Hydra's console handler writes); both streams a terminal: the bar alone.
    class Out:
        def isatty(self):
            return stdout_tty

        def write(self, text):
            return len(text)

        def flush(self):
            pass

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(sys, "stdout", Out())
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="pipeline.io.progress"):
        with Progress("encoding", 100, "passages", clock=clock, terminal=True, quiet_s=0) as p:
            for _ in range(10):
                clock.now += 1.0
                p.update(10)
    assert "passages/s" in capsys.readouterr().err  # the bar
    assert len([m for m in lines(caplog) if "%" in m]) == (0 if stdout_tty else 9)

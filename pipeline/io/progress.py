"""Progress of a long stage: a bar on a terminal, a few log lines anywhere else.

Encoding a corpus, chunking it, indexing it (BM25, Chroma) and pooling runs may take minutes
to hours; whoever watches a log file or a pipe must see that the stage is alive and when it
will end, and whoever watches a terminal wants a bar. :class:`Progress` gives both:

- standard error a terminal: a tqdm bar (done/total, rate, time left), cleared at the end;
- standard error or standard output (where the job's log lines go) not a terminal: one INFO
  line each time another 10% is done or ``every_s`` (30 s) passed since
  the last line, whichever comes first, with done/total, the rate and the time left. A stage
  that ends within ``quiet_s`` (10 s) prints none of these: short jobs stay short;
- either way a last line says how long the stage took (INFO when it took a second or more),
  and a stage left by Ctrl-C, a signal or an OS error (a full disk) says how far it got and
  what ``note`` says about it (what was kept, how to resume); any other error says what is
  wrong itself.

:func:`announce_termination` turns a SIGTERM during a block into that same line before the
signal takes effect as it would have (the default: the process ends with status 143).

A library-tier leaf: logging, time, signal and tqdm (on a terminal only).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

#: A line at least every this many seconds where there is no bar.
EVERY_S = 30.0
#: No intermediate line before a stage has run this long (a stage this short needs none).
QUIET_S = 10.0


def is_terminal(stream: Any = None) -> bool:
    """Whether ``stream`` (default: standard error, where bars go) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def quiet_without_terminal() -> None:
    """Progress bars off unless standard error is a terminal; colour off unless standard
    output is (``HF_HUB_DISABLE_PROGRESS_BARS``, ``TQDM_DISABLE``, ``NO_COLOR``), so logs and CI
    output hold no carriage-return animations. Explicit settings in the environment win. Run
    first by every entry point (``pipeline.console.setup``, ``pipeline.cli.runner.start``),
    before torch, transformers or huggingface_hub are imported."""
    if not is_terminal(sys.stderr):
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # huggingface_hub, transformers
        os.environ.setdefault("TQDM_DISABLE", "1")  # any other tqdm bar left at its default
    if not is_terminal(sys.stdout):
        os.environ.setdefault("NO_COLOR", "1")


def duration(seconds: float) -> str:
    """``4.2 s``, ``3 min 5 s``, ``2 h 7 min``: how long, to a useful precision."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


class Progress:
    """Counts the items of a stage (``update``) and reports as the module says.

    Used as a context manager (``with Progress("encoding", n, "passages") as p: ... p.update(k)``)
    it ends with the closing line, or with the interrupted line when the block raises; ``note``
    (a string, or a function called then) is added to the interrupted line: what was kept.
    ``clock`` and ``terminal`` are for tests.
    """

    def __init__(self, label: str, total: int, unit: str = "items", *, logger: logging.Logger | None = None,
                 note: str | Callable[[], str] = "", every_s: float = EVERY_S, quiet_s: float = QUIET_S,
                 clock: Callable[[], float] = time.monotonic, terminal: bool | None = None):
        self.label, self.total, self.unit = label, max(int(total), 0), unit
        self.log = logger or log
        self.note = note
        self.every_s, self.quiet_s, self.clock = every_s, quiet_s, clock
        self.done = 0
        self.start = self.last_line = clock()
        self.tenths = 0  # tenths of the total reached when the last line was written
        self.closed = False
        self.bar: Any = None
        if (is_terminal() if terminal is None else terminal) and self.total:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit=f" {unit}", desc=label, file=sys.stderr, dynamic_ncols=True,
                            leave=False, disable=False)
        # Log lines too where the log does not go to that terminal (``python -m pipeline > job.log``:
        # the bar on standard error, the lines in the file, where Hydra's console handler writes).
        self.lines = self.bar is None or not is_terminal(sys.stdout)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        if kind is None:
            self.close()
        elif issubclass(kind, OSError) or not issubclass(kind, Exception):
            # Ctrl-C, a signal turned into an exception, a full disk: how far it got, what it kept.
            # Other errors say what is wrong themselves (one line, the caller's).
            self.interrupted(kind.__name__ if err is None or not str(err) else f"{kind.__name__}: {err}")
        else:
            self.closed = True
            if self.bar is not None:
                self.bar.close()

    def rate(self) -> float:
        """Items per second so far (0 before the first)."""
        elapsed = self.clock() - self.start
        return self.done / elapsed if elapsed > 0 else 0.0

    def status(self) -> str:
        """``40% (2,048 of 5,183 passages), 25.1 passages/s, about 2 min 5 s left``."""
        rate = self.rate()
        left = f", about {duration((self.total - self.done) / rate)} left" if rate > 0 and self.done < self.total \
            else ""
        percent = 100 * self.done // self.total if self.total else 100
        return f"{percent}% ({self.done:,} of {self.total:,} {self.unit}), {rate:,.1f} {self.unit}/s{left}"

    def update(self, n: int = 1) -> None:
        """``n`` more items done; a line (no bar) when another tenth is reached or ``every_s`` passed."""
        self.done += int(n)
        if self.bar is not None:
            self.bar.update(int(n))
        if not self.lines:
            return
        now = self.clock()
        tenths = min(10, self.done * 10 // self.total) if self.total else 10
        if now - self.start < self.quiet_s:
            self.tenths = tenths
            return
        if tenths > self.tenths or now - self.last_line >= self.every_s:
            self.tenths, self.last_line = tenths, now
            if self.done < self.total:
                self.log.info("%s: %s", self.label, self.status())

    def _note(self) -> str:
        note = self.note() if callable(self.note) else self.note
        return f"; {note}" if note else ""

    def close(self) -> None:
        """The closing line: how many items in how long (once)."""
        if self.closed:
            return
        self.closed = True
        if self.bar is not None:
            self.bar.close()
        elapsed = self.clock() - self.start
        rate = f" ({self.done / elapsed:,.1f} {self.unit}/s)" if elapsed > 0 and self.done else ""
        self.log.log(logging.INFO if elapsed >= 1.0 else logging.DEBUG, "%s: %s %s in %s%s", self.label,
                     f"{self.done:,}", self.unit, duration(elapsed), rate)

    def interrupted(self, why: str) -> None:
        """The line of a stage that did not finish: how far it got, why, and the note (once)."""
        if self.closed:
            return
        self.closed = True
        if self.bar is not None:
            self.bar.close()
        self.log.warning("%s interrupted (%s) after %s of %s %s in %s%s", self.label, why, f"{self.done:,}",
                         f"{self.total:,}", self.unit, duration(self.clock() - self.start), self._note())


@contextmanager
def announce_termination(progress: Progress) -> Iterator[None]:
    """Within the block, a SIGTERM first writes ``progress``'s interrupted line, then acts as
    it would have: the previous handler is called (a sweep's raises its own exception), or
    the default ends the process (status 143). Outside the main thread: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:  # set outside Python: treated as the default
        previous = signal.SIG_DFL
    if previous is signal.SIG_IGN:
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        progress.interrupted("SIGTERM")
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signum, frame)
        else:
            signal.raise_signal(signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

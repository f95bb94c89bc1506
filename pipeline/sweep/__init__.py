"""A Hydra multirun as one sweep: its whole lifecycle (start, end, summary, parent run).

``callback`` (``pipeline.sweep.SweepCallback``, named in conf/config.yaml) starts the sweep
and ends it; ``summary`` writes the summary from the jobs' folders, ``table`` its table and
figures, ``parent`` the parent run. Only the callback is imported here: every job loads this
package (``pipeline.__main__``), and only the launching process loads the summary, at the end.
"""

from __future__ import annotations

from pipeline.sweep.callback import Interrupted, SweepCallback, on_interrupt, on_sweep_error

__all__ = ["Interrupted", "SweepCallback", "on_interrupt", "on_sweep_error"]

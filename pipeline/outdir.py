"""A Hydra callback that checks the output folder before Hydra creates it.

Hydra makes ``hydra.run.dir`` (a run) or ``hydra.sweep.dir`` (a sweep) inside its own error
handling, so a folder that cannot be created (a path under a file, a read-only mount, no
permission) ends in its traceback and exit 1, before any of the pipeline's code runs. This
callback runs first (``on_run_start``/``on_multirun_start``), makes the folder itself and
turns a failure into one line naming the folder and the setting to change, with exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def make_output_dir(folder: str, setting: str) -> None:
    """Create ``folder`` (and its parents); on failure print one line and exit 2."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        print(f"error: cannot create the output folder {folder} ({setting}): {reason}; "
              "choose a writable paths.root=DIR (or set hydra.run.dir / hydra.sweep.dir)", file=sys.stderr)
        sys.exit(2)


class OutputDirCheck(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        make_output_dir(str(config.hydra.run.dir), "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        make_output_dir(str(config.hydra.sweep.dir), "hydra.sweep.dir")

"""``python -m pipeline [overrides]``: compose the config with Hydra and run one experiment.

:func:`entry` is the whole command (console set-up, ``-v``, the command-line checks, Hydra,
Ctrl-C/SIGTERM and a stopped sweep): the module's main block calls it, and so does the tests'
in-process runner (``tests/commands.py``, ``run_pipeline_command``), so both take one path.
"""

from __future__ import annotations

import os
import signal
import sys

import hydra
from omegaconf import DictConfig

import pipeline.config  # noqa: F401  (registers the base_config schema)
from pipeline import console
from pipeline.io.ray_runtime import import_ray
from pipeline.errors import InputError, Interrupted, exit_line
from pipeline.job import run_job
from pipeline.sweep import on_interrupt, on_sweep_error


# The config folder, absolute (pipeline.config.CONF_DIR): the same search path whether this
# module runs as ``__main__`` (where Hydra resolves ``../conf`` against this file) or is imported.
@hydra.main(version_base="1.3", config_path=str(pipeline.config.CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    return run_job(cfg)


def check_command_line(argv: list[str]) -> None:
    """``k=abc`` and the like: one line and exit status 2 before Hydra starts (Hydra itself
    would print its error block and exit 1). ``HYDRA_FULL_ERROR=1`` leaves it to Hydra."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return
    try:
        pipeline.config.check_overrides(argv)
        check_extras(argv)
    except InputError as err:
        line, status = exit_line(err)
        print(line, file=sys.stderr)
        sys.exit(status)


def check_extras(argv: list[str]) -> None:
    """``hydra/launcher=ray`` without Ray installed: InputError naming the extra, before the
    sweep's parent run is opened (the launcher itself would say so only after it)."""
    if any(arg.lstrip("+~").replace(" ", "") == "hydra/launcher=ray" for arg in argv):
        import_ray("hydra/launcher=ray")


def entry(argv: list[str]) -> int:
    """``python -m pipeline ARGV``: the exit status (0, or 130/143 after Ctrl-C/SIGTERM);
    ``SystemExit`` for the other ends (a bad command line, Hydra's errors, a failed sweep job).
    Hydra reads the command line from ``sys.argv``: ``argv`` replaces ``sys.argv[1:]``."""
    console.setup()  # before torch/transformers: no progress bars or colour where no terminal
    sys.argv[1:] = console.verbose_argv(list(argv))  # -v: verbose=true (Hydra owns the command line)
    check_command_line(sys.argv[1:])
    try:
        main()
    except (KeyboardInterrupt, Interrupted) as stop:  # one line and 130/143, no traceback
        return on_interrupt(getattr(stop, "signum", signal.SIGINT))
    except SystemExit as stop:  # Hydra reported an error that stopped a sweep before its end
        if stop.code not in (0, None):
            on_sweep_error()  # (nothing when no sweep of this process is running)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))

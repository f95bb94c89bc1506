"""``python -m pipeline [overrides]``: compose the config with Hydra and run one experiment."""

from __future__ import annotations

import signal
import os
import sys

#: Arguments after which Hydra prints and exits, without a job.
_NO_JOB = {"--help", "-h", "--cfg", "-c", "--info", "--hydra-help"}

if __name__ == "__main__" and "tracking=none" in sys.argv[1:] and not _NO_JOB & set(sys.argv[1:]):
    # The figure process imports matplotlib (~1 s) while this one imports Hydra, SciPy and
    # the stages below and the job computes (a tracked job's tracking process draws instead).
    from pipeline import plots

    plots.figure_process()

import hydra
from omegaconf import DictConfig

import pipeline.config  # noqa: F401  (registers the base_config schema)
from pipeline.errors import InputError
from pipeline.run import run_job
from pipeline.sweep import (Interrupted, cache_config_files, compose_each_job_once, on_interrupt, on_sweep_error,
                            validate_covering_jobs)
from pipeline import console, tracking


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    return run_job(cfg)


def check_command_line(argv: list[str]) -> None:
    """``k=abc`` and the like: one line and exit status 2 before Hydra starts (Hydra itself
    would print its error block and exit 1). ``HYDRA_FULL_ERROR=1`` leaves it to Hydra."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return
    try:
        pipeline.config.check_overrides(argv)
    except InputError as err:
        print(str(err), file=sys.stderr)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    console.setup()  # before torch/transformers: no progress bars or colour where no terminal
    check_command_line(sys.argv[1:])
    if not {"tracking=none", *_NO_JOB} & set(sys.argv[1:]):
        tracking.prestart()  # mlflow's import overlaps with Hydra's start-up and the job
    if {"-m", "--multirun", "hydra.mode=MULTIRUN"} & set(sys.argv[1:]):  # (a single job composes once)
        compose_each_job_once()  # a sweep composes each job's config once, not twice
        cache_config_files()  # and parses each config file once
        validate_covering_jobs()  # before any job runs, every swept value is composed once
    try:
        main()
    except (KeyboardInterrupt, Interrupted) as stop:  # one line and 130/143, no traceback
        sys.exit(on_interrupt(getattr(stop, "signum", signal.SIGINT)))
    except SystemExit as stop:  # Hydra reported an error that stopped a sweep before its end
        if stop.code not in (0, None):
            on_sweep_error()  # (nothing when no sweep of this process is running)
        raise

"""``python -m pipeline [overrides]``: compose the config with Hydra and run one experiment."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

import pipeline.config  # noqa: F401  (registers the base_config schema)
from pipeline.run import run_job
from pipeline import tracking


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    return run_job(cfg)


if __name__ == "__main__":
    if not {"tracking=none", "--help", "-h", "--cfg", "-c", "--info", "--hydra-help"} & set(sys.argv[1:]):
        tracking.prestart()  # mlflow's import overlaps with Hydra's start-up and the job
    main()

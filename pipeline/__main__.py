"""``python -m pipeline [overrides]``: compose the config with Hydra and run one experiment."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

import pipeline.config  # noqa: F401  (registers the base_config schema)
from pipeline.run import run_job


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    return run_job(cfg)


if __name__ == "__main__":
    main()

"""``python -m pipeline [overrides]``: compose the config with Hydra and run one experiment."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

import pipeline.config  # noqa: F401  (registers the base_config schema)
from pipeline.run import exit_on_user_error, run


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    with exit_on_user_error():
        return run(cfg)


if __name__ == "__main__":
    main()

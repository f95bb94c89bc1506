"""``hydra/sweeper=grid``: the config of this project's grid sweeper (registered in Hydra's
ConfigStore when Hydra scans the ``hydra_plugins`` namespace package). Its keys are those of
Hydra's ``hydra/sweeper=basic`` (``max_batch_size``, ``params``), so a command line or an
experiment written for the basic sweeper works unchanged.
"""

# No ``from __future__ import annotations``: Hydra's plugin scan executes this module without
# putting it in sys.modules first, and dataclasses cannot then resolve string annotations.
from dataclasses import dataclass
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class GridSweeperConf:
    _target_: str = "hydra_plugins.pipeline_grid_sweeper.grid_sweeper.GridSweeper"
    max_batch_size: Optional[int] = None  # jobs per batch handed to the launcher (null: all at once)
    params: Optional[Dict[str, Any]] = None  # key: comma-separated values, as on the command line


ConfigStore.instance().store(group="hydra/sweeper", name="grid", node=GridSweeperConf, provider="pipeline_grid_sweeper")

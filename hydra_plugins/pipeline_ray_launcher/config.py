"""``hydra/launcher=ray``: the config of this project's Ray launcher (registered in Hydra's
ConfigStore when Hydra scans the ``hydra_plugins`` namespace package).

The keys follow Hydra's own ``hydra-ray-launcher`` (``hydra.launcher.ray.init.*`` are
``ray.init`` arguments, ``hydra.launcher.ray.remote.*`` those of each job's ``ray.remote``), so
the command lines written for that plugin work here. Nothing here imports Ray.
"""

# No ``from __future__ import annotations``: Hydra's plugin scan executes this module without
# putting it in sys.modules, and dataclasses cannot then resolve string annotations.
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class RayInitConf:
    # null: start Ray on this machine (shut down when the sweep's process exits);
    # auto | HOST:6379 | ray://HOST:10001: join that cluster (it keeps running)
    address: Optional[str] = None
    num_cpus: Optional[int] = None  # a local Ray's CPUs (null: all); ignored when joining a cluster
    num_gpus: Optional[int] = None  # a local Ray's GPUs (null: those it finds)
    include_dashboard: bool = False
    runtime_env: Optional[Dict[str, Any]] = None  # ray.init's runtime_env (env_vars, pip, ...)


@dataclass
class RayRemoteConf:
    num_cpus: float = 1  # per job: a job uses this many threads for torch and BLAS
    num_gpus: float = 0  # per job
    # 0: a job whose worker dies fails (its FAILED note), rather than run twice
    max_retries: int = 0


@dataclass
class RayConf:
    init: RayInitConf = field(default_factory=RayInitConf)
    remote: RayRemoteConf = field(default_factory=RayRemoteConf)


@dataclass
class RayLauncherConf:
    _target_: str = "hydra_plugins.pipeline_ray_launcher.ray_launcher.RayLauncher"
    ray: RayConf = field(default_factory=RayConf)


ConfigStore.instance().store(group="hydra/launcher", name="ray", node=RayLauncherConf, provider="pipeline_ray_launcher")

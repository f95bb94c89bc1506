"""The Ray launcher: each job of a sweep is one Ray task running Hydra's ``run_job``.

- Ray: the runtime this process has already, or one started here (``hydra.launcher.ray.init.address``
  null) or joined (``auto``, ``HOST:6379``, ``ray://HOST:10001``). Ray started or joined by
  the launcher stays up for the sweep's later batches (an Optuna sweep launches several) and is
  shut down (or disconnected) when the sweep's process exits; a cluster the user started keeps
  running. An address that cannot be reached: one line, exit status 3.
- Each task gets the job's overrides, the sweep config, the task function and Hydra's
  singletons (as the joblib launcher does), and works in the launching folder when that
  folder exists on its node, so relative paths (``outputs/``) mean the same as in the sweep's
  process. Each job logs itself to MLflow from its worker; the sweep's end runs here.
- The jobs' returns come back in order. Ctrl-C cancels the jobs not yet finished.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from pipeline.errors import InputError, exit_line
from pipeline.io.ray_runtime import RayFailed, import_ray, ray_runtime
from pipeline.io.results import FailedObjective, write_failed

log = logging.getLogger(__name__)


def execute_job(idx: int, overrides: Sequence[str], hydra_context: HydraContext, config: DictConfig,
                task_function: TaskFunction, singleton_state: dict[Any, Any], launch_dir: str) -> JobReturn:
    """One job, in a Ray worker: Hydra's state restored, the job's config composed, ``run_job``."""
    setup_globals()
    Singleton.set_state(singleton_state)
    if Path(launch_dir).is_dir():
        os.chdir(launch_dir)
    else:
        log.warning("the sweep's folder %s does not exist on this node; relative paths start in %s "
                    "(use absolute paths on a shared file system: paths.root=/shared/...)", launch_dir, os.getcwd())
    sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
    HydraConfig.instance().set_config(sweep_config)
    return run_job(hydra_context=hydra_context, config=sweep_config, task_function=task_function,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


def connect(init: dict[str, Any]) -> Any:
    """The ``ray`` module, connected: as it is, or started/joined with ``init`` (then shut down
    at exit). Ray missing: one line naming the extra, exit 2; a cluster that cannot be reached:
    one line, exit 3."""
    try:
        ray = import_ray("hydra/launcher=ray")
    except InputError as err:
        line, status = exit_line(err)
        print(line, file=sys.stderr)
        sys.exit(status)
    if ray.is_initialized():
        return ray
    address = init.pop("address", None)
    runtime = ray_runtime(address, "hydra/launcher=ray", **init)
    try:
        runtime.__enter__()
    except RayFailed as err:
        line, status = exit_line(err)
        print(line, file=sys.stderr)
        sys.exit(status)
    atexit.register(runtime.__exit__, None, None, None)  # shut down (or disconnect) when the sweep ends
    return ray


class RayLauncher(Launcher):
    """Hydra launcher: the jobs of a batch as Ray tasks (``hydra.launcher.ray.remote`` each)."""

    def __init__(self, ray: Any = None, **_: Any) -> None:
        settings = OmegaConf.to_container(ray, resolve=True) if isinstance(ray, DictConfig) else dict(ray or {})
        self.init: dict[str, Any] = dict(settings.get("init") or {})
        self.remote: dict[str, Any] = dict(settings.get("remote") or {})
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        ray = connect(dict(self.init))
        remote = {k: v for k, v in self.remote.items() if v is not None}
        log.info("Ray is launching %d jobs (%s), sweep output dir: %s", len(job_overrides),
                 ", ".join(f"{k}={v}" for k, v in remote.items()), sweep_dir)
        for idx, overrides in enumerate(job_overrides):
            log.info("\t#%d : %s", initial_job_idx + idx, " ".join(filter_overrides(overrides)))
        task = ray.remote(**remote)(execute_job) if remote else ray.remote(execute_job)
        state, here = Singleton.get_state(), os.getcwd()
        refs = [task.remote(initial_job_idx + idx, list(overrides), self.hydra_context, self.config,
                            self.task_function, state, here) for idx, overrides in enumerate(job_overrides)]
        returns = []
        try:
            for idx, (ref, overrides) in enumerate(zip(refs, job_overrides)):
                try:
                    returns.append(ray.get(ref))
                except ray.exceptions.RayError as err:  # its worker died, or Ray lost it: that job failed
                    returns.append(self.lost_job(initial_job_idx + idx, overrides, err))
        except BaseException:  # Ctrl-C: the jobs not yet finished are not left running on the cluster
            # Only the pending ones: cancelling a task that is completing races inside Ray's core
            # worker (2.60 aborts the process: "Tried to complete task that was not pending").
            done = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
            for ref in refs:
                if ref in done:
                    continue
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # finished meanwhile, or already gone
                    pass
            raise
        for ret in returns:
            assert isinstance(ret, JobReturn)
        return returns

    def lost_job(self, idx: int, overrides: Sequence[str], err: BaseException) -> JobReturn:
        """The return of a job that Ray lost (its worker died: out of memory, a node gone), as
        ``pipeline.job`` makes a failed sweep job's: one line, a FAILED note in its folder (the
        sweep's end lists it and exits non-zero), NaN to the sweeper (a failed trial to Optuna)."""
        assert self.config is not None and self.hydra_context is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id, cfg.hydra.job.num = f"{cfg.hydra.job.name}_{idx}", idx
        HydraConfig.instance().set_config(cfg)
        job_dir = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        message = f"error: Ray lost the job ({type(err).__name__}: {first})"
        shown = " ".join(filter_overrides(overrides))
        line = f"job {job_dir.name} ({shown}): {message}"
        print(line, file=sys.stderr)
        job_dir.mkdir(parents=True, exist_ok=True)
        write_failed(job_dir, shown, message)
        ret = JobReturn(overrides=list(overrides), cfg=cfg, working_dir=str(job_dir), task_name=cfg.hydra.job.name,
                        status=JobStatus.COMPLETED)
        optuna = "optuna" in str(self.config.hydra.sweeper.get("_target_", "")).lower()
        ret.return_value = FailedObjective(line) if optuna else float("nan")
        return ret

"""The grid sweeper: Hydra's basic grid, validating only the jobs that cover every value.

A sweep's launcher composes every job it runs (``load_sweep_config``); Hydra's basic sweeper
composes each one a first time beforehand, so that a config that cannot be composed stops
the sweep before its first job. Composing is most of a sweep job's fixed cost (about 0.12 s
a composition on two cores; a 100-job sweep spent 12 s validating). Here only
:func:`covering_jobs` are validated before a batch is launched: jobs that together use every
value of every swept key at least once. A value that cannot be composed on its own
(``k=abc``, ``retriever=nonesuch``, a key the schema lacks) still stops the sweep before any
job runs, as with the basic sweeper; a combination of valid values that cannot be composed
together (rare: an experiment overlay that clashes with one option) is found when the
launcher composes that job, and the sweep stops there with Hydra's error (its finished jobs
are logged and its parent run is closed as FAILED: ``pipeline.sweep.on_sweep_error``).

Everything else is the basic sweeper's: the same jobs in the same order (the cartesian
product of the value lists, the last key varying fastest), ``max_batch_size``, ``params``,
``multirun.yaml`` in the sweep folder. Only Hydra's public plugin API, as in Hydra's
example sweeper plugin: a ``Sweeper`` subclass found by the plugin scan of the
``hydra_plugins`` namespace, the launcher from ``Plugins``, the overrides parser.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


def covering_jobs(batch: Sequence[Sequence[str]]) -> list[int]:
    """Indices of jobs of ``batch`` (each a list of ``key=value`` overrides) that together hold
    every override of the batch, chosen greedily (the job with the most overrides not yet held,
    the first on ties). For a grid of value lists it needs as many jobs as the longest list
    (the greedy set cover is exact here: every job holds one value of each key)."""
    left = set().union(*map(set, batch)) if batch else set()
    chosen: list[int] = []
    while left:
        best = max(range(len(batch)), key=lambda i: (len(left.intersection(batch[i])), -i))
        chosen.append(best)
        left.difference_update(batch[best])
    return chosen


def grid(overrides: Sequence[Override], max_batch_size: int | None) -> list[list[list[str]]]:
    """The jobs of ``overrides`` (each a list of ``key=value``) as the basic sweeper makes them:
    every combination of the swept values, in batches of ``max_batch_size`` (None: one batch)."""
    lists: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            lists[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            lists[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            kind = override.value_type.name if override.value_type is not None else "?"
            raise HydraException(f"GridSweeper does not support sweep type : {kind}")
    jobs = [list(job) for job in itertools.product(*lists.values())]
    size = len(jobs) if max_batch_size in (None, -1) else int(max_batch_size)
    if size <= 0:
        return [jobs]
    return [jobs[i:i + size] for i in range(0, len(jobs), size)] or [[]]


class GridSweeper(Sweeper):
    """``hydra/sweeper=grid``: the basic sweeper's grid; before each batch is launched, the
    jobs that cover every value in it are composed (a check), then the launcher composes and
    runs every job once."""

    def __init__(self, max_batch_size: int | None = None, params: dict[str, Any] | None = None):
        self.max_batch_size = max_batch_size
        self.params = params or {}
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                               task_function=task_function, config=config)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        cover = covering_jobs(batch)
        log.debug("validating %d of %d jobs (each swept value once)", len(cover), len(batch))
        super().validate_batch_is_legal([batch[i] for i in cover])

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*(f"{k}={v}" for k, v in self.params.items()), *arguments])
        batches = grid(overrides, self.max_batch_size)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns, first = [], 0
        for batch in batches:
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=first)
            for result in results:
                _ = result.return_value  # a job's exception is raised here, as the basic sweeper does
            first += len(batch)
            returns.append(results)
        return returns

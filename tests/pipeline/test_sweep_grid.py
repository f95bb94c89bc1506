"""The grid sweeper (hydra_plugins/pipeline_grid_sweeper, ``hydra/sweeper=grid``, the default):
the basic sweeper's jobs, each composed once (issue 35).

Hydra's basic sweeper is the oracle for which jobs a sweep runs and in what order; a stand-in
config loader counts the compositions the sweeper makes before a batch is launched. That a
value which cannot be composed still stops the sweep before its first job is checked end to
end in tests/pipeline/test_app.py (``attention=flat,nonexistent``).
"""

from __future__ import annotations

import itertools

import pytest
from hydra._internal.core_plugins import basic_sweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.pipeline_grid_sweeper.grid_sweeper import GridSweeper, covering_jobs, grid

ARGS = [
    ["k=3,5,10", "reorder=none,reverse"],
    ["retriever=bm25,dense,hybrid", "reorder=none,lost_in_the_middle", "k=3,5,10", "tracking=none"],
    ["k=range(1,6)", "attention=flat,liu2023,log,u_shape", "seed=0"],
    ["k=5"],
]


@pytest.mark.parametrize("args", ARGS)
@pytest.mark.parametrize("batch", [None, 4])
def test_the_jobs_and_their_order_are_the_basic_sweepers(args, batch):
    overrides = OverridesParser.create().parse_overrides(args)
    assert grid(overrides, batch) == basic_sweeper.BasicSweeper.split_arguments(overrides, batch)


@pytest.mark.parametrize("sizes", [(5, 5, 4), (3, 2, 3), (1, 7), (4,), (2, 2, 2, 2)])
def test_the_covering_jobs_hold_every_value_with_as_many_jobs_as_the_longest_list(sizes):
    lists = [[f"key{i}={v}" for v in range(n)] for i, n in enumerate(sizes)]
    jobs = [list(job) for job in itertools.product(*lists)]
    cover = covering_jobs(jobs)
    assert len(cover) == max(sizes)
    assert set().union(*(jobs[i] for i in cover)) == set().union(*map(set, jobs))
    assert covering_jobs([]) == []


class _CountingLoader:
    """A config loader that records the overrides of every composition asked of it."""

    def __init__(self):
        self.composed: list[list[str]] = []

    def load_sweep_config(self, master_config, sweep_overrides):
        self.composed.append(list(sweep_overrides))
        return master_config


class _Context:
    def __init__(self, loader):
        self.config_loader = loader


def test_before_a_batch_only_the_covering_jobs_are_composed():
    """100 jobs (5 x 5 x 4): 5 compositions before the launch, where the basic sweeper makes
    100 (and the launcher then one per job either way)."""
    overrides = OverridesParser.create().parse_overrides(
        ["reorder=a,b,c,d,e", "k=1,3,5,10,20", "attention=flat,liu2023,log,u_shape"])
    (batch,) = grid(overrides, None)
    for sweeper, expected in ((GridSweeper(), 5), (basic_sweeper.BasicSweeper(max_batch_size=None), 100)):
        loader = _CountingLoader()
        sweeper.hydra_context, sweeper.config = _Context(loader), object()
        sweeper.validate_batch_is_legal(batch)
        assert len(loader.composed) == expected
        assert set().union(*map(set, loader.composed)) == set().union(*map(set, batch))

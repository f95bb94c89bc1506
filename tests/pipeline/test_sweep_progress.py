"""A sweep's progress (issue 35): where its output is not a terminal, one line per 10% of its
jobs (or per 30 s) with done/total, the rate and the time left, and at its end how long it took.

Driven in-process through the sweep callback's hooks with a clock the test moves; how many
jobs a sweep will run is checked against Hydra's basic sweeper, which makes them.
"""

from __future__ import annotations

import functools
import re

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from pipeline.io.progress import Progress
from pipeline.sweep import callback

GRID = "hydra_plugins.pipeline_grid_sweeper.grid_sweeper.GridSweeper"


def _config(task: list[str], target: str = GRID, **sweeper) -> OmegaConf:
    return OmegaConf.create({"hydra": {"sweeper": {"_target_": target, **sweeper}, "overrides": {"task": task},
                                       "launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher."
                                                                "BasicLauncher"}}})


@pytest.mark.parametrize("task, params", [
    (["reorder=a,b,c,d,e", "k=1,3,5,10,20", "attention=flat,liu2023,log,u_shape", "tracking=none"], None),
    (["k=range(1,8)", "seed=1,2"], {"retriever": "bm25,dense"}),
    (["k=3,5"], {"k": "1,2,3", "reorder": "none,reverse"}),  # the command line's list wins
    (["k=3"], None),
])
def test_the_planned_job_count_is_what_the_basic_sweeper_runs(task, params):
    args = [*(f"{k}={v}" for k, v in (params or {}).items()), *task]
    (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(args), None)
    for target in (GRID, "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"):
        assert callback.planned_jobs(_config(task, target, params=params)) == len(jobs)


def test_optuna_plans_its_trials_and_an_unknown_sweeper_nothing():
    assert callback.planned_jobs(_config([], "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
                                         n_trials=20)) == 20
    assert callback.planned_jobs(_config(["k=1,2"], "somewhere.OtherSweeper")) is None
    assert callback.planned_jobs(_config(["k=interval(1,2)"])) is None


def test_progress_lines_of_a_sweep_when_its_output_is_not_a_terminal(monkeypatch, capsys, tmp_path):
    """20 jobs, 2 s each: a line at every 10% (2, 4, ... 18 jobs done) with done/total, rate and
    time left, on standard output (capsys: not a terminal), then the closing line."""
    now = [0.0]
    monkeypatch.setattr(callback, "Progress", functools.partial(Progress, clock=lambda: now[0]))
    config = _config(["k=1,2,3,4,5", "reorder=a,b,c,d"])
    callback._start_progress(config)
    cb = callback.SweepCallback()
    for _ in range(20):
        now[0] += 2.0
        cb.on_job_end(config, None)
    callback._end_progress(tmp_path, in_this_process=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "sweep: 30% (6 of 20 jobs), 0.5 jobs/s, about 28.0 s left"  # quiet for the first 10 s
    assert [re.match(r"sweep: (\d+)% \((\d+) of 20 jobs\)", line).groups() for line in lines[:-1]] == [
        (str(p), str(p // 5)) for p in range(30, 100, 10)]
    assert lines[-1] == "sweep: 20 jobs in 40.0 s (0.5 jobs/s)"
    cb.on_job_end(config, None)  # no sweep running: nothing
    assert capsys.readouterr().out == ""


def test_a_parallel_launchers_sweep_counts_its_job_folders_at_the_end(monkeypatch, capsys, tmp_path):
    now = [0.0]
    monkeypatch.setattr(callback, "Progress", functools.partial(Progress, clock=lambda: now[0]))
    callback._start_progress(_config(["k=1,2,3"]))
    for name in ("0", "1", "2", "summary"):
        (tmp_path / name).mkdir()
    now[0] = 75.0
    callback._end_progress(tmp_path, in_this_process=False)
    assert capsys.readouterr().out.splitlines() == ["sweep: 3 jobs in 1 min 15 s (0.0 jobs/s)"]

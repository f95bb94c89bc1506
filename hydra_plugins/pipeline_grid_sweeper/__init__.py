"""``hydra/sweeper=grid`` (the default): Hydra's basic grid sweep, each job composed once.

Hydra's ``BasicSweeper`` composes every job of a batch before launching it (its
``validate_batch_is_legal``: a config that cannot be composed stops the sweep before any
job), and the launcher composes each job again to run it: two compositions a job, about
0.12 s each. ``GridSweeper`` is that sweeper with validation of the jobs that cover every
swept value (:func:`grid_sweeper.covering_jobs`: for a grid, as many jobs as the longest
list of values) instead of all of them. ``config`` registers ``hydra/sweeper=grid``.
"""

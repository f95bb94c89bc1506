"""What a comparison reports, as frozen dataclasses: per system, per comparison with the
baseline, and per metric (:class:`Comparison`, JSON-ready through ``to_dict()``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class SystemSummary:
    """One system's mean and its paired-bootstrap confidence interval."""

    name: str
    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class BaselineComparison:
    """One system against the baseline on one metric; d = system - baseline per query.

    ``p`` and ``p_adjusted`` map each test of ``PAIRED_TESTS`` to its two-sided p-value;
    ``significant`` is ``p_adjusted[test] <= alpha`` for the report's chosen test.
    """

    system: str
    baseline: str
    diff: float
    diff_ci_low: float
    diff_ci_high: float
    t: float
    p: dict[str, float]
    p_adjusted: dict[str, float]
    significant: bool
    d_z: float
    hedges_g: float
    wins: int
    ties: int
    losses: int
    sd_diff: float
    mdd: float
    n_needed: int | None


@dataclass(frozen=True)
class Comparison:
    """Everything :func:`compare` says about one metric. ``to_dict()`` is JSON-ready.

    ``tukey[a][b]`` is the randomized Tukey HSD p-value of systems a and b (family-wise
    over all pairs of this metric, never re-adjusted). ``sensitivity`` holds the pooled
    sd of the baseline differences, sqrt(mean(sd_diff^2)), the minimum detectable
    difference at this many queries, and the queries needed for ``delta`` when given.
    """

    metric: str
    n_queries: int
    baseline: str
    test: str
    correction: str
    alpha: float
    confidence: float
    ci_method: str
    n_resamples: int
    n_permutations: int
    seed: int | None
    systems: list[SystemSummary]
    vs_baseline: list[BaselineComparison]
    tukey: dict[str, dict[str, float]]
    sensitivity: dict[str, float | int | None]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

"""The one inference of a comparison, computed once: what every rendering states.

Per metric, ``stats.infer`` (randomized Tukey HSD over the distinct systems: the best, the
set of systems that could be the best, each system's verdict against the best in one of four
words against the practical margin, with its simultaneous interval and adjusted p-value);
for a sweep over a grid of factors, ``stats.answer_factors`` (one answer per factor: marginal
means paired by query, the four words, the edge of the grid, "which k?" for a metric that
never pays for more chunks, interactions) and ``stats.anova_blocks`` (ANOVA with topics as
blocks, effect sizes). See docs/statistics.md for the formulas and their sources.

The console (``render``), ``report.md``, ``report.json`` (key ``verdict``), the sweep's
summary, its parent run's description and the Python API all read :class:`Verdict`; none
computes a statistic of its own. A ValueError of ``stats`` (bad input: a margin <= 0, one
query) becomes an :class:`~pipeline.errors.InputError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from pipeline import stats
from pipeline.errors import InputError

#: The practical margin's default, in the metric's units (``compare.margin`` in conf/config.yaml).
DEFAULT_MARGIN = stats.DEFAULT_MARGIN


def check_margin(margin: Any, where: str = "compare.margin") -> float:
    """``margin`` as a float; InputError (one line, exit 2) unless positive and finite."""
    try:
        return stats.check_margin(margin)
    except ValueError as err:
        raise InputError(str(err), where) from None


@dataclass
class Verdict:
    """Per metric, the :class:`stats.Inference`; per metric, the factors' answers and the ANOVA
    (a sweep over a grid); ``baseline`` when the user named one (else the marks are against the
    best). ``to_dict`` is ``report.json``'s ``verdict``."""

    margin: float
    alpha: float
    inferences: dict[str, Any]
    answers: dict[str, list[Any]] = field(default_factory=dict)
    anova: dict[str, Any] = field(default_factory=dict)
    baseline: str | None = None
    settings_differ: dict[str, dict[str, str]] = field(default_factory=dict)

    def against(self, metric: str, name: str) -> Any:
        """The verdict on ``name`` against the reference (the named baseline, else the best)."""
        inf = self.inferences[metric]
        reference = self.baseline or inf.best
        return None if name == reference else inf.pair(name, reference)

    def to_dict(self) -> dict[str, Any]:
        return {"method": stats.METHOD, "margin": self.margin, "alpha": self.alpha, "baseline": self.baseline,
                "against": "baseline" if self.baseline else "best",
                "settings_differ": self.settings_differ,
                "metrics": {m: inf.to_dict() for m, inf in self.inferences.items()},
                "vs_baseline": ({m: {n: pv.to_dict() for n in inf.names if (pv := self.against(m, n)) is not None}
                                 for m, inf in self.inferences.items()} if self.baseline else {}),
                "factors": {m: [a.to_dict() for a in answers] for m, answers in self.answers.items()},
                "anova": {m: table.to_dict() for m, table in self.anova.items()}}


def grid_factors(factors: Mapping[str, Mapping[str, str]], names: Sequence[str]) -> dict[str, dict[str, str]]:
    """The swept factors that can be answered one by one: at least two levels, each level shared
    by more than one system unless every system is its own level of a single factor (a one-factor
    sweep). An Optuna search (every system its own value of several factors) has none."""
    out = {}
    for factor, values in factors.items():
        levels = {values[n] for n in names}
        if len(levels) < 2:
            continue
        if len(levels) == len(names) and len(factors) > 1:
            continue  # each system its own level: the factor is the system, not a factor
        out[factor] = dict(values)
    return out


def compute_verdict(matrices: Mapping[str, NDArray[np.float64]], names: list[str], *, margin: float, alpha: float,
                    n_permutations: int, seed: int, factors: Mapping[str, Mapping[str, str]] | None = None,
                    baseline: str | None = None, settings_differ: Mapping[str, Mapping[str, str]] | None = None
                    ) -> Verdict:
    """The :class:`Verdict` of ``matrices[metric] [systems, queries]`` (rows in ``names`` order).

    ``factors`` (a sweep's swept factors): answered per factor when there are more than two
    systems (:func:`grid_factors`)."""
    margin = check_margin(margin)
    try:
        inferences = {m: stats.infer(x, names, metric=m, margin=margin, alpha=alpha, n_permutations=n_permutations,
                                     seed=seed) for m, x in matrices.items()}
        grid = grid_factors(factors or {}, names) if len(names) > 2 else {}
        answers, anova = {}, {}
        if grid:
            for m, x in matrices.items():
                answers[m] = stats.answer_factors(x, names, grid, metric=m, margin=margin, alpha=alpha,
                                                  n_permutations=n_permutations, seed=seed)
                anova[m] = stats.anova_blocks(x, names, grid)
    except ValueError as err:
        raise InputError(str(err)) from err
    return Verdict(margin, alpha, inferences, answers, anova, baseline,
                   {k: dict(v) for k, v in (settings_differ or {}).items()})


def differing_settings(systems: Sequence[Any], factors: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """The settings in which the systems differ: the swept factors, plus ``k`` from the jobs'
    params when it differs and no override names it (a job run with the default k)."""
    out = {f: dict(v) for f, v in factors.items()}
    ks = {s.name: str(s.params.get("k")) for s in systems if s.params.get("k") is not None}
    if "k" not in out and len(ks) == len(systems) and len(set(ks.values())) > 1:
        out["k"] = ks
    return out


def differ_clause(settings: Mapping[str, Mapping[str, str]], a: str, b: str) -> str:
    """``; they differ in k=5 vs k=10, retriever=dense vs retriever=bm25`` (empty when they do not)."""
    parts = [f"{f}={v[a]} vs {f}={v[b]}" for f, v in settings.items() if a in v and b in v and v[a] != v[b]]
    return f"; they differ in {', '.join(parts)}" if parts else ""


def cutoff_note(metrics: Sequence[str], settings: Mapping[str, Mapping[str, str]]) -> list[str]:
    """A note when the systems' k differ and a metric has a fixed cut-off (``ndcg_at_10``): each
    system is then scored on its top 10, not on the k chunks it hands the generator."""
    ks = settings.get("k")
    if not ks:
        return []
    fixed = [m for m in metrics if m.rsplit("_", 1)[-1].isdigit() and "_at_" in m]
    if not fixed:
        return []
    values = sorted(set(ks.values()), key=lambda v: float(v) if _number(v) else math.inf)
    cut = fixed[0].rsplit("_", 1)[-1]
    return [f"the systems' k differ ({', '.join(f'k={v}' for v in values)}): {', '.join(fixed)} "
            f"{'scores' if len(fixed) == 1 else 'score'} every system on its top {cut} whatever its k; "
            "<family>_at_k scores each at its own k"]


def _number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False

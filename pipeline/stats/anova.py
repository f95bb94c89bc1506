"""ANOVA of a grid sweep with topics as blocks (no replication), and standardised effect sizes.

Each system is one cell of a complete grid of factors (every combination of levels once) and
every system is scored on the same n topics (queries). The model is

    y[cell, t] = mu + topic_t + sum over non-empty factor subsets S of effect_S[levels of S] + e,

the two-way ANOVA without replication with topics as blocks (Sakai 2018, *Laboratory
Experiments in Information Retrieval*, ch. 5; Montgomery, *Design and Analysis of
Experiments*, ch. 4) generalised to several factors: each factor and each interaction among
factors is a source; the topic x cell interaction is the residual, with df (n - 1)(C - 1) for C
cells. With a balanced design the sums of squares are orthogonal projections (inclusion-exclusion
of marginal means), the same as type I, II or III sums of squares (statsmodels' ``anova_lm`` is
the test oracle).

Effect size of a pairwise difference of levels: (mean_a - mean_b) / sqrt(MS_residual), the
residual variance as the standardiser (Sakai 2018, ch. 5; Sakai 2014, "Statistical reform in
information retrieval?").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.inputs import as_matrix, as_names
from pipeline.stats.verdicts import jsonable

#: The source names of the blocks and the residual in :class:`AnovaTable` rows.
TOPIC, RESIDUAL = "topic", "residual"


@dataclass(frozen=True)
class AnovaTable:
    """Rows ``{source, df, ss, ms, f, p}``: each factor, each interaction ("a:b"), topic, residual
    (its f and p are NaN). ``effect_sizes[factor]["a vs b"]`` = (mean_a - mean_b) / sqrt(MS_residual)
    for each pair of levels in level order. ``note`` says why the table is empty (an incomplete
    grid) and is None otherwise."""

    rows: list[dict[str, Any]]
    residual_ms: float
    effect_sizes: dict[str, dict[str, float]]
    note: str | None = None

    def row(self, source: str) -> dict[str, Any] | None:
        """The row of ``source`` ("retriever", "retriever:k", "topic", "residual"), or None."""
        return next((r for r in self.rows if r["source"] == source), None)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})


def level_order(values: Sequence[str]) -> list[str]:
    """A factor's distinct levels in numeric order when they are all numbers, else as first seen."""
    levels = list(dict.fromkeys(str(v) for v in values))
    try:
        return sorted(levels, key=float)
    except ValueError:
        return levels


def check_factors(names: list[str], factors: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """Per factor, its levels (:func:`level_order`); ValueError when a system has no level for a
    factor or a factor has fewer than two levels."""
    if not factors:
        raise ValueError("no factors given")
    out = {}
    for factor, values in factors.items():
        missing = [n for n in names if n not in values]
        if missing:
            raise ValueError(f"factor {factor!r} has no level for {len(missing)} systems, e.g. {missing[:3]}")
        levels = level_order([values[n] for n in names])
        if len(levels) < 2:
            raise ValueError(f"factor {factor!r} has one level ({levels[0]!r}): nothing to compare")
        out[factor] = levels
    return out


def grid(x: NDArray[np.float64], names: list[str], factors: Mapping[str, Mapping[str, str]],
         levels: Mapping[str, list[str]]) -> tuple[NDArray[np.float64] | None, str | None]:
    """The scores as an array ``[L_1, ..., L_k, n_queries]`` when the systems form a complete grid
    (each combination of levels exactly once), else ``(None, reason)``."""
    keys = list(levels)
    cells: dict[tuple[int, ...], int] = {}
    for i, n in enumerate(names):
        cell = tuple(levels[f].index(str(factors[f][n])) for f in keys)
        if cell in cells:
            return None, (f"incomplete grid: {names[cells[cell]]!r} and {n!r} share the levels "
                          f"{dict(zip(keys, (levels[f][c] for f, c in zip(keys, cell))))}; ANOVA skipped")
        cells[cell] = i
    size = math.prod(len(v) for v in levels.values())
    if len(cells) < size:
        return None, f"incomplete grid: {len(cells)} of {size} combinations of levels ran; ANOVA skipped"
    y = np.empty((*(len(levels[f]) for f in keys), x.shape[1]))
    for cell, i in cells.items():
        y[cell] = x[i]
    return y, None


def _projection(y: NDArray[np.float64], subset: tuple[int, ...], k: int) -> NDArray[np.float64]:
    """The effect of a subset of factor axes: inclusion-exclusion of the marginal means."""
    out = np.zeros([y.shape[a] if a in subset else 1 for a in range(k)] + [1])
    for r in range(len(subset) + 1):
        for sub in itertools.combinations(subset, r):
            other = tuple(a for a in range(k + 1) if a not in sub)
            out = out + (-1) ** (len(subset) - r) * y.mean(axis=other, keepdims=True)
    return out


def _row(source: str, df: int, ss: float, residual_ms: float, residual_df: int) -> dict[str, Any]:
    import scipy.stats  # noqa: PLC0415 (slow import: only where needed)
    ms = ss / df
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.float64(ms) / np.float64(residual_ms)
    p = float(scipy.stats.f.sf(f, df, residual_df)) if not math.isnan(f) else math.nan
    return {"source": source, "df": df, "ss": ss, "ms": ms, "f": float(f), "p": p}


def anova_blocks(matrix: ArrayLike, names: Sequence[str], factors: Mapping[str, Mapping[str, str]]) -> AnovaTable:
    """ANOVA with topics as blocks for a complete grid of factors (see the module docstring).

    ``factors``: factor -> {system name: level}. An incomplete grid (a failed job, a search that
    did not try every combination, two systems in one cell) gives an empty table with a ``note``
    instead of an error; a factor with one level or a system without a level is a ValueError.
    """
    x = as_matrix(matrix, min_queries=2)
    names = as_names(names, x.shape[0])
    levels = check_factors(names, factors)
    y, note = grid(x, names, factors, levels)
    if y is None:
        return AnovaTable([], math.nan, {}, note)
    keys, k, n = list(levels), len(levels), x.shape[1]
    cells = x.shape[0]
    total = float(((y - y.mean()) ** 2).sum())
    parts: list[tuple[str, int, float]] = []
    for r in range(1, k + 1):
        for subset in itertools.combinations(range(k), r):
            effect = _projection(y, subset, k)
            df = math.prod(len(levels[keys[a]]) - 1 for a in subset)
            parts.append((":".join(keys[a] for a in subset), df, float(y.size / effect.size * (effect ** 2).sum())))
    topic = y.mean(axis=tuple(range(k)), keepdims=True) - y.mean()
    parts.append((TOPIC, n - 1, float(y.size / topic.size * (topic ** 2).sum())))
    residual_df = (n - 1) * (cells - 1)
    residual_ss = max(total - sum(ss for _, _, ss in parts), 0.0)
    residual_ms = residual_ss / residual_df
    rows = [_row(s, df, ss, residual_ms, residual_df) for s, df, ss in parts]
    rows.append({"source": RESIDUAL, "df": residual_df, "ss": residual_ss, "ms": residual_ms, "f": math.nan,
                 "p": math.nan})
    sd = math.sqrt(residual_ms)
    effect_sizes: dict[str, dict[str, float]] = {}
    for a, f in enumerate(keys):
        means = y.mean(axis=tuple(i for i in range(k + 1) if i != a))
        with np.errstate(divide="ignore", invalid="ignore"):
            effect_sizes[f] = {f"{levels[f][i]} vs {levels[f][j]}": float(np.float64(means[i] - means[j]) / sd)
                               for i, j in itertools.combinations(range(len(means)), 2)}
    return AnovaTable(rows, residual_ms, effect_sizes, None)

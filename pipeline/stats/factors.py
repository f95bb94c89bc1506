"""An answer per factor of a grid sweep: which level, how sure, and whether it matters.

For each factor, the level x query matrix of marginal means (per level, the per-query mean over the
systems at that level, i.e. averaged over the other factors; query-paired) goes through the same
inference as systems do (``verdicts.infer``: randomized Tukey HSD over the distinct levels, two
levels being the randomization test of the mean difference): the best level, the set of levels
that could be best, and each level's verdict against the best in the margin's four words.

``FactorAnswer.ci_low``/``ci_high`` are the simultaneous (Tukey) intervals of each level's
difference to the best level (0 and [0, 0] for the best level itself and levels identical to it),
so they are the intervals the verdicts read.

Ordered factors (every level a number) say when the best level is the largest or smallest tried
(the optimum may lie outside the grid). An objective that never pays for more depth (recall, hit
rate and context utility/recall over each job's own k or token budget: adding a chunk can only
keep or raise them, :func:`pays_for_depth`) always prefers the largest k; for it "which k?" is
answered by a non-inferiority test (Wellek 2010; Lakens 2017): the smallest level whose interval
against the best has a lower bound above -margin.

Interactions: the factor's effect (each level minus the best level) is computed within each level
of every other factor; it is flagged when it changes sign by more than the margin either way, or
when the ANOVA interaction term (``anova.anova_blocks``) is significant (then "changes size").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.anova import AnovaTable, anova_blocks, check_factors
from pipeline.stats.inputs import as_matrix, as_names
from pipeline.stats.verdicts import (DEFAULT_MARGIN, Inference, PairVerdict, check_alpha, check_margin, infer,
                                     jsonable)

#: Metric families that never fall when a job reads more chunks (or tokens): at a job-relative
#: cut-off they reward the largest k or budget tried, so they cannot answer "which k?" alone.
MONOTONE_FAMILIES = ("recall", "hit_rate", "context_utility", "context_recall")
#: Factors that set the depth of the context (how many chunks or tokens a job reads).
DEPTH_FACTORS = {"k": "chunks", "budget": "tokens"}
#: The factor-level words: one distinct result at every level; every level within the margin of
#: the best; one level better than every other; anything else.
FACTOR_WORDS = ("no difference", "no practical difference", "best", "undecided")


def pays_for_depth(metric: str) -> bool:
    """False for a monotone family's job-relative keys (``recall_at_k``, ``context_utility_at_k``,
    ``context_recall_budget_1024``, ...): more chunks never lower them, so the largest depth always
    wins; True for everything else (nDCG, precision, MRR, fixed cut-offs like ``recall_at_10``)."""
    family = next((f for f in sorted(MONOTONE_FAMILIES, key=len, reverse=True) if metric.startswith(f + "_")), None)
    if family is None:
        return True
    rest = metric[len(family) + 1:]
    return not (rest == "at_k" or rest.startswith("budget"))


@dataclass(frozen=True)
class FactorAnswer:
    """One factor's answer; ``evidence[level]`` is that level minus the best level; ``line`` is the
    one line a report prints."""

    factor: str
    levels: list[str]
    ordered: bool
    means: list[float]
    ci_low: list[float]
    ci_high: list[float]
    best_level: str
    best_set: list[str]
    evidence: dict[str, PairVerdict]
    edge: str | None
    choice: str | None
    interactions: list[str]
    word: str
    line: str
    p: list[list[float]] | None = None
    hsd: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})


def level_matrix(x: NDArray[np.float64], names: list[str], values: Mapping[str, str],
                 levels: list[str]) -> NDArray[np.float64]:
    """``[levels, queries]``: per level, the per-query mean of the systems at that level."""
    return np.stack([x[[i for i, n in enumerate(names) if str(values[n]) == level]].mean(axis=0)
                     for level in levels])


def _is_number(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def _depth_unit(factor: str) -> str | None:
    return DEPTH_FACTORS.get(factor.rsplit(".", 1)[-1])


def _evidence_text(level: str, v: PairVerdict, *, with_p: bool = True, with_word: bool = False) -> str:
    text = f"{level} {v.diff:+.3f} [{v.ci_low:+.3f}, {v.ci_high:+.3f}]"
    if with_p:
        text += f" p {v.p:.2g}"
    if with_word:
        text += f" {v.word}" + (" by less than the margin" if v.below_margin and v.word in ("better", "worse") else "")
    return text


def _word(inf: Inference, margin: float) -> str:
    if len(inf.distinct) == 1:
        return "no difference"
    if all(-margin < v.ci_low and v.ci_high < margin for v in inf.evidence.values()):
        return "no practical difference"
    twins = next(g for g in inf.distinct if inf.best in g)
    if all(v.word == "worse" for k, v in inf.evidence.items() if k not in twins):
        return "best"
    return "undecided"


def _headline(factor: str, metric: str, inf: Inference, word: str, margin: float) -> str:
    best, ev = inf.best, inf.evidence
    m = f"{margin:g}"
    if word == "no difference":
        return f"{factor}: no difference (identical results at every level: {metric} cannot see {factor})"
    if word == "no practical difference":
        if len(ev) == 1:
            (other, v), = ev.items()
            return (f"{factor}: no practical difference ({best} {-v.diff:+.3f} [{-v.ci_high:+.3f}, "
                    f"{-v.ci_low:+.3f}] vs {other}, inside ±{m})")
        parts = "; ".join(_evidence_text(k, v, with_p=False) for k, v in ev.items())
        return f"{factor}: no practical difference (best {best}; {parts}; all inside ±{m})"
    if word == "best":
        parts = "; ".join(_evidence_text(k, v) + (" (by less than the margin)" if v.below_margin else "")
                          for k, v in ev.items())
        return f"{factor}: {best} best ({parts})"
    could = [k for k in inf.best_set if k != best]
    parts = "; ".join(_evidence_text(k, v, with_word=True) for k, v in ev.items())
    lead = f"{best} highest, {', '.join(could)} could be as good" if could else f"{best} highest"
    return f"{factor}: no clear best: {lead} ({parts})"


def _edge(levels: list[str], ordered: bool, best: str) -> str | None:
    if not ordered:
        return None
    if best == levels[-1]:
        return "largest"
    if best == levels[0]:
        return "smallest"
    return None


def _edge_text(factor: str, levels: list[str], edge: str, inf: Inference) -> str:
    neighbour = levels[-2] if edge == "largest" else levels[1]
    text = f", at the edge of the grid ({edge} {factor} tried)"
    if inf.evidence[neighbour].word == "worse":
        if edge == "largest":
            text += f": {inf.metric} is still rising at {factor} {inf.best} (try beyond it)"
        else:
            text += f": {inf.metric} still rises toward smaller {factor} (try below {inf.best})"
    return text


def _choice(factor: str, metric: str, levels: list[str], inf: Inference, margin: float) -> tuple[str | None, str]:
    unit = _depth_unit(factor)
    if unit is None or pays_for_depth(metric):
        return None, ""
    head = f"; {metric} never pays for more {unit}"
    for level in levels:
        if level == inf.best:
            return level, f"{head}, and no smaller {factor} is shown within {margin:g} of the best: {factor} {level}"
        v = inf.evidence[level]
        if v.ci_low > -margin:
            return level, (f"{head}, so the smallest {factor} within {margin:g} of the best is {level} "
                           f"(non-inferiority: {v.diff:+.3f} [{v.ci_low:+.3f}, {v.ci_high:+.3f}] vs {inf.best}, "
                           f"lower bound above -{margin:g})")
    return None, ""  # unreachable: the best level always qualifies


def _interactions(x: NDArray[np.float64], names: list[str], factors: Mapping[str, Mapping[str, str]],
                  factor: str, levels: Mapping[str, list[str]], best: str, margin: float, alpha: float,
                  anova: AnovaTable) -> list[str]:
    """Per other factor: the effect of each level minus the best level within each of its levels;
    one line per other factor where it reverses by more than the margin either way or the ANOVA
    interaction term is significant (the level that reverses, else the one that varies most)."""
    out = []
    values = factors[factor]
    for other in levels:
        if other == factor:
            continue
        effects: dict[str, dict[str, float]] = {}
        for g in levels[other]:
            rows = {lv: [i for i, n in enumerate(names) if str(factors[other][n]) == g and str(values[n]) == lv]
                    for lv in levels[factor]}
            if any(not r for r in rows.values()):
                continue
            means = {lv: float(x[r].mean()) for lv, r in rows.items()}
            effects[g] = {lv: means[lv] - means[best] for lv in levels[factor] if lv != best}
        if len(effects) < 2:
            continue
        row = anova.row(f"{factor}:{other}") or anova.row(f"{other}:{factor}")
        significant = row is not None and row["p"] is not None and row["p"] <= alpha
        flagged = []
        for lv in (lv for lv in levels[factor] if lv != best):
            e = {g: v[lv] for g, v in effects.items()}
            flip = max(e.values()) > margin and min(e.values()) < -margin
            if flip or significant:
                flagged.append((flip, max(e.values()) - min(e.values()), lv, e))
        if not flagged:
            continue
        flip, _, lv, e = max(flagged, key=lambda t: t[:2])  # a reversal first, then the widest spread
        what = "changes sign" if max(e.values()) > 0 > min(e.values()) else "changes size"
        per = ", ".join(f"{v:+.3f} at {other} {g}" for g, v in e.items())
        why = f"interaction p {row['p']:.2g}" if significant and row is not None else f"beyond ±{margin:g} both ways"
        out.append(f"{lv} - {best} {what} across {other} ({per}; {why})")
    return out


def answer_factor(x: NDArray[np.float64], names: list[str], factors: Mapping[str, Mapping[str, str]],
                  factor: str, levels: Mapping[str, list[str]], anova: AnovaTable, *, metric: str, margin: float,
                  alpha: float, n_permutations: int, seed: int | None) -> FactorAnswer:
    """One factor's :class:`FactorAnswer` (see :func:`answer_factors`)."""
    lv = levels[factor]
    inf = infer(level_matrix(x, names, factors[factor], lv), lv, metric=metric, margin=margin, alpha=alpha,
                n_permutations=n_permutations, seed=seed)
    ordered = all(_is_number(v) for v in lv)
    ev = {k: inf.evidence[k] for k in lv if k != inf.best}
    low = [0.0 if k == inf.best else ev[k].ci_low for k in lv]
    high = [0.0 if k == inf.best else ev[k].ci_high for k in lv]
    word = _word(inf, margin)
    line = _headline(factor, metric, inf, word, margin)
    edge = _edge(lv, ordered, inf.best)
    if edge and word not in ("no difference", "no practical difference"):
        line += _edge_text(factor, lv, edge, inf)
    choice, choice_text = _choice(factor, metric, lv, inf, margin)
    interactions = _interactions(x, names, factors, factor, levels, inf.best, margin, alpha, anova)
    line += choice_text + "".join(f"; {t}" for t in interactions)
    return FactorAnswer(factor, lv, ordered, inf.means, low, high, inf.best, inf.best_set, ev, edge, choice,
                        interactions, word, line, inf.p, inf.hsd)


def answer_factors(matrix: ArrayLike, names: Sequence[str], factors: Mapping[str, Mapping[str, str]], *,
                   metric: str = "metric", margin: float = DEFAULT_MARGIN, alpha: float = 0.05,
                   n_permutations: int = 10_000, seed: int | None = 0) -> list[FactorAnswer]:
    """One :class:`FactorAnswer` per factor of a sweep (``factors``: factor -> {system: level}).

    ValueError for a factor with one level, a system without a level, fewer than 2 queries,
    non-finite scores, a bad margin or alpha. An incomplete grid still gets answers (the marginal
    means are then over the systems that ran); only its interaction sizes lose the ANOVA.
    """
    x = as_matrix(matrix, min_queries=2)
    names = as_names(names, x.shape[0])
    margin, alpha = check_margin(margin), check_alpha(alpha)
    levels = check_factors(names, factors)
    anova = anova_blocks(x, names, factors)
    return [answer_factor(x, names, factors, f, levels, anova, metric=metric, margin=margin, alpha=alpha,
                          n_permutations=n_permutations, seed=seed) for f in levels]

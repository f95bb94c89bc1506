"""Verdicts you can act on: one inference over all systems, four words per difference.

One family: every pair of *distinct* systems (``inputs.distinct_rows``; exact twins are one
system and share its evidence) by the randomized Tukey HSD of ``significance.tukey_hsd``
(Carterette 2012; Sakai 2018, sec. 4.4): the same permutations and the same p-values as
``tukey_hsd`` on the distinct rows for the same seed. Its critical range HSD (from the
permutation distribution of the maximum range) gives a simultaneous interval diff +- HSD for
every pair, defined so that "the interval excludes 0" <=> "Tukey p <= alpha" exactly
(:func:`critical_range`). The HSD is also each pair's detectable difference, so the two can never
disagree.

With a practical margin m (in the metric's units) each difference gets one of four words
(:func:`word`): *better*/*worse* when its interval excludes 0 (flagged ``below_margin`` when
|diff| < m); *equivalent* when the whole interval lies inside (-m, +m): two one-sided tests
(Schuirmann 1987; Lakens 2017) at the simultaneous level; *inconclusive* otherwise.

The best set (the systems that could be the best) holds the best (highest mean) and every system
whose interval against the best contains 0: the best was chosen from the same data, and the
all-pairs Tukey family covers a comparison with a best chosen after the fact, which "best vs
each" with Holm does not (Hsu 1996, ch. 4: any all-pairwise simultaneous procedure implies
multiple comparisons with the best at the same level).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.stats.inputs import as_matrix, as_names, distinct_rows
from pipeline.stats.significance import tukey_pvalues, tukey_ranges, tukey_tolerance, wins_ties_losses

#: The four words, in this order of precedence: an interval that excludes 0 is better/worse
#: even when it also lies inside the margin (then ``below_margin`` says so).
WORDS = ("better", "worse", "equivalent", "inconclusive")
#: Default practical margin, in the objective's units (0.01 = one point of a [0, 1] metric).
DEFAULT_MARGIN = 0.01
METHOD = "randomized Tukey HSD (Carterette 2012; Sakai 2018)"


def positive_finite(value: Any) -> float | None:
    """``value`` as a float when it is a positive finite number (not a bool), else None: the
    one check behind the margin and the sweep's latency budget."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if isinstance(value, bool) or not math.isfinite(number) or number <= 0 else number


def check_margin(margin: float) -> float:
    """``margin`` as a float; ValueError unless it is a positive finite number."""
    if (m := positive_finite(margin)) is None:
        raise ValueError(f"margin must be a positive finite number, got {margin!r}")
    return m


def check_alpha(alpha: float) -> float:
    """``alpha`` as a float; ValueError unless 0 < alpha < 1."""
    a = float(alpha)
    if not 0 < a < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return a


def word(diff: float, low: float, high: float, margin: float) -> str:
    """The verdict on a difference with interval [low, high]: better or worse when the interval
    excludes 0, equivalent when it lies inside (-margin, +margin), inconclusive otherwise (also
    when a bound is NaN). ``diff`` only breaks no tie: the interval decides."""
    m = check_margin(margin)
    if math.isnan(low) or math.isnan(high) or math.isnan(diff):
        return "inconclusive"
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    if -m < low and high < m:
        return "equivalent"
    return "inconclusive"


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and non-finite floats as None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value


def _signed(v: float, digits: int = 3) -> str:
    return f"{v:+.{digits}f}"


def _p(p: float) -> str:
    return f"p {p:.2g}"


@dataclass(frozen=True)
class PairVerdict:
    """The verdict on a - b (mean of a minus mean of b) with its simultaneous interval, the
    family-wise Tukey p, the detectable difference (the HSD: the smallest |diff| this family
    calls significant) and the per-query wins/ties/losses of a against b."""

    a: str
    b: str
    diff: float
    ci_low: float
    ci_high: float
    p: float
    hsd: float
    word: str
    below_margin: bool
    wins: int
    ties: int
    losses: int
    n_queries: int
    margin: float = DEFAULT_MARGIN

    def phrase(self, metric: str) -> str:
        """One sentence with the evidence, e.g. "dense is better than bm25 on ndcg_at_10 by 0.194
        [0.083, 0.304] (p 0.001, 52 queries)". Worse is said the other way round ("by 0.194
        [0.083, 0.304]": the interval of b - a)."""
        tail = f"({_p(self.p)}, {self.n_queries} queries)"
        interval = f"{_signed(self.diff)} [{_signed(self.ci_low)}, {_signed(self.ci_high)}]"
        m = f"{self.margin:g}"
        if self.word in ("better", "worse"):
            if self.below_margin:
                return (f"{self.a} is {self.word} than {self.b} on {metric}, by less than the margin {m}: "
                        f"{interval} {tail}")
            lo, hi = (self.ci_low, self.ci_high) if self.word == "better" else (-self.ci_high, -self.ci_low)
            return (f"{self.a} is {self.word} than {self.b} on {metric} by {abs(self.diff):.3f} "
                    f"[{lo:.3f}, {hi:.3f}] {tail}")
        if self.word == "equivalent":
            return f"{self.a} and {self.b} are equivalent on {metric}: {interval}, inside ±{m} {tail}"
        return (f"{self.a} vs {self.b} on {metric} is inconclusive: {interval} "
                f"({_p(self.p)}, {self.n_queries} queries; detectable difference {self.hsd:.3f})")

    def to_dict(self) -> dict[str, Any]:
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Inference:
    """All pairs of one metric's systems: means, the Tukey p matrix (``names`` order), the
    critical range, the groups of identical systems, the best set and, per other system, its
    verdict against the best (a = that system, b = the best)."""

    metric: str
    names: list[str]
    means: list[float]
    method: str
    alpha: float
    margin: float
    n_queries: int
    n_permutations: int
    seed: int | None
    hsd: float
    p: list[list[float]]
    distinct: list[list[str]]
    best: str
    best_set: list[str]
    evidence: dict[str, PairVerdict]
    scores: NDArray[np.float64] | None = field(default=None, repr=False, compare=False)

    def pair(self, a: str, b: str) -> PairVerdict:
        """The verdict on ``a - b`` (any two of ``names``; twins give diff 0, [0, 0], p 1)."""
        unknown = [n for n in (a, b) if n not in self.names]
        if unknown:
            raise ValueError(f"unknown system {unknown[0]!r} (known: {', '.join(self.names)})")
        i, j = self.names.index(a), self.names.index(b)
        x = self.scores
        if x is None:
            raise ValueError("this Inference carries no scores (built by hand?)")
        wins, ties, losses = (int(v[0]) for v in wins_ties_losses(x[i] - x[j]))
        twins = any(a in g and b in g for g in self.distinct)
        # twins are one system: their difference is 0, not the rounding of two equal means
        diff = 0.0 if twins else self.means[i] - self.means[j]
        h = 0.0 if twins else self.hsd
        lo, hi = diff - h, diff + h
        return PairVerdict(a, b, diff, lo, hi, self.p[i][j], self.hsd, word(diff, lo, hi, self.margin),
                           bool(abs(diff) < self.margin), wins, ties, losses, self.n_queries, self.margin)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({f.name: getattr(self, f.name) for f in fields(self) if f.name != "scores"})


def critical_range(ranges: NDArray[np.float64], tol: float, alpha: float) -> float:
    """The HSD: the half-width h with "|diff| > h" <=> "Tukey p <= alpha" for the p-values
    :func:`significance.tukey_pvalues` computes from these permuted ranges.

    p = (c + 1) / (B + 1) with c = #{r* >= |diff| - tol}. Let c_max be the largest count with
    (c_max + 1) / (B + 1) <= alpha, evaluated in floating point exactly as p is (Phipson & Smyth
    2010's +1 included). Then p <= alpha <=> c <= c_max <=> the (c_max + 1)-th largest range
    r_(B - c_max) < |diff| - tol, so h = r_(B - c_max) + tol. No count qualifies when
    alpha (B + 1) < 1: nothing can be significant and h = inf.
    """
    b = ranges.shape[0]
    counts = np.arange(b + 1)
    ok = np.flatnonzero((counts + 1) / (b + 1) <= alpha)
    if not ok.size:
        return math.inf
    c_max = int(ok[-1])
    r = np.sort(ranges)
    return float(r[b - c_max - 1] + tol)


def _groups(first: NDArray[np.int64], names: list[str]) -> list[list[str]]:
    return [[names[i] for i in np.flatnonzero(first == g)] for g in dict.fromkeys(first.tolist())]


def infer(matrix: ArrayLike, names: Sequence[str], *, metric: str = "metric", margin: float = DEFAULT_MARGIN,
          alpha: float = 0.05, n_permutations: int = 10_000, seed: int | None = 0) -> Inference:
    """Randomized Tukey HSD over the distinct systems of ``matrix [systems, queries]`` with
    simultaneous intervals, the best set and each system's verdict against the best.

    ValueError for fewer than 2 queries, non-finite scores, a bad margin or alpha, repeated
    names. One system: it is the best, with no evidence.
    """
    x = as_matrix(matrix, min_queries=2)
    names = as_names(names, x.shape[0])
    margin, alpha = check_margin(margin), check_alpha(alpha)
    first = distinct_rows(x)
    keep = np.flatnonzero(first == np.arange(len(first)))
    xd = x[keep][None]
    if keep.size > 1:
        ranges = tukey_ranges(xd, n_permutations, seed)
        pd = tukey_pvalues(xd, ranges)[0]
        hsd = critical_range(ranges[0], float(tukey_tolerance(xd)[0]), alpha)
    else:
        if n_permutations < 1:
            raise ValueError("n_permutations must be >= 1")
        pd, hsd = np.ones((1, 1)), 0.0
    slot = {int(k): j for j, k in enumerate(keep)}
    idx = [slot[int(f)] for f in first]
    p = pd[np.ix_(idx, idx)]
    means = x.mean(axis=1)
    best = int(np.argmax(means))
    draft = Inference(metric, names, [float(v) for v in means], METHOD, alpha, margin, x.shape[1],
                      n_permutations, seed, hsd, p.tolist(), _groups(first, names), names[best], [], {}, x)
    evidence = {n: draft.pair(n, names[best]) for n in names if n != names[best]}
    # the best set by its definition (Tukey p against the best > alpha); its intervals contain 0
    in_set = [i for i in range(len(names)) if i == best or p[i, best] > alpha]
    in_set.sort(key=lambda i: (i != best, -means[i]))
    return replace(draft, best_set=[names[i] for i in in_set], evidence=evidence)

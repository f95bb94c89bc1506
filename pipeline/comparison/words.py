"""The verdict in words: the lines every view prints, from the report's JSON (``data["verdict"]``).

They read what ``comparison.verdict`` computed and compute nothing: the console, ``report.md``,
the sweep's summary (console, ``summary.md``) and its parent run's description print the same
sentences, each claim with its evidence (a simultaneous 95% interval and the adjusted p-value
of the randomized Tukey HSD) beside it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pipeline import stats
from pipeline.comparison.verdict import differ_clause

#: How many members of a best set a line names before "and N more".
MOST = 6
_FLIP = {"better": "worse", "worse": "better"}


def pair(d: Mapping[str, Any]) -> Any:
    """A :class:`stats.PairVerdict` from its JSON (null bounds, e.g. an infinite HSD, as inf)."""
    values = {k: (float("inf") if v is None and k in ("ci_high", "hsd") else
                  float("-inf") if v is None and k == "ci_low" else v) for k, v in d.items()}
    return stats.PairVerdict(**values)


def flip(d: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict on b - a from that on a - b."""
    out = dict(d)
    out.update(a=d["b"], b=d["a"], diff=-d["diff"], wins=d["losses"], losses=d["wins"],
               word=_FLIP.get(d["word"], d["word"]),
               ci_low=None if d["ci_high"] is None else -d["ci_high"],
               ci_high=None if d["ci_low"] is None else -d["ci_low"])
    return out


def reference(data: Mapping[str, Any], metric: str) -> str:
    """The system the marks are against: the named baseline, else the best on ``metric``."""
    v = data["verdict"]
    return v["baseline"] or v["metrics"][metric]["best"]


def against(data: Mapping[str, Any], metric: str, name: str) -> dict[str, Any] | None:
    """The JSON verdict on ``name`` minus the reference (None for the reference itself)."""
    v = data["verdict"]
    if v["baseline"]:
        return v["vs_baseline"][metric].get(name)
    return v["metrics"][metric]["evidence"].get(name)


def evidence(d: Mapping[str, Any], digits: int = 3) -> str:
    """``-0.194 [-0.304, -0.083] p 0.001``: the difference, its simultaneous interval, the p-value."""
    lo = "-inf" if d["ci_low"] is None else f"{d['ci_low']:+.{digits}f}"
    hi = "inf" if d["ci_high"] is None else f"{d['ci_high']:+.{digits}f}"
    return f"{d['diff']:+.{digits}f} [{lo}, {hi}] p {d['p']:.2g}"


def word_of(d: Mapping[str, Any]) -> str:
    """The verdict's word, "better, by less than the margin" when it is."""
    w = d["word"]
    return f"{w}, by less than the margin" if d["below_margin"] and w in ("better", "worse") else w


def sentence(data: Mapping[str, Any], metric: str) -> str:
    """Two systems, one metric: who wins, by how much, how sure, and in which settings they differ
    ("dense k5 is better than bm25 k10 on ndcg_at_10 by 0.194 [0.083, 0.304] (p 0.001, 52
    queries); they differ in k=5 vs k=10"). Against a named baseline, the other system comes first."""
    v = data["verdict"]
    inf = v["metrics"][metric]
    ref = reference(data, metric)
    other = next(n for n in inf["names"] if n != ref)
    d = against(data, metric, other)
    if d is None:  # pragma: no cover - two systems always have one verdict
        return f"{metric}: no verdict"
    if not v["baseline"]:
        d = flip(d)  # the best first: "A is better than B"
    differ = differ_clause(v.get("settings_differ") or {}, d["a"], d["b"])
    if d["b"] in _group_of(inf, d["a"]):  # exact twins: nothing to estimate
        return f"{d['a']} and {d['b']} are identical on {metric} ({inf['n_queries']} queries, every one){differ}"
    return pair(d).phrase(metric) + differ


def _group_of(inf: Mapping[str, Any], name: str) -> list[str]:
    return next((g for g in inf["distinct"] if name in g), [name])


def best_set_line(data: Mapping[str, Any], metric: str, digits: int = 4) -> str:
    """``best on ndcg_at_10: dense k10 0.8315; could also be the best: dense litm k10 -0.007
    [-0.051, +0.038] p 1 (inconclusive); the other 16 are worse (randomized Tukey HSD, alpha
    0.05, margin 0.01)``. Systems identical on every query are one (``a = b``)."""
    v = data["verdict"]
    inf = v["metrics"][metric]
    best = inf["best"]
    if len(inf["distinct"]) == 1:
        return f"no best on {metric}: every system is identical on every query ({method(v)})"
    mean = inf["means"][inf["names"].index(best)]
    twins = _group_of(inf, best)
    text = f"best on {metric}: {' = '.join([best, *(n for n in twins if n != best)])} {mean:.{digits}f}"
    groups = [g for g in inf["distinct"] if g is not twins and g[0] in inf["best_set"] and best not in g]
    if groups:
        shown = [f"{' = '.join(g)} {evidence(inf['evidence'][g[0]])} ({word_of(inf['evidence'][g[0]])})"
                 for g in groups[:MOST]]
        more = f" and {len(groups) - MOST} more" if len(groups) > MOST else ""
        text += f"; could also be the best: {'; '.join(shown)}{more}"
    rest = len(inf["names"]) - len(twins) - sum(len(g) for g in groups)
    if rest:
        text += f"; {'the other ' + str(rest) if groups else 'all ' + str(rest) + ' others'} are worse"
    return text + f" ({method(v)})"


def method(v: Mapping[str, Any]) -> str:
    return f"randomized Tukey HSD, alpha {v['alpha']:g}, margin {v['margin']:g}"


def factor_lines(data: Mapping[str, Any], metric: str) -> list[str]:
    """One line per swept factor (the marginal means' verdict, the edge of the grid, "which k?",
    interactions), as ``stats.answer_factors`` worded them."""
    return [a["line"] for a in (data["verdict"].get("factors") or {}).get(metric, [])]


def verdict_lines(data: Mapping[str, Any], metric: str) -> list[str]:
    """What a comparison concludes on ``metric``: two systems, the one sentence; more, one line
    per factor of a sweep and the best set with its evidence."""
    inf = data["verdict"]["metrics"][metric]
    if len(inf["names"]) == 2:
        return [sentence(data, metric)]
    return [*factor_lines(data, metric), best_set_line(data, metric)]


def system_cells(data: Mapping[str, Any], names: Sequence[str], metric: str, digits: int = 3) -> list[str]:
    """Per system, its verdict against the reference: ``-0.194 [-0.304, -0.083] p 0.001 worse``,
    or ``best``/``baseline`` for the reference itself."""
    ref = reference(data, metric)
    twins = _group_of(data["verdict"]["metrics"][metric], ref)
    what = "baseline" if data["verdict"]["baseline"] else "best"
    out = []
    for name in names:
        d = against(data, metric, name)
        out.append(what if name == ref or d is None else f"identical to the {what}" if name in twins
                   else f"{evidence(d, digits)} {word_of(d)}")
    return out


def anova_lines(data: Mapping[str, Any], metric: str) -> list[list[str]]:
    """The ANOVA table's rows (source, df, SS, MS, F, p) as text; [] without one."""
    table = (data["verdict"].get("anova") or {}).get(metric)
    if not table or not table.get("rows"):
        return []
    num = lambda x, f: "" if x is None else format(x, f)  # noqa: E731
    return [[r["source"], str(r["df"]), num(r["ss"], ".4g"), num(r["ms"], ".4g"), num(r["f"], ".3g"),
             num(r["p"], ".2g")] for r in table["rows"]]

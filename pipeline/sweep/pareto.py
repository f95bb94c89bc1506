"""Quality against cost in a sweep: the Pareto front of the objective against p95 latency, and
the answer under a latency budget (``select.max_latency_p95_ms``; issue 36).

Each job is a point: its objective (the mean over the evaluated queries, with the 95% BCa CI
the job logged) against its p95 per-query retrieval latency (with the percentile-bootstrap CI
of ``retrievers.cost``), read from the job's record (``record["cost"]``). A job without a cost
block (``cost.enabled=false``, a run file: nothing was retrieved) or without a result (a failed
job) is *unmeasured*: named as such, never on the front, never within or outside a budget.

- **The front** (:func:`pareto_front`): the measured jobs that no other measured job dominates
  (at least as good on the objective and at most as slow, better on one). On the point
  estimates: the CIs are drawn and printed beside it, they do not move a job on or off it.
- **A budget** B (:func:`budget_answer`): the jobs whose p95 is at most B are *within*; the best
  within is the one with the highest objective among them. What is claimed about it comes from
  the verdict machinery: the randomized Tukey HSD over the jobs within the budget alone
  (``pipeline.stats.verdicts.infer``, the settings of the sweep's comparison), whose best set
  names the jobs within the budget that could be as good. The better jobs the budget rules
  out are the measured jobs over B whose objective beats the best within. A job whose p95 CI
  straddles B is flagged *borderline* (its side of B may change on a rerun). No job within B is
  an answer: it names the closest job (the lowest p95).

Latency depends on the machine: the jobs' machines (``record["cost"]["machine"]``) are compared
and a sweep measured on more than one says so.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.io import results as res
from pipeline.stats.verdicts import infer, positive_finite

log = logging.getLogger(__name__)

#: The cost metric the front and the budget use.
LATENCY = "latency_p95_ms"


@dataclass(frozen=True)
class Point:
    """One job as the front and the budget see it; ``p95`` is None when unmeasured."""

    name: str
    folder: str
    run_id: str
    objective: float
    ci_low: float
    ci_high: float
    p95: float | None
    p95_low: float | None
    p95_high: float | None
    source: str  # measured | cache | not measured | failed | no cost block

    @property
    def measured(self) -> bool:
        return self.p95 is not None and math.isfinite(self.p95)


def check_budget(value: Any, where: str = "select.max_latency_p95_ms") -> float | None:
    """The budget in ms, or None when unset; ValueError unless a positive finite number (a
    budget of 0 ms or less admits no job by definition: a typo, not a question)."""
    if value is None:
        return None
    if (budget := positive_finite(value)) is None:
        raise ValueError(f"{where} must be a positive finite number of milliseconds (or null), got {value!r}")
    return budget


def budget_of(records: list[dict[str, Any]]) -> float | None:
    """The budget the jobs' params hold (``select.max_latency_p95_ms``), when they all hold one
    and the same (a sweep ended by ``pipeline.sync`` has no config of its own); else None."""
    values = {str((r.get("params") or {}).get("select.max_latency_p95_ms", "null")) for r in records}
    if len(values) != 1 or values & {"null", "None", ""}:
        return None
    try:
        return check_budget(values.pop())
    except ValueError:
        return None


def pareto_front(quality: ArrayLike, cost: ArrayLike) -> NDArray[np.bool_]:
    """Which points are on the front, higher ``quality`` and lower ``cost`` being better: a
    point is dominated when another is at least as good on both and strictly better on one.
    Points equal on both are all on it or all off. O(n log n): by cost ascending, a point is on
    the front when it is the best of its cost and better than everything strictly cheaper."""
    q = np.asarray(quality, dtype=np.float64)
    c = np.asarray(cost, dtype=np.float64)
    if q.shape != c.shape or q.ndim != 1:
        raise ValueError("quality and cost must be 1-d arrays of one length")
    if not (np.isfinite(q).all() and np.isfinite(c).all()):
        raise ValueError("quality and cost must be finite (leave unmeasured points out)")
    on = np.zeros(q.size, dtype=bool)
    order = np.lexsort((-q, c))
    best_cheaper = -math.inf
    i = 0
    while i < order.size:
        j = i
        while j < order.size and c[order[j]] == c[order[i]]:
            j += 1
        group = order[i:j]
        top = q[group].max()
        if top > best_cheaper:
            on[group[q[group] == top]] = True
            best_cheaper = top
        i = j
    return on


def points_of(jobs: list[tuple[Path, dict[str, Any]]], objective: str) -> list[Point]:
    """The jobs as points (in ``jobs`` order); ``objective`` NaN when a job lacks it."""
    out = []
    for results, record in jobs:
        m = record.get("metrics") or {}
        cost = record.get("cost") or {}
        c = cost.get("metrics") or {}
        source = str(cost.get("latency_source") or "no cost block")
        marker = res.read_marker(results)
        measured = LATENCY in c and source != "not measured"
        out.append(Point(
            str(record.get("run_name", results.parent.name)), str(results.parent), marker["run_id"] if marker else "",
            float(m.get(objective, math.nan)), float(m.get(f"{objective}_ci_low", math.nan)),
            float(m.get(f"{objective}_ci_high", math.nan)),
            float(c[LATENCY]) if measured else None, float(c.get(f"{LATENCY}_ci_low", math.nan)) if measured else None,
            float(c.get(f"{LATENCY}_ci_high", math.nan)) if measured else None, source))
    return out


def front_of(points: list[Point]) -> list[Point]:
    """The points on the front, by latency ascending."""
    usable = [p for p in points if p.measured and math.isfinite(p.objective)]
    if not usable:
        return []
    on = pareto_front([p.objective for p in usable], [p.p95 for p in usable])
    return sorted((p for p, keep in zip(usable, on) if keep), key=lambda p: (p.p95, -p.objective))


def budget_answer(points: list[Point], budget: float, objective: str, report: dict[str, Any] | None,
                  margin: float) -> dict[str, Any]:
    """The answer under ``budget`` (module docstring), JSON-able: ``within`` (names), ``best``,
    ``could_be_as_good`` (the best set of the Tukey HSD over the jobs within, the best
    excluded; None when no statistics ran), ``ruled_out`` (better jobs over the budget),
    ``borderline``, ``closest`` (when none is within), ``unmeasured``, ``claim`` (what the
    statistics say, in words)."""
    measured = [p for p in points if p.measured and math.isfinite(p.objective)]
    within = sorted((p for p in measured if p.p95 <= budget), key=lambda p: -p.objective)
    out: dict[str, Any] = {"budget_ms": budget, "objective": objective, "within": [p.name for p in within],
                           "unmeasured": [p.name for p in points if not p.measured], "best": None,
                           "could_be_as_good": None, "ruled_out": [], "borderline": [], "closest": None, "claim": ""}
    out["borderline"] = [p.name for p in measured if p.p95_low is not None and p.p95_high is not None
                         and p.p95_low <= budget < p.p95_high]
    if not within:
        closest = min(measured, key=lambda p: (p.p95, -p.objective), default=None)
        out["closest"] = None if closest is None else closest.name
        return out
    best = within[0]
    out["best"] = best.name
    out["ruled_out"] = [p.name for p in sorted(measured, key=lambda p: -p.objective)
                        if p.p95 > budget and p.objective > best.objective]
    out["could_be_as_good"], out["claim"] = _best_set(within, objective, report, margin)
    return out


def _best_set(within: list[Point], objective: str, report: dict[str, Any] | None,
              margin: float) -> tuple[list[str] | None, str]:
    """The jobs within the budget that could be as good as its best: the best set of the
    randomized Tukey HSD over those jobs alone, on the per-query scores of the sweep's
    comparison (its alpha, permutations and seed)."""
    if len(within) == 1:
        return [], "the only job within the budget"
    if report is None or objective not in (report.get("per_query") or {}).get("scores", {}):
        return None, "no statistics ran (see the note above): the best within is the highest mean only"
    by_folder = {str(Path(d["folder"]).resolve()): d["name"] for d in report["systems"] if d.get("folder")}
    scores = report["per_query"]["scores"][objective]
    names = [by_folder.get(str(Path(p.folder).resolve())) for p in within]
    if None in names:
        return None, "the comparison does not hold every job within the budget: the highest mean only"
    settings = report.get("settings") or {}
    inference = infer(np.array([scores[n] for n in names]), [p.name for p in within], metric=objective,
                      margin=margin, alpha=float(settings.get("alpha", 0.05)),
                      n_permutations=int(settings.get("n_permutations", 10_000)), seed=settings.get("seed", 0))
    others = [n for n in inference.best_set if n != within[0].name]
    return others, (f"randomized Tukey HSD over the {len(within)} jobs within the budget, alpha "
                    f"{inference.alpha:g}, {inference.n_queries} queries")


def machines(jobs: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """The distinct machines the jobs' latencies were measured on (``cpu, N threads``)."""
    seen = []
    for _, record in jobs:
        m = (record.get("cost") or {}).get("machine") or {}
        if m:
            seen.append(f"{m.get('cpu', '?')}, {m.get('threads', '?')} threads")
    return list(dict.fromkeys(seen))


def _ms(value: float | None) -> str:
    return "?" if value is None or not math.isfinite(value) else (f"{value:,.0f}" if value >= 100 else f"{value:.3g}")


def _point(p: Point, objective: str, ci: bool = False) -> str:
    text = f"{p.name} ({objective} {p.objective:.4f}"
    if ci and math.isfinite(p.ci_low):
        text += f" [95% CI {p.ci_low:.4f}, {p.ci_high:.4f}]"
    text += f", p95 {_ms(p.p95)} ms"
    if ci and p.p95_low is not None and math.isfinite(p.p95_low):
        text += f" [{_ms(p.p95_low)}, {_ms(p.p95_high)}]"
    return text + (", latency from the cache" if p.source == "cache" else "") + ")"


def describe(points: list[Point], front: list[Point], answer: dict[str, Any] | None, objective: str,
             machine_list: list[str]) -> str:
    """The quality-against-cost lines of the sweep's summary (console, summary.md, the parent
    run's description, word for word)."""
    by_name = {p.name: p for p in points}
    measured = [p for p in points if p.measured]
    if not measured:
        return ("quality against cost: no job measured its latency (cost.enabled=false, a run file, or failed): "
                "no front" + (f"; no answer for the budget p95 <= {_ms(answer['budget_ms'])} ms" if answer else ""))
    lines = [f"quality against cost ({objective} against p95 retrieval latency, summary/pareto.png): the front is "
             f"{', '.join(_point(p, objective) for p in front)}"
             + ("" if len(front) == len(measured) else
                f"; the other {len(measured) - len(front)} job(s) are dominated (another is at least as good and at "
                "most as slow)")]
    if unmeasured := [p for p in points if not p.measured]:
        lines.append(f"unmeasured (no latency: cost.enabled=false, a run file or a failed job; neither on the "
                     f"front nor within a budget): {', '.join(f'{p.name} ({p.source})' for p in unmeasured)}")
    if len(machine_list) > 1:
        lines.append(f"note: the latencies were measured on {len(machine_list)} machines ({'; '.join(machine_list)}): "
                     "they do not compare across them")
    if answer is not None:
        lines += _budget_lines(answer, by_name, objective)
    return "\n".join(lines)


def _budget_lines(answer: dict[str, Any], by_name: dict[str, Point], objective: str) -> list[str]:
    budget = f"p95 <= {_ms(answer['budget_ms'])} ms"
    if answer["best"] is None:
        closest = by_name.get(answer["closest"]) if answer["closest"] else None
        line = f"budget {budget}: no job meets it"
        return [line + (f"; the closest is {_point(closest, objective, ci=True)}" if closest else "")]
    best = by_name[answer["best"]]
    line = f"budget {budget}: the best within it is {_point(best, objective, ci=True)}"
    tied = answer["could_be_as_good"]
    if tied is None:
        line += f" ({answer['claim']})"
    elif tied:
        line += f"; could be as good ({answer['claim']}): {', '.join(tied)}"
    elif len(answer["within"]) > 1:
        line += f"; better than every other job within it ({answer['claim']})"
    else:
        line += f" ({answer['claim']})"
    lines = [line]
    if answer["ruled_out"]:
        lines.append(f"ruled out by the budget (better {objective}, p95 over it): "
                     + ", ".join(_point(by_name[n], objective) for n in answer["ruled_out"]))
    else:
        lines.append("the budget rules out no better job")
    if answer["borderline"]:
        lines.append(f"borderline (the p95's 95% CI contains the budget: its side may change on a rerun): "
                     f"{', '.join(answer['borderline'])}")
    return lines


def write(out: Path, points: list[Point], front: list[Point], answer: dict[str, Any] | None, objective: str) -> None:
    """``pareto.csv`` (every job: its objective and p95 with their CIs, where the latency comes
    from, on the front, within the budget) and ``pareto.png`` (when a job was measured)."""
    import pandas as pd

    on = {p.name for p in front}
    within = set(answer["within"]) if answer else set()
    rows = [{"run_name": p.name, "run_id": p.run_id, objective: p.objective, f"{objective}_ci_low": p.ci_low,
             f"{objective}_ci_high": p.ci_high, LATENCY: p.p95, f"{LATENCY}_ci_low": p.p95_low,
             f"{LATENCY}_ci_high": p.p95_high, "latency_source": p.source, "on_front": p.name in on,
             **({"within_budget": (p.name in within) if p.measured else None} if answer else {})} for p in points]
    pd.DataFrame(rows).to_csv(out / "pareto.csv", index=False, float_format="%.6g")
    measured = [p for p in points if p.measured and math.isfinite(p.objective)]
    if not measured:
        return
    from pipeline import figures as plots

    figure = plots.pareto_figure(
        [(p.name, p.p95, p.p95_low, p.p95_high, p.objective, p.ci_low, p.ci_high, p.name in on) for p in measured],
        objective, None if answer is None else answer["budget_ms"], answer["best"] if answer else None,
        f"{objective} against p95 retrieval latency ({len(measured)} jobs, {len(front)} on the front)")
    figure.savefig(out / "pareto.png", dpi=80, **plots.PNG_FAST)

"""Exact ties between systems, said once and the same way everywhere.

Jobs of a sweep over ``k``, ``reorder`` or ``attention`` rank the same documents, so every
ranking metric gives them identical per-query values: they are one result, not several.
A comparison groups systems with identical per-query values (``stats.distinct_rows``) and
counts each distinct result once in the correction family; this module words it ("3
distinct results among 18 jobs"), finds the swept factors a metric cannot see (jobs that
differ only in that factor score identically), the metrics that do vary across jobs, and
the default metrics of a comparison of systems that differ only in placement. The console,
the sweep summary (``summary/summary.md``), the parent run's description and ``report.md``
all use these functions.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from pipeline.metrics import BUDGET_FAMILIES, RUN_FAMILIES
from pipeline.comparison.systems import DEFAULT_METRICS, System, is_factor, load_systems

#: Override keys (and their sub-keys) that change only the placed order of the top k.
PLACEMENT_FACTORS = ("reorder", "attention")
#: Families whose job-relative key (``<family>_at_k``) :func:`varying_metrics` lists, in this order.
RELATIVE_FAMILIES = ("context_utility", "ndcg", "recall", "precision", "mrr")
#: Metric keys never listed as "varying": timings, data counts, the objective's CI.
_NOT_METRICS = ("time_", "data_", "n_queries", "best_")


def distinct_phrase(n_distinct: int, n: int, noun: str = "jobs") -> str:
    """``3 distinct results among 18 jobs``."""
    return f"{n_distinct} distinct result{'' if n_distinct == 1 else 's'} among {n} {noun}"


def noun_of(systems: Sequence[Any]) -> str:
    """``jobs`` when every system is a job of a sweep, else ``systems``."""
    return "jobs" if systems and all(getattr(s, "sweep", None) for s in systems) else "systems"


def blind_factors(factors: Mapping[str, Mapping[str, str]], names: Sequence[str], first: Sequence[int]) -> list[str]:
    """The swept factors a metric cannot see: for each factor, the systems that agree on every
    other factor but differ in it are compared; when there is such a set and each has one
    result (``first``: ``stats.distinct_rows`` of the metric), the factor changes nothing.
    A factor never varied alone (an Optuna search) is not judged."""
    blind = []
    for factor, values in factors.items():
        others = [f for f in factors if f != factor]
        cells: dict[tuple[str, ...], list[int]] = {}
        for i, name in enumerate(names):
            cells.setdefault(tuple(factors[f][name] for f in others), []).append(i)
        varied = [cell for cell in cells.values() if len({values[names[i]] for i in cell}) > 1]
        if varied and all(len({first[i] for i in cell}) == 1 for cell in varied):
            blind.append(factor)
    return blind


def distinct_lines(data: Mapping[str, Any], noun: str) -> list[str]:
    """Per metric of a comparison report: how many distinct results, which systems repeat
    which, and the factors the metric cannot see."""
    lines = []
    n = len(data["systems"])
    for metric in data["metrics"]:
        groups = data.get("distinct", {}).get(metric) or [[s["name"]] for s in data["systems"]]
        text = f"{metric}: {distinct_phrase(len(groups), n, noun)}"
        if blind := data.get("blind", {}).get(metric):
            text += f"; it cannot see {', '.join(blind)}"
        same = [" = ".join(g) for g in groups if len(g) > 1]
        if same and len(groups) < n:
            text += "; identical: " + "; ".join(same[:6]) + ("; ..." if len(same) > 6 else "")
        lines.append(text)
    return lines


def varying_metrics(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The computed metrics whose means differ across the jobs (``records``: their
    ``record.json``), compressed by family: ``context_utility_at_K (K = 1, 3, 5, 10)``,
    ``ndcg_at_k`` (each job at its own k, when the jobs' k differ), ``context_recall_budget_B
    (B = 256, 512)``, ``mrr``."""
    if len(records) < 2:
        return []
    common = set.intersection(*(set(r["metrics"]) for r in records))
    varying: dict[str, list[int]] = {}
    singles = []
    for key in sorted(common):
        if key.startswith(_NOT_METRICS) or key.endswith(("_ci_low", "_ci_high")):
            continue
        if not _differ([r["metrics"][key] for r in records]):
            continue
        stem, _, tail = key.rpartition("_")
        if tail.isdigit() and (stem.endswith("_at") and stem[:-3] in RUN_FAMILIES
                               or stem.endswith("_budget") and stem[:-7] in BUDGET_FAMILIES):
            varying.setdefault(stem, []).append(int(tail))
        elif not tail.isdigit():
            singles.append(key)
    out = [f"{stem}_{'K' if stem.endswith('_at') else 'B'} ({'K' if stem.endswith('_at') else 'B'} = "
           f"{', '.join(map(str, sorted(values)))})" for stem, values in varying.items()]
    ks = [r.get("params", {}).get("k", r.get("k")) for r in records]
    if len(set(map(str, ks))) > 1:  # each job at its own k
        for family in RELATIVE_FAMILIES:
            values = [r["metrics"].get(f"{family}_at_{k}") for r, k in zip(records, ks)]
            if None not in values and _differ(values) and f"{family}_at_k" not in singles:
                out.append(f"{family}_at_k")
    return out + singles


def _differ(values: Sequence[Any]) -> bool:
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(float(v))]
    return len(numbers) == len(values) and max(numbers) - min(numbers) > 1e-12


def only_placement(factors: Mapping[str, Any]) -> bool:
    """Whether the systems differ only in placement (``reorder``, ``attention`` and their keys)."""
    return bool(factors) and all(f.split(".", 1)[0] in PLACEMENT_FACTORS for f in factors)


def placement_metrics(defaults: Sequence[str]) -> list[str]:
    """The default metrics of a comparison plus ``context_utility_at_k`` (each job at its own
    k): when systems differ only in placement, every ranking metric (and context recall and
    precision, which count what is in the context, not where) ties exactly."""
    return [*defaults, *(m for m in ("context_utility_at_k",) if m not in defaults)]


def placement_note(swept: Mapping[str, Any], metrics: Sequence[str], distinct: Mapping[str, list]) -> list[str]:
    """One line when the systems differ only in placement and a metric cannot tell them apart."""
    flat = [m for m in metrics if len(distinct[m]) == 1]
    if not (only_placement(swept) and flat):
        return []
    return [f"the systems differ only in placement ({', '.join(swept)}), which reorders the top k without changing "
            f"it: {', '.join(flat)} cannot differ; context_utility_at_k (each job at its k) can"]


def choose_metrics(specs: Sequence[str], metrics: Sequence[str] | None, **load: Any) -> tuple[list[System], list[str]]:
    """The systems and the metrics to compare them on: ``metrics``, or by default
    :data:`DEFAULT_METRICS`, plus ``context_utility_at_k`` when the systems (jobs) differ
    only in placement: the default metrics all tie exactly there. ``load`` goes to ``load_systems``."""
    chosen = list(metrics or DEFAULT_METRICS)
    systems = load_systems(specs, chosen, **load)
    if metrics or not only_placement(swept_factors(systems)) or any(s.kind == "trec" for s in systems):
        return systems, chosen
    chosen = placement_metrics(chosen)
    return load_systems(specs, chosen, **load), chosen


def swept_factors(systems: Sequence[System]) -> dict[str, dict[str, str]]:
    """``{factor: {system: value}}`` for each override key whose value varies across systems.

    A system without the override has its config's value (record params, e.g.
    ``retriever.k1``) or its group choice (tag ``choice.retriever``), else ``default``."""
    keys = list(dict.fromkeys(k for s in systems for k in s.overrides if is_factor(k)))  # command-line order
    out = {}
    for key in keys:
        values = {s.name: s.overrides.get(key) or s.params.get(key) or s.tags.get(f"choice.{key}") or "default"
                  for s in systems}
        if len(set(values.values())) > 1:
            out[key] = values
    return out

"""Compare retrieval systems on the same queries: the report behind ``python -m pipeline.compare``.

Each system's per-query scores of the evaluated queries (``pipeline.comparison.systems``) are
aligned by query id (``stats.align``) and compared with ``stats.compare_metrics``: mean and
BCa bootstrap CI per system, the difference to the baseline with its CI, paired t,
Wilcoxon, sign and randomization tests adjusted (Holm by default) over every comparison of
every metric, effect sizes, randomized Tukey HSD, the minimum detectable difference and the
set of systems tied with the best. For a sweep, the swept factors' main effects too. See
docs/comparing.md and docs/statistics.md.

The report is a JSON-ready dict (:class:`Report` ``.data``, format :data:`REPORT_FORMAT`):
one computation, rendered as a console table and ``report.md`` (``comparison.render``),
written to a folder with its figures and put on an MLflow run (``comparison.output``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from pipeline import stats
from pipeline.comparison.systems import (DEFAULT_METRICS, SCORING, System, check_metrics, describe_differences,
                                         scoring_differences)
from pipeline.comparison.ties import blind_factors, placement_note, swept_factors
from pipeline.errors import InputError
from pipeline.io import results as res

log = logging.getLogger(__name__)

REPORT_FORMAT = "rag-eval-compare/1"
TESTS = ("fisher", "t", "wilcoxon", "sign")
CORRECTIONS = ("holm", "bonferroni", "fdr_bh")


@dataclass
class Report:
    """The comparison: ``data`` is the JSON report; ``matrices[metric]`` the aligned scores
    ``[systems, queries]`` (rows in ``names`` order, columns in ``query_ids`` order)."""

    data: dict[str, Any]
    names: list[str]
    query_ids: list[str]
    matrices: dict[str, NDArray[np.float64]]
    systems: list[System]


def _level_order(values: Iterable[str]) -> list[str]:
    """A factor's values in numeric order when they are all numbers, else as first seen."""
    levels = list(dict.fromkeys(values))
    try:
        return sorted(levels, key=float)
    except ValueError:
        return levels


def compute_main_effects(factors: Mapping[str, Mapping[str, str]], names: list[str],
                         matrices: Mapping[str, NDArray[np.float64]], n_resamples: int, seed: int) -> dict[str, Any]:
    """Per metric and factor, per level: the mean over queries of the per-query average of the
    jobs at that level, with its BCa bootstrap CI (queries resampled, the same for all levels)."""
    out: dict[str, Any] = {}
    for metric, x in matrices.items():
        out[metric] = {}
        for factor, values in factors.items():
            levels = _level_order(values[n] for n in names)
            rows = np.stack([x[[i for i, n in enumerate(names) if values[n] == level]].mean(axis=0)
                             for level in levels])
            lo, hi = stats.bootstrap_ci(rows, n_resamples=n_resamples, seed=seed)
            out[metric][factor] = [
                {"value": level, "mean": float(rows[j].mean()), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                 "n_systems": sum(values[n] == level for n in names)}
                for j, level in enumerate(levels)
            ]
    return out


def find_baseline(baseline: str | None, systems: Sequence[System]) -> str:
    """The name of the system ``baseline`` names (its name, run id, command-line spec,
    folder, run name or overrides); the first system when None. InputError when it names
    none or several."""
    if baseline is None:
        return systems[0].name
    for attempt in (
        lambda s: s.name == baseline,
        lambda s: s.run_id is not None and baseline in (s.run_id, f"mlflow:{s.run_id}"),
        lambda s: s.spec == baseline,
        lambda s: s.folder is not None and Path(baseline).expanduser().resolve() in
        (Path(s.folder).resolve(), Path(s.folder).resolve() / res.RESULTS),
        lambda s: s.run_name == baseline,
        lambda s: s.name.endswith(f" [{baseline}]"),  # the overrides that name it: "retriever.k1=0.5"
    ):
        hits = [s for s in systems if attempt(s)]
        if len(hits) == 1:
            return hits[0].name
        if len(hits) > 1:
            raise InputError(f"{baseline!r} names {len(hits)} systems ({', '.join(h.name for h in hits[:4])}): "
                             "pass one system's name", "--baseline")
    raise InputError(f"{baseline!r} is none of the systems ({', '.join(s.name for s in systems[:8])})", "--baseline")


def _query_set(systems: Sequence[System], metric: str, missing: str) -> tuple[list[str], dict[str, list[str]]]:
    """The union of every system's evaluated queries, and the queries each system lacks.

    A query one system lacks is an error naming that system's file, unless
    ``missing="zero"`` (trec_eval -c): then it is listed, to be scored 0."""
    union = sorted(set().union(*(s.scores[metric] for s in systems)))
    if not union:  # nothing computed from nothing: no mean, no test
        raise InputError("no evaluated query: no system has a query with a relevant document (per_query.csv "
                         "'evaluated'); every mean would be 0 from no query", systems[0].source)
    zero_filled = {}
    for s in systems:
        absent = [q for q in union if q not in s.scores[metric]]
        if absent and missing != "zero":
            raise InputError(f"no score for {len(absent)} of the {len(union)} evaluated queries of the systems, "
                             f"e.g. {absent[:5]} (--missing zero scores them 0, as trec_eval -c)", s.source)
        if absent:
            zero_filled[s.name] = absent
    return union, zero_filled


def _statistics(systems: Sequence[System], metrics: Sequence[str], baseline: str, query_ids: list[str], *,
                test: str, correction: str, alpha: float, n_resamples: int, n_permutations: int, seed: int,
                missing: str, delta: float | None) -> tuple[dict[str, NDArray[np.float64]], list[Any], dict[str, Any]]:
    """The aligned score matrices, ``stats.compare_metrics``'s comparisons and, per metric,
    the systems tied with the best; a ValueError of ``stats`` (bad input) is an InputError."""
    names = [s.name for s in systems]
    try:
        matrices = {m: stats.align({s.name: s.scores[m] for s in systems}, missing=missing,
                                   query_ids=query_ids).matrix for m in metrics}
        comparisons = stats.compare_metrics(
            matrices, names, baseline=baseline, n_resamples=n_resamples, n_permutations=n_permutations, seed=seed,
            correction=correction, alpha=alpha, test=test, delta=delta)  # type: ignore[arg-type]
        tied = {m: stats.tied_with_best(matrices[m], names, test=test, correction=correction,  # type: ignore[arg-type]
                                        alpha=alpha, n_permutations=n_permutations, seed=seed) for m in metrics}
    except ValueError as err:
        raise InputError(str(err)) from err
    return matrices, comparisons, tied


def build_report(systems: Sequence[System], metrics: Sequence[str] = DEFAULT_METRICS, *, baseline: str | None = None,
                 test: str = "fisher", correction: str = "holm", alpha: float = 0.05, n_resamples: int = 10_000,
                 n_permutations: int = 10_000, seed: int = 0, missing: str = "error", delta: float | None = None,
                 main_effects: bool | None = None, allow_mixed: bool = False) -> Report:
    """Compare ``systems`` (from ``load_systems``) on ``metrics``.

    The first system is the baseline unless ``baseline`` names one (its name, run id,
    command-line spec or folder). ``main_effects`` (default: when a sweep is compared)
    adds the per-factor means. Systems scored under different definitions (gain,
    relevance_level, judged_only, qrels, collection, the depth of full-depth metrics:
    ``systems.SCORING``) are an InputError naming the setting and the systems, unless
    ``allow_mixed``: the report is then marked mixed (``data["mixed"]``, the console's and
    report.md's first lines). ValueErrors of ``stats`` become InputErrors."""
    metrics = check_metrics(metrics)
    if len(systems) < 2:
        raise InputError(f"need at least two systems to compare, got {len(systems)}",
                         systems[0].spec if systems else None)
    if test not in TESTS:
        raise InputError(f"--test must be one of {', '.join(TESTS)}, got {test!r}")
    names = [s.name for s in systems]
    base = find_baseline(baseline, systems)
    mixed, unknown = scoring_differences(systems, metrics)
    if mixed and not allow_mixed:
        raise InputError(f"not comparable: the systems were scored under different definitions: "
                         f"{describe_differences(mixed)}; their differences would be the scoring's, not the systems' "
                         "(compare systems scored alike, or pass --allow-mixed)")
    for key, names_unknown in unknown.items():  # an older record: say so, do not refuse on that alone
        log.warning("%s is not recorded for %s (an older record): not checked", SCORING[key], ", ".join(names_unknown))
    union, zero_filled = _query_set(systems, metrics[0], missing)
    matrices, comparisons, tied = _statistics(systems, metrics, base, union, test=test, correction=correction,
                                              alpha=alpha, n_resamples=n_resamples, n_permutations=n_permutations,
                                              seed=seed, missing=missing, delta=delta)
    best, sensitivity = {}, {}
    for c in comparisons:  # the best mean (within stats.TIE_TOLERANCE), the power at delta when given
        top = max(s.mean for s in c.systems)
        best[c.metric] = [s.name for s in c.systems if s.mean >= top - stats.TIE_TOLERANCE]
        sens = dict(c.sensitivity)
        if delta is not None and "sd_diff" in sens:
            sens["power_at_delta"] = float(stats.power_paired_t(delta, sens["sd_diff"], len(union), alpha=alpha))
        sensitivity[c.metric] = sens
    swept = swept_factors(systems)
    effects = {}
    if swept and (main_effects if main_effects is not None else any(s.sweep for s in systems)):
        effects = compute_main_effects(swept, names, matrices, n_resamples, seed)
    distinct = {c.metric: c.distinct for c in comparisons}
    first = {m: [next(j for j, g in enumerate(distinct[m]) if n in g) for n in names] for m in metrics}
    blind = {m: b for m in metrics if swept and (b := blind_factors(swept, names, first[m]))}
    data = {  # the order of the JSON report's keys
        "format": REPORT_FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "metrics": metrics, "baseline": base,
        "settings": {"test": test, "correction": correction, "alpha": alpha, "ci_method": "BCa", "confidence": 0.95,
                     "n_resamples": n_resamples, "n_permutations": n_permutations, "seed": seed,
                     "missing": missing, "delta": delta},
        "n_queries": len(union), "n_comparisons": sum(c.n_family for c in comparisons), "distinct": distinct,
        "blind": blind, "notes": placement_note(swept, metrics, distinct),
        "systems": [s.describe() for s in systems], "zero_filled": zero_filled,
        "comparisons": [finite(c.to_dict()) for c in comparisons], "best": best, "tied_with_best": tied,
        "sensitivity": finite(sensitivity), "factors": swept, "main_effects": finite(effects),
        "per_query": {"query_ids": union,
                      "scores": {m: {name: row.tolist() for name, row in zip(names, matrices[m])} for m in metrics}},
    }
    if mixed:  # only then, so that a clean comparison's report keeps its keys
        data["mixed"] = mixed
    if unknown:
        data["scoring_unknown"] = unknown
    return Report(data, names, union, matrices, list(systems))


def finite(value: Any) -> Any:
    """JSON has no infinities: a non-finite float (t of constant differences) becomes null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value

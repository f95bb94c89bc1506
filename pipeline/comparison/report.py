"""Compare retrieval systems on the same queries: the report behind ``python -m pipeline.cli compare``.

Each system's per-query scores of the evaluated queries (``pipeline.comparison.systems``) are
aligned by query id (``stats.align``). The one inference (``comparison.verdict``: randomized
Tukey HSD, the best set, four words against a practical margin, an answer per factor of a
sweep) is what every view states. The full table of tests (``--all-tests``) keeps
``stats.compare_metrics``: mean and BCa bootstrap CI per system, the difference to the
reference (the named baseline, else the best) with its CI, paired t, Wilcoxon, sign and
randomization tests adjusted (Holm by default), effect sizes, the minimum detectable
difference. For a sweep, the swept factors' main effects too. See docs/comparing.md and
docs/statistics.md.

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
from pipeline.comparison.latency import latency_report
from pipeline.comparison.ties import blind_factors, placement_note, swept_factors
from pipeline.comparison.verdict import (DEFAULT_MARGIN, Verdict, check_margin, compute_verdict, cutoff_note,
                                         differing_settings)
from pipeline.errors import InputError
from pipeline.io import results as res

log = logging.getLogger(__name__)

REPORT_FORMAT = "rag-eval-compare/2"  # 2: the verdict; the reference is the best unless named
TESTS = ("fisher", "t", "wilcoxon", "sign")
CORRECTIONS = ("holm", "bonferroni", "fdr_bh")


@dataclass
class Report:
    """The comparison: ``data`` is the JSON report; ``matrices[metric]`` the aligned scores
    ``[systems, queries]`` (rows in ``names`` order, columns in ``query_ids`` order);
    ``verdict`` the one inference every rendering states (``data["verdict"]`` is its JSON)."""

    data: dict[str, Any]
    names: list[str]
    query_ids: list[str]
    matrices: dict[str, NDArray[np.float64]]
    systems: list[System]
    verdict: Verdict


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


def _align(systems: Sequence[System], metrics: Sequence[str], query_ids: list[str],
           missing: str) -> dict[str, NDArray[np.float64]]:
    """The aligned score matrices ``[systems, queries]`` per metric."""
    try:
        return {m: stats.align({s.name: s.scores[m] for s in systems}, missing=missing, query_ids=query_ids).matrix
                for m in metrics}
    except ValueError as err:
        raise InputError(str(err)) from err


def _check(systems: Sequence[System], metrics: Sequence[str], test: str, allow_mixed: bool
           ) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[str]]]:
    """Two systems or more, a known test, systems scored alike (unless ``allow_mixed``); the
    scoring settings that differ, and a warning for those an older record does not say."""
    if len(systems) < 2:
        raise InputError(f"need at least two systems to compare, got {len(systems)}",
                         systems[0].spec if systems else None)
    if test not in TESTS:
        raise InputError(f"--test must be one of {', '.join(TESTS)}, got {test!r}")
    mixed, unknown = scoring_differences(systems, metrics)
    if mixed and not allow_mixed:
        raise InputError(f"not comparable: the systems were scored under different definitions: "
                         f"{describe_differences(mixed)}; their differences would be the scoring's, not the systems' "
                         "(compare systems scored alike, or pass --allow-mixed)")
    for key, names_unknown in unknown.items():  # an older record: say so, do not refuse on that alone
        log.warning("%s is not recorded for %s (an older record): not checked", SCORING[key], ", ".join(names_unknown))
    return mixed, unknown


def _best_of(matrix: NDArray[np.float64], names: list[str]) -> str:
    """The system with the highest mean (the first of exact ties, in the systems' order)."""
    means = matrix.mean(axis=1)
    return names[int(np.flatnonzero(means >= means.max() - stats.TIE_TOLERANCE)[0])]


def build_report(systems: Sequence[System], metrics: Sequence[str] = DEFAULT_METRICS, *, baseline: str | None = None,
                 test: str = "fisher", correction: str = "holm", alpha: float = 0.05, n_resamples: int = 10_000,
                 n_permutations: int = 10_000, seed: int = 0, missing: str = "error", delta: float | None = None,
                 main_effects: bool | None = None, allow_mixed: bool = False, margin: float = DEFAULT_MARGIN,
                 all_tests: bool = False) -> Report:
    """Compare ``systems`` (from ``load_systems``) on ``metrics``: the one inference
    (:mod:`pipeline.comparison.verdict`: the best set, each system against the best, or against
    ``baseline`` when it names one, in four words against ``margin``; per factor of a sweep) and
    the full table of tests (means with BCa CIs, every paired test against the reference,
    adjusted by ``correction``), shown with ``all_tests``.

    ``baseline`` names a system by its name, run id, command-line spec or folder; without it the
    full table's reference is the best system on the first metric, and says so. ``main_effects``
    (default: when a sweep is compared) adds the per-factor means. Systems scored under different
    definitions (``systems.SCORING``) are an InputError naming the setting and the systems,
    unless ``allow_mixed``: the report is then marked mixed (``data["mixed"]``, the console's
    and report.md's first lines). ValueErrors of ``stats`` become InputErrors."""
    metrics = check_metrics(metrics)
    mixed, unknown = _check(systems, metrics, test, allow_mixed)
    margin = check_margin(margin)
    names = [s.name for s in systems]
    named = find_baseline(baseline, systems) if baseline is not None else None
    union, zero_filled = _query_set(systems, metrics[0], missing)
    matrices = _align(systems, metrics, union, missing)
    base = named or _best_of(matrices[metrics[0]], names)
    try:
        comparisons = stats.compare_metrics(
            matrices, names, baseline=base, n_resamples=n_resamples, n_permutations=n_permutations, seed=seed,
            correction=correction, alpha=alpha, test=test, delta=delta)  # type: ignore[arg-type]
    except ValueError as err:
        raise InputError(str(err)) from err
    swept = swept_factors(systems)
    verdict = compute_verdict(matrices, names, margin=margin, alpha=alpha, n_permutations=n_permutations, seed=seed,
                              factors=swept if any(s.sweep for s in systems) else None, baseline=named,
                              settings_differ=differing_settings(systems, swept))
    effects = {}
    if swept and (main_effects if main_effects is not None else any(s.sweep for s in systems)):
        effects = compute_main_effects(swept, names, matrices, n_resamples, seed)
    data = _data(systems, metrics, comparisons, verdict, swept, effects, union, matrices, delta, alpha)
    data["baseline"], data["baseline_named"] = base, named is not None
    data["settings"] = {"test": test, "correction": correction, "alpha": alpha, "ci_method": "BCa",
                        "confidence": 0.95, "n_resamples": n_resamples, "n_permutations": n_permutations,
                        "seed": seed, "missing": missing, "delta": delta, "margin": margin, "all_tests": all_tests}
    data["zero_filled"] = zero_filled
    data["latency"] = latency_report(systems, base, seed)  # cost beside quality: retrievers.cost
    if mixed:  # only then, so that a clean comparison's report keeps its keys
        data["mixed"] = mixed
    if unknown:
        data["scoring_unknown"] = unknown
    return Report(data, names, union, matrices, list(systems), verdict)


def _data(systems: Sequence[System], metrics: list[str], comparisons: list[Any], verdict: Verdict,
          swept: dict[str, dict[str, str]], effects: dict[str, Any], union: list[str],
          matrices: dict[str, NDArray[np.float64]], delta: float | None, alpha: float) -> dict[str, Any]:
    """The JSON report (its keys in this order; ``build_report`` fills in the settings)."""
    names = [s.name for s in systems]
    best, sensitivity = {}, {}
    for c in comparisons:  # the best mean (within stats.TIE_TOLERANCE), the power at delta when given
        top = max(s.mean for s in c.systems)
        best[c.metric] = [s.name for s in c.systems if s.mean >= top - stats.TIE_TOLERANCE]
        sens = dict(c.sensitivity)
        if delta is not None and "sd_diff" in sens:
            sens["power_at_delta"] = float(stats.power_paired_t(delta, sens["sd_diff"], len(union), alpha=alpha))
        sensitivity[c.metric] = sens
    distinct = {c.metric: c.distinct for c in comparisons}
    first = {m: [next(j for j, g in enumerate(distinct[m]) if n in g) for n in names] for m in metrics}
    blind = {m: b for m in metrics if swept and (b := blind_factors(swept, names, first[m]))}
    notes = placement_note(swept, metrics, distinct) + cutoff_note(metrics, verdict.settings_differ)
    return {
        "format": REPORT_FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "metrics": metrics,
        "baseline": None, "baseline_named": False, "settings": {},
        "n_queries": len(union), "n_comparisons": sum(c.n_family for c in comparisons), "distinct": distinct,
        "blind": blind, "notes": notes, "verdict": verdict.to_dict(),
        "systems": [s.describe() for s in systems], "zero_filled": {},
        "comparisons": [finite(c.to_dict()) for c in comparisons], "best": best,
        "tied_with_best": {m: list(inf.best_set) for m, inf in verdict.inferences.items()},
        "sensitivity": finite(sensitivity), "factors": swept, "main_effects": finite(effects),
        "per_query": {"query_ids": union,
                      "scores": {m: {name: row.tolist() for name, row in zip(names, matrices[m])} for m in metrics}},
    }


def finite(value: Any) -> Any:
    """JSON has no infinities: a non-finite float (t of constant differences) becomes null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value

"""Compare retrieval systems on the same queries: the report behind ``python -m pipeline.compare``.

Each system's per-query scores of the evaluated queries (``pipeline.report.systems``) are
aligned by query id (``stats.align``) and compared with ``stats.compare_metrics``: mean and
BCa bootstrap CI per system, the difference to the baseline with its CI, paired t,
Wilcoxon, sign and randomization tests adjusted (Holm by default) over every comparison of
every metric, effect sizes, randomized Tukey HSD, the minimum detectable difference and the
set of systems tied with the best. For a sweep, the swept factors' main effects too. See
docs/comparing.md and docs/statistics.md.

The report is a JSON-ready dict (:class:`Report` ``.data``, format :data:`REPORT_FORMAT`),
rendered as a console table and ``report.md`` (the best mean marked :data:`BEST`, a
difference significant after the correction :data:`SIGNIFICANT`), written to a folder with
its figures (:func:`write_report`) and put on an MLflow run (:func:`log_report`).
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

from pipeline import stats, tracking
from pipeline.errors import InputError
from pipeline.io import results as res
from pipeline.report import figures as plots
from pipeline.report.systems import (DEFAULT_METRICS, DEFAULT_TRACKING_URI, SCORING, System, check_metrics,
                                     describe_differences, is_factor, load_systems, scoring_differences)
from pipeline.report.ties import blind_factors, distinct_lines, noun_of, placement_note, swept_factors

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


SIGNIFICANT = "†"
BEST = "*"
_TEST_NAMES = {"fisher": "randomization test", "t": "paired t-test", "wilcoxon": "Wilcoxon signed-rank test",
               "sign": "sign test"}


def _cells(report: Report, markdown: bool = False, digits: int = 3) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the system table: per metric, mean [CI] (best marked) and the
    difference to the baseline [CI] (significant marked)."""
    data = report.data
    head = ["system", *(f"{m} {column} [95% CI]" for m in data["metrics"] for column in ("mean", "diff"))]
    by_metric = {c["metric"]: c for c in data["comparisons"]}
    rows = []
    for i, name in enumerate(report.names):
        row = [name + (" (baseline)" if name == data["baseline"] else "")]
        for m in data["metrics"]:
            s = by_metric[m]["systems"][i]
            mark = BEST if name in data["best"][m] else ""
            mean = f"**{s['mean']:.{digits}f}**" if mark and markdown else f"{s['mean']:.{digits}f}"
            row.append(f"{mean} [{s['ci_low']:.{digits}f}, {s['ci_high']:.{digits}f}]{mark}")
            vs = next((v for v in by_metric[m]["vs_baseline"] if v["system"] == name), None)
            sig = SIGNIFICANT if vs is not None and vs["significant"] else ""
            row.append("-" if vs is None else f"{vs['diff']:+.{digits}f} [{vs['diff_ci_low']:+.{digits}f}, "
                                              f"{vs['diff_ci_high']:+.{digits}f}]{sig}")
        rows.append(row)
    return head, rows


def _legend(report: Report) -> str:
    d = report.data
    st = d["settings"]
    distinct = d.get("distinct") or {}
    per_metric = [len(distinct.get(m) or report.names) - 1 for m in d["metrics"]]
    shape = (f"{_count(len(d['metrics']), 'metric')} x {_count(per_metric[0], 'system')} vs the baseline"
             if len(set(per_metric)) == 1 else " + ".join(f"{m}: {n}" for m, n in zip(d["metrics"], per_metric)))
    return (f"{BEST} best mean; {SIGNIFICANT} {_TEST_NAMES[st['test']]} p <= {st['alpha']} after {st['correction']} "
            f"over {_count(d['n_comparisons'], 'comparison')} ({shape}; each distinct result once, one identical "
            f"to another takes its p-value); CIs: {st['ci_method']} bootstrap, {st['n_resamples']} resamples; "
            f"{d['n_queries']} queries")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _sensitivity_line(report: Report, digits: int = 3) -> str:
    d = report.data
    parts = []
    for m in d["metrics"]:
        s = d["sensitivity"][m]
        if s.get("mdd") is None:
            continue
        text = f"{m} {s['mdd']:.{digits}f}"
        if s.get("delta") is not None:
            text += (f" (a difference of {s['delta']:g} has power {s['power_at_delta']:.2f}; "
                     f"needs {s['n_needed']} queries)")
        parts.append(text)
    return (f"sensitivity: smallest difference detectable with power 0.8 at alpha {d['settings']['alpha']} "
            f"with {d['n_queries']} queries (paired t): " + "; ".join(parts))


def _ties_line(report: Report) -> str:
    d = report.data
    st = d["settings"]
    n = len(report.names)
    parts = [f"{m}: " + (f"all {n} systems" if len(d["tied_with_best"][m]) == n else ", ".join(d["tied_with_best"][m]))
             for m in d["metrics"]]
    return (f"tied with the best (not significantly different from it; {_TEST_NAMES[st['test']]}, "
            f"{st['correction']}): " + "; ".join(parts))


def format_table(report: Report, digits: int = 3) -> str:
    """The console table, its legend, the sensitivity and the tie set."""
    head, rows = _cells(report, digits=digits)
    # two header lines: the metric over its two columns, then what each column holds
    top = [""] + [h.split(" ", 1)[0] if j % 2 == 0 else "" for j, h in enumerate(head[1:])]
    sub = [head[0]] + [h.split(" ", 1)[1] for h in head[1:]]
    width = [max(len(r[j]) for r in [top, sub, *rows]) for j in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, width)).rstrip()  # noqa: E731
    out = [*mixed_headline(report), *(f"note: {n}" for n in report.data.get("notes", [])), line(top), line(sub),
           line(["-" * w for w in width]), *(line(r) for r in rows), "",
           *distinct_lines(report.data, noun_of(report.systems)), _legend(report), _sensitivity_line(report, digits),
           _ties_line(report)]
    if report.data["zero_filled"]:
        out.append("scored 0 where missing: " + "; ".join(
            f"{k}: {len(v)} queries" for k, v in report.data["zero_filled"].items()))
    return "\n".join(out)


def mixed_headline(report: Report) -> list[str]:
    """The first line of a mixed comparison (``--allow-mixed``): what differs; none otherwise."""
    mixed = report.data.get("mixed")
    if not mixed:
        return []
    return [f"MIXED COMPARISON (--allow-mixed): the systems were scored under different definitions: "
            f"{describe_differences(mixed)}; differences below include the scoring's, not only the systems'"]


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(map(esc, r)) + " |" for r in rows)]


def format_markdown(report: Report, figures: Sequence[str] = ()) -> str:
    """``report.md``: the table, then per metric every test's p-values, effect sizes and the
    sensitivity, the systems' sources and the figures."""
    d = report.data
    lines = [f"# Comparison of {len(report.names)} systems", "", *(f"**{h}**" for h in mixed_headline(report)),
             *([""] if d.get("mixed") else []), f"Baseline: **{d['baseline']}**. Metrics: {', '.join(d['metrics'])}. "
             f"{d['n_queries']} evaluated queries, aligned by query id.", ""]
    lines += [f"Note: {n}." for n in d.get("notes", [])] + ([""] if d.get("notes") else [])
    head, rows = _cells(report, markdown=True, digits=4)
    lines += _md_table(head, rows)
    lines += ["", *(f"- {t}" for t in distinct_lines(d, noun_of(report.systems))), ""]
    lines += [_legend(report) + ".", "", _sensitivity_line(report, 4) + ".", "", _ties_line(report) + ".", ""]
    if d["zero_filled"]:
        lines += ["Queries missing from a system scored 0 (--missing zero): " + "; ".join(
            f"{k}: {', '.join(v[:10])}{' ...' if len(v) > 10 else ''}" for k, v in d["zero_filled"].items()), ""]
    for c in d["comparisons"]:
        lines += _md_metric(report, c)
    if d["main_effects"]:
        lines += _md_main_effects(d["main_effects"])
    lines += ["## Systems", ""]
    lines += _md_table(["system", "kind", "source", "run id", "overrides"],
                       [[s["name"], s["kind"], s["source"], s["run_id"] or "",
                         " ".join(f"{k}={v}" for k, v in s["overrides"].items() if is_factor(k))]
                        for s in d["systems"]]) + [""]
    lines += [f"![{f}]({f})" for f in figures]
    return "\n".join(lines).rstrip() + "\n"


def _md_metric(report: Report, c: dict) -> list[str]:
    """A metric's section: each system against the baseline under every test, then the
    randomized Tukey HSD p-values of every pair (more than two systems)."""
    st = report.data["settings"]
    tests = stats.PAIRED_TESTS
    lines = [f"## {c['metric']}", ""]
    if c["vs_baseline"]:
        head = ["system", "diff", "95% CI", *(f"p {t}" for t in tests), *(f"p adj {t}" for t in tests),
                "d_z", "Hedges g", "W/T/L", "MDD"]
        rows = [[v["system"], f"{v['diff']:+.4f}", f"[{v['diff_ci_low']:+.4f}, {v['diff_ci_high']:+.4f}]",
                 *(f"{v['p'][t]:.4g}" for t in tests),
                 *(f"{v['p_adjusted'][t]:.4g}" + (SIGNIFICANT if t == st["test"] and v["significant"] else "")
                   for t in tests),
                 _num(v["d_z"]), _num(v["hedges_g"]), f"{v['wins']}/{v['ties']}/{v['losses']}",
                 f"{v['mdd']:.4f}"] for v in c["vs_baseline"]]
        lines += _md_table(head, rows) + [""]
    if c["tukey"] and len(report.names) > 2:
        lines += ["Randomized Tukey HSD p-values (family-wise over all pairs):", ""]
        short = [f"S{i + 1}" for i in range(len(report.names))]
        lines += _md_table(["", *short], [[f"S{i + 1} {a}", *(f"{c['tukey'][a][b]:.3g}" for b in report.names)]
                                          for i, a in enumerate(report.names)]) + [""]
    return lines


def _md_main_effects(effects: dict) -> list[str]:
    """Per metric and swept factor: each value's mean with its CI and how many jobs it averages."""
    lines = ["## Main effects", "", "Mean over queries of the average of the jobs at each value of a swept "
             "factor, with its 95% bootstrap CI.", ""]
    for metric, by_factor in effects.items():
        for factor, levels in by_factor.items():
            lines += [f"**{metric} by {factor}**", ""]
            lines += _md_table(["value", "mean", "95% CI", "jobs"],
                               [[lv["value"], f"{lv['mean']:.4f}", f"[{lv['ci_low']:.4f}, {lv['ci_high']:.4f}]",
                                 str(lv["n_systems"])] for lv in levels]) + [""]
    return lines


def _num(v: float | None) -> str:
    return "inf" if v is None else f"{v:.3f}"


def write_report(report: Report, out: str | Path) -> list[Path]:
    """``report.json``, ``report.md`` and the figures in ``out``; returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    d = report.data
    figures = {
        "forest.png": plots.forest_figure({c["metric"]: c["vs_baseline"] for c in d["comparisons"]}, d["baseline"],
                                          f"Difference to the baseline with its 95% CI ({d['n_queries']} queries)"),
        "per_query_diff.png": plots.per_query_diff_figure(
            {m: {name: x[i] - x[report.names.index(d["baseline"])] for i, name in enumerate(report.names)
                 if name != d["baseline"]} for m, x in report.matrices.items()},
            d["baseline"], f"Per-query differences to the baseline, sorted ({d['n_queries']} queries)",
            query_ids=report.query_ids),
    }
    if d["main_effects"]:
        figures["main_effects.png"] = plots.main_effects_figure(d["main_effects"], "Main effects of the swept factors")
    written = []
    for name, figure in figures.items():
        figure.savefig(out / name, dpi=100, **plots.PNG_FAST)
        written.append(out / name)
    d["files"] = sorted(p.name for p in [*written, out / "report.md", out / "report.json"])
    res.write_text(out / "report.md", format_markdown(report, list(figures)))
    res.write_json(out / "report.json", d, indent=1)
    return [out / "report.json", out / "report.md", *written]


def report_for_folders(folders: Sequence[str | Path], metrics: Sequence[str] = DEFAULT_METRICS,
                       baseline: str | None = None, out: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """The comparison report (a JSON-ready dict) of job folders or sweep folders; written to
    ``out`` too when given. ``options`` go to ``build_report`` (test, correction, alpha,
    n_resamples, n_permutations, seed, missing, delta, main_effects, allow_mixed). For the sweep summary:
    ``report_for_folders([sweep_dir], baseline=None)`` compares every job of the sweep."""
    systems = load_systems([str(f) for f in folders], metrics)
    report = build_report(systems, metrics, baseline=baseline, **options)
    if out is not None:
        write_report(report, out)
    return report.data


def _log_target(systems: Sequence[System], explicit_uri: str | None) -> tuple[str, str | None]:
    """(store uri, parent run) for ``--log``: the sweep's parent run when every system is a
    job of one sweep whose parent is known; else no parent (a new run in "compare")."""
    sweeps = {(s.sweep, s.sweep_parent_run, s.sweep_store) for s in systems}
    if len(sweeps) == 1:
        sweep, parent, store = next(iter(sweeps))
        if sweep and parent and store and (explicit_uri is None or tracking.without_credentials(explicit_uri) == store):
            return explicit_uri or store, parent
    return explicit_uri or DEFAULT_TRACKING_URI, None


def log_report(report: Report, out: Path, explicit_uri: str | None) -> tuple[str, str, bool]:
    """Put the report folder ``out`` on an MLflow run, then note that run in the folder's
    ``report.json`` (key ``mlflow``); returns (run id, store, whether a sweep's parent run)."""
    uri, parent = _log_target(report.systems, explicit_uri)
    d = report.data
    names = report.names
    run_name = f"compare: {d['baseline']} vs {len(names) - 1} system{'s' if len(names) > 2 else ''}"
    tags = {"compare.baseline": d["baseline"], "compare.systems": "\n".join(names)[:4000],
            "compare.source_runs": " ".join(s.run_id for s in report.systems if s.run_id)[:4000],
            "mlflow.note.content": (out / "report.md").read_text()[:20000]}
    params = {"metrics": ",".join(d["metrics"]), "baseline": d["baseline"], "n_systems": str(len(names)),
              "n_queries": str(d["n_queries"]), **{k: str(v) for k, v in d["settings"].items()}}
    settings = tracking.StoreSettings(uri=uri)  # a password in the URI stays in memory (settings.login)
    run_id = tracking.log_report(settings, out, parent_run_id=parent,
                                 artifact_path=f"compare/{out.name}" if parent else None,
                                 run_name=run_name[:250], tags=tags, params=params)
    d["mlflow"] = {"run_id": run_id, "uri": settings.uri, "sweep_parent": parent is not None}
    res.write_json(out / "report.json", d, indent=1)
    return run_id, settings.uri, parent is not None

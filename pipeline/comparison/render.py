"""The comparison's renderings for a person: the console table and ``report.md``.

One computation (:class:`pipeline.comparison.report.Report`), many views: these functions
only format what ``build_report`` computed (the best mean marked :data:`BEST`, a difference
significant after the correction :data:`SIGNIFICANT`); nothing here computes a statistic.
"""

from __future__ import annotations

from typing import Sequence

from pipeline import stats
from pipeline.comparison.report import Report
from pipeline.comparison.systems import describe_differences, is_factor
from pipeline.comparison.ties import distinct_lines, noun_of


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

"""The comparison's renderings for a person: the console table and ``report.md``, answer first.

One computation (:class:`pipeline.comparison.report.Report`), many views: these functions
only format what ``build_report`` computed (the best mean marked :data:`BEST`, a difference
significant after the correction :data:`SIGNIFICANT`); nothing here computes a statistic.
"""

from __future__ import annotations

from typing import Sequence

from pipeline import stats
from pipeline.comparison.latency import latency_lines
from pipeline.comparison.report import Report
from pipeline.comparison.systems import describe_differences, is_factor
from pipeline.comparison import words
from pipeline.comparison.ties import distinct_lines, noun_of


SIGNIFICANT = "†"
BEST = "*"
_TEST_NAMES = {"fisher": "randomization test", "t": "paired t-test", "wilcoxon": "Wilcoxon signed-rank test",
               "sign": "sign test"}


def _cells(report: Report, markdown: bool = False, digits: int = 3) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the systems' table: per metric, mean [BCa CI] (:data:`BEST` when the
    system could be the best) and its verdict against the reference (the best, or the named
    baseline): difference [simultaneous CI], Tukey p, the word."""
    data = report.data
    ref = "baseline" if data["verdict"]["baseline"] else "best"
    head = ["system", *(f"{m} {column}" for m in data["metrics"] for column in ("mean [95% CI]", f"vs {ref}"))]
    by_metric = {c["metric"]: c for c in data["comparisons"]}
    verdicts = {m: words.system_cells(data, report.names, m, digits) for m in data["metrics"]}
    rows = []
    for i, name in enumerate(report.names):
        row = [name]
        for m in data["metrics"]:
            s = by_metric[m]["systems"][i]
            mark = BEST if name in data["tied_with_best"][m] else ""
            mean = f"**{s['mean']:.{digits}f}**" if mark and markdown else f"{s['mean']:.{digits}f}"
            row += [f"{mean} [{s['ci_low']:.{digits}f}, {s['ci_high']:.{digits}f}]{mark}", verdicts[m][i]]
        rows.append(row)
    return head, rows


def _test_cells(report: Report, markdown: bool = False, digits: int = 3) -> tuple[list[str], list[list[str]]]:
    """The full table of tests (``--all-tests``): per metric, mean [CI] (highest mean marked) and
    the difference to the reference [CI] (significant marked)."""
    data = report.data
    head = ["system", *(f"{m} {column} [95% CI]" for m in data["metrics"] for column in ("mean", "diff"))]
    by_metric = {c["metric"]: c for c in data["comparisons"]}
    rows = []
    for i, name in enumerate(report.names):
        row = [name + (" (reference)" if name == data["baseline"] else "")]
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


def _verdict_legend(report: Report) -> str:
    d = report.data
    v = d["verdict"]
    ref = f"the baseline {v['baseline']}" if v["baseline"] else "the best"
    hsd = "; ".join(f"{m} {inf['hsd']:.3f}" for m, inf in v["metrics"].items() if inf["hsd"] is not None)
    return (f"{BEST} could be the best (its interval against the best contains 0); vs {ref}: difference "
            f"[simultaneous 95% interval] and adjusted p of the {v['method']} over every pair, {d['n_queries']} "
            f"queries, {d['settings']['n_permutations']} permutations; words against the margin {v['margin']:g} "
            f"(equivalent: the interval inside +-{v['margin']:g}); detectable difference: {hsd}")


def _legend(report: Report) -> str:
    d = report.data
    st = d["settings"]
    distinct = d.get("distinct") or {}
    per_metric = [len(distinct.get(m) or report.names) - 1 for m in d["metrics"]]
    ref = "the named baseline" if d.get("baseline_named") else "the best on the first metric"
    shape = (f"{_count(len(d['metrics']), 'metric')} x {_count(per_metric[0], 'system')} vs {ref}"
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


def _grid(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A console table with two header lines: the metric over its columns, then what each holds."""
    top = [""] + [h.split(" ", 1)[0] if j % 2 == 0 else "" for j, h in enumerate(head[1:])]
    sub = [head[0]] + [h.split(" ", 1)[1] for h in head[1:]]
    width = [max(len(r[j]) for r in [top, sub, *rows]) for j in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, width)).rstrip()  # noqa: E731
    return [line(top), line(sub), line(["-" * w for w in width]), *(line(r) for r in rows)]


def format_table(report: Report, digits: int = 3) -> str:
    """What the console shows: the verdict per metric (two systems: one sentence each; a sweep:
    one line per factor and the best set, with their evidence), the systems' table against the
    best (or the named baseline), the legend; with ``all_tests``, the full table of tests."""
    d = report.data
    out = [*mixed_headline(report), *(f"note: {n}" for n in d.get("notes", []))]
    for m in d["metrics"]:
        out += words.verdict_lines(d, m)
    out += ["", *_grid(*_cells(report, digits=digits)), "", *distinct_lines(d, noun_of(report.systems)),
            _verdict_legend(report)]
    if d["settings"].get("all_tests"):
        out += ["", f"every test (--all-tests), against {d['baseline']}:", *_grid(*_test_cells(report, digits=digits)),
                _legend(report), _sensitivity_line(report, digits)]
    if latency := latency_lines(d):
        out += ["", *latency]
    if d["zero_filled"]:
        out.append("scored 0 where missing: " + "; ".join(
            f"{k}: {len(v)} queries" for k, v in d["zero_filled"].items()))
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
    """``report.md``: the answer first (its first screen: per metric the verdict per factor, or
    the two systems' sentence, and the best set with its evidence), then the tables: the systems
    against the best (or the named baseline), the ANOVA with effect sizes, the factors' means;
    with ``all_tests``, every test's p-values; the systems' sources and the figures last."""
    d = report.data
    v = d["verdict"]
    lines = [f"# Comparison of {len(report.names)} {noun_of(report.systems)}", "",
             *(f"**{h}**" for h in mixed_headline(report)), *([""] if d.get("mixed") else [])]
    for m in d["metrics"]:
        lines += [f"**{m}** ({d['n_queries']} queries; {words.method(v)}):", "",
                  *(f"- {t}" for t in words.verdict_lines(d, m)), ""]
    lines += [f"Note: {n}." for n in d.get("notes", [])] + ([""] if d.get("notes") else [])
    against = f"the named baseline **{v['baseline']}**" if v["baseline"] else "the best"
    lines += [f"## Systems against {against}", ""]
    lines += _md_table(*_cells(report, markdown=True, digits=4))
    lines += ["", *(f"- {t}" for t in distinct_lines(d, noun_of(report.systems))), "", _verdict_legend(report) + ".",
              ""]
    if d["zero_filled"]:
        lines += ["Queries missing from a system scored 0 (--missing zero): " + "; ".join(
            f"{k}: {', '.join(q[:10])}{' ...' if len(q) > 10 else ''}" for k, q in d["zero_filled"].items()), ""]
    if latency := latency_lines(d):
        lines += ["## Latency", "", f"{latency[0]}", "", *(f"- {t.strip()}" if t.startswith("  ") else f"\n{t}\n"
                                                          for t in latency[1:]), ""]
    lines += _md_factors(d)
    if d["settings"].get("all_tests"):
        lines += [f"## Every test (--all-tests), against {d['baseline']}", ""]
        lines += _md_table(*_test_cells(report, markdown=True, digits=4))
        lines += ["", _legend(report) + ".", "", _sensitivity_line(report, 4) + ".", ""]
        for c in d["comparisons"]:
            lines += _md_metric(report, c)
    if d["main_effects"]:
        lines += _md_main_effects(d["main_effects"])
    lines += ["## Sources", ""]
    lines += _md_table(["system", "kind", "source", "run id", "overrides"],
                       [[s["name"], s["kind"], s["source"], s["run_id"] or "",
                         " ".join(f"{k}={v}" for k, v in s["overrides"].items() if is_factor(k))]
                        for s in d["systems"]]) + [""]
    lines += [f"![{f}]({f})" for f in figures]
    return "\n".join(lines).rstrip() + "\n"


def _md_factors(d: dict) -> list[str]:
    """Per metric of a sweep: each factor's levels (marginal mean, difference to the best level
    [simultaneous CI], word) and the ANOVA with topics as blocks, with effect sizes."""
    lines: list[str] = []
    for metric, answers in (d["verdict"].get("factors") or {}).items():
        lines += [f"## Factors on {metric}", ""]
        for a in answers:
            rows = [[lv, f"{a['means'][i]:.4f}"] + (["best", ""] if lv == a["best_level"] else
                                                    [words.evidence(a["evidence"][lv]),
                                                     words.word_of(a["evidence"][lv])])
                    for i, lv in enumerate(a["levels"])]
            lines += [f"**{a['factor']}**: {a['word']}", ""]
            lines += _md_table(["level", "mean", "vs the best level", "verdict"], rows) + [""]
        table = d["verdict"]["anova"].get(metric) or {}
        if rows := words.anova_lines(d, metric):
            lines += ["ANOVA with topics as blocks (two-way without replication; Sakai 2018, ch. 5):", ""]
            lines += _md_table(["source", "df", "SS", "MS", "F", "p"], rows) + [""]
            sizes = "; ".join(f"{f}: " + ", ".join(f"{pair} {es:+.2f}" for pair, es in by.items() if es is not None)
                              for f, by in (table.get("effect_sizes") or {}).items())
            lines += [f"Effect sizes (difference / sqrt(MS residual)): {sizes}.", ""] if sizes else []
        elif table.get("note"):
            lines += [f"ANOVA: {table['note']}.", ""]
    return lines


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

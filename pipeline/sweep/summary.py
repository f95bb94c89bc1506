"""The end of a sweep: every finished job logged, a summary built from the jobs' folders.

Runs in the process that launched the sweep (``pipeline.sweep``), or in ``python -m
pipeline.sync`` for a sweep whose end a crash cut short. The summary
(``summary/sweep_table.csv``, ``.md`` and ``sweep_summary.png``: the jobs' headline metrics
and their nDCG@K and recall@K curves, and ``summary/compare/``: which jobs differ) is built
from the records on disk, not read back from MLflow, so an untracked sweep has one too;
when tracking, it is logged to the sweep's parent run, which is then closed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pipeline import tracking
from pipeline.errors import InputError
from pipeline.io import results as res
from pipeline.comparison.output import report_for_folders
from pipeline.comparison.systems import SCORING, read_scoring
from pipeline.comparison.ties import distinct_phrase, varying_metrics
from pipeline.comparison.verdict import DEFAULT_MARGIN
from pipeline.comparison.words import verdict_lines
from pipeline.metrics import metric_key
from pipeline.sweep import pareto
from pipeline.sweep.parent import log_to_parent
from pipeline.sweep.table import (ci_columns, console_rows, draw_budgets, draw_summary, job_curves, job_row,
                                  markdown_table, n_tied_with_best, resolved, sweep_table)

log = logging.getLogger(__name__)


def log_pending(sweep_dir: Path, settings: tracking.StoreSettings | None = None,
                retry_failed: bool = False) -> list[tuple[Path, str]]:
    """Log every complete job folder of the sweep that has not reached the store.

    Jobs with a FAILED note are skipped unless ``retry_failed`` (a note written because
    logging failed is removed once the job is logged). Returns the (folder, error) pairs
    that could not be logged; each also gets a FAILED note."""
    errors = []
    for results in res.find_results([sweep_dir]):
        job_dir = results.parent
        if (job_dir / res.FAILED).exists() and not retry_failed:
            continue
        try:
            tracking.log_results(results, settings)
        except (tracking.TrackingError, InputError) as err:
            errors.append((job_dir, str(err)))
            res.write_failed(job_dir, _overrides(results), f"error: {err}\nThe results are safe on disk in "
                             f"{results.resolve()}; `python -m pipeline.cli sync {job_dir}` logs them later.")
            continue
        (job_dir / res.FAILED).unlink(missing_ok=True)
    return errors


def _overrides(results: Path) -> str:
    try:
        return res.read_record(results)["tags"].get(tracking.TAG_OVERRIDES, "")
    except InputError:
        return ""


def summarize(sweep_dir: Path, objective: str, settings: tracking.StoreSettings | None,
              status: str = "FINISHED", margin: float = DEFAULT_MARGIN, budget: float | None = None) -> str:
    """Write the sweep's summary from its job folders, log it to the parent run (when
    tracking) and close the parent with ``status`` (FAILED when a job failed); returns the
    text to print. The summary gives each job's objective with its 95% CI and the comparison's
    verdict on the objective (``pipeline.comparison``, ``summary/compare/``: one line per swept
    factor in four words against ``margin``, the jobs that could be the best with their evidence),
    and the best job, which the parent run also carries as tags (``best_run_name``,
    ``best_run_id``, ``best.<override>``) and metrics (``best_<objective>`` and its CI).

    A sweep whose jobs were scored under different definitions (it varies gain,
    relevance_level, judged_only or the dataset: ``systems.SCORING``) is compared per
    scoring setting (``summary/compare/<setting>/``, a ``scoring`` column in the table) and
    names no overall best: its scores do not compare across those settings. Quality against
    cost, under the latency ``budget`` when given: :func:`_quality_against_cost`."""
    sweep_dir = Path(sweep_dir)
    out = sweep_dir / res.SUMMARY
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(results, res.read_record(results)) for results in res.find_results([sweep_dir])]
    groups = scoring_groups(jobs, objective)  # {} when every job was scored alike
    if groups:
        compared = [_compare([r.parent for r in members], objective, out / "compare" / _slug(label), len(members),
                             margin) for label, members in groups.items()]
    else:
        compared = [_compare([sweep_dir], objective, out / "compare", len(jobs), margin)]
    reports = [report for report, _ in compared if report is not None]
    note = "; ".join(n for _, n in compared if n)
    table = _table(jobs, reports, groups, settings, objective)
    table.to_csv(out / "sweep_table.csv", index=False, float_format="%.6g")
    (out / "sweep_table.md").write_text(markdown_table(table))
    if len(table):
        draw_summary(table, job_curves(jobs), objective, out)
        draw_budgets(jobs, out)
    info = res.read_sweep(sweep_dir)
    shown = [c for c in ("run_name", "scoring", "status", objective, *ci_columns(objective), "tied_with_best", "ndcg_at_k",
                         "context_utility_at_k", "mrr", "map") if c in table.columns]
    headline = table[list(dict.fromkeys(shown))] if len(table) else table  # the files hold every column
    result_of = _results_of(jobs, reports[0], objective) if reports and not groups else None
    verdict, twins = _verdict(table, jobs, result_of, reports[0] if reports else None, objective)
    if coverage := tracking.sweep_coverage_warning([record for _, record in jobs]):  # once for the sweep
        verdict = f"{verdict}\n{coverage}" if verdict else coverage
    identical = result_of is not None and len(set(result_of)) == 1 and len(jobs) > 1  # no best among exact ties
    best = table.iloc[0] if len(table) and objective in table.columns and not groups and not identical else None
    text = _summary_text(info.get("sweep_id", sweep_dir.name), out, table, console_rows(headline, result_of), best,
                         objective, verdict)
    per_scoring = _per_scoring_text(table, objective, groups) if groups else ""
    text += per_scoring
    costs, answer = _quality_against_cost(sweep_dir, jobs, objective, out, reports[0] if reports and not groups
                                          else None, margin, budget, bool(groups))
    text += f"\n{costs}" if costs else ""
    res.write_text(out / "summary.md", f"# {info.get('run_name') or 'sweep'}\n\n{verdict}\n\n"
                   + (f"{costs}\n\n" if costs else "") + markdown_table(headline))
    if note:
        text += f"\nnote: {note}"
    if settings is not None:
        text += log_to_parent(sweep_dir, info, settings, out, table, headline, best, objective, status,
                              per_scoring, verdict, twins, costs, answer)
    return text


def _quality_against_cost(sweep_dir: Path, jobs: list[tuple[Path, dict[str, Any]]], objective: str, out: Path,
                          report: dict[str, Any] | None, margin: float, budget: float | None,
                          mixed: bool) -> tuple[str, dict[str, Any] | None]:
    """The quality-against-cost lines (:func:`pareto.describe`: the jobs on the Pareto front of
    the objective against p95 latency and, with a latency ``budget``, ``select.max_latency_p95_ms``,
    the best job within it, the jobs within it that could be as good, the better jobs it rules
    out) and the budget's answer (parent tags ``best_within_budget_*``), with
    ``pareto.csv``/``.png`` written; a failed job (its FAILED note, no result) is unmeasured.
    Jobs scored differently (``mixed``) get no front: their objectives do not compare."""
    if mixed:
        return "quality against cost: no front, the jobs were scored under different definitions", None
    if budget is None:  # pipeline.sync ending a sweep: the budget its jobs were run with
        budget = pareto.budget_of([record for _, record in jobs])
    points = pareto.points_of(jobs, objective)
    done = {str(r.parent.resolve()) for r, _ in jobs}
    for note in sorted(sweep_dir.glob(f"*/{res.FAILED}")):
        if str(note.parent.resolve()) not in done:
            points.append(pareto.Point(note.parent.name, str(note.parent), "", float("nan"), float("nan"),
                                       float("nan"), None, None, None, "failed"))
    if not points:
        return "", None
    front = pareto.front_of(points)
    answer = None if budget is None else pareto.budget_answer(points, budget, objective, report, margin)
    pareto.write(out, points, front, answer, objective)
    return pareto.describe(points, front, answer, objective, pareto.machines(jobs)), answer


def _table(jobs: list[tuple[Path, dict[str, Any]]], reports: list[dict[str, Any]], groups: dict[str, list[Path]],
           settings: tracking.StoreSettings | None, objective: str) -> Any:
    """The sweep table, each job marked when it could be the best (``tied_with_best``: in the
    comparison's best set) and, when the jobs were scored differently, with its scoring setting."""
    tied_folders = set().union(*(_tied_folders(report, objective) for report in reports))
    label_of = {resolved(r): label for label, members in groups.items() for r in members}
    rows = [job_row(results, record, settings, tied_folders) for results, record in jobs]
    for row, (results, _) in zip(rows, jobs):
        if groups:
            row["scoring"] = label_of[resolved(results)]
    table = sweep_table(rows, jobs, objective)
    if not reports and "tied_with_best" in table.columns:  # no statistics ran: no job is tied or untied
        table = table.drop(columns="tied_with_best")
    return table


def _results_of(jobs: list[tuple[Path, dict[str, Any]]], report: dict[str, Any], objective: str) -> list[int] | None:
    """Per job (in ``jobs`` order), the index of its distinct result on the objective in the
    comparison (``report["distinct"]``); None when the report does not say."""
    groups = (report.get("distinct") or {}).get(objective)
    if not groups:
        return None
    folder = {d["name"]: resolved(d.get("folder")) for d in report["systems"]}
    index = {folder[name]: i for i, group in enumerate(groups) for name in group}
    out = [index.get(resolved(results.parent), index.get(resolved(results))) for results, _ in jobs]
    return None if None in out else out  # type: ignore[return-value]


def _verdict(table: Any, jobs: list[tuple[Path, dict[str, Any]]], result_of: list[int] | None,
             report: dict[str, Any] | None, objective: str) -> tuple[str, list[str]]:
    """The verdict on the objective: how many distinct results the jobs have and which factors
    it cannot see, then the comparison's answer per swept factor and the jobs that could be the
    best, with their evidence (``comparison.words``); "no best: ..." when it is identical for
    every job, with the metrics that do vary. Also the jobs identical to the best (the best
    excluded), for the parent's tags. Printed, written to ``summary/summary.md`` and put in the
    parent run's description, word for word."""
    if result_of is None or not len(table) or report is None:
        return "", []
    n = len(jobs)
    n_distinct = len(set(result_of))
    blind = (report.get("blind") or {}).get(objective, [])
    line = f"{objective}: {distinct_phrase(n_distinct, n)}"
    if blind:
        line += f"; it cannot see {', '.join(blind)} (jobs that differ only in {'it' if len(blind) == 1 else 'them'} " \
                "score identically on every query)"
    if n_distinct == 1 and n > 1:
        varying = varying_metrics([record for _, record in jobs])
        factors = ", ".join(report.get("factors") or {}) or "what the sweep varies"
        line += (f"\nno best: {objective} is identical for all {n} jobs, so no job is better than another on it (it "
                 f"cannot see {factors}). ")
        line += (f"Metrics that vary across the jobs: {', '.join(varying[:8])}{' ...' if len(varying) > 8 else ''}; "
                 "sweep again with objective=<one of them> (README, \"Reading your results\")." if varying else
                 "No computed metric varies across the jobs: they are one result.")
        return line, []
    best_result = result_of[int(table.index[0])]
    twins = [str(table.loc[i, "run_name"]) for i in table.index[1:] if result_of[int(i)] == best_result]
    if report.get("verdict") and objective in report["verdict"]["metrics"]:
        line += "".join(f"\n{text}" for text in verdict_lines(report, objective))
    return line, twins


def scoring_groups(jobs: list[tuple[Path, dict[str, Any]]], objective: str) -> dict[str, list[Path]]:
    """The sweep's jobs by scoring setting (``{"gain=exp": [results, ...]}``, labelled by the
    :data:`~pipeline.comparison.systems.SCORING` settings that differ; depth only for a full-depth
    objective), or {} when every job was scored under the same definition."""
    scorings = [read_scoring(results / "metrics.json", record["params"], (record.get("dataset") or {}).get("digest"))
                for results, record in jobs]
    keys = [k for k in SCORING if (k != "depth" or metric_key(objective).full_depth)
            and len({sc[k] for sc in scorings if sc.get(k) is not None}) > 1]
    groups: dict[str, list[Path]] = {}
    for (results, record), sc in zip(jobs, scorings):
        parts = []
        for key in keys:
            value = str(sc.get(key))[:8] if key.endswith("_digest") else sc.get(key)
            if key == "collection_digest":
                value = f"{(record.get('dataset') or {}).get('name', '')}:{value}"
            parts.append(f"{key.removesuffix('_digest')}={value}")
        groups.setdefault(" ".join(parts), []).append(results)
    return groups if keys else {}


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "=._-" else "_" for c in label)[:120]


def _per_scoring_text(table: Any, objective: str, groups: dict[str, list[Path]]) -> str:
    """No overall best: the best job of each scoring setting, with its CI and the jobs tied with it."""
    differ = sorted({part.split("=", 1)[0] for label in groups for part in label.split()})
    text = (f"\nno overall best: the jobs were scored under different definitions ({', '.join(differ)}), so "
            f"{objective} does not compare across them; the best per scoring setting (summary/compare/<setting>/):")
    if "scoring" not in table.columns or objective not in table.columns:
        return text
    ci_cols = ci_columns(objective)
    for label in groups:
        rows = table[table["scoring"] == label]
        if not len(rows):
            continue
        top = rows.iloc[0]
        ci = (f" [95% CI {top[ci_cols[0]]:.4f}, {top[ci_cols[1]]:.4f}]"
              if all(c in table.columns for c in ci_cols) else "")
        text += f"\n  {label}: {top['run_name']}: {objective} {top[objective]:.4f}{ci}"
        if (n_tied := n_tied_with_best(rows)) is not None and len(rows) > 1:
            text += f"; {n_tied} other job(s) could be the best (randomized Tukey HSD)"
    return text


def _tied_folders(report: dict[str, Any] | None, objective: str) -> set[str]:
    """The folders of the jobs the comparison found tied with the best on the objective."""
    if report is None:
        return set()
    by_name = {d["name"]: d for d in report["systems"]}
    return {resolved(by_name[n].get("folder")) for n in report["tied_with_best"].get(objective, []) if n in by_name}


def _summary_text(sweep_id: str, out: Path, table: Any, headline: tuple[Any, str], best: Any, objective: str,
                  verdict: str = "") -> str:
    """What the sweep prints: where the summary is, the headline table's rows for the console
    (:func:`console_rows`: the rows and a line saying which), the distinct results (:func:`_verdict`, with the judged-coverage
    warning), the verdict, the best job and where the evidence is."""
    text = f"sweep {sweep_id}: {len(table)} runs; summary in {out.resolve()}"
    if len(table):  # each job printed its line already: a few rows here, every job in sweep_table.md
        rows, note = headline
        text += "\n" + markdown_table(rows).rstrip("\n") + (f"\n{note}" if note else "")
    if verdict:
        text += "\n" + verdict
    if best is None:
        return text
    ci_cols = ci_columns(objective)
    ci_text = (f" [95% CI {best[ci_cols[0]]:.4f}, {best[ci_cols[1]]:.4f}]"
               if all(c in table.columns for c in ci_cols) else "")
    text += f"\nbest: {best['run_name']} ({best['overrides']}): {objective} {best[objective]:.4f}{ci_text}"
    if best["run_id"]:
        text += f"; MLflow run {best['run_id']}"
    if n_tied_with_best(table) is not None:
        text += "; the evidence: summary/compare/report.md"
    return text


def _compare(folders: list[Path], objective: str, out: Path, n_jobs: int,
             margin: float = DEFAULT_MARGIN) -> tuple[dict[str, Any] | None, str]:
    """The statistics of the jobs (a sweep folder, or job folders) on the objective, written
    to ``out``, or why not (none for a single job: nothing to compare it with)."""
    if n_jobs < 2:
        return None, ""
    try:
        return report_for_folders(folders, metrics=[objective], out=out, margin=margin), ""
    except InputError as err:
        log.warning("no statistics for the sweep: %s", err)
        return None, f"no statistics for the sweep: {err}"


def end_sweep(sweep_dir: Path, objective: str, settings: tracking.StoreSettings | None,
              status: str = "FINISHED", margin: float = DEFAULT_MARGIN, budget: float | None = None) -> str:
    """Log the jobs that have not reached the store (their logger may have died), then
    summarize with the practical ``margin`` (``compare.margin``) and the latency ``budget``
    (``select.max_latency_p95_ms``); the parent is FAILED when any job failed."""
    sweep_dir = Path(sweep_dir)
    if settings is not None:
        log_pending(sweep_dir, settings)
    if any(sweep_dir.glob(f"*/{res.FAILED}")) and status == "FINISHED":
        status = "FAILED"
    return summarize(sweep_dir, objective, settings, status, margin, budget)

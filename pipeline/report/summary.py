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
from pipeline.report import figures as plots
from pipeline.metrics import metric_key
from pipeline.report.compare import report_for_folders
from pipeline.report.systems import SCORING, parse_overrides, read_scoring
from pipeline.report.ties import distinct_phrase, varying_metrics

log = logging.getLogger(__name__)

#: Families compared at each k used in the sweep (with the objective, mrr and map).
_FAMILIES = ("ndcg", "precision", "recall", "context_utility")
#: Budget metrics a sweep's table shows (``<name>_budget_<B>``), in this order for each B.
_BUDGET_PREFIXES = ("context_recall_budget_", "context_precision_budget_", "relevant_token_share_budget_",
                    "n_chunks_budget_")
#: Rows of the jobs' table the console shows (the best first; the files hold every job).
CONSOLE_ROWS = 5


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
                             f"{results.resolve()}; `python -m pipeline.sync {job_dir}` logs them later.")
            continue
        (job_dir / res.FAILED).unlink(missing_ok=True)
    return errors


def _overrides(results: Path) -> str:
    try:
        return res.read_record(results)["tags"].get(tracking.TAG_OVERRIDES, "")
    except InputError:
        return ""


def summarize(sweep_dir: Path, objective: str, settings: tracking.StoreSettings | None,
              status: str = "FINISHED") -> str:
    """Write the sweep's summary from its job folders, log it to the parent run (when
    tracking) and close the parent with ``status`` (FAILED when a job failed); returns the
    text to print. The summary gives each job's objective with its 95% CI, the jobs
    statistically tied with the best (randomization test, Holm-adjusted: ``pipeline.compare``),
    the swept factors' main effects (``summary/compare/``), and the best job, which the parent
    run also carries as tags (``best_run_name``, ``best_run_id``, ``best.<override>``) and
    metrics (``best_<objective>`` and its CI).

    A sweep whose jobs were scored under different definitions (it varies gain,
    relevance_level, judged_only or the dataset: ``systems.SCORING``) is compared per
    scoring setting (``summary/compare/<setting>/``, a ``scoring`` column in the table) and
    names no overall best: its scores do not compare across those settings."""
    sweep_dir = Path(sweep_dir)
    out = sweep_dir / res.SUMMARY
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(results, res.read_record(results)) for results in res.find_results([sweep_dir])]
    groups = scoring_groups(jobs, objective)  # {} when every job was scored alike
    if groups:
        compared = [_compare([r.parent for r in members], objective, out / "compare" / _slug(label), len(members))
                    for label, members in groups.items()]
    else:
        compared = [_compare([sweep_dir], objective, out / "compare", len(jobs))]
    reports = [report for report, _ in compared if report is not None]
    note = "; ".join(n for _, n in compared if n)
    tied_folders = set().union(*(_tied_folders(report, objective) for report in reports))
    label_of = {_resolved(r): label for label, members in groups.items() for r in members}
    rows = [_job_row(results, record, settings, tied_folders) for results, record in jobs]
    for row, (results, _) in zip(rows, jobs):
        if groups:
            row["scoring"] = label_of[_resolved(results)]
    table = _sweep_table(rows, jobs, objective)
    if not reports and "tied_with_best" in table.columns:  # no statistics ran: no job is tied or untied
        table = table.drop(columns="tied_with_best")
    table.to_csv(out / "sweep_table.csv", index=False, float_format="%.6g")
    (out / "sweep_table.md").write_text(_markdown(table))
    if len(table):
        _draw(table, _curves(jobs), objective, out)
        _draw_budgets(jobs, out)
    info = res.read_sweep(sweep_dir)
    shown = [c for c in ("run_name", "scoring", "status", objective, *_ci_columns(objective), "tied_with_best", "ndcg_at_k",
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
    res.write_text(out / "summary.md", f"# {info.get('run_name') or 'sweep'}\n\n{verdict}\n\n{_markdown(headline)}")
    per_scoring = _per_scoring_text(table, objective, groups) if groups else ""
    text += per_scoring
    if note:
        text += f"\nnote: {note}"
    if settings is not None:
        text += _log_to_parent(sweep_dir, info, settings, out, table, headline, best, objective, status,
                               per_scoring, verdict, twins)
    return text


def _results_of(jobs: list[tuple[Path, dict[str, Any]]], report: dict[str, Any], objective: str) -> list[int] | None:
    """Per job (in ``jobs`` order), the index of its distinct result on the objective in the
    comparison (``report["distinct"]``); None when the report does not say."""
    groups = (report.get("distinct") or {}).get(objective)
    if not groups:
        return None
    folder = {d["name"]: _resolved(d.get("folder")) for d in report["systems"]}
    index = {folder[name]: i for i, group in enumerate(groups) for name in group}
    out = [index.get(_resolved(results.parent), index.get(_resolved(results))) for results, _ in jobs]
    return None if None in out else out  # type: ignore[return-value]


def _verdict(table: Any, jobs: list[tuple[Path, dict[str, Any]]], result_of: list[int] | None,
             report: dict[str, Any] | None, objective: str) -> tuple[str, list[str]]:
    """The lines that say how many distinct results the jobs have on the objective and which
    factors it cannot see; "no best: ..." when it is identical for every job, with the metrics
    that do vary. Also the jobs identical to the best (the best excluded). Printed, written to
    ``summary/summary.md`` and put in the parent run's description, word for word."""
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
    if twins:
        line += f"\nidentical to the best on {objective} (every query): {', '.join(twins[:10])}" + \
                (f" and {len(twins) - 10} more" if len(twins) > 10 else "")
    return line, twins


def _draw_budgets(jobs: list[tuple[Path, dict[str, Any]]], out: Path) -> None:
    """``budget_curve.png``: context recall and precision against the token budget, one line per
    configuration (jobs with identical budget curves, e.g. a sweep over ``budget`` at one chunk
    size, are one line); only when the jobs computed budget metrics."""
    curves: dict[str, list[dict[str, Any]]] = {}
    values: dict[str, dict[str, dict[int, float]]] = {}
    for _, record in jobs:
        by_name = {name: {int(key.rsplit("_", 1)[1]): float(v) for key, v in record["metrics"].items()
                          if key.startswith(f"{name}_budget_") and key.rsplit("_", 1)[1].isdigit()}
                   for name in ("context_recall", "context_precision")}
        if not any(by_name.values()):
            continue
        fingerprint = repr(sorted((n, sorted(v.items())) for n, v in by_name.items()))
        curves.setdefault(fingerprint, []).append(record)
        values[fingerprint] = by_name
    if not curves:
        return
    lines = {_group_label(records, jobs, "one curve"): values[fp] for fp, records in curves.items()}
    figure = plots.budget_curve_figure(lines, f"Context at a token budget ({len(jobs)} jobs, {len(lines)} curves)")
    figure.savefig(out / "budget_curve.png", dpi=80, **plots.PNG_FAST)


def scoring_groups(jobs: list[tuple[Path, dict[str, Any]]], objective: str) -> dict[str, list[Path]]:
    """The sweep's jobs by scoring setting (``{"gain=exp": [results, ...]}``, labelled by the
    :data:`~pipeline.report.systems.SCORING` settings that differ; depth only for a full-depth
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
    ci_cols = _ci_columns(objective)
    for label in groups:
        rows = table[table["scoring"] == label]
        if not len(rows):
            continue
        top = rows.iloc[0]
        ci = (f" [95% CI {top[ci_cols[0]]:.4f}, {top[ci_cols[1]]:.4f}]"
              if all(c in table.columns for c in ci_cols) else "")
        text += f"\n  {label}: {top['run_name']}: {objective} {top[objective]:.4f}{ci}"
        if (n_tied := n_tied_with_best(rows)) is not None and len(rows) > 1:
            text += f"; {n_tied} other job(s) statistically tied"
    return text


def _ci_columns(objective: str) -> list[str]:
    """The columns of the objective's 95% CI (each job logs them)."""
    return [f"{objective}_ci_low", f"{objective}_ci_high"]


def _tied_folders(report: dict[str, Any] | None, objective: str) -> set[str]:
    """The folders of the jobs the comparison found tied with the best on the objective."""
    if report is None:
        return set()
    by_name = {d["name"]: d for d in report["systems"]}
    return {_resolved(by_name[n].get("folder")) for n in report["tied_with_best"].get(objective, []) if n in by_name}


def _job_row(results: Path, record: dict[str, Any], settings: tracking.StoreSettings | None,
             tied_folders: set[str]) -> dict[str, Any]:
    """A job's row of the sweep table: its names, status, overrides and every metric."""
    marker = res.read_marker(results)
    k = record["params"].get("k", str(record["k"]))
    row: dict[str, Any] = {"run_name": record["run_name"], "run_id": marker["run_id"] if marker else "",
                           "status": "FINISHED" if marker or settings is None else "FAILED",
                           "overrides": record["tags"].get(tracking.TAG_OVERRIDES, ""), **record["metrics"]}
    for family in ("ndcg", "context_utility"):  # each job at its own k
        row[f"{family}_at_k"] = record["metrics"].get(f"{family}_at_{k}")
    row["tied_with_best"] = _resolved(results.parent) in tied_folders or _resolved(results) in tied_folders
    if "optuna_trial" in record["tags"]:
        row["optuna_trial"] = record["tags"]["optuna_trial"]
    return row


def _curves(jobs: list[tuple[Path, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The nDCG@K and recall@K curves to draw, by label. Jobs with identical rankings have
    identical curves: each ranking is drawn once (see :func:`_group_label`)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for _, record in jobs:
        groups.setdefault(record.get("ranking_digest") or record["job_key"], []).append(record)
    return {_group_label(records, jobs): {name: records[0]["curves"].get(f"curve/{name}")
                                          for name in ("ndcg", "recall")} for records in groups.values()}


def _sweep_table(rows: list[dict[str, Any]], jobs: list[tuple[Path, dict[str, Any]]], objective: str) -> Any:
    """The sweep table (pandas): names, then the objective with its CI and the tie mark,
    each job's metrics at its own k, every family at each k of the sweep, mrr, map, the
    budget metrics; only the columns every job has; best objective first."""
    import pandas as pd

    table = pd.DataFrame(rows)
    if not len(table):
        return table
    ks = sorted({int(record["params"].get("k", 0)) for _, record in jobs} - {0})
    # context metrics per token budget of chunked or budgeted jobs (pipeline.chunkers), by budget
    budget = sorted((c for c in table.columns if c.startswith(_BUDGET_PREFIXES) and c.rsplit("_", 1)[-1].isdigit()),
                    key=lambda c: (int(c.rsplit("_", 1)[-1]),
                                   _BUDGET_PREFIXES.index(c.rsplit("_budget_", 1)[0] + "_budget_")))
    wanted = [objective, *_ci_columns(objective), "tied_with_best", "ndcg_at_k", "context_utility_at_k",
              *(f"{f}_at_{k}" for k in ks for f in _FAMILIES), "mrr", "map", *budget, "time_total_s"]
    keys = list(dict.fromkeys(c for c in wanted if c in table.columns and table[c].notna().all()))
    trial = ["optuna_trial"] if "optuna_trial" in table.columns else []
    scoring = ["scoring"] if "scoring" in table.columns else []
    table = table[["run_name", *scoring, "run_id", "status", "overrides", *trial, *keys]]
    if objective in table.columns:  # best first (within each scoring setting, when they differ)
        table = table.sort_values([*scoring, objective], ascending=[True] * len(scoring) + [False], kind="stable")
    return table


def _draw(table: Any, curves: dict[str, dict[str, Any]], objective: str, out: Path) -> None:
    """``sweep_summary.png``: the headline metrics per job (the objective with its CI, the
    tied jobs marked) beside the curves."""
    import pandas as pd

    ci_cols = _ci_columns(objective)
    headline = [k for k in (objective, "ndcg_at_k", "context_utility_at_k") if k in table.columns]
    ci = ({objective: (table[ci_cols[0]].to_numpy(), table[ci_cols[1]].to_numpy())}
          if all(c in table.columns for c in ci_cols) else None)
    tied = table.loc[table.get("tied_with_best", pd.Series(False, index=table.index)).astype(bool), "run_name"]
    figure = plots.sweep_summary_figure(table, curves, headline, ci=ci, tied=list(tied),
                                        title=f"Sweep summary ({len(table)} jobs)")
    figure.savefig(out / "sweep_summary.png", dpi=80, **plots.PNG_FAST)


def _summary_text(sweep_id: str, out: Path, table: Any, headline: tuple[Any, str], best: Any, objective: str,
                  verdict: str = "") -> str:
    """What the sweep prints: where the summary is, the headline table's rows for the console
    (:func:`console_rows`: the rows and a line saying which), the distinct results (:func:`_verdict`, with the judged-coverage
    warning), the best job and how many jobs tie with it."""
    text = f"sweep {sweep_id}: {len(table)} runs; summary in {out.resolve()}"
    if len(table):  # each job printed its line already: a few rows here, every job in sweep_table.md
        rows, note = headline
        text += "\n" + _markdown(rows).rstrip("\n") + (f"\n{note}" if note else "")
    if verdict:
        text += "\n" + verdict
    if best is None:
        return text
    ci_cols = _ci_columns(objective)
    ci_text = (f" [95% CI {best[ci_cols[0]]:.4f}, {best[ci_cols[1]]:.4f}]"
               if all(c in table.columns for c in ci_cols) else "")
    text += f"\nbest: {best['run_name']} ({best['overrides']}): {objective} {best[objective]:.4f}{ci_text}"
    if best["run_id"]:
        text += f"; MLflow run {best['run_id']}"
    if (n_tied := n_tied_with_best(table)) is not None:
        text += (f"\n{n_tied} other job(s) statistically tied with the best (randomization test, Holm, "
                 f"alpha 0.05); see summary/compare/report.md")
    return text


def console_rows(headline: Any, result_of: list[int] | None) -> tuple[Any, str]:
    """The rows of the jobs' table the console shows and a line saying which: every job when at
    most :data:`CONSOLE_ROWS`; else the best job of each distinct result on the objective
    (``result_of``, in job order = the table's index), or the best jobs when that is unknown."""
    if len(headline) <= CONSOLE_ROWS:
        return headline, ""
    where = f"all {len(headline)} jobs in summary/sweep_table.md"
    if result_of is None:
        return headline.head(CONSOLE_ROWS), f"(the best {CONSOLE_ROWS} jobs; {where})"
    firsts: dict[int, Any] = {}
    for i in headline.index:
        firsts.setdefault(result_of[int(i)], i)
    shown = list(firsts.values())[:CONSOLE_ROWS]
    which = "each" if len(firsts) == len(shown) else f"the first {len(shown)}"
    return headline.loc[shown], f"(the best job of {which} of the {len(firsts)} distinct results; {where})"


def _log_to_parent(sweep_dir: Path, info: dict[str, Any], settings: tracking.StoreSettings, out: Path, table: Any,
                   headline: Any, best: Any, objective: str, status: str, per_scoring: str = "", verdict: str = "",
                   twins: list[str] | None = None) -> str:
    """Log the summary to the sweep's parent run (made now if the sweep has none in this
    store), with the best job as tags and metrics, and close it; returns what to print."""
    name = info.get("run_name") or f"sweep {info.get('sweep_id', sweep_dir.name)}"
    parent = info.get("parent_run_id") if info.get("uri", settings.uri) == settings.uri else None
    exp_id = info.get("experiment_id") if parent else None
    if parent is None:
        experiment = info.get("experiment")
        if not experiment:
            raise tracking.TrackingError(f"{sweep_dir / res.SWEEP_FILE}: the sweep's experiment is unknown")
        found = tracking.start_sweep(settings, experiment, info.get("sweep_id", sweep_dir.name), {},
                                     run_name=info.get("run_name"))
        parent, exp_id = found["parent_run_id"], found["experiment_id"]
    tags, metrics = _best_on_parent(best, objective, table, twins or [])
    description = sweep_description(name, info.get("experiment", ""), objective, table, best, status, headline,
                                    per_scoring, verdict)
    tracking.finish_sweep(settings, parent, out, table, status=status, tags=tags, metrics=metrics,
                          description=description)
    text = f"\nMLflow parent run {parent} ({name}, {status})"
    if exp_id:
        text += "\n" + tracking.open_hint(settings.uri, str(exp_id))
    return text


def sweep_description(name: str, experiment: str, objective: str, table: Any, best: Any, status: str,
                      shown: Any, per_scoring: str = "", verdict: str = "") -> str:
    """The parent run's description (``mlflow.note.content``, markdown): what was swept, the
    distinct results on the objective (``verdict``, as printed; "no best" when it is identical
    for every job), the best job with its objective and CI (or, ``per_scoring``, why there is
    none and the best of each scoring setting), how many jobs tie with it, the jobs' headline
    table, and where the summary files are."""
    lines = [f"**{name}**" + (f" on {experiment}" if experiment else "") + f": {len(table)} jobs, {status}; "
             "each job is a run nested under this one, with its own description and curves.", ""]
    if verdict:
        lines += [*verdict.splitlines(), ""]
    if per_scoring:
        first, *groups = per_scoring.strip().splitlines()
        lines += [first, "", *(f"- {line.strip()}" for line in groups), ""]
    if best is not None:
        ci_cols = _ci_columns(objective)
        ci = (f" (95% CI {best[ci_cols[0]]:.4f} to {best[ci_cols[1]]:.4f})"
              if all(c in table.columns for c in ci_cols) else "")
        lines.append(f"**Best:** `{best['run_name']}` (`{best['overrides']}`): `{objective}` = "
                     f"{best[objective]:.4f}{ci}.")
        if (n_tied := n_tied_with_best(table)) is not None:
            lines.append(f"{n_tied} other job(s) are statistically tied with it "
                         "(paired randomization test, Holm-adjusted, alpha 0.05).")
        lines.append("")
    if len(shown):
        lines += [_markdown(shown.head(20)).rstrip("\n"), ""]
        if len(shown) > 20:
            lines += [f"({len(shown) - 20} more jobs in `summary/sweep_table.md`)", ""]
    lines.append("**Where things are** (Artifacts tab): `summary/sweep_table.md` and `.csv` (every job's "
                 "metrics), `summary/sweep_summary.png` (the jobs' objective with CIs and their nDCG@K and "
                 "recall@K curves), `summary/compare/report.md` (which jobs differ, and how sure that is).")
    return "\n".join(lines) + "\n"


def _resolved(path: Any) -> str:
    return str(Path(path).resolve()) if path else ""


def _compare(folders: list[Path], objective: str, out: Path, n_jobs: int) -> tuple[dict[str, Any] | None, str]:
    """The statistics of the jobs (a sweep folder, or job folders) on the objective, written
    to ``out``, or why not (none for a single job: nothing to compare it with)."""
    if n_jobs < 2:
        return None, ""
    try:
        return report_for_folders(folders, metrics=[objective], out=out), ""
    except InputError as err:
        log.warning("no statistics for the sweep: %s", err)
        return None, f"no statistics for the sweep: {err}"


def _group_label(records: list[dict[str, Any]], jobs: list[tuple[Path, dict[str, Any]]], what: str = "one ranking"
                 ) -> str:
    """A job's run name; for jobs with one ranking, the settings they share that vary in the
    sweep (``retriever=bm25 (6 jobs)``), else the first name and how many more."""
    if len(records) == 1:
        return records[0]["run_name"]
    every = [parse_overrides(r["tags"].get(tracking.TAG_OVERRIDES, "")) for _, r in jobs]
    mine = [parse_overrides(r["tags"].get(tracking.TAG_OVERRIDES, "")) for r in records]
    shared = [key for key in mine[0] if len({m.get(key) for m in mine}) == 1
              and len({e.get(key) for e in every}) > 1 and not key.startswith(("paths.", "tracking.", "hydra."))]
    if shared:
        return " ".join(f"{key}={mine[0][key]}" for key in shared) + f" ({len(records)} jobs, {what})"
    return f"{records[0]['run_name']} (+{len(records) - 1} with the same {what.removeprefix('one ')})"


def _best_on_parent(best: Any, objective: str, table: Any, twins: list[str] = ()) -> tuple[dict[str, str],
                                                                                          dict[str, float]]:
    """The best job (a row of ``table``, or None: no tags) as the parent run's tags and metrics.
    ``best.<override>`` only for the settings the jobs identical to it (``twins``) share: the
    objective cannot tell their other settings apart."""
    if best is None:
        return {}, {}
    same = [parse_overrides(str(o)) for o in table.loc[table["run_name"].isin(twins), "overrides"]]
    tags = {"best_run_name": str(best["run_name"]), "best_run_id": str(best["run_id"]),
            **{f"best.{k}": v for k, v in parse_overrides(str(best["overrides"])).items()
               if not k.startswith(("paths.", "tracking.", "hydra.")) and all(o.get(k) == v for o in same)}}
    if "optuna_trial" in table.columns:
        tags["best_optuna_trial"] = str(best["optuna_trial"])
    metrics = {f"best_{col}": float(best[col]) for col in (objective, *_ci_columns(objective)) if col in table.columns}
    if "tied_with_best" in table.columns:
        metrics["n_tied_with_best"] = float(table["tied_with_best"].sum())
    return tags, metrics


def end_sweep(sweep_dir: Path, objective: str, settings: tracking.StoreSettings | None,
              status: str = "FINISHED") -> str:
    """Log the jobs that have not reached the store (their logger may have died), then
    summarize; the parent is FAILED when any job failed."""
    sweep_dir = Path(sweep_dir)
    if settings is not None:
        log_pending(sweep_dir, settings)
    if any(sweep_dir.glob(f"*/{res.FAILED}")) and status == "FINISHED":
        status = "FAILED"
    return summarize(sweep_dir, objective, settings, status)


def _markdown(table: Any) -> str:
    if not len(table):
        return "(no runs)\n"
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table.iterrows():
        lines.append("| " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def n_tied_with_best(table: Any) -> int | None:
    """How many jobs other than the best (the first row) are statistically tied with it;
    None without the column. (Subtracting 1 from the column's sum gave -1 when the best
    itself was not marked, e.g. when only one job succeeded.)"""
    if "tied_with_best" not in table.columns:
        return None
    return int(table["tied_with_best"].iloc[1:].sum())

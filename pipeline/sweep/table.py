"""The sweep's table and figures: one row per job, the console's few rows, ``sweep_summary.png``
and ``budget_curve.png``, built from the jobs' records on disk (``pipeline.sweep.summary``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import figures as plots
from pipeline import tracking
from pipeline.comparison.systems import parse_overrides
from pipeline.io import results as res
from pipeline.tracking import mapping

#: Families compared at each k used in the sweep (with the objective, mrr and map).
_FAMILIES = ("ndcg", "precision", "recall", "context_utility")
#: Budget metrics a sweep's table shows (``<name>_budget_<B>``), in this order for each B.
_BUDGET_PREFIXES = ("context_recall_budget_", "context_precision_budget_", "relevant_token_share_budget_",
                    "n_chunks_budget_")
#: Rows of the jobs' table the console shows (the best first; the files hold every job).
CONSOLE_ROWS = 5


def ci_columns(objective: str) -> list[str]:
    """The columns of the objective's 95% CI (each job logs them)."""
    return [f"{objective}_ci_low", f"{objective}_ci_high"]


def resolved(path: Any) -> str:
    return str(Path(path).resolve()) if path else ""


def job_row(results: Path, record: dict[str, Any], settings: tracking.StoreSettings | None,
             tied_folders: set[str]) -> dict[str, Any]:
    """A job's row of the sweep table: its names, status, overrides and every metric."""
    marker = res.read_marker(results)
    k = record["params"].get("k", str(record["k"]))
    row: dict[str, Any] = {"run_name": record["run_name"], "run_id": marker["run_id"] if marker else "",
                           "status": "FINISHED" if marker or settings is None else "FAILED",
                           "overrides": record["tags"].get(tracking.TAG_OVERRIDES, ""), **record["metrics"]}
    row.update(mapping.at_job_k(record["metrics"], k, ("ndcg", "context_utility")))  # each job at its own k
    row["tied_with_best"] = resolved(results.parent) in tied_folders or resolved(results) in tied_folders
    if "optuna_trial" in record["tags"]:
        row["optuna_trial"] = record["tags"]["optuna_trial"]
    return row


def job_curves(jobs: list[tuple[Path, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The nDCG@K and recall@K curves to draw, by label. Jobs with identical rankings have
    identical curves: each ranking is drawn once (see :func:`group_label`)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for _, record in jobs:
        groups.setdefault(record.get("ranking_digest") or record["job_key"], []).append(record)
    return {group_label(records, jobs): {name: records[0]["curves"].get(mapping.curve_key(name))
                                          for name in ("ndcg", "recall")} for records in groups.values()}


def group_label(records: list[dict[str, Any]], jobs: list[tuple[Path, dict[str, Any]]], what: str = "one ranking"
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


def sweep_table(rows: list[dict[str, Any]], jobs: list[tuple[Path, dict[str, Any]]], objective: str) -> Any:
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
    wanted = [objective, *ci_columns(objective), "tied_with_best", "ndcg_at_k", "context_utility_at_k",
              *(f"{f}_at_{k}" for k in ks for f in _FAMILIES), "mrr", "map", *budget, mapping.timing_key("total")]
    keys = list(dict.fromkeys(c for c in wanted if c in table.columns and table[c].notna().all()))
    trial = ["optuna_trial"] if "optuna_trial" in table.columns else []
    scoring = ["scoring"] if "scoring" in table.columns else []
    table = table[["run_name", *scoring, "run_id", "status", "overrides", *trial, *keys]]
    if objective in table.columns:  # best first (within each scoring setting, when they differ)
        table = table.sort_values([*scoring, objective], ascending=[True] * len(scoring) + [False], kind="stable")
    return table


def draw_summary(table: Any, curves: dict[str, dict[str, Any]], objective: str, out: Path) -> None:
    """``sweep_summary.png``: the headline metrics per job (the objective with its CI, the
    tied jobs marked) beside the curves."""
    import pandas as pd

    ci_cols = ci_columns(objective)
    # once each: the objective may be one of the job-relative columns (context_utility_at_k)
    headline = list(dict.fromkeys(k for k in (objective, "ndcg_at_k", "context_utility_at_k") if k in table.columns))
    ci = ({objective: (table[ci_cols[0]].to_numpy(), table[ci_cols[1]].to_numpy())}
          if all(c in table.columns for c in ci_cols) else None)
    tied = table.loc[table.get("tied_with_best", pd.Series(False, index=table.index)).astype(bool), "run_name"]
    figure = plots.sweep_summary_figure(table, curves, headline, ci=ci, tied=list(tied),
                                        title=f"Sweep summary ({len(table)} jobs)")
    figure.savefig(out / "sweep_summary.png", dpi=80, **plots.PNG_FAST)


def draw_budgets(jobs: list[tuple[Path, dict[str, Any]]], out: Path) -> None:
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
    lines = {group_label(records, jobs, "one curve"): values[fp] for fp, records in curves.items()}
    figure = plots.budget_curve_figure(lines, f"Context at a token budget ({len(jobs)} jobs, {len(lines)} curves)")
    figure.savefig(out / "budget_curve.png", dpi=80, **plots.PNG_FAST)


def console_rows(headline: Any, result_of: list[int] | None) -> tuple[Any, str]:
    """The rows of the jobs' table the console shows and a line saying which: every job when at
    most :data:`CONSOLE_ROWS`; else the best job of each distinct result on the objective
    (``result_of``, in job order = the table's index), or the best jobs when that is unknown."""
    if len(headline) <= CONSOLE_ROWS:
        return headline, ""
    n = len(headline)
    where = f"all {n} are in summary/sweep_table.md"
    if result_of is None:
        return headline.head(CONSOLE_ROWS), f"(the {CONSOLE_ROWS} best of {n} jobs; {where})"
    firsts: dict[int, Any] = {}
    for i in headline.index:
        firsts.setdefault(result_of[int(i)], i)
    shown = list(firsts.values())[:CONSOLE_ROWS]
    if len(firsts) == n:  # every job its own result
        return headline.loc[shown], f"(the {len(shown)} best of {n} jobs; {where})"
    which = (f"one job per distinct result ({len(firsts)} results: jobs with identical scores on every query "
             "are one)" if len(firsts) == len(shown) else
             f"one job for each of the {len(shown)} best of {len(firsts)} distinct results (jobs with identical "
             "scores on every query are one)")
    return headline.loc[shown], f"({len(shown)} of {n} jobs shown, {which}; {where})"


def markdown_table(table: Any) -> str:
    if not len(table):
        return "(no runs)\n"
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table.iterrows():
        lines.append("| " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def n_tied_with_best(table: Any) -> int | None:
    """How many jobs other than the best (the first row) could be the best (its best set);
    None without the column. (Subtracting 1 from the column's sum gave -1 when the best
    itself was not marked, e.g. when only one job succeeded.)"""
    if "tied_with_best" not in table.columns:
        return None
    return int(table["tied_with_best"].iloc[1:].sum())

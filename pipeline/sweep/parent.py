"""The sweep's parent run: its description, the best job as tags and metrics, and closing it
with the summary (``pipeline.sweep.summary``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import tracking
from pipeline.comparison.systems import parse_overrides
from pipeline.io import results as res
from pipeline.tracking import mapping
from pipeline.sweep.table import ci_columns, markdown_table, n_tied_with_best

def log_to_parent(sweep_dir: Path, info: dict[str, Any], settings: tracking.StoreSettings, out: Path, table: Any,
                   headline: Any, best: Any, objective: str, status: str, per_scoring: str = "", verdict: str = "",
                   twins: list[str] | None = None, costs: str = "", answer: dict[str, Any] | None = None) -> str:
    """Log the summary to the sweep's parent run (made now if the sweep has none in this
    store), with the best job as tags and metrics (and, under a latency budget, the best job
    within it: :func:`budget_on_parent`), and close it; returns what to print."""
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
    tags, metrics = best_on_parent(best, objective, table, twins or [])
    more_tags, more_metrics = budget_on_parent(answer, table, objective)
    tags, metrics = {**tags, **more_tags}, {**metrics, **more_metrics}
    description = sweep_description(name, info.get("experiment", ""), objective, table, best, status, headline,
                                    per_scoring, verdict, costs)
    tracking.finish_sweep(settings, parent, out, table, status=status, tags=tags, metrics=metrics,
                          description=description)
    text = f"\nMLflow parent run {parent} ({name}, {status})"
    if exp_id:
        text += "\n" + tracking.open_hint(settings.uri, str(exp_id))
    return text


def sweep_description(name: str, experiment: str, objective: str, table: Any, best: Any, status: str,
                      shown: Any, per_scoring: str = "", verdict: str = "", costs: str = "") -> str:
    """The parent run's description (``mlflow.note.content``, markdown): what was swept, the
    distinct results on the objective (``verdict``, as printed; "no best" when it is identical
    for every job), the best job with its objective and CI (or, ``per_scoring``, why there is
    none and the best of each scoring setting), how many jobs tie with it, the jobs' headline
    table, the quality-against-cost lines (``costs``: the Pareto front, the budget's answer), and
    where the summary files are."""
    lines = [f"**{name}**" + (f" on {experiment}" if experiment else "") + f": {len(table)} jobs, {status}; "
             "each job is a run nested under this one, with its own description and curves.", ""]
    if verdict:
        lines += [*verdict.splitlines(), ""]
    if per_scoring:
        first, *groups = per_scoring.strip().splitlines()
        lines += [first, "", *(f"- {line.strip()}" for line in groups), ""]
    if best is not None:
        ci_cols = ci_columns(objective)
        ci = (f" (95% CI {best[ci_cols[0]]:.4f} to {best[ci_cols[1]]:.4f})"
              if all(c in table.columns for c in ci_cols) else "")
        lines.append(f"**Best:** `{best['run_name']}` (`{best['overrides']}`): `{objective}` = "
                     f"{best[objective]:.4f}{ci}.")
        if n_tied_with_best(table) is not None:
            lines.append("Which jobs could be the best, with their evidence: the verdict above "
                         "(`summary/compare/report.md` has the tables).")
        lines.append("")
    if costs:
        lines += [*costs.splitlines(), ""]
    if len(shown):
        lines += [markdown_table(shown.head(20)).rstrip("\n"), ""]
        if len(shown) > 20:
            lines += [f"({len(shown) - 20} more jobs in `summary/sweep_table.md`)", ""]
    lines.append("**Where things are** (Artifacts tab): `summary/sweep_table.md` and `.csv` (every job's "
                 "metrics), `summary/sweep_summary.png` (the jobs' objective with CIs and their nDCG@K and "
                 "recall@K curves), `summary/compare/report.md` (which jobs differ, and how sure that is), "
                 "`summary/pareto.png` and `.csv` (the objective against p95 latency, the front).")
    return "\n".join(lines) + "\n"


def best_on_parent(best: Any, objective: str, table: Any, twins: list[str] = ()) -> tuple[dict[str, str],
                                                                                          dict[str, float]]:
    """The best job (a row of ``table``, or None: no tags) as the parent run's tags and metrics
    (``mapping.parent_best``). ``best.<override>`` only for the settings the jobs identical to
    it (``twins``) share: the objective cannot tell their other settings apart."""
    if best is None:
        return {}, {}
    same = [parse_overrides(str(o)) for o in table.loc[table["run_name"].isin(twins), "overrides"]]
    n_tied = table["tied_with_best"].sum() if "tied_with_best" in table.columns else None
    return mapping.parent_best(objective, best, parse_overrides(str(best["overrides"])), same, n_tied)


def budget_on_parent(answer: dict[str, Any] | None, table: Any, objective: str) -> tuple[dict[str, str],
                                                                                        dict[str, float]]:
    """Under a latency budget: the tags ``budget.max_latency_p95_ms``, ``best_within_budget_run_name``
    and ``_run_id`` (empty when no job meets it; ``closest_to_budget_run_name`` then) and the
    metric ``best_within_budget_<objective>``; nothing without a budget."""
    if answer is None:
        return {}, {}
    run_id = value = None
    row = table.loc[table["run_name"] == answer["best"]] if answer["best"] is not None else table.iloc[:0]
    if len(row):
        run_id = str(row.iloc[0]["run_id"])
        value = float(row.iloc[0][objective]) if objective in table.columns else None
    return mapping.parent_budget(objective, answer["budget_ms"], answer["best"], answer["closest"], run_id, value)

"""The comparison written and logged: the report folder (``report.json``, ``report.md``,
figures) and its MLflow run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from pipeline import figures as plots
from pipeline import tracking
from pipeline.comparison.render import format_markdown
from pipeline.comparison.report import Report, build_report
from pipeline.comparison.systems import DEFAULT_METRICS, DEFAULT_TRACKING_URI, System, load_systems
from pipeline.io import results as res


def write_report(report: Report, out: str | Path) -> list[Path]:
    """``report.json``, ``report.md`` and the figures in ``out``; returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    d = report.data
    figures = {
        "forest.png": plots.forest_figure({c["metric"]: c["vs_baseline"] for c in d["comparisons"]}, d["baseline"],
                                          f"Difference to {d['baseline']} with its 95% CI ({d['n_queries']} queries)"),
        "per_query_diff.png": plots.per_query_diff_figure(
            {m: {name: x[i] - x[report.names.index(d["baseline"])] for i, name in enumerate(report.names)
                 if name != d["baseline"]} for m, x in report.matrices.items()},
            d["baseline"], f"Per-query differences to {d['baseline']}, sorted ({d['n_queries']} queries)",
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

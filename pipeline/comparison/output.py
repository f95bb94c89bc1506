"""The comparison written and logged: the report folder (``report.json``, ``report.md``,
figures) and its MLflow run; :func:`compare_sources` does all of it for the systems named
on ``python -m pipeline.cli compare``'s command line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pipeline import figures as plots
from pipeline import tracking
from pipeline.comparison.render import format_markdown
from pipeline.comparison.report import Report, build_report
from pipeline.comparison.systems import DEFAULT_METRICS, System, load_systems
from pipeline.comparison.ties import choose_metrics
from pipeline.errors import InputError, check_output_folder
from pipeline.io import results as res
from pipeline.tracking.store import DEFAULT_TRACKING_URI


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


@dataclass
class Compared:
    """A comparison done: its report, the folder it is in, and with ``log``: (run id, store,
    whether a sweep's parent run) and the "creating a new store" note of that store, if any."""

    report: Report
    out: Path
    logged: tuple[str, str, bool] | None = None
    note: str | None = None


def default_out(root: Path = Path("outputs") / "compare") -> Path:
    """``outputs/compare/<timestamp>`` (``_1``, ``_2`` ... when taken)."""
    base = root / time.strftime("%Y-%m-%d_%H-%M-%S")
    out, i = base, 1
    while out.exists():
        out, i = base.with_name(f"{base.name}_{i}"), i + 1
    return out


def compare_sources(specs: Sequence[str], metrics: Sequence[str] | None = None, *, out: str | Path | None = None,
                    log: bool = False, tracking_uri: str | None = None, qrels: str | None = None,
                    experiment_filter: str = "", gain: str = "exp", relevance_level: int = 1,
                    **options: Any) -> Compared:
    """Compare the systems ``specs`` name (job, sweep or run-file paths, ``mlflow:RUN_ID``,
    ``mlflow-experiment:NAME[:FILTER]``; ``pipeline.comparison.systems``) on ``metrics``
    (default: ``choose_metrics``'), write the report to ``out`` (checked before any work;
    default :func:`default_out`) and with ``log`` put it on an MLflow run (:func:`log_report`).
    ``options`` go to ``build_report``; a computing module's ValueError is an InputError."""
    out = check_output_folder(out, "--out") if out else default_out()
    try:  # by default, jobs that differ only in placement are compared on context_utility_at_k too
        systems, chosen = choose_metrics(specs, metrics, qrels=qrels, tracking_uri=tracking_uri,
                                         experiment_filter=experiment_filter, gain=gain,
                                         relevance_level=relevance_level)
        report = build_report(systems, chosen, **options)
    except ValueError as err:  # a computing module's word for bad input
        raise InputError(str(err)) from err
    write_report(report, out)
    if not log:
        return Compared(report, out)
    notes = new_store_notes(tracking_uri, report)
    run_id, uri, in_sweep = log_report(report, out, tracking_uri)
    uri = tracking.without_credentials(uri)
    return Compared(report, out, (run_id, uri, in_sweep), notes.get(uri))


def new_store_notes(tracking_uri: str | None, report: Report) -> dict[str, str]:
    """The "creating a new one" note of each sqlite store ``log`` may write to (the one named,
    or each sweep's), asked before the store is made; keyed by the store's URI."""
    uris = {tracking_uri or DEFAULT_TRACKING_URI, *(s.sweep_store for s in report.systems if s.sweep_store)}
    notes = {tracking.without_credentials(uri): tracking.new_store_note(tracking.without_credentials(uri))
             for uri in uris if tracking.sqlite_path(tracking.without_credentials(uri)) is not None}
    return {uri: note for uri, note in notes.items() if note}

"""Hydra callback that makes a multirun one sweep in MLflow.

- ``on_multirun_start`` (in the launching process, before any job): creates the tracking
  store once (parallel jobs creating a new sqlite store lose runs), the experiment and the
  sweep's parent run, and writes ``<sweep dir>/mlflow_sweep.json`` for the jobs to read.
- Each job's run carries the tag ``sweep_id`` and is nested under the parent run.
- ``on_multirun_end``: a summary (table + figure comparing the jobs' headline metrics and
  curves) written to ``<sweep dir>/summary`` and logged to the parent run.

Works with any launcher (basic, joblib, submitit) and sweeper (basic, Optuna).
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipeline import config as pconfig
from pipeline import tracking
from pipeline.run import FAILED_FILE, SWEEP_FILE

log = logging.getLogger(__name__)

#: Families compared at each k used in the sweep (with the objective, mrr and map).
_FAMILIES = ("ndcg", "precision", "recall", "context_utility")


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        sweep_id = f"{sweep_dir.parent.name}_{sweep_dir.name}_{uuid.uuid4().hex[:6]}"
        info: dict[str, str] = {"sweep_id": sweep_id}
        if config.tracking.enabled:
            experiment = config.tracking.experiment or pconfig.dataset_name(config.dataset)
            args = (config.tracking, experiment, sweep_id, {tracking.TAG_OVERRIDES: " ".join(config.hydra.overrides.task)})
            tracker = tracking.Tracker.shared(config.tracking)
            if _jobs_in_this_process(config):
                # The jobs track through this same process, after it: no need to wait for
                # mlflow's import here. It nests their runs under the parent it creates.
                tracker.submit("pipeline.tracking:start_sweep", *args)
            else:  # jobs in other processes read the parent run from the sweep file
                try:
                    info.update(tracker.call("pipeline.tracking:start_sweep", *args))
                except tracking.TrackingError as err:
                    print(f"error: {err}", file=sys.stderr)
                    sys.exit(3)
            info["experiment"] = experiment
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(info))
        log.info("sweep %s started in %s", sweep_id, sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        path = sweep_dir / SWEEP_FILE
        if config.tracking.enabled and path.exists():
            info = json.loads(path.read_text())
            tracker = tracking.Tracker.shared(config.tracking)
            try:
                tracker.call("pipeline.tracking:flush")  # the jobs' queued runs are logged first
                failed = sorted(sweep_dir.glob(f"*/{FAILED_FILE}"))
                text = tracker.call(
                    "pipeline.sweep:summarize", config.tracking, info, sweep_dir / "summary",
                    str(config.objective), "FAILED" if failed else "FINISHED",
                )
                print(text)
            except tracking.TrackingError as err:
                print(f"error: {err}\nThe jobs' results are on disk under {sweep_dir.resolve()}.", file=sys.stderr)
                sys.exit(3)
        failed = sorted(sweep_dir.glob(f"*/{FAILED_FILE}"))
        if failed:
            print(f"error: {len(failed)} job(s) of the sweep failed:", file=sys.stderr)
            for note in failed:
                overrides, message = note.read_text().split("\n", 1)
                print(f"  {note.parent}: {overrides}: {message.strip()}", file=sys.stderr)
            sys.exit(2)


def _jobs_in_this_process(config: DictConfig) -> bool:
    return str(config.hydra.launcher.get("_target_", "")).endswith("BasicLauncher")


def summarize(tracking_cfg: Any, info: dict[str, str], out: Path, objective: str, status: str = "FINISHED") -> str:
    """Compare the sweep's job runs: a table and a figure, on disk and on the parent run.

    Runs in the tracking process (where mlflow is imported); returns the text to print."""
    import pandas as pd

    from pipeline import plots

    runs = tracking.sweep_runs(tracking_cfg, info["sweep_id"])
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for run in runs:
        row: dict[str, Any] = {
            "run_name": run.info.run_name,
            "run_id": run.info.run_id,
            "status": run.info.status,
            "overrides": run.data.tags.get(tracking.TAG_OVERRIDES, ""),
        }
        row.update(run.data.metrics)
        k = run.data.params.get("k")
        for family in ("ndcg", "context_utility"):  # each job at its own k
            row[f"{family}_at_k"] = run.data.metrics.get(f"{family}_at_{k}")
        rows.append(row)
    table = pd.DataFrame(rows)
    if len(table):
        ks = sorted({int(run.data.params.get("k", 0)) for run in runs} - {0})
        wanted = [objective, "ndcg_at_k", "context_utility_at_k", *(f"{f}_at_{k}" for k in ks for f in _FAMILIES),
                  "mrr", "map", "time_total_s"]
        keys = list(dict.fromkeys(c for c in wanted if c in table.columns and table[c].notna().all()))
        table = table[["run_name", "run_id", "status", "overrides", *keys]]
        if objective in table.columns:
            table = table.sort_values(objective, ascending=False, kind="stable")
    table.to_csv(out / "sweep_table.csv", index=False, float_format="%.6g")
    (out / "sweep_table.md").write_text(_markdown(table))
    if len(table):
        labels = {run.info.run_id: f"{run.info.run_name} [{i}]" for i, run in enumerate(runs)}
        curves = {
            labels[run.info.run_id]: {
                "ndcg": tracking.metric_history(tracking_cfg, run.info.run_id, "curve/ndcg"),
                "recall": tracking.metric_history(tracking_cfg, run.info.run_id, "curve/recall"),
            }
            for run in runs
        }
        view = table.assign(run_name=table["run_id"].map(labels))
        headline = [k for k in (objective, "ndcg_at_k", "context_utility_at_k") if k in view.columns]
        plots.sweep_summary_figure(view, curves, headline).savefig(out / "sweep_summary.png", dpi=80)
    parent = info.get("parent_run_id") or tracking.sweep_parent(info["sweep_id"], info["experiment"])
    if parent is None:
        raise tracking.TrackingError(f"the parent run of sweep {info['sweep_id']} was not created")
    tracking.finish_sweep(tracking_cfg, parent, out, table, status=status)
    text = f"sweep {info['sweep_id']}: {len(table)} runs; summary in {out.resolve()}"
    if len(table):  # the headline columns; the files hold them all
        shown = [c for c in ("run_name", "status", objective, "ndcg_at_k", "context_utility_at_k", "mrr", "map")
                 if c in table.columns]
        text += "\n" + _markdown(table[list(dict.fromkeys(shown))])
    return text


def _markdown(table: Any) -> str:
    if not len(table):
        return "(no runs)\n"
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table.iterrows():
        cells = [f"{v:.4f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
